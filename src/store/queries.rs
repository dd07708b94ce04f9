//! Reads for the API: jobs, payloads, listings and event streams.

use super::codec::decode;
use super::tables::*;
use super::{Store, StoreError};
use crate::model::{Event, JobId, JobPayload, JobRecord, JobSetName, JobState, QueueName};

/// Which jobs to list.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub queue: Option<QueueName>,
    pub job_set: Option<JobSetName>,
    pub states: Vec<JobState>,
    /// Only jobs with ids after this one (pagination).
    pub after: Option<JobId>,
    pub limit: usize,
}

impl Store {
    /// A job's record.
    pub fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(JOBS)?;
        match t.get(&job_key(id))? {
            Some(v) => Ok(Some(decode(v.value(), &format!("job {id}"))?)),
            None => Ok(None),
        }
    }

    /// A job's pod spec, services and ingresses.
    pub fn payload(&self, id: JobId) -> Result<Option<JobPayload>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(PAYLOADS)?;
        match t.get(&job_key(id))? {
            Some(v) => Ok(Some(decode(v.value(), &format!("payload of job {id}"))?)),
            None => Ok(None),
        }
    }

    /// Payloads of several jobs in one read transaction.
    pub fn payloads(&self, ids: &[JobId]) -> Result<Vec<Option<JobPayload>>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(PAYLOADS)?;
        ids.iter()
            .map(|id| match t.get(&job_key(*id))? {
                Some(v) => Ok(Some(decode(v.value(), &format!("payload of job {id}"))?)),
                None => Ok(None),
            })
            .collect()
    }

    /// Jobs matching `filter`, in id (submission time) order, at most `filter.limit`, plus
    /// whether more follow.
    pub fn list_jobs(&self, filter: &JobFilter) -> Result<(Vec<JobRecord>, bool), StoreError> {
        let tx = self.read()?;
        let jobs = tx.open_table(JOBS)?;
        let mut out = Vec::new();
        let keep = |r: &JobRecord| {
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
                    let Some(id) = key.get(key.len().saturating_sub(16)..).and_then(|b| <[u8; 16]>::try_from(b).ok()) else { continue };
                    let Some(v) = jobs.get(&id)? else { continue };
                    let r: JobRecord = decode(v.value(), "job")?;
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
                    let (_, v) = row?;
                    let r: JobRecord = decode(v.value(), "job")?;
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
    pub fn events(&self, queue: &QueueName, job_set: &JobSetName, from: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        let tx = self.read()?;
        let t = tx.open_table(EVENTS)?;
        let start = event_key(queue, job_set, from);
        let end = prefix_end(&set_prefix(queue, job_set));
        let mut out = Vec::new();
        for row in t.range(start.as_slice()..end.as_slice())? {
            let (_, v) = row?;
            out.push(decode(v.value(), "event")?);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// A job's events (the record lists their sequence numbers).
    pub fn job_events(&self, record: &JobRecord) -> Result<Vec<Event>, StoreError> {
        let tx = self.read()?;
        let events = tx.open_table(EVENTS)?;
        let mut out = Vec::with_capacity(record.event_seqs.len());
        for seq in &record.event_seqs {
            if let Some(v) = events.get(event_key(&record.queue, &record.job_set, *seq).as_slice())? {
                out.push(decode(v.value(), "event")?);
            }
        }
        Ok(out)
    }
}
