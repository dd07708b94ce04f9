//! Rebuilding the in-memory state from the database at start-up: queues, executors, event
//! counters, idempotency keys and the live jobs (terminal jobs stay on disk).

use super::codec::decode_row;
use super::tables::*;
use super::{Store, StoreError};
use crate::model::{Job, JobSetName, Queue, QueueName};
use crate::record::{ExecutorRecord, JobRecord, QueueRecord};
use crate::state::{Executor, QueueState, State, StateSettings};
use redb::{ReadableTable, ReadableTableMetadata};
use std::collections::BTreeMap;

impl Store {
    /// Loads the state.
    pub fn load_state(&self, settings: StateSettings) -> Result<State, StoreError> {
        let tx = self.read()?;
        let mut state = State::new(settings);
        let meta = tx.open_table(META)?;
        if let Some(v) = meta.get(SUBMIT_SEQ)? {
            let b: [u8; 8] = v
                .value()
                .try_into()
                .map_err(|_| StoreError::Malformed { what: "meta.submit_seq".into(), detail: "not 8 bytes".into() })?;
            state.next_seq = u64::from_be_bytes(b);
        }
        for row in tx.open_table(QUEUES)?.iter()? {
            let (k, v) = row?;
            let q: QueueRecord = decode_row(v.value(), || format!("queue {}", k.value()))?;
            let q = Queue::from(q);
            state.queues.insert(
                q.name.clone(),
                QueueState { queue: q, queued: BTreeMap::new(), demand: Default::default(), counts: BTreeMap::new() },
            );
        }
        for row in tx.open_table(EXECUTORS)?.iter()? {
            let (k, v) = row?;
            let e: ExecutorRecord = decode_row(v.value(), || format!("executor {}", k.value()))?;
            state.executors.insert(e.name.clone(), Executor::from(e));
        }
        state.refresh_largest_node();
        for row in tx.open_table(EVENT_SEQS)?.iter()? {
            let (k, v) = row?;
            if let Some((q, s)) = split_pair(k.value())
                && let (Some(q), Some(s)) = (name::<QueueName>(q), name::<JobSetName>(s))
            {
                state.event_seqs.insert((q, s), v.value());
            }
        }
        for row in tx.open_table(CLIENT_IDS)?.iter()? {
            let (k, v) = row?;
            if let Some((q, c)) = split_pair(k.value())
                && let (Some(q), Ok(c)) = (name::<QueueName>(q), std::str::from_utf8(c))
            {
                state.client_ids.insert((q, c.to_string()), job_from_key(v.value()));
            }
        }
        let live = tx.open_table(LIVE_JOBS)?;
        let jobs = tx.open_table(JOBS)?;
        // Keys are big-endian ids, so the last is the largest.
        if let Some(last) = jobs.last()? {
            state.max_job_id = Some(job_from_key(last.0.value()));
        }
        state.jobs.reserve(live.len()? as usize);
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
            state.restore_job(Job::from(record));
        }
        Ok(state)
    }
}

fn name<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
    std::str::from_utf8(b).ok()?.parse().ok()
}
