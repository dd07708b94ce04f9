//! Version 1: the first released layout. A fresh database gets its tables.
//!
//! A database of the pre-release prototype (version 0: no `meta` table, jobs as JSON text in
//! `jobs_json`) is refused: that format was never released and its JSON was never pinned, so it
//! cannot be read faithfully. Such a data directory has to be started afresh.

use crate::store::StoreError;
use redb::{TableDefinition, TableHandle};

// The tables of schema version 1, frozen.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("queues");
const JOBS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("jobs");
const PAYLOADS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("payloads");
const LIVE_JOBS: TableDefinition<&[u8; 16], ()> = TableDefinition::new("live_jobs");
const JOB_SETS: TableDefinition<&[u8], ()> = TableDefinition::new("job_sets");
/// Version 1's events, one row per event: `queue 0 job_set 0 seq(u64 BE)` → one event record.
pub(crate) const EVENTS_V1: TableDefinition<&[u8], &[u8]> = TableDefinition::new("events");
const EVENT_SEQS: TableDefinition<&[u8], u64> = TableDefinition::new("event_seqs");
const CLIENT_IDS: TableDefinition<&[u8], &[u8; 16]> = TableDefinition::new("client_ids");
const EXECUTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("executors");

/// The prototype's job table.
pub(crate) const JOBS_JSON_V0: TableDefinition<&str, &str> = TableDefinition::new("jobs_json");

/// Creates the version 1 tables.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    if tx.list_tables()?.any(|t| t.name() == JOBS_JSON_V0.name()) {
        return Err(StoreError::Unsupported {
            reason: "it is a database of the pre-release prototype (jobs stored as JSON, no schema version); \
                     move the data directory aside and start with an empty one"
                .into(),
        });
    }
    tx.open_table(META)?;
    tx.open_table(QUEUES)?;
    tx.open_table(JOBS)?;
    tx.open_table(PAYLOADS)?;
    tx.open_table(LIVE_JOBS)?;
    tx.open_table(JOB_SETS)?;
    tx.open_table(EVENTS_V1)?;
    tx.open_table(EVENT_SEQS)?;
    tx.open_table(CLIENT_IDS)?;
    tx.open_table(EXECUTORS)?;
    Ok(())
}
