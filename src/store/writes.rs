//! Writing the state machine's changes into a write transaction.

use super::StoreError;
use super::codec::{decode_row, encode_row};
use super::tables::*;
use crate::model::{JobId, JobSetName, QueueName};
use crate::record::{EventRecord, JobRecord};
use crate::state::Change;
use redb::{Key, ReadableTable, Table, TableDefinition, Value, WriteTransaction};
use std::collections::{BTreeMap, HashMap, HashSet};

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
    let (mut job_sets, mut client_ids, mut executors, mut finished) = (None, None, None, None);
    let (mut events, mut event_seqs, mut node_health, mut run_jobs) = (None, None, None, None);
    let (mut owners, mut usage) = (None, None);
    // A job set's events of this transaction become chunks, written at the end.
    let mut new_events: HashMap<(&QueueName, &JobSetName), Vec<&EventRecord>> = HashMap::new();
    // Purged jobs by the event chunks holding their events: each chunk is rewritten once, at the
    // end, however many of its jobs go.
    let mut purged_events: BTreeMap<Vec<u8>, HashSet<JobId>> = BTreeMap::new();
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
            Change::IndexFinished { job, at_ms } => {
                open(&mut finished, tx, FINISHED)?.insert(&finished_key(*at_ms, *job), ())?;
            }
            Change::PurgeJob { job, queue, job_set, finished_ms } => {
                let k = job_key(*job);
                let record = open(&mut jobs, tx, JOBS)?.remove(&k)?.map(|v| v.value().to_vec());
                open(&mut payloads, tx, PAYLOADS)?.remove(&k)?;
                open(&mut owners, tx, JOB_OWNERS)?.remove(&k)?;
                open(&mut finished, tx, FINISHED)?.remove(&finished_key(*finished_ms, *job))?;
                open(&mut job_sets, tx, JOB_SETS)?.remove(job_set_key(queue, job_set, *job).as_slice())?;
                let Some(bytes) = record else { continue };
                let record: JobRecord = decode_row(&bytes, || format!("job {job}"))?;
                let index = open(&mut run_jobs, tx, RUN_JOBS)?;
                for run in &record.runs {
                    index.remove(&run_key(run.run_id))?;
                }
                let used = open(&mut usage, tx, RUN_USAGE)?;
                for run in &record.runs {
                    used.remove(&run_key(run.run_id))?;
                }
                let prefix = set_prefix(queue, job_set);
                let t = open(&mut events, tx, EVENTS)?;
                for seq in record.event_seqs {
                    if let Some(chunk) = chunk_key_holding(t, &prefix, seq)? {
                        purged_events.entry(chunk).or_default().insert(*job);
                    }
                }
            }
            Change::DeleteClientId { queue, client_id } => {
                open(&mut client_ids, tx, CLIENT_IDS)?.remove(client_id_key(queue, client_id).as_slice())?;
            }
            Change::ForgetJobSet { queue, job_set } => {
                let prefix = set_prefix(queue, job_set);
                open(&mut event_seqs, tx, EVENT_SEQS)?.remove(prefix.as_slice())?;
                // Normally its jobs' purges took every event out already.
                let (start, end) = (event_key(&prefix, 0), prefix_end(&prefix));
                open(&mut events, tx, EVENTS)?.retain_in(start.as_slice()..end.as_slice(), |_, _| false)?;
                // Events appended earlier in this transaction belonged to the stream forgotten now.
                new_events.remove(&(queue, job_set));
            }
            Change::PutPurges(n) => {
                open(&mut meta, tx, META)?.insert(PURGES, n.to_be_bytes().as_slice())?;
            }
            Change::PutMaxJobId(id) => {
                open(&mut meta, tx, META)?.insert(MAX_JOB_ID, id.as_u128().to_be_bytes().as_slice())?;
            }
            Change::PutNodeHealth(h) => {
                open(&mut node_health, tx, NODE_HEALTH)?
                    .insert(node_key(&h.executor, &h.node).as_slice(), encode_row("node health", h)?.as_slice())?;
            }
            Change::DeleteNodeHealth { executor, node } => {
                open(&mut node_health, tx, NODE_HEALTH)?.remove(node_key(executor, node).as_slice())?;
            }
            Change::PutQueueUsage(usage) => {
                open(&mut meta, tx, META)?.insert(QUEUE_USAGE, encode_row("queue usage", usage)?.as_slice())?;
            }
            Change::PutQueueTrees(trees) => {
                open(&mut meta, tx, META)?.insert(QUEUE_TREE, encode_row("queue tree", trees)?.as_slice())?;
            }
            Change::IndexRun { run, job } => {
                open(&mut run_jobs, tx, RUN_JOBS)?.insert(&run_key(*run), &job_key(*job))?;
            }
            Change::PutOwner { job, owner } => {
                open(&mut owners, tx, JOB_OWNERS)?.insert(&job_key(*job), owner.as_str())?;
            }
            Change::PutRunUsage { run, usage: u } => {
                open(&mut usage, tx, RUN_USAGE)?.insert(&run_key(*run), encode_row("run usage", u)?.as_slice())?;
            }
        }
    }
    // Purged events before new ones: a job set forgotten and begun again in this transaction
    // gets chunks under the keys its old ones had.
    for (key, gone) in purged_events {
        let t = open(&mut events, tx, EVENTS)?;
        let Some(bytes) = t.get(key.as_slice())?.map(|v| v.value().to_vec()) else { continue };
        let mut chunk: Vec<EventRecord> = decode_row(&bytes, || format!("event chunk {key:?}"))?;
        let before = chunk.len();
        chunk.retain(|e| !gone.contains(&e.job_id));
        if chunk.is_empty() {
            t.remove(key.as_slice())?;
        } else if chunk.len() != before {
            t.insert(key.as_slice(), encode_row("event chunk", &chunk)?.as_slice())?;
        }
    }
    if new_events.is_empty() {
        return Ok(());
    }
    let events = open(&mut events, tx, EVENTS)?;
    let event_seqs = open(&mut event_seqs, tx, EVENT_SEQS)?;
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

/// The key of the job set's event chunk that holds `seq` (the last one starting at or before it).
fn chunk_key_holding(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    seq: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    let (first, at) = (event_key(prefix, 0), event_key(prefix, seq));
    match t.range(first.as_slice()..=at.as_slice())?.next_back() {
        Some(row) => Ok(Some(row?.0.value().to_vec())),
        None => Ok(None),
    }
}
