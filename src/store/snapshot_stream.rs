//! Snapshots of the state as a stream of frames (format: `record::snapshot`): the schema version,
//! then one [`SnapshotRowRecord`] per row, table by table in key order. Exported from a pinned
//! read transaction one row at a time, imported one row at a time in bounded write transactions,
//! so neither side ever holds the state in memory.
//!
//! What an import must guarantee: readers (the API reads jobs and events from redb) see the old
//! state or the new one, never a mix; a corrupt stream or a crash part-way leaves the old state.
//! Chosen: **staging tables, then one swap**. Rows go into tables of their own (`import.<table>`),
//! committed every `rows_per_tx` rows without fsync. Only after the stream ended and checked out
//! (the frame source verifies the file's checksum before it reports the end) does one durable
//! transaction swap them in: each live table is deleted and its staging table renamed over it
//! (redb renames in the catalog, not row by row), the replicated `meta` keys are replaced, and
//! Raft's applied log id and membership are set, all in the same commit. A failed import drops
//! the staging tables; a crash leaves them behind, and [`Store::open`] drops them, so the state
//! is the old one with its old applied log id and Raft sends the snapshot again.
//!
//! The alternative, writing the live tables in place with an "import in progress" mark in `meta`
//! that start-up detects, was not taken: during the import the live tables would be half old,
//! half new, and the API serves reads from them; and after a crash the member could not serve
//! at all until the same snapshot was fetched and installed again.

use super::codec::{decode_row, encode_row};
use super::tables::*;
use super::{Store, StoreError};
use crate::record::{
    FrameSink, FrameSource, STATE_SCHEMA_VERSION, SnapshotRecord, SnapshotRowRecord, SnapshotRowRef, decode, encode,
};
use redb::{Durability, ReadableTable, Table, TableDefinition, WriteTransaction};

/// Rows per write transaction of an import: each commit stays a few MB, and the cost of a commit
/// (a new root, no fsync) is spread over many rows.
pub const IMPORT_ROWS_PER_TX: usize = 20_000;

const S_META: TableDefinition<&str, &[u8]> = TableDefinition::new("import.meta");
const S_QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("import.queues");
const S_JOBS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("import.jobs");
const S_PAYLOADS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("import.payloads");
const S_LIVE_JOBS: TableDefinition<&[u8; 16], ()> = TableDefinition::new("import.live_jobs");
const S_JOB_SETS: TableDefinition<&[u8], ()> = TableDefinition::new("import.job_sets");
const S_EVENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("import.event_chunks");
const S_EVENT_SEQS: TableDefinition<&[u8], u64> = TableDefinition::new("import.event_seqs");
const S_CLIENT_IDS: TableDefinition<&[u8], &[u8; 16]> = TableDefinition::new("import.client_ids");
const S_EXECUTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("import.executors");
const S_FINISHED: TableDefinition<&[u8; 24], ()> = TableDefinition::new("import.finished");
const S_NODE_HEALTH: TableDefinition<&[u8], &[u8]> = TableDefinition::new("import.node_health");
const S_RUN_JOBS: TableDefinition<&[u8; 16], &[u8; 16]> = TableDefinition::new("import.run_jobs");
const S_JOB_OWNERS: TableDefinition<&[u8; 16], &str> = TableDefinition::new("import.job_owners");
const S_JOB_POLICIES: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("import.job_policies");
const S_RUN_USAGE: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("import.run_usage");

/// What an import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportStats {
    /// Rows imported.
    pub rows: u64,
    /// Write transactions committed, the swap included.
    pub transactions: u64,
}

/// A consistent view of the state tables, pinned for a snapshot export (a redb read transaction:
/// writes committed after it was taken are not seen).
pub struct ExportView {
    tx: redb::ReadTransaction,
}

impl ExportView {
    /// A `meta` value as of this view.
    pub fn raft_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let meta = self.tx.open_table(META)?;
        Ok(meta.get(key)?.map(|v| v.value().to_vec()))
    }

    /// Writes the state as of this view to `out`; returns the number of rows.
    pub fn write_rows(&self, out: &mut dyn FrameSink) -> Result<u64, StoreError> {
        write_rows(&self.tx, out)
    }
}

impl Store {
    /// Pins the current state for a later [`ExportView::write_rows`].
    pub fn pin_export(&self) -> Result<ExportView, StoreError> {
        Ok(ExportView { tx: self.read()? })
    }

    /// Replaces the state with the snapshot stream `frames`, in write transactions of at most
    /// `rows_per_tx` rows and a final swap that also writes `raft_meta` into `meta` (see the
    /// module docs). On error the state is unchanged.
    pub fn import_stream(
        &self,
        frames: &mut dyn FrameSource,
        raft_meta: &[(&str, Vec<u8>)],
        rows_per_tx: usize,
    ) -> Result<ImportStats, StoreError> {
        let imported = self.import_staged(frames, raft_meta, rows_per_tx.max(1));
        if imported.is_err()
            && let Err(e) = drop_staging(&self.db)
        {
            tracing::warn!(error = %e, "cannot drop the staging tables of a failed snapshot import");
        }
        imported
    }

    fn import_staged(
        &self,
        frames: &mut dyn FrameSource,
        raft_meta: &[(&str, Vec<u8>)],
        rows_per_tx: usize,
    ) -> Result<ImportStats, StoreError> {
        drop_staging(&self.db)?;
        let first = frames.next_frame().map_err(StoreError::Stream)?;
        check_schema(first)?;
        let mut stats = ImportStats { rows: 0, transactions: 0 };
        let mut tx = self.staging_tx()?;
        let mut staging = Staging::open(&tx)?;
        let mut in_tx = 0;
        while let Some(frame) = frames.next_frame().map_err(StoreError::Stream)? {
            let row: SnapshotRowRecord = decode_row(frame, || format!("snapshot row {}", stats.rows + 1))?;
            staging.insert(row)?;
            stats.rows += 1;
            in_tx += 1;
            if in_tx == rows_per_tx {
                drop(staging);
                tx.commit()?;
                stats.transactions += 1;
                tx = self.staging_tx()?;
                staging = Staging::open(&tx)?;
                in_tx = 0;
            }
        }
        drop(staging);
        // The end of the stream, checked: the rows of the last batch and the swap go together,
        // durably (this also persists the earlier non-durable commits).
        tx.set_durability(Durability::Immediate)?;
        swap(&tx, raft_meta)?;
        tx.commit()?;
        stats.transactions += 1;
        Ok(stats)
    }

    /// A write transaction of staging rows: not fsynced (lost rows only matter if the swap
    /// commits, and the swap's durable commit persists them first).
    fn staging_tx(&self) -> Result<WriteTransaction, StoreError> {
        let mut tx = self.write()?;
        tx.set_durability(Durability::None)?;
        Ok(tx)
    }
}

/// The staging tables of an import in progress, open in one write transaction.
struct Staging<'t> {
    meta: Table<'t, &'static str, &'static [u8]>,
    queues: Table<'t, &'static str, &'static [u8]>,
    jobs: Table<'t, &'static [u8; 16], &'static [u8]>,
    payloads: Table<'t, &'static [u8; 16], &'static [u8]>,
    live_jobs: Table<'t, &'static [u8; 16], ()>,
    job_sets: Table<'t, &'static [u8], ()>,
    events: Table<'t, &'static [u8], &'static [u8]>,
    event_seqs: Table<'t, &'static [u8], u64>,
    client_ids: Table<'t, &'static [u8], &'static [u8; 16]>,
    executors: Table<'t, &'static str, &'static [u8]>,
    finished: Table<'t, &'static [u8; 24], ()>,
    node_health: Table<'t, &'static [u8], &'static [u8]>,
    run_jobs: Table<'t, &'static [u8; 16], &'static [u8; 16]>,
    job_owners: Table<'t, &'static [u8; 16], &'static str>,
    run_usage: Table<'t, &'static [u8; 16], &'static [u8]>,
    job_policies: Table<'t, &'static [u8; 16], &'static [u8]>,
}

impl<'t> Staging<'t> {
    fn open(tx: &'t WriteTransaction) -> Result<Self, StoreError> {
        Ok(Staging {
            meta: tx.open_table(S_META)?,
            queues: tx.open_table(S_QUEUES)?,
            jobs: tx.open_table(S_JOBS)?,
            payloads: tx.open_table(S_PAYLOADS)?,
            live_jobs: tx.open_table(S_LIVE_JOBS)?,
            job_sets: tx.open_table(S_JOB_SETS)?,
            events: tx.open_table(S_EVENTS)?,
            event_seqs: tx.open_table(S_EVENT_SEQS)?,
            client_ids: tx.open_table(S_CLIENT_IDS)?,
            executors: tx.open_table(S_EXECUTORS)?,
            finished: tx.open_table(S_FINISHED)?,
            node_health: tx.open_table(S_NODE_HEALTH)?,
            run_jobs: tx.open_table(S_RUN_JOBS)?,
            job_owners: tx.open_table(S_JOB_OWNERS)?,
            run_usage: tx.open_table(S_RUN_USAGE)?,
            job_policies: tx.open_table(S_JOB_POLICIES)?,
        })
    }

    fn insert(&mut self, row: SnapshotRowRecord) -> Result<(), StoreError> {
        match row {
            // The node's own keys never come from another node.
            SnapshotRowRecord::Meta { key, .. } if is_node_local(&key) => {}
            SnapshotRowRecord::Meta { key, value } => {
                self.meta.insert(key.as_str(), value.as_slice())?;
            }
            SnapshotRowRecord::Queue { name, value } => {
                self.queues.insert(name.as_str(), value.as_slice())?;
            }
            SnapshotRowRecord::Job { id, value } => {
                self.jobs.insert(&id, value.as_slice())?;
            }
            SnapshotRowRecord::Payload { id, value } => {
                self.payloads.insert(&id, value.as_slice())?;
            }
            SnapshotRowRecord::LiveJob { id } => {
                self.live_jobs.insert(&id, ())?;
            }
            SnapshotRowRecord::JobSet { key } => {
                self.job_sets.insert(key.as_slice(), ())?;
            }
            SnapshotRowRecord::EventChunk { key, value } => {
                self.events.insert(key.as_slice(), value.as_slice())?;
            }
            SnapshotRowRecord::EventSeq { key, seq } => {
                self.event_seqs.insert(key.as_slice(), seq)?;
            }
            SnapshotRowRecord::ClientId { key, job } => {
                self.client_ids.insert(key.as_slice(), &job)?;
            }
            SnapshotRowRecord::Executor { name, value } => {
                self.executors.insert(name.as_str(), value.as_slice())?;
            }
            SnapshotRowRecord::Finished { key } => {
                self.finished.insert(&key, ())?;
            }
            SnapshotRowRecord::NodeHealth { key, value } => {
                self.node_health.insert(key.as_slice(), value.as_slice())?;
            }
            SnapshotRowRecord::JobOwner { job, owner } => {
                self.job_owners.insert(&job, owner.as_str())?;
            }
            SnapshotRowRecord::RunUsage { run, value } => {
                self.run_usage.insert(&run, value.as_slice())?;
            }
            SnapshotRowRecord::JobPolicies { job, value } => {
                self.job_policies.insert(&job, value.as_slice())?;
            }
            SnapshotRowRecord::RunJob { run, job } => {
                self.run_jobs.insert(&run, &job)?;
            }
        }
        Ok(())
    }
}

/// Replaces `live` by `staged` (a catalog rename, whatever the table's size).
fn swap_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    tx: &WriteTransaction,
    live: TableDefinition<K, V>,
    staged: TableDefinition<K, V>,
) -> Result<(), StoreError> {
    tx.delete_table(live)?;
    tx.rename_table(staged, live)?;
    Ok(())
}

/// Puts the staged tables in place of the live ones, with the snapshot's `meta` rows (the node's
/// own keys stay) and `raft_meta`.
fn swap(tx: &WriteTransaction, raft_meta: &[(&str, Vec<u8>)]) -> Result<(), StoreError> {
    swap_table(tx, QUEUES, S_QUEUES)?;
    swap_table(tx, JOBS, S_JOBS)?;
    swap_table(tx, PAYLOADS, S_PAYLOADS)?;
    swap_table(tx, LIVE_JOBS, S_LIVE_JOBS)?;
    swap_table(tx, JOB_SETS, S_JOB_SETS)?;
    swap_table(tx, EVENTS, S_EVENTS)?;
    swap_table(tx, EVENT_SEQS, S_EVENT_SEQS)?;
    swap_table(tx, CLIENT_IDS, S_CLIENT_IDS)?;
    swap_table(tx, EXECUTORS, S_EXECUTORS)?;
    swap_table(tx, FINISHED, S_FINISHED)?;
    swap_table(tx, NODE_HEALTH, S_NODE_HEALTH)?;
    swap_table(tx, RUN_JOBS, S_RUN_JOBS)?;
    swap_table(tx, JOB_OWNERS, S_JOB_OWNERS)?;
    swap_table(tx, RUN_USAGE, S_RUN_USAGE)?;
    swap_table(tx, JOB_POLICIES, S_JOB_POLICIES)?;
    {
        let mut live = tx.open_table(META)?;
        live.retain(|k, _| is_node_local(k))?;
        let staged = tx.open_table(S_META)?;
        for row in staged.iter()? {
            let (k, v) = row?;
            live.insert(k.value(), v.value())?;
        }
        for (k, v) in raft_meta {
            live.insert(*k, v.as_slice())?;
        }
    }
    tx.delete_table(S_META)?;
    Ok(())
}

/// Drops the staging tables an interrupted import left; true if there were any.
pub(super) fn drop_staging(db: &redb::Database) -> Result<bool, StoreError> {
    let tx = db.begin_write()?;
    let mut found = tx.delete_table(S_META)?;
    found |= tx.delete_table(S_QUEUES)?;
    found |= tx.delete_table(S_JOBS)?;
    found |= tx.delete_table(S_PAYLOADS)?;
    found |= tx.delete_table(S_LIVE_JOBS)?;
    found |= tx.delete_table(S_JOB_SETS)?;
    found |= tx.delete_table(S_EVENTS)?;
    found |= tx.delete_table(S_EVENT_SEQS)?;
    found |= tx.delete_table(S_CLIENT_IDS)?;
    found |= tx.delete_table(S_EXECUTORS)?;
    found |= tx.delete_table(S_FINISHED)?;
    found |= tx.delete_table(S_NODE_HEALTH)?;
    found |= tx.delete_table(S_RUN_JOBS)?;
    found |= tx.delete_table(S_JOB_OWNERS)?;
    found |= tx.delete_table(S_RUN_USAGE)?;
    found |= tx.delete_table(S_JOB_POLICIES)?;
    tx.commit()?;
    Ok(found)
}

/// The first frame of a stream: the state schema version of its rows, which must be ours.
fn check_schema(first: Option<&[u8]>) -> Result<(), StoreError> {
    let found = schema_in(first)?;
    if found != STATE_SCHEMA_VERSION {
        return Err(StoreError::SnapshotVersion { found, expected: STATE_SCHEMA_VERSION });
    }
    Ok(())
}

/// The state schema version of a stream's rows, from its first frame.
fn schema_in(first: Option<&[u8]>) -> Result<u32, StoreError> {
    let Some(frame) = first else {
        return Err(StoreError::Malformed {
            what: "snapshot".into(),
            detail: "the stream is empty: it has no schema version".into(),
        });
    };
    decode(frame).map_err(|source| StoreError::Corrupt { what: "snapshot schema version".into(), source })
}

/// The state schema version of the rows of the stream `frames` (its first frame is read).
pub(crate) fn schema_of(frames: &mut dyn FrameSource) -> Result<u32, StoreError> {
    schema_in(frames.next_frame().map_err(StoreError::Stream)?)
}

/// Writes one row as a frame.
fn emit(out: &mut dyn FrameSink, row: SnapshotRowRef<'_>) -> Result<(), StoreError> {
    let bytes = encode_row("snapshot row", &row)?;
    out.frame(&bytes).map_err(StoreError::Stream)
}

/// Writes the schema version, then every row of the state tables, from `tx`.
pub(super) fn write_rows(tx: &redb::ReadTransaction, out: &mut dyn FrameSink) -> Result<u64, StoreError> {
    let version = encode(&STATE_SCHEMA_VERSION).map_err(|source| StoreError::Encode { what: "schema", source })?;
    out.frame(&version).map_err(StoreError::Stream)?;
    let mut n = 0u64;
    for row in tx.open_table(META)?.iter()? {
        let (k, v) = row?;
        if !is_node_local(k.value()) {
            emit(out, SnapshotRowRef::Meta { key: k.value(), value: v.value() })?;
            n += 1;
        }
    }
    for row in tx.open_table(QUEUES)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::Queue { name: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(JOBS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::Job { id: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(PAYLOADS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::Payload { id: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(LIVE_JOBS)?.iter()? {
        emit(out, SnapshotRowRef::LiveJob { id: row?.0.value() })?;
        n += 1;
    }
    for row in tx.open_table(JOB_SETS)?.iter()? {
        emit(out, SnapshotRowRef::JobSet { key: row?.0.value() })?;
        n += 1;
    }
    for row in tx.open_table(EVENTS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::EventChunk { key: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(EVENT_SEQS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::EventSeq { key: k.value(), seq: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(CLIENT_IDS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::ClientId { key: k.value(), job: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(EXECUTORS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::Executor { name: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(FINISHED)?.iter()? {
        emit(out, SnapshotRowRef::Finished { key: row?.0.value() })?;
        n += 1;
    }
    for row in tx.open_table(NODE_HEALTH)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::NodeHealth { key: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(RUN_JOBS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::RunJob { run: k.value(), job: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(JOB_OWNERS)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::JobOwner { job: k.value(), owner: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(RUN_USAGE)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::RunUsage { run: k.value(), value: v.value() })?;
        n += 1;
    }
    for row in tx.open_table(JOB_POLICIES)?.iter()? {
        let (k, v) = row?;
        emit(out, SnapshotRowRef::JobPolicies { job: k.value(), value: v.value() })?;
        n += 1;
    }
    Ok(n)
}

/// Writes the frames of an inline snapshot of an older release (a state schema 2
/// [`SnapshotRecord`], as `raft_snapshot` kept it before snapshot files): the same rows, in the
/// same order, as an export of that state writes, as rows of today's schema, that is with the
/// `finished` index that migration 3 builds for a schema 2 database (the state this snapshot is
/// installed into has been migrated too), no `node_health` rows (migration 4 starts that
/// table empty), and jobs converted and their runs indexed as migration 7 does. Holds the old
/// record in memory, as the old release did.
pub(crate) fn convert_legacy(data: &[u8], out: &mut dyn FrameSink) -> Result<u64, StoreError> {
    use super::migrate::steps::v0003_finished_index::{ChunksInMemory, Events, finished_key_of};
    let found = SnapshotRecord::schema_version_of(data)
        .map_err(|source| StoreError::Corrupt { what: "inline snapshot".into(), source })?;
    // Inline snapshots were only ever written at schema 2.
    if found != 2 {
        return Err(StoreError::SnapshotVersion { found, expected: 2 });
    }
    let e: SnapshotRecord = decode_row(data, || "inline snapshot".into())?;
    let live: std::collections::HashSet<&[u8; 16]> = e.live_jobs.iter().collect();
    let chunks = ChunksInMemory(e.events.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect());
    let mut events = Events::new(&chunks);
    let mut finished = std::collections::BTreeSet::new();
    for (_, record) in e.jobs.iter().filter(|(id, _)| !live.contains(id)) {
        if let Some(key) = finished_key_of(record, &mut events)? {
            finished.insert(key);
        }
    }
    let mut jobs = Vec::with_capacity(e.jobs.len());
    let mut run_jobs = std::collections::BTreeMap::new();
    for (id, record) in &e.jobs {
        let (converted, runs) = super::migrate::steps::v0007_run_index::convert_job(record)?;
        run_jobs.extend(runs.into_iter().map(|run| (run, *id)));
        jobs.push((*id, converted));
    }
    let version = encode(&STATE_SCHEMA_VERSION).map_err(|source| StoreError::Encode { what: "schema", source })?;
    out.frame(&version).map_err(StoreError::Stream)?;
    let rows = e
        .meta
        .iter()
        .filter(|(k, _)| !is_node_local(k))
        .map(|(key, value)| SnapshotRowRef::Meta { key, value })
        .chain(e.queues.iter().map(|(name, value)| SnapshotRowRef::Queue { name, value }))
        .chain(jobs.iter().map(|(id, value)| SnapshotRowRef::Job { id, value }))
        .chain(e.payloads.iter().map(|(id, value)| SnapshotRowRef::Payload { id, value }))
        .chain(e.live_jobs.iter().map(|id| SnapshotRowRef::LiveJob { id }))
        .chain(e.job_sets.iter().map(|key| SnapshotRowRef::JobSet { key }))
        .chain(e.events.iter().map(|(key, value)| SnapshotRowRef::EventChunk { key, value }))
        .chain(e.event_seqs.iter().map(|(key, seq)| SnapshotRowRef::EventSeq { key, seq: *seq }))
        .chain(e.client_ids.iter().map(|(key, job)| SnapshotRowRef::ClientId { key, job }))
        .chain(e.executors.iter().map(|(name, value)| SnapshotRowRef::Executor { name, value }))
        .chain(finished.iter().map(|key| SnapshotRowRef::Finished { key }))
        .chain(run_jobs.iter().map(|(run, job)| SnapshotRowRef::RunJob { run, job }));
    let mut n = 0;
    for row in rows {
        emit(out, row)?;
        n += 1;
    }
    Ok(n)
}
