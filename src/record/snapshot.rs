//! Snapshots of the state: every state table's rows, copied as stored. The rows inside keep
//! their own formats (the state schema's), so a snapshot is only read by a binary of the same
//! state schema version, which it carries first.
//!
//! Two formats:
//! - [`SnapshotRowRecord`] (snapshot file format 1): one frame per row, streamed into and out of
//!   a snapshot file (`raft::snapshot_file`) so that no member holds a whole snapshot in memory.
//!   The first frame of the stream is the state schema version alone (a `u32`), the rows follow
//!   table by table in the order of the enum's variants, each table in key order.
//! - [`SnapshotRecord`] (state schema 2, before snapshot files): the whole state in one record,
//!   as releases before snapshot files kept it inline in the `raft_snapshot` table. Still read, to
//!   convert such a snapshot into a file when an old data directory is opened.

use serde::{Deserialize, Serialize};

/// The whole state, table by table, as raw rows. Format: state schema 2.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// State schema version of the rows. First, so that any later version can read it.
    pub schema_version: u32,
    /// `meta` rows but the schema version.
    pub meta: Vec<(String, Vec<u8>)>,
    /// `queues` rows.
    pub queues: Vec<(String, Vec<u8>)>,
    /// `jobs` rows.
    pub jobs: Vec<([u8; 16], Vec<u8>)>,
    /// `payloads` rows.
    pub payloads: Vec<([u8; 16], Vec<u8>)>,
    /// `live_jobs` keys.
    pub live_jobs: Vec<[u8; 16]>,
    /// `job_sets` keys.
    pub job_sets: Vec<Vec<u8>>,
    /// `event_chunks` rows.
    pub events: Vec<(Vec<u8>, Vec<u8>)>,
    /// `event_seqs` rows.
    pub event_seqs: Vec<(Vec<u8>, u64)>,
    /// `client_ids` rows.
    pub client_ids: Vec<(Vec<u8>, [u8; 16])>,
    /// `executors` rows.
    pub executors: Vec<(String, Vec<u8>)>,
}

impl SnapshotRecord {
    /// The schema version of an encoded snapshot, read without decoding the rest (which may be
    /// in another version's format).
    pub fn schema_version_of(bytes: &[u8]) -> Result<u32, super::CodecError> {
        super::codec::decode_prefix(bytes)
    }
}

/// One row of a state table in a snapshot stream: one frame each. Format: snapshot file format 1,
/// with rows of state schema 2 inside, [`SnapshotRowRecord::Finished`] from state schema 3 on,
/// [`SnapshotRowRecord::NodeHealth`] from state schema 4 on, [`SnapshotRowRecord::RunJob`] from
/// state schema 7 on, [`SnapshotRowRecord::JobOwner`] from state schema 8 on and
/// [`SnapshotRowRecord::RunUsage`] from state schema 9 on and [`SnapshotRowRecord::JobPolicies`]
/// from state schema 11 on (see [`super::SNAPSHOT_FORMAT_VERSION`]). Never change a variant: add a new format instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotRowRecord {
    /// A `meta` row (never the node's own keys, such as the schema version).
    Meta {
        /// The key.
        key: String,
        /// The value as stored.
        value: Vec<u8>,
    },
    /// A `queues` row.
    Queue {
        /// The queue name.
        name: String,
        /// The `QueueRecord` as stored.
        value: Vec<u8>,
    },
    /// A `jobs` row.
    Job {
        /// The job id key (big-endian).
        id: [u8; 16],
        /// The `JobRecord` as stored.
        value: Vec<u8>,
    },
    /// A `payloads` row.
    Payload {
        /// The job id key (big-endian).
        id: [u8; 16],
        /// The `PayloadRecord` as stored.
        value: Vec<u8>,
    },
    /// A `live_jobs` key.
    LiveJob {
        /// The job id key (big-endian).
        id: [u8; 16],
    },
    /// A `job_sets` key.
    JobSet {
        /// `queue 0 job_set 0 job_id`.
        key: Vec<u8>,
    },
    /// An `event_chunks` row.
    EventChunk {
        /// `queue 0 job_set 0 first_seq`.
        key: Vec<u8>,
        /// The chunk of `EventRecord`s as stored.
        value: Vec<u8>,
    },
    /// An `event_seqs` row.
    EventSeq {
        /// `queue 0 job_set`.
        key: Vec<u8>,
        /// The job set's last sequence number.
        seq: u64,
    },
    /// A `client_ids` row.
    ClientId {
        /// `queue 0 client_id`.
        key: Vec<u8>,
        /// The job id key (big-endian).
        job: [u8; 16],
    },
    /// An `executors` row.
    Executor {
        /// The executor name.
        name: String,
        /// The `ExecutorRecord` as stored.
        value: Vec<u8>,
    },
    /// A `finished` key: finish time and job id (state schema 3).
    Finished {
        /// The key as stored (`store::tables::finished_key`).
        key: [u8; 24],
    },
    /// A `node_health` row (state schema 4).
    NodeHealth {
        /// `executor 0 node`.
        key: Vec<u8>,
        /// The `NodeHealthRecord` as stored.
        value: Vec<u8>,
    },
    /// A `run_jobs` row: the job of a run (state schema 7).
    RunJob {
        /// The run id key (big-endian).
        run: [u8; 16],
        /// The job id key (big-endian).
        job: [u8; 16],
    },
    /// A `job_owners` row: who submitted a job (state schema 8).
    JobOwner {
        /// The job id key (big-endian).
        job: [u8; 16],
        /// The principal's name.
        owner: String,
    },
    /// A `run_usage` row: what a run used (state schema 9).
    RunUsage {
        /// The run id key (big-endian).
        run: [u8; 16],
        /// The encoded [`super::RunUsageRecord`], as stored.
        value: Vec<u8>,
    },
    /// A `job_policies` row: a job's dependencies and retry policy (state schema 11).
    JobPolicies {
        /// The job id key (big-endian).
        job: [u8; 16],
        /// The encoded [`super::JobPoliciesRecord`], as stored.
        value: Vec<u8>,
    },
}

/// [`SnapshotRowRecord`] borrowing the row from the table, for writing without copies. It
/// encodes exactly as [`SnapshotRowRecord`] (the golden tests check it).
#[derive(Debug, Clone, Copy, Serialize)]
pub enum SnapshotRowRef<'a> {
    /// See [`SnapshotRowRecord::Meta`].
    Meta {
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::Queue`].
    Queue {
        /// The queue name.
        name: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::Job`].
    Job {
        /// The job id key.
        id: &'a [u8; 16],
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::Payload`].
    Payload {
        /// The job id key.
        id: &'a [u8; 16],
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::LiveJob`].
    LiveJob {
        /// The job id key.
        id: &'a [u8; 16],
    },
    /// See [`SnapshotRowRecord::JobSet`].
    JobSet {
        /// The key.
        key: &'a [u8],
    },
    /// See [`SnapshotRowRecord::EventChunk`].
    EventChunk {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::EventSeq`].
    EventSeq {
        /// The key.
        key: &'a [u8],
        /// The last sequence number.
        seq: u64,
    },
    /// See [`SnapshotRowRecord::ClientId`].
    ClientId {
        /// The key.
        key: &'a [u8],
        /// The job id key.
        job: &'a [u8; 16],
    },
    /// See [`SnapshotRowRecord::Executor`].
    Executor {
        /// The executor name.
        name: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::Finished`].
    Finished {
        /// The key.
        key: &'a [u8; 24],
    },
    /// See [`SnapshotRowRecord::NodeHealth`].
    NodeHealth {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::RunJob`].
    RunJob {
        /// The run id key.
        run: &'a [u8; 16],
        /// The job id key.
        job: &'a [u8; 16],
    },
    /// See [`SnapshotRowRecord::JobOwner`].
    JobOwner {
        /// The job id key.
        job: &'a [u8; 16],
        /// The principal's name.
        owner: &'a str,
    },
    /// See [`SnapshotRowRecord::RunUsage`].
    RunUsage {
        /// The run id key.
        run: &'a [u8; 16],
        /// The encoded record.
        value: &'a [u8],
    },
    /// See [`SnapshotRowRecord::JobPolicies`].
    JobPolicies {
        /// The job id key.
        job: &'a [u8; 16],
        /// The encoded record.
        value: &'a [u8],
    },
}

impl SnapshotRowRecord {
    /// This row borrowed, as it is written.
    pub fn as_ref(&self) -> SnapshotRowRef<'_> {
        match self {
            SnapshotRowRecord::Meta { key, value } => SnapshotRowRef::Meta { key, value },
            SnapshotRowRecord::Queue { name, value } => SnapshotRowRef::Queue { name, value },
            SnapshotRowRecord::Job { id, value } => SnapshotRowRef::Job { id, value },
            SnapshotRowRecord::Payload { id, value } => SnapshotRowRef::Payload { id, value },
            SnapshotRowRecord::LiveJob { id } => SnapshotRowRef::LiveJob { id },
            SnapshotRowRecord::JobSet { key } => SnapshotRowRef::JobSet { key },
            SnapshotRowRecord::EventChunk { key, value } => SnapshotRowRef::EventChunk { key, value },
            SnapshotRowRecord::EventSeq { key, seq } => SnapshotRowRef::EventSeq { key, seq: *seq },
            SnapshotRowRecord::ClientId { key, job } => SnapshotRowRef::ClientId { key, job },
            SnapshotRowRecord::Executor { name, value } => SnapshotRowRef::Executor { name, value },
            SnapshotRowRecord::Finished { key } => SnapshotRowRef::Finished { key },
            SnapshotRowRecord::NodeHealth { key, value } => SnapshotRowRef::NodeHealth { key, value },
            SnapshotRowRecord::RunJob { run, job } => SnapshotRowRef::RunJob { run, job },
            SnapshotRowRecord::JobOwner { job, owner } => SnapshotRowRef::JobOwner { job, owner },
            SnapshotRowRecord::RunUsage { run, value } => SnapshotRowRef::RunUsage { run, value },
            SnapshotRowRecord::JobPolicies { job, value } => SnapshotRowRef::JobPolicies { job, value },
        }
    }
}
