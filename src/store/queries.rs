//! Reads for the API: jobs, payloads, listings and event streams.

use super::codec::decode_row;
use super::tables::*;
use super::{Store, StoreError};
use crate::model::{Event, Job, JobId, JobPayload, JobSetName, JobState, QueueName, RunId};
use crate::record::{EventRecord, JobRecord, PayloadRecord};
use redb::ReadableTable;

/// Which jobs to list.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only jobs of this queue.
    pub queue: Option<QueueName>,
    /// Only jobs of this job set (read through the job set's index when `queue` is set too).
    pub job_set: Option<JobSetName>,
    /// Only jobs in one of these states (empty: any state).
    pub states: Vec<JobState>,
    /// Only jobs with ids after this one (pagination).
    pub after: Option<JobId>,
    /// Most jobs to return (0 counts as 1).
    pub limit: usize,
}

impl Store {
    /// A job's record.
    pub fn job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(JOBS)?;
        match t.get(&job_key(id))? {
            Some(v) => Ok(Some(decode_job(v.value(), id)?)),
            None => Ok(None),
        }
    }

    /// The jobs of runs, by the `run_jobs` index, in one read transaction: the job holding each
    /// run, or none for a run the store does not hold (never leased, or purged with its job).
    pub fn jobs_of_runs(&self, runs: &[RunId]) -> Result<Vec<Option<Job>>, StoreError> {
        let tx = self.read()?;
        let index = tx.open_table(RUN_JOBS)?;
        let jobs = tx.open_table(JOBS)?;
        runs.iter()
            .map(|run| {
                let Some(k) = index.get(&run_key(*run))?.map(|v| *v.value()) else { return Ok(None) };
                let id = job_from_key(&k);
                match jobs.get(&k)? {
                    Some(v) => Ok(Some(decode_job(v.value(), id)?)),
                    None => Ok(None),
                }
            })
            .collect()
    }

    /// A job's pod spec, services and ingresses.
    pub fn payload(&self, id: JobId) -> Result<Option<JobPayload>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(PAYLOADS)?;
        match t.get(&job_key(id))? {
            Some(v) => Ok(Some(decode_payload(v.value(), id)?)),
            None => Ok(None),
        }
    }

    /// Payloads of several jobs in one read transaction.
    pub fn payloads(&self, ids: &[JobId]) -> Result<Vec<Option<JobPayload>>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(PAYLOADS)?;
        ids.iter()
            .map(|id| match t.get(&job_key(*id))? {
                Some(v) => Ok(Some(decode_payload(v.value(), *id)?)),
                None => Ok(None),
            })
            .collect()
    }

    /// Jobs matching `filter`, in id (submission time) order, at most `filter.limit`, plus
    /// whether more follow.
    pub fn list_jobs(&self, filter: &JobFilter) -> Result<(Vec<Job>, bool), StoreError> {
        let tx = self.read()?;
        let jobs = tx.open_table(JOBS)?;
        let mut out = Vec::new();
        let keep = |r: &Job| {
            filter.queue.as_ref().is_none_or(|q| &r.queue == q)
                && filter.job_set.as_ref().is_none_or(|s| &r.job_set == s)
                && (filter.states.is_empty() || filter.states.contains(&r.state))
        };
        let limit = filter.limit.max(1);
        match (&filter.queue, &filter.job_set) {
            (Some(q), Some(s)) => {
                let sets = tx.open_table(JOB_SETS)?;
                let prefix = set_prefix(q, s);
                let start = match filter.after {
                    Some(a) => {
                        let mut k = job_set_key(q, s, a);
                        k.push(0);
                        k
                    }
                    None => {
                        let mut k = prefix.clone();
                        k.push(0);
                        k
                    }
                };
                let end = prefix_end(&prefix);
                for row in sets.range(start.as_slice()..end.as_slice())? {
                    let (k, _) = row?;
                    let key = k.value();
                    let Some(id) = key.get(key.len().saturating_sub(16)..).and_then(|b| <[u8; 16]>::try_from(b).ok())
                    else {
                        continue;
                    };
                    let Some(v) = jobs.get(&id)? else { continue };
                    let r = decode_job(v.value(), job_from_key(&id))?;
                    if keep(&r) {
                        if out.len() == limit {
                            return Ok((out, true));
                        }
                        out.push(r);
                    }
                }
            }
            _ => {
                let start = filter.after.map(|a| a.as_u128().saturating_add(1).to_be_bytes()).unwrap_or([0; 16]);
                for row in jobs.range::<&[u8; 16]>(&start..)? {
                    let (k, v) = row?;
                    let r = decode_job(v.value(), job_from_key(k.value()))?;
                    if keep(&r) {
                        if out.len() == limit {
                            return Ok((out, true));
                        }
                        out.push(r);
                    }
                }
            }
        }
        Ok((out, false))
    }

    /// Events of a job set with sequence numbers from `from` on, at most `limit`.
    pub fn events(
        &self,
        queue: &QueueName,
        job_set: &JobSetName,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(EVENTS)?;
        let prefix = set_prefix(queue, job_set);
        let end = prefix_end(&prefix);
        let start = match chunk_holding(&t, &prefix, from)? {
            Some((key, _)) => key,
            None => event_key(&prefix, from),
        };
        let mut out = Vec::new();
        for row in t.range(start.as_slice()..end.as_slice())? {
            let (_, v) = row?;
            let chunk = decode_chunk(v.value(), queue, job_set)?;
            for e in chunk.into_iter().filter(|e| e.seq >= from) {
                out.push(Event::from(e));
                if out.len() >= limit {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// A job's events (the record lists their sequence numbers).
    pub fn job_events(&self, record: &Job) -> Result<Vec<Event>, StoreError> {
        let tx = self.read()?;
        let events = tx.open_table(EVENTS)?;
        let prefix = set_prefix(&record.queue, &record.job_set);
        let mut out = Vec::with_capacity(record.event_seqs.len());
        // A job's events are often in the same chunk: decode each chunk once.
        let mut chunk: Vec<EventRecord> = Vec::new();
        for &seq in &record.event_seqs {
            if chunk.first().is_none_or(|e| e.seq > seq) || chunk.last().is_none_or(|e| e.seq < seq) {
                chunk = match chunk_holding(&events, &prefix, seq)? {
                    Some((_, bytes)) => decode_chunk(&bytes, &record.queue, &record.job_set)?,
                    None => Vec::new(),
                };
            }
            if let Ok(i) = chunk.binary_search_by_key(&seq, |e| e.seq) {
                out.push(Event::from(chunk[i].clone()));
            }
        }
        Ok(out)
    }
}

fn decode_job(bytes: &[u8], id: JobId) -> Result<Job, StoreError> {
    decode_row::<JobRecord>(bytes, || format!("job {id}")).map(Job::from)
}

fn decode_payload(bytes: &[u8], id: JobId) -> Result<JobPayload, StoreError> {
    decode_row::<PayloadRecord>(bytes, || format!("payload of job {id}")).map(JobPayload::from)
}

fn decode_chunk(bytes: &[u8], queue: &QueueName, job_set: &JobSetName) -> Result<Vec<EventRecord>, StoreError> {
    decode_row(bytes, || format!("event chunk of job set {job_set} in queue {queue}"))
}

/// A stored row's key and value.
type Row = (Vec<u8>, Vec<u8>);

/// The key and bytes of the job set's event chunk that would hold `seq`: the last one starting at
/// or before it.
fn chunk_holding(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    seq: u64,
) -> Result<Option<Row>, StoreError> {
    let (first, at) = (event_key(prefix, 0), event_key(prefix, seq));
    match t.range(first.as_slice()..=at.as_slice())?.next_back() {
        Some(row) => {
            let (k, v) = row?;
            Ok(Some((k.value().to_vec(), v.value().to_vec())))
        }
        None => Ok(None),
    }
}
