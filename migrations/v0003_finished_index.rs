//! Version 3: the `finished` index, (finish time, job id) of every job that left memory, which
//! retention (`job_retention`) reads from the oldest on. This step indexes the finished jobs of a
//! version 2 database; [`finished_key_of`] does the same for the rows of a version 2 inline
//! snapshot when an old log is upgraded (`store::snapshot_stream::convert_legacy`).
//!
//! A job's finish time is when its last event happened (the event that ended it). A job whose
//! last event cannot be found counts as finished at the latest time its record holds (submission,
//! its runs' times, a kill order): never later than it really finished, so it is at worst purged
//! a little early rather than kept for ever.

use crate::model::{JobId, RunId};
use crate::record::codec::decode;
use crate::store::StoreError;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// The tables this step reads and writes, frozen as of version 3.
const JOBS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("jobs");
const LIVE_JOBS: TableDefinition<&[u8; 16], ()> = TableDefinition::new("live_jobs");
const EVENT_CHUNKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("event_chunks");
/// Version 3's index: `finish ms (i64, sign bit flipped, BE) job id (BE)` → nothing.
const FINISHED: TableDefinition<&[u8; 24], ()> = TableDefinition::new("finished");

/// Version 2's job record, frozen. Names are read as their text and enums as their variant's
/// position (bincode writes both the same way), since only a few fields matter here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Job {
    id: JobId,
    queue: String,
    job_set: String,
    priority: u32,
    priority_class: String,
    submit_seq: u64,
    submitted_at_ms: i64,
    client_id: Option<String>,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    requirements: Requirements,
    gang: Option<Gang>,
    termination_grace_period_ms: u64,
    active_deadline_seconds: u64,
    /// Queued, leased, pending, running, succeeded, failed, cancelled, preempted.
    state: u32,
    state_reason: Option<String>,
    runs: Vec<Run>,
    event_seqs: Vec<u64>,
}

/// Positions of version 2's terminal job states: succeeded, failed, cancelled, preempted.
const TERMINAL: std::ops::RangeInclusive<u32> = 4..=7;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Requirements {
    requests: BTreeMap<String, i64>,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    node_affinity: Option<NodeAffinity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Toleration {
    key: String,
    operator: u32,
    value: String,
    effect: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NodeAffinity {
    required_terms: Option<Vec<NodeSelectorTerm>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NodeSelectorTerm {
    match_expressions: Vec<SelectorRequirement>,
    match_fields: Vec<SelectorRequirement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SelectorRequirement {
    key: String,
    operator: u32,
    values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Gang {
    id: String,
    cardinality: u32,
    min_cardinality: u32,
    node_uniformity_label: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Run {
    run_id: RunId,
    executor: String,
    node: String,
    pool: String,
    state: u32,
    leased_at_ms: i64,
    pending_at_ms: Option<i64>,
    running_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
    exit_code: Option<i32>,
    reason: Option<String>,
    message: Option<String>,
    kill: Option<Kill>,
    log_tail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kill {
    at_ms: i64,
    grace_period_ms: u64,
    reason: String,
}

/// Version 2's event, frozen (a chunk is a list of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Event {
    seq: u64,
    job_id: JobId,
    at_ms: i64,
    kind: u32,
    run_id: Option<RunId>,
    message: Option<String>,
}

fn corrupt(what: String) -> impl FnOnce(crate::record::CodecError) -> StoreError {
    move |source| StoreError::Corrupt { what, source }
}

/// `prefix 0 seq(8 bytes BE)`, version 2's event chunk key.
fn chunk_key(prefix: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 9);
    k.extend_from_slice(prefix);
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Version 3's `finished` key.
pub(crate) fn finished_key(at_ms: i64, id: JobId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&((at_ms as u64) ^ (1 << 63)).to_be_bytes());
    k[8..].copy_from_slice(&id.as_u128().to_be_bytes());
    k
}

/// The latest time a record holds.
fn record_time(job: &Job) -> i64 {
    let run_times = job.runs.iter().flat_map(|r| {
        [Some(r.leased_at_ms), r.pending_at_ms, r.running_at_ms, r.finished_at_ms, r.kill.as_ref().map(|k| k.at_ms)]
    });
    run_times.flatten().fold(job.submitted_at_ms, i64::max)
}

/// An event chunk's key and bytes.
pub(crate) type Chunk = (Vec<u8>, Vec<u8>);

/// Event chunks of a version 2 state, wherever they are: the chunk of a job set (`prefix`) that
/// would hold `seq` (the last one starting at or before it), as its key and bytes.
pub(crate) trait ChunkSource {
    /// The chunk's key and bytes, if the job set has one at or before `seq`.
    fn chunk_holding(&self, prefix: &[u8], seq: u64) -> Result<Option<Chunk>, StoreError>;
}

impl<T: ReadableTable<&'static [u8], &'static [u8]>> ChunkSource for T {
    fn chunk_holding(&self, prefix: &[u8], seq: u64) -> Result<Option<Chunk>, StoreError> {
        let (first, at) = (chunk_key(prefix, 0), chunk_key(prefix, seq));
        let Some(row) = self.range(first.as_slice()..=at.as_slice())?.next_back() else { return Ok(None) };
        let (k, v) = row?;
        Ok(Some((k.value().to_vec(), v.value().to_vec())))
    }
}

/// Event chunks in memory, by key (an inline snapshot's rows).
pub(crate) struct ChunksInMemory<'a>(pub BTreeMap<&'a [u8], &'a [u8]>);

impl ChunkSource for ChunksInMemory<'_> {
    fn chunk_holding(&self, prefix: &[u8], seq: u64) -> Result<Option<Chunk>, StoreError> {
        let (first, at) = (chunk_key(prefix, 0), chunk_key(prefix, seq));
        Ok(self.0.range(first.as_slice()..=at.as_slice()).next_back().map(|(k, v)| (k.to_vec(), v.to_vec())))
    }
}

/// Reads event chunks, keeping the last one decoded: a job's neighbours by id were mostly
/// submitted, and ended, in the same transactions, so their last events share chunks.
pub(crate) struct Events<'a, C> {
    chunks: &'a C,
    cached: Option<(Vec<u8>, Vec<Event>)>,
}

impl<'a, C: ChunkSource> Events<'a, C> {
    /// Reads `chunks`.
    pub(crate) fn new(chunks: &'a C) -> Self {
        Events { chunks, cached: None }
    }

    /// When event `seq` of the job set `prefix` happened, if it is stored.
    fn time_of(&mut self, prefix: &[u8], seq: u64) -> Result<Option<i64>, StoreError> {
        let Some((key, bytes)) = self.chunks.chunk_holding(prefix, seq)? else { return Ok(None) };
        if self.cached.as_ref().is_none_or(|(k, _)| *k != key) {
            let chunk: Vec<Event> = decode(&bytes).map_err(corrupt(format!("event chunk {key:?}")))?;
            self.cached = Some((key, chunk));
        }
        let chunk = self.cached.as_ref().map(|(_, c)| c.as_slice()).unwrap_or_default();
        Ok(chunk.binary_search_by_key(&seq, |e| e.seq).ok().map(|i| chunk[i].at_ms))
    }
}

/// The `finished` key of a version 2 job record that is out of memory (the caller checks it is
/// not in `live_jobs`): None if the job is not over.
pub(crate) fn finished_key_of(
    record: &[u8],
    events: &mut Events<'_, impl ChunkSource>,
) -> Result<Option<[u8; 24]>, StoreError> {
    let job: Job = decode(record).map_err(corrupt("a job record".to_string()))?;
    if !TERMINAL.contains(&job.state) {
        return Ok(None);
    }
    let mut prefix = Vec::with_capacity(job.queue.len() + job.job_set.len() + 1);
    prefix.extend_from_slice(job.queue.as_bytes());
    prefix.push(0);
    prefix.extend_from_slice(job.job_set.as_bytes());
    let last_event = match job.event_seqs.iter().max() {
        Some(&seq) => events.time_of(&prefix, seq)?,
        None => None,
    };
    Ok(Some(finished_key(last_event.unwrap_or_else(|| record_time(&job)), job.id)))
}

/// Creates the `finished` index and fills it with the jobs that are over and out of memory.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let mut index = tx.open_table(FINISHED)?;
    let jobs = tx.open_table(JOBS)?;
    let live = tx.open_table(LIVE_JOBS)?;
    let chunks = tx.open_table(EVENT_CHUNKS)?;
    let mut events = Events::new(&chunks);
    let mut indexed = 0u64;
    for row in jobs.iter()? {
        let (k, v) = row?;
        // Jobs still stopping a run stay in memory; they are indexed when they end.
        if live.get(k.value())?.is_some() {
            continue;
        }
        if let Some(key) = finished_key_of(v.value(), &mut events)? {
            index.insert(&key, ())?;
            indexed += 1;
        }
    }
    tracing::info!(finished_jobs = indexed, "finished jobs indexed by finish time");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frozen_job_reads_a_version_2_record_and_the_frozen_event_a_chunk() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/state-v2");
        let bytes = std::fs::read(dir.join("job.bin")).unwrap();
        let job: Job = decode(&bytes).unwrap();
        assert_eq!((job.queue.as_str(), job.state, job.event_seqs.as_slice()), ("physics", 3, &[1, 2, 5, 9][..]));
        assert_eq!(job.runs.len(), 2);
        assert_eq!(record_time(&job), 1_760_000_300_004, "the kill order of the first run is the latest time");
        let chunk: Vec<Event> = decode(&std::fs::read(dir.join("event-chunk.bin")).unwrap()).unwrap();
        assert_eq!(chunk.len(), 13);
        assert_eq!(crate::record::codec::encode(&chunk).unwrap(), std::fs::read(dir.join("event-chunk.bin")).unwrap());
    }
}
