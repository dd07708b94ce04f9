//! Writing the state machine's changes into a write transaction.

use super::StoreError;
use super::codec::encode_row;
use super::tables::*;
use crate::model::{JobSetName, QueueName};
use crate::record::EventRecord;
use crate::state::Change;
use redb::{Key, Table, TableDefinition, Value, WriteTransaction};
use std::collections::HashMap;

/// Opens a table on first use: a transaction pays (in opening, and in updating table roots at
/// commit) only for the tables it changes. Small transactions change two or three of ten.
fn open<'s, 't, K: Key + 'static, V: Value + 'static>(
    slot: &'s mut Option<Table<'t, K, V>>,
    tx: &'t WriteTransaction,
    def: TableDefinition<K, V>,
) -> Result<&'s mut Table<'t, K, V>, StoreError> {
    let table = match slot.take() {
        Some(table) => table,
        None => tx.open_table(def)?,
    };
    Ok(slot.insert(table))
}

/// Writes `changes` in `tx` (the caller commits).
pub fn write_changes(tx: &WriteTransaction, changes: &[Change]) -> Result<(), StoreError> {
    if changes.is_empty() {
        return Ok(());
    }
    let (mut meta, mut queues, mut jobs, mut payloads, mut live) = (None, None, None, None, None);
    let (mut job_sets, mut client_ids, mut executors) = (None, None, None);
    // A job set's events of this transaction become chunks, written at the end.
    let mut new_events: HashMap<(&QueueName, &JobSetName), Vec<&EventRecord>> = HashMap::new();
    for c in changes {
        match c {
            Change::PutQueue(q) => {
                open(&mut queues, tx, QUEUES)?.insert(q.name.as_str(), encode_row("queue", q)?.as_slice())?;
            }
            Change::DeleteQueue(name) => {
                open(&mut queues, tx, QUEUES)?.remove(name.as_str())?;
            }
            Change::PutJob { record, live: is_live } => {
                let k = job_key(record.id);
                open(&mut jobs, tx, JOBS)?.insert(&k, encode_row("job", record.as_ref())?.as_slice())?;
                if *is_live {
                    open(&mut live, tx, LIVE_JOBS)?.insert(&k, ())?;
                } else {
                    open(&mut live, tx, LIVE_JOBS)?.remove(&k)?;
                }
            }
            Change::PutPayload(id, p) => {
                open(&mut payloads, tx, PAYLOADS)?
                    .insert(&job_key(*id), encode_row("payload", p.as_ref())?.as_slice())?;
            }
            Change::PutClientId { queue, client_id, job } => {
                open(&mut client_ids, tx, CLIENT_IDS)?
                    .insert(client_id_key(queue, client_id).as_slice(), &job_key(*job))?;
            }
            Change::AddToJobSet { queue, job_set, job } => {
                open(&mut job_sets, tx, JOB_SETS)?.insert(job_set_key(queue, job_set, *job).as_slice(), ())?;
            }
            Change::AppendEvent { queue, job_set, event } => {
                new_events.entry((queue, job_set)).or_default().push(event);
            }
            Change::PutExecutor(e) => {
                open(&mut executors, tx, EXECUTORS)?.insert(e.name.as_str(), encode_row("executor", e)?.as_slice())?;
            }
            Change::DeleteClientIds(queue) => {
                let mut prefix = queue.as_str().as_bytes().to_vec();
                let end = prefix_end(&prefix);
                prefix.push(0);
                open(&mut client_ids, tx, CLIENT_IDS)?.retain_in(prefix.as_slice()..end.as_slice(), |_, _| false)?;
            }
            Change::DeleteExecutor(name) => {
                open(&mut executors, tx, EXECUTORS)?.remove(name.as_str())?;
            }
            Change::PutSubmitSeq(seq) => {
                open(&mut meta, tx, META)?.insert(SUBMIT_SEQ, seq.to_be_bytes().as_slice())?;
            }
        }
    }
    if new_events.is_empty() {
        return Ok(());
    }
    let mut events = tx.open_table(EVENTS)?;
    let mut event_seqs = tx.open_table(EVENT_SEQS)?;
    for ((queue, job_set), mut list) in new_events {
        // Applying hands out sequence numbers in order; sorting keeps chunks contiguous anyway.
        list.sort_by_key(|e| e.seq);
        let prefix = set_prefix(queue, job_set);
        for chunk in list.chunks(EVENT_CHUNK_MAX) {
            events
                .insert(event_key(&prefix, chunk[0].seq).as_slice(), encode_row("event chunk", &chunk)?.as_slice())?;
        }
        if let Some(last) = list.last() {
            event_seqs.insert(prefix.as_slice(), last.seq)?;
        }
    }
    Ok(())
}
