//! Writing the state machine's changes into a write transaction.

use super::StoreError;
use super::codec::encode;
use super::tables::*;
use crate::model::{Event, JobSetName, QueueName};
use crate::state::Change;
use redb::WriteTransaction;
use std::collections::HashMap;

/// Writes `changes` in `tx` (the caller commits).
pub fn write_changes(tx: &WriteTransaction, changes: &[Change]) -> Result<(), StoreError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut meta = tx.open_table(META)?;
    let mut queues = tx.open_table(QUEUES)?;
    let mut jobs = tx.open_table(JOBS)?;
    let mut payloads = tx.open_table(PAYLOADS)?;
    let mut live = tx.open_table(LIVE_JOBS)?;
    let mut job_sets = tx.open_table(JOB_SETS)?;
    let mut events = tx.open_table(EVENTS)?;
    let mut event_seqs = tx.open_table(EVENT_SEQS)?;
    let mut client_ids = tx.open_table(CLIENT_IDS)?;
    let mut executors = tx.open_table(EXECUTORS)?;
    // A job set's events of this transaction become chunks, written at the end.
    let mut new_events: HashMap<(&QueueName, &JobSetName), Vec<&Event>> = HashMap::new();
    for c in changes {
        match c {
            Change::PutQueue(q) => {
                queues.insert(q.name.as_str(), encode(q)?.as_slice())?;
            }
            Change::DeleteQueue(name) => {
                queues.remove(name.as_str())?;
            }
            Change::PutJob { record, live: is_live } => {
                let k = job_key(record.id);
                jobs.insert(&k, encode(record.as_ref())?.as_slice())?;
                if *is_live {
                    live.insert(&k, ())?;
                } else {
                    live.remove(&k)?;
                }
            }
            Change::PutPayload(id, p) => {
                payloads.insert(&job_key(*id), encode(p.as_ref())?.as_slice())?;
            }
            Change::PutClientId { queue, client_id, job } => {
                client_ids.insert(client_id_key(queue, client_id).as_slice(), &job_key(*job))?;
            }
            Change::AddToJobSet { queue, job_set, job } => {
                job_sets.insert(job_set_key(queue, job_set, *job).as_slice(), ())?;
            }
            Change::AppendEvent { queue, job_set, event } => {
                new_events.entry((queue, job_set)).or_default().push(event);
            }
            Change::PutExecutor(e) => {
                executors.insert(e.name.as_str(), encode(e)?.as_slice())?;
            }
            Change::DeleteExecutor(name) => {
                executors.remove(name.as_str())?;
            }
            Change::PutSubmitSeq(seq) => {
                meta.insert(SUBMIT_SEQ, seq.to_be_bytes().as_slice())?;
            }
        }
    }
    for ((queue, job_set), mut list) in new_events {
        // Applying hands out sequence numbers in order; sorting keeps chunks contiguous anyway.
        list.sort_by_key(|e| e.seq);
        let prefix = set_prefix(queue, job_set);
        for chunk in list.chunks(EVENT_CHUNK_MAX) {
            events.insert(event_key(&prefix, chunk[0].seq).as_slice(), encode(&chunk)?.as_slice())?;
        }
        if let Some(last) = list.last() {
            event_seqs.insert(prefix.as_slice(), last.seq)?;
        }
    }
    Ok(())
}
