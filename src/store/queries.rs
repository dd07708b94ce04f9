//! Reads for the API: jobs, payloads, listings and event streams.

use super::codec::decode_row;
use super::tables::*;
use super::{Store, StoreError};
use crate::model::{Event, Job, JobId, JobPayload, JobSetName, JobState, QueueName, RunId};
use crate::record::{EventRecord, JobRecord, PayloadRecord, RunUsageRecord};
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
    /// Only jobs past this one in the order listed (pagination).
    pub after: Option<JobId>,
    /// Most jobs to return (0 counts as 1).
    pub limit: usize,
    /// Only jobs whose id, queue, job set, priority class, client id, state reason, or an
    /// annotation or label (key or value) holds this text, in any case (see [`TEXT_SCAN`]).
    pub text: Option<String>,
    /// Newest first (default: oldest first, the submission order).
    pub newest_first: bool,
}

/// Most jobs a text search looks at for one page: a page of a rare text ends early, with a
/// `next` to go on from.
pub const TEXT_SCAN: usize = 100_000;

/// A page of jobs.
#[derive(Debug, Clone, Default)]
pub struct JobPage {
    /// The jobs, in the order asked.
    pub jobs: Vec<Job>,
    /// Where the next page starts (its `after`), if there may be more.
    pub next: Option<JobId>,
}

/// Whether `r` holds `needle` (lower case) in one of the fields a text search looks at.
fn holds_text(r: &Job, needle: &str) -> bool {
    let has = |s: &str| s.to_lowercase().contains(needle);
    has(&r.id.to_string())
        || has(r.queue.as_str())
        || has(r.job_set.as_str())
        || has(r.priority_class.as_str())
        || r.client_id.as_deref().is_some_and(has)
        || r.state_reason.as_deref().is_some_and(has)
        || r.annotations.iter().chain(r.labels.iter()).any(|(k, v)| has(k) || has(v))
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

    /// What each of `runs` used (none for a run not ended, not measured, or that ended before
    /// usage was recorded), in one read transaction.
    pub fn run_usage(&self, runs: &[RunId]) -> Result<Vec<Option<RunUsageRecord>>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(RUN_USAGE)?;
        runs.iter()
            .map(|r| match t.get(&run_key(*r))? {
                Some(v) => Ok(Some(decode_row(v.value(), || format!("usage of run {r}"))?)),
                None => Ok(None),
            })
            .collect()
    }

    /// Who submitted each of `ids` (none for a job submitted before owners were recorded, or
    /// not stored), in one read transaction.
    pub fn owners(&self, ids: &[JobId]) -> Result<Vec<Option<String>>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(JOB_OWNERS)?;
        ids.iter().map(|id| Ok(t.get(&job_key(*id))?.map(|v| v.value().to_string()))).collect()
    }

    /// The dependencies and retry policy of each of `ids` (none for a job without any, or not
    /// stored), in one read transaction.
    pub fn policies(&self, ids: &[JobId]) -> Result<Vec<Option<Box<crate::model::JobPolicies>>>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(JOB_POLICIES)?;
        ids.iter().map(|id| super::load::read_policies(&t, &job_key(*id))).collect()
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

    /// Jobs matching `filter`, in id (submission) order, at most `filter.limit`; true if there
    /// may be more.
    pub fn list_jobs(&self, filter: &JobFilter) -> Result<(Vec<Job>, bool), StoreError> {
        let page = self.search_jobs(filter)?;
        Ok((page.jobs, page.next.is_some()))
    }

    /// A page of the jobs matching `filter`, in the order it asks, with where the next starts.
    pub fn search_jobs(&self, filter: &JobFilter) -> Result<JobPage, StoreError> {
        self.search_jobs_looking_at(filter, TEXT_SCAN)
    }

    /// [`Store::search_jobs`], a text search looking at `scan` jobs at most.
    pub(crate) fn search_jobs_looking_at(&self, filter: &JobFilter, scan: usize) -> Result<JobPage, StoreError> {
        let tx = self.read()?;
        let jobs = tx.open_table(JOBS)?;
        let needle = filter.text.as_deref().map(str::to_lowercase).filter(|t| !t.is_empty());
        let keep = |r: &Job| {
            filter.queue.as_ref().is_none_or(|q| &r.queue == q)
                && filter.job_set.as_ref().is_none_or(|s| &r.job_set == s)
                && (filter.states.is_empty() || filter.states.contains(&r.state))
                && needle.as_deref().is_none_or(|t| holds_text(r, t))
        };
        let limit = filter.limit.max(1);
        let mut page = JobPage::default();
        let mut looked = 0usize;
        // Takes one row; false when the page is full (or the search looked far enough).
        let mut take = |r: Job, page: &mut JobPage| -> bool {
            looked += 1;
            if keep(&r) {
                if page.jobs.len() == limit {
                    page.next = page.jobs.last().map(|j| j.id);
                    return false;
                }
                page.jobs.push(r);
            } else if needle.is_some() && looked >= scan {
                page.next = Some(r.id);
                return false;
            }
            true
        };
        match (&filter.queue, &filter.job_set) {
            (Some(q), Some(s)) => {
                let sets = tx.open_table(JOB_SETS)?;
                let prefix = set_prefix(q, s);
                let mut first = prefix.clone();
                first.push(0);
                let end = prefix_end(&prefix);
                let range = match (filter.after, filter.newest_first) {
                    (Some(a), false) => {
                        let mut k = job_set_key(q, s, a);
                        k.push(0);
                        sets.range(k.as_slice()..end.as_slice())?
                    }
                    (Some(a), true) => sets.range(first.as_slice()..job_set_key(q, s, a).as_slice())?,
                    (None, _) => sets.range(first.as_slice()..end.as_slice())?,
                };
                let rows: Box<dyn Iterator<Item = _>> =
                    if filter.newest_first { Box::new(range.rev()) } else { Box::new(range) };
                for row in rows {
                    let (k, _) = row?;
                    let key = k.value();
                    let Some(id) = key.get(key.len().saturating_sub(16)..).and_then(|b| <[u8; 16]>::try_from(b).ok())
                    else {
                        continue;
                    };
                    let Some(v) = jobs.get(&id)? else { continue };
                    if !take(decode_job(v.value(), job_from_key(&id))?, &mut page) {
                        return Ok(page);
                    }
                }
            }
            _ => {
                let range = match (filter.after, filter.newest_first) {
                    (Some(a), false) => jobs.range::<&[u8; 16]>(&a.as_u128().saturating_add(1).to_be_bytes()..)?,
                    (Some(a), true) => jobs.range::<&[u8; 16]>(..&a.as_u128().to_be_bytes())?,
                    (None, _) => jobs.range::<&[u8; 16]>(..)?,
                };
                let rows: Box<dyn Iterator<Item = _>> =
                    if filter.newest_first { Box::new(range.rev()) } else { Box::new(range) };
                for row in rows {
                    let (k, v) = row?;
                    if !take(decode_job(v.value(), job_from_key(k.value()))?, &mut page) {
                        return Ok(page);
                    }
                }
            }
        }
        Ok(page)
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
