//! Snapshots of the state: every state table's rows, copied as stored. The rows inside keep
//! their own formats (the state schema's), so a snapshot is only read by a binary of the same
//! state schema version, which the record carries first.

use serde::{Deserialize, Serialize};

/// The whole state, table by table, as raw rows. Format: state schema 3 (schema 2's record was
/// this without `finished`).
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
    /// `finished` keys (finish time, job id).
    pub finished: Vec<[u8; 24]>,
}

impl SnapshotRecord {
    /// The schema version of an encoded snapshot, read without decoding the rest (which may be
    /// in another version's format).
    pub fn schema_version_of(bytes: &[u8]) -> Result<u32, super::CodecError> {
        super::codec::decode_prefix(bytes)
    }
}
