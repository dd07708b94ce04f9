//! Reads for retention: which finished jobs are due for purging, oldest first.

use super::codec::decode_row;
use super::tables::*;
use super::{Store, StoreError};
use crate::record::{JobRecord, PurgeTarget};

/// The next purge, as the leader proposes it (`Command::PurgeFinished`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgePlan {
    /// Purges applied in the state this plan was read from.
    pub purges: u64,
    /// The jobs, in the order of the `finished` index.
    pub jobs: Vec<PurgeTarget>,
    /// Index rows passed over because their job has no record (they stay; nothing refers to
    /// them).
    pub orphans: usize,
}

impl Store {
    /// Up to `limit` jobs that finished before `before_ms`, by finish time then id, with the number
    /// of purges applied, read together so that the plan is exactly what the state held then.
    pub fn purge_plan(&self, before_ms: i64, limit: usize) -> Result<PurgePlan, StoreError> {
        let tx = self.read()?;
        let mut plan = PurgePlan::default();
        if let Some(v) = tx.open_table(META)?.get(PURGES)? {
            let b: [u8; 8] = v
                .value()
                .try_into()
                .map_err(|_| StoreError::Malformed { what: "meta.purges".into(), detail: "not 8 bytes".into() })?;
            plan.purges = u64::from_be_bytes(b);
        }
        let jobs = tx.open_table(JOBS)?;
        // Keys below (before_ms, the smallest id) are exactly the jobs that finished before it.
        let end = finished_key(before_ms, crate::model::JobId::from_u128(0));
        for row in tx.open_table(FINISHED)?.range::<&[u8; 24]>(..&end)? {
            if plan.jobs.len() >= limit {
                break;
            }
            let (finished_ms, id) = finished_from_key(row?.0.value());
            let Some(bytes) = jobs.get(&job_key(id))? else {
                plan.orphans += 1;
                continue;
            };
            let r: JobRecord = decode_row(bytes.value(), || format!("job {id}"))?;
            plan.jobs.push(PurgeTarget {
                job_id: id,
                finished_ms,
                queue: r.queue,
                job_set: r.job_set,
                client_id: r.client_id,
            });
        }
        Ok(plan)
    }

    /// Number of jobs in the `finished` index (the finished jobs stored).
    pub fn finished_jobs(&self) -> Result<u64, StoreError> {
        use redb::ReadableTableMetadata;
        Ok(self.read()?.open_table(FINISHED)?.len()?)
    }
}
