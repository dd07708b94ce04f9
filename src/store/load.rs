//! Rebuilding the in-memory state from the database at start-up: queues, executors, node
//! health, event counters, jobs per job set, idempotency keys and the live jobs (terminal jobs stay on disk).

use super::codec::decode_row;
use super::tables::*;
use super::{Store, StoreError};
use crate::model::{Job, JobId, JobSetName, Queue, QueueName};
use crate::record::{
    ExecutorRecord, JobRecord, NodeHealthRecord, QueuePoliciesWithRetryByQueueRecord, QueueRecord, QueueTreesRecord,
    QueueUsageRecord, SchedulerConfigRecord,
};
use crate::state::{Executor, State, StateSettings};
use redb::{ReadableTable, ReadableTableMetadata};
use std::collections::{BTreeMap, HashMap};

impl Store {
    /// Loads the state.
    pub fn load_state(&self, settings: StateSettings) -> Result<State, StoreError> {
        let tx = self.read()?;
        let mut state = State::new(settings);
        let meta = tx.open_table(META)?;
        let next_seq = meta_bytes::<8>(&meta, SUBMIT_SEQ)?.map_or(0, u64::from_be_bytes);
        let purges = meta_bytes::<8>(&meta, PURGES)?.map_or(0, u64::from_be_bytes);
        state.restore_counters(next_seq, purges);
        let purged_max = meta_bytes::<16>(&meta, MAX_JOB_ID)?.map(|b| JobId::from_u128(u128::from_be_bytes(b)));
        if let Some(v) = meta.get(QUEUE_USAGE)? {
            let usage: QueueUsageRecord = decode_row(v.value(), || "meta.queue_usage".to_string())?;
            state.restore_queue_usage(usage.into());
        }
        let config = match meta.get(SCHEDULER_CONFIG)? {
            Some(v) => Some(decode_row::<SchedulerConfigRecord>(v.value(), || "meta.scheduler_config".to_string())?),
            None => None,
        };
        let cycles = meta_bytes::<8>(&meta, SCHEDULE_CYCLES)?.map_or(0, u64::from_be_bytes);
        state.restore_scheduling_record(config, cycles);
        if let Some(v) = meta.get(RAFT_APPLIED)? {
            let applied: Option<crate::record::raft::LogIdRecord> =
                decode_row(v.value(), || "meta.raft_applied".to_string())?;
            state.set_applied_index(applied.map_or(0, |id| id.index));
        }
        let mut trees = match meta.get(QUEUE_TREE)? {
            Some(v) => decode_row::<QueueTreesRecord>(v.value(), || "meta.queue_tree".to_string())?.queues,
            None => BTreeMap::new(),
        };
        let mut policies = match meta.get(QUEUE_POLICIES)? {
            Some(v) => {
                decode_row::<QueuePoliciesWithRetryByQueueRecord>(v.value(), || "meta.queue_policies".to_string())?
                    .queues
            }
            None => BTreeMap::new(),
        };
        for row in tx.open_table(QUEUES)?.iter()? {
            let (k, v) = row?;
            let q: QueueRecord = decode_row(v.value(), || format!("queue {}", k.value()))?;
            let mut q = Queue::from(q);
            if let Some(tree) = trees.remove(&q.name) {
                tree.apply_to(&mut q);
            }
            if let Some(p) = policies.remove(&q.name) {
                p.apply_to(&mut q);
            }
            state.restore_queue(q);
        }
        for row in tx.open_table(EXECUTORS)?.iter()? {
            let (k, v) = row?;
            let e: ExecutorRecord = decode_row(v.value(), || format!("executor {}", k.value()))?;
            state.restore_executor(Executor::from(e));
        }
        state.refresh_largest_node();
        for row in tx.open_table(NODE_HEALTH)?.iter()? {
            let (k, v) = row?;
            let h: NodeHealthRecord = decode_row(v.value(), || format!("node health {:?}", k.value()))?;
            state.restore_node_health(h);
        }
        for row in tx.open_table(EVENT_SEQS)?.iter()? {
            let (k, v) = row?;
            if let Some((q, s)) = split_pair(k.value())
                && let (Some(q), Some(s)) = (name::<QueueName>(q), name::<JobSetName>(s))
            {
                state.restore_event_seq(q, s, v.value());
            }
        }
        for row in tx.open_table(CLIENT_IDS)?.iter()? {
            let (k, v) = row?;
            if let Some((q, c)) = split_pair(k.value())
                && let (Some(q), Ok(c)) = (name::<QueueName>(q), std::str::from_utf8(c))
            {
                state.restore_client_id(q, c.to_string(), job_from_key(v.value()));
            }
        }
        state.restore_stored_jobs_per_set(set_sizes(&tx.open_table(JOB_SETS)?)?);
        let live = tx.open_table(LIVE_JOBS)?;
        let jobs = tx.open_table(JOBS)?;
        let policies = tx.open_table(JOB_POLICIES)?;
        // Keys are big-endian ids, so the last is the largest (of the jobs purges left).
        if let Some(last) = jobs.last()? {
            state.restore_max_job_id(Some(job_from_key(last.0.value())));
        }
        state.restore_max_job_id(purged_max);
        state.reserve_jobs(live.len()? as usize);
        for row in live.iter()? {
            let (k, _) = row?;
            let key = k.value();
            let Some(bytes) = jobs.get(&key)? else {
                return Err(StoreError::Malformed {
                    what: format!("live job {}", job_from_key(key)),
                    detail: "it has no record in the jobs table".into(),
                });
            };
            let record: JobRecord = decode_row(bytes.value(), || format!("job {}", job_from_key(key)))?;
            let mut job = Job::from(record);
            job.policies = read_policies(&policies, key)?;
            state.restore_job(job);
        }
        state.pack_indexes();
        Ok(state)
    }
}

/// A job's dependencies and retry policy, if it has a `job_policies` row.
pub(super) fn read_policies(
    t: &impl ReadableTable<&'static [u8; 16], &'static [u8]>,
    key: &[u8; 16],
) -> Result<Option<Box<crate::model::JobPolicies>>, StoreError> {
    let Some(bytes) = t.get(key)? else { return Ok(None) };
    let record: crate::record::JobPoliciesRecord =
        decode_row(bytes.value(), || format!("policies of job {}", job_from_key(key)))?;
    Ok(Some(Box::new(record.into())))
}

/// Jobs per job set, counted from the job-set index (`queue 0 job_set 0 job_id`). Its keys are in
/// order, so each job set's keys are consecutive: one count per run of equal prefixes.
fn set_sizes(t: &impl ReadableTable<&'static [u8], ()>) -> Result<HashMap<(QueueName, JobSetName), u64>, StoreError> {
    fn put(prefix: &[u8], n: u64, out: &mut HashMap<(QueueName, JobSetName), u64>) -> Result<(), StoreError> {
        let parsed = split_pair(prefix).and_then(|(q, s)| Some((name::<QueueName>(q)?, name::<JobSetName>(s)?)));
        let Some(key) = parsed else {
            return Err(StoreError::Malformed {
                what: format!("job set key {prefix:?}"),
                detail: "not a queue and a job set name".into(),
            });
        };
        out.insert(key, n);
        Ok(())
    }
    let mut out = HashMap::new();
    let mut run: (Vec<u8>, u64) = (Vec::new(), 0);
    for row in t.iter()? {
        let (k, _) = row?;
        let key = k.value();
        // `prefix 0 id(16 bytes)`.
        let Some(prefix) = key.len().checked_sub(17).map(|n| &key[..n]) else {
            return Err(StoreError::Malformed { what: format!("job set key {key:?}"), detail: "too short".into() });
        };
        if run.1 > 0 && run.0 == prefix {
            run.1 += 1;
            continue;
        }
        if run.1 > 0 {
            put(&run.0, run.1, &mut out)?;
        }
        run = (prefix.to_vec(), 1);
    }
    if run.1 > 0 {
        put(&run.0, run.1, &mut out)?;
    }
    Ok(out)
}

/// A fixed-size `meta` value, if present.
fn meta_bytes<const N: usize>(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<Option<[u8; N]>, StoreError> {
    let Some(v) = meta.get(key)? else { return Ok(None) };
    let bytes: [u8; N] = v
        .value()
        .try_into()
        .map_err(|_| StoreError::Malformed { what: format!("meta.{key}"), detail: format!("not {N} bytes") })?;
    Ok(Some(bytes))
}

fn name<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
    std::str::from_utf8(b).ok()?.parse().ok()
}
