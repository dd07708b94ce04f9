//! Version 2: events are stored in chunks (`event_chunks`, see `src/store/tables.rs`) instead of
//! one row per event, so that a batch of submissions writes a few rows rather than two per job.
//! Each job set's events are regrouped, in order, into chunks of consecutive sequence numbers.

use super::v0001_initial::EVENTS_V1;
use crate::model::Event;
use crate::store::codec::{decode, encode};
use crate::store::tables::{EVENT_CHUNK_MAX, EVENTS, event_key};
use redb::{ReadableTable, TableHandle};

pub fn run(tx: &redb::WriteTransaction) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let mut chunks = tx.open_table(EVENTS).map_err(|x| e(&x))?;
    if !tx.list_tables().map_err(|x| e(&x))?.any(|t| t.name() == EVENTS_V1.name()) {
        return Ok(());
    }
    {
        let old = tx.open_table(EVENTS_V1).map_err(|x| e(&x))?;
        // The chunk being built: its job set's key prefix and its events.
        let mut prefix: Vec<u8> = Vec::new();
        let mut chunk: Vec<Event> = Vec::new();
        let mut flush = |prefix: &[u8], chunk: &mut Vec<Event>| -> Result<(), String> {
            if let Some(first) = chunk.first() {
                chunks
                    .insert(event_key(prefix, first.seq).as_slice(), encode(&*chunk).map_err(|x| e(&x))?.as_slice())
                    .map_err(|x| e(&x))?;
            }
            chunk.clear();
            Ok(())
        };
        for row in old.iter().map_err(|x| e(&x))? {
            let (k, v) = row.map_err(|x| e(&x))?;
            let key = k.value();
            // `prefix 0 seq(8 bytes)`.
            let Some(p) = key.len().checked_sub(9).map(|n| &key[..n]) else {
                return Err(format!("event key {key:?} is too short"));
            };
            let event: Event = decode(v.value(), "event").map_err(|x| e(&x))?;
            let follows = p == prefix.as_slice() && chunk.last().is_some_and(|l| l.seq + 1 == event.seq);
            if !follows || chunk.len() == EVENT_CHUNK_MAX {
                flush(&prefix, &mut chunk)?;
                prefix = p.to_vec();
            }
            chunk.push(event);
        }
        flush(&prefix, &mut chunk)?;
    }
    tx.delete_table(EVENTS_V1).map_err(|x| e(&x))?;
    Ok(())
}
