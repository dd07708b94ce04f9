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

/// The tables a transaction opened so far, each on first use (see [`open`]).
#[derive(Default)]
struct Tables<'t> {
    meta: Option<Table<'t, &'static str, &'static [u8]>>,
    queues: Option<Table<'t, &'static str, &'static [u8]>>,
    jobs: Option<Table<'t, &'static [u8; 16], &'static [u8]>>,
    payloads: Option<Table<'t, &'static [u8; 16], &'static [u8]>>,
    live: Option<Table<'t, &'static [u8; 16], ()>>,
    job_sets: Option<Table<'t, &'static [u8], ()>>,
    client_ids: Option<Table<'t, &'static [u8], &'static [u8; 16]>>,
    executors: Option<Table<'t, &'static str, &'static [u8]>>,
    finished: Option<Table<'t, &'static [u8; 24], ()>>,
    events: Option<Table<'t, &'static [u8], &'static [u8]>>,
    event_seqs: Option<Table<'t, &'static [u8], u64>>,
    node_health: Option<Table<'t, &'static [u8], &'static [u8]>>,
    run_jobs: Option<Table<'t, &'static [u8; 16], &'static [u8; 16]>>,
    owners: Option<Table<'t, &'static [u8; 16], &'static str>>,
    usage: Option<Table<'t, &'static [u8; 16], &'static [u8]>>,
    policies: Option<Table<'t, &'static [u8; 16], &'static [u8]>>,
}

/// What a transaction writes of the event streams once every change is seen.
#[derive(Default)]
struct PendingEvents<'c> {
    /// A job set's events of this transaction, which become chunks at the end.
    new: HashMap<(&'c QueueName, &'c JobSetName), Vec<&'c EventRecord>>,
    /// Purged jobs by the event chunks holding their events: each chunk is rewritten once, at
    /// the end, however many of its jobs go.
    purged: BTreeMap<Vec<u8>, HashSet<JobId>>,
}

/// Writes `changes` in `tx` (the caller commits).
pub fn write_changes(tx: &WriteTransaction, changes: &[Change]) -> Result<(), StoreError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut t = Tables::default();
    let mut pending = PendingEvents::default();
    for c in changes {
        write_change(tx, &mut t, &mut pending, c)?;
    }
    // Purged events before new ones: a job set forgotten and begun again in this transaction
    // gets chunks under the keys its old ones had.
    rewrite_purged_chunks(tx, &mut t, pending.purged)?;
    append_new_events(tx, &mut t, pending.new)
}

/// Writes one change (event chunks wait in `pending`).
fn write_change<'t, 'c>(
    tx: &'t WriteTransaction,
    t: &mut Tables<'t>,
    pending: &mut PendingEvents<'c>,
    c: &'c Change,
) -> Result<(), StoreError> {
    match c {
        Change::PutQueue(q) => {
            open(&mut t.queues, tx, QUEUES)?.insert(q.name.as_str(), encode_row("queue", q)?.as_slice())?;
        }
        Change::DeleteQueue(name) => {
            open(&mut t.queues, tx, QUEUES)?.remove(name.as_str())?;
        }
        Change::PutJob { record, live: is_live } => {
            let k = job_key(record.id);
            open(&mut t.jobs, tx, JOBS)?.insert(&k, encode_row("job", record.as_ref())?.as_slice())?;
            if *is_live {
                open(&mut t.live, tx, LIVE_JOBS)?.insert(&k, ())?;
            } else {
                open(&mut t.live, tx, LIVE_JOBS)?.remove(&k)?;
            }
        }
        Change::PutPayload(id, p) => {
            open(&mut t.payloads, tx, PAYLOADS)?
                .insert(&job_key(*id), encode_row("payload", p.as_ref())?.as_slice())?;
        }
        Change::PutClientId { queue, client_id, job } => {
            open(&mut t.client_ids, tx, CLIENT_IDS)?
                .insert(client_id_key(queue, client_id).as_slice(), &job_key(*job))?;
        }
        Change::AddToJobSet { queue, job_set, job } => {
            open(&mut t.job_sets, tx, JOB_SETS)?.insert(job_set_key(queue, job_set, *job).as_slice(), ())?;
        }
        Change::AppendEvent { queue, job_set, event } => {
            pending.new.entry((queue, job_set)).or_default().push(event);
        }
        Change::PutExecutor(e) => {
            open(&mut t.executors, tx, EXECUTORS)?.insert(e.name.as_str(), encode_row("executor", e)?.as_slice())?;
        }
        Change::DeleteClientIds(queue) => {
            let mut prefix = queue.as_str().as_bytes().to_vec();
            let end = prefix_end(&prefix);
            prefix.push(0);
            open(&mut t.client_ids, tx, CLIENT_IDS)?.retain_in(prefix.as_slice()..end.as_slice(), |_, _| false)?;
        }
        Change::DeleteExecutor(name) => {
            open(&mut t.executors, tx, EXECUTORS)?.remove(name.as_str())?;
        }
        Change::PutSubmitSeq(seq) => {
            open(&mut t.meta, tx, META)?.insert(SUBMIT_SEQ, seq.to_be_bytes().as_slice())?;
        }
        Change::IndexFinished { job, at_ms } => {
            open(&mut t.finished, tx, FINISHED)?.insert(&finished_key(*at_ms, *job), ())?;
        }
        Change::PurgeJob { job, queue, job_set, finished_ms } => {
            purge_job(tx, t, pending, *job, queue, job_set, *finished_ms)?;
        }
        Change::DeleteClientId { queue, client_id } => {
            open(&mut t.client_ids, tx, CLIENT_IDS)?.remove(client_id_key(queue, client_id).as_slice())?;
        }
        Change::ForgetJobSet { queue, job_set } => {
            let prefix = set_prefix(queue, job_set);
            open(&mut t.event_seqs, tx, EVENT_SEQS)?.remove(prefix.as_slice())?;
            // Normally its jobs' purges took every event out already.
            let (start, end) = (event_key(&prefix, 0), prefix_end(&prefix));
            open(&mut t.events, tx, EVENTS)?.retain_in(start.as_slice()..end.as_slice(), |_, _| false)?;
            // Events appended earlier in this transaction belonged to the stream forgotten now.
            pending.new.remove(&(queue, job_set));
        }
        Change::PutPurges(n) => {
            open(&mut t.meta, tx, META)?.insert(PURGES, n.to_be_bytes().as_slice())?;
        }
        Change::PutMaxJobId(id) => {
            open(&mut t.meta, tx, META)?.insert(MAX_JOB_ID, id.as_u128().to_be_bytes().as_slice())?;
        }
        Change::PutNodeHealth(h) => {
            open(&mut t.node_health, tx, NODE_HEALTH)?
                .insert(node_key(&h.executor, &h.node).as_slice(), encode_row("node health", h)?.as_slice())?;
        }
        Change::DeleteNodeHealth { executor, node } => {
            open(&mut t.node_health, tx, NODE_HEALTH)?.remove(node_key(executor, node).as_slice())?;
        }
        Change::PutQueueUsage(usage) => {
            open(&mut t.meta, tx, META)?.insert(QUEUE_USAGE, encode_row("queue usage", usage)?.as_slice())?;
        }
        Change::PutQueuePolicies(policies) => {
            open(&mut t.meta, tx, META)?.insert(QUEUE_POLICIES, encode_row("queue policies", policies)?.as_slice())?;
        }
        Change::PutQueueTrees(trees) => {
            open(&mut t.meta, tx, META)?.insert(QUEUE_TREE, encode_row("queue tree", trees)?.as_slice())?;
        }
        Change::PutSchedulerConfig(config) => {
            let row = encode_row("scheduler config", config.as_ref())?;
            open(&mut t.meta, tx, META)?.insert(SCHEDULER_CONFIG, row.as_slice())?;
        }
        Change::PutScheduleCycles(n) => {
            open(&mut t.meta, tx, META)?.insert(SCHEDULE_CYCLES, n.to_be_bytes().as_slice())?;
        }
        Change::IndexRun { run, job } => {
            open(&mut t.run_jobs, tx, RUN_JOBS)?.insert(&run_key(*run), &job_key(*job))?;
        }
        Change::PutOwner { job, owner } => {
            open(&mut t.owners, tx, JOB_OWNERS)?.insert(&job_key(*job), owner.as_str())?;
        }
        Change::PutPolicies { job, policies } => {
            let row = encode_row("job policies", policies.as_ref())?;
            open(&mut t.policies, tx, JOB_POLICIES)?.insert(&job_key(*job), row.as_slice())?;
        }
        Change::PutRunUsage { run, usage } => {
            open(&mut t.usage, tx, RUN_USAGE)?.insert(&run_key(*run), encode_row("run usage", usage)?.as_slice())?;
        }
    }
    Ok(())
}

/// Deletes a job's rows and its runs' (their index and usage); the event chunks holding its
/// events are noted in `pending`, to be rewritten once at the end.
fn purge_job<'t>(
    tx: &'t WriteTransaction,
    t: &mut Tables<'t>,
    pending: &mut PendingEvents<'_>,
    job: JobId,
    queue: &QueueName,
    job_set: &JobSetName,
    finished_ms: i64,
) -> Result<(), StoreError> {
    let k = job_key(job);
    let record = open(&mut t.jobs, tx, JOBS)?.remove(&k)?.map(|v| v.value().to_vec());
    open(&mut t.payloads, tx, PAYLOADS)?.remove(&k)?;
    open(&mut t.owners, tx, JOB_OWNERS)?.remove(&k)?;
    open(&mut t.policies, tx, JOB_POLICIES)?.remove(&k)?;
    open(&mut t.finished, tx, FINISHED)?.remove(&finished_key(finished_ms, job))?;
    open(&mut t.job_sets, tx, JOB_SETS)?.remove(job_set_key(queue, job_set, job).as_slice())?;
    let Some(bytes) = record else { return Ok(()) };
    let record: JobRecord = decode_row(&bytes, || format!("job {job}"))?;
    for run in &record.runs {
        open(&mut t.run_jobs, tx, RUN_JOBS)?.remove(&run_key(run.run_id))?;
        open(&mut t.usage, tx, RUN_USAGE)?.remove(&run_key(run.run_id))?;
    }
    let prefix = set_prefix(queue, job_set);
    let events = open(&mut t.events, tx, EVENTS)?;
    for seq in record.event_seqs {
        if let Some(chunk) = chunk_key_holding(events, &prefix, seq)? {
            pending.purged.entry(chunk).or_default().insert(job);
        }
    }
    Ok(())
}

/// Rewrites each event chunk that held purged jobs' events without them (removed when empty).
fn rewrite_purged_chunks<'t>(
    tx: &'t WriteTransaction,
    t: &mut Tables<'t>,
    purged: BTreeMap<Vec<u8>, HashSet<JobId>>,
) -> Result<(), StoreError> {
    for (key, gone) in purged {
        let events = open(&mut t.events, tx, EVENTS)?;
        let Some(bytes) = events.get(key.as_slice())?.map(|v| v.value().to_vec()) else { continue };
        let mut chunk: Vec<EventRecord> = decode_row(&bytes, || format!("event chunk {key:?}"))?;
        let before = chunk.len();
        chunk.retain(|e| !gone.contains(&e.job_id));
        if chunk.is_empty() {
            events.remove(key.as_slice())?;
        } else if chunk.len() != before {
            events.insert(key.as_slice(), encode_row("event chunk", &chunk)?.as_slice())?;
        }
    }
    Ok(())
}

/// Writes this transaction's new events as chunks of each job set's stream, and its last
/// sequence number.
fn append_new_events<'t>(
    tx: &'t WriteTransaction,
    t: &mut Tables<'t>,
    new: HashMap<(&QueueName, &JobSetName), Vec<&EventRecord>>,
) -> Result<(), StoreError> {
    if new.is_empty() {
        return Ok(());
    }
    let events = open(&mut t.events, tx, EVENTS)?;
    let event_seqs = open(&mut t.event_seqs, tx, EVENT_SEQS)?;
    for ((queue, job_set), mut list) in new {
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
