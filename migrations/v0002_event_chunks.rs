//! Version 2: events are stored in chunks (`event_chunks`) instead of one row per event, so that
//! a batch of submissions writes a few rows rather than two per job. Each job set's events are
//! regrouped, in order, into chunks of consecutive sequence numbers.

use super::v0001_initial::EVENTS_V1;
use crate::model::{JobId, RunId};
use crate::record::codec::{decode, encode};
use crate::store::StoreError;
use redb::{ReadableTable, TableDefinition, TableHandle};
use serde::{Deserialize, Serialize};

/// Version 2's event chunks: `queue 0 job_set 0 first_seq(u64 BE)` → the events from
/// `first_seq` on, consecutive, at most [`CHUNK_MAX`].
const EVENT_CHUNKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("event_chunks");
/// Most events in a chunk, in version 2.
const CHUNK_MAX: usize = 256;

/// An event as versions 1 and 2 store it (a version 1 row holds one, a version 2 chunk a list).
/// Frozen: only this migration uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Event {
    seq: u64,
    job_id: JobId,
    at_ms: i64,
    /// The kind's position in version 1's list of kinds (kept as is).
    kind: u32,
    run_id: Option<RunId>,
    message: Option<String>,
}

/// `prefix 0 seq(8 bytes BE)`.
fn chunk_key(prefix: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 9);
    k.extend_from_slice(prefix);
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn corrupt(what: String) -> impl FnOnce(crate::record::CodecError) -> StoreError {
    move |source| StoreError::Corrupt { what, source }
}

/// Regroups version 1's event rows into chunks.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let mut chunks = tx.open_table(EVENT_CHUNKS)?;
    if !tx.list_tables()?.any(|t| t.name() == EVENTS_V1.name()) {
        return Ok(());
    }
    {
        let old = tx.open_table(EVENTS_V1)?;
        // The chunk being built: its job set's key prefix and its events.
        let mut prefix: Vec<u8> = Vec::new();
        let mut chunk: Vec<Event> = Vec::new();
        let mut flush = |prefix: &[u8], chunk: &mut Vec<Event>| -> Result<(), StoreError> {
            if let Some(first) = chunk.first() {
                let bytes = encode(&*chunk).map_err(|source| StoreError::Encode { what: "event chunk", source })?;
                chunks.insert(chunk_key(prefix, first.seq).as_slice(), bytes.as_slice())?;
            }
            chunk.clear();
            Ok(())
        };
        for row in old.iter()? {
            let (k, v) = row?;
            let key = k.value();
            // `prefix 0 seq(8 bytes)`.
            let Some(p) = key.len().checked_sub(9).map(|n| &key[..n]) else {
                return Err(StoreError::Malformed { what: format!("event key {key:?}"), detail: "too short".into() });
            };
            let event: Event = decode(v.value()).map_err(corrupt(format!("event row {key:?}")))?;
            let follows = p == prefix.as_slice() && chunk.last().is_some_and(|l| l.seq + 1 == event.seq);
            if !follows || chunk.len() == CHUNK_MAX {
                flush(&prefix, &mut chunk)?;
                prefix = p.to_vec();
            }
            chunk.push(event);
        }
        flush(&prefix, &mut chunk)?;
    }
    tx.delete_table(EVENTS_V1)?;
    Ok(())
}
