//! Version 1: the first released layout (tables in `src/store/tables.rs`).
//!
//! A fresh database just gets its tables. A database from the pre-release prototype (version 0:
//! no `meta` table, jobs as JSON text in `jobs_json` keyed by the job id's text, no live-jobs
//! index, no job-set index) is converted: every job is re-encoded, indexed by job set, and the
//! ones that are not over go into the live-jobs index.

use crate::model::JobRecord;
use crate::store::codec::encode;
use crate::store::tables::*;
use redb::{ReadableTable, TableDefinition, TableHandle};

/// The prototype's job table.
pub const JOBS_JSON_V0: TableDefinition<&str, &str> = TableDefinition::new("jobs_json");

/// Version 1's events, one row per event: `queue 0 job_set 0 seq(u64 BE)` → bincode `Event`.
/// Version 2 stores them in chunks.
pub const EVENTS_V1: TableDefinition<&[u8], &[u8]> = TableDefinition::new("events");

pub fn run(tx: &redb::WriteTransaction) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    // Create every table.
    tx.open_table(META).map_err(|x| e(&x))?;
    tx.open_table(QUEUES).map_err(|x| e(&x))?;
    tx.open_table(PAYLOADS).map_err(|x| e(&x))?;
    tx.open_table(EVENTS_V1).map_err(|x| e(&x))?;
    tx.open_table(EVENT_SEQS).map_err(|x| e(&x))?;
    tx.open_table(CLIENT_IDS).map_err(|x| e(&x))?;
    tx.open_table(EXECUTORS).map_err(|x| e(&x))?;
    let mut jobs = tx.open_table(JOBS).map_err(|x| e(&x))?;
    let mut live = tx.open_table(LIVE_JOBS).map_err(|x| e(&x))?;
    let mut sets = tx.open_table(JOB_SETS).map_err(|x| e(&x))?;

    let has_v0 = tx.list_tables().map_err(|x| e(&x))?.any(|t| t.name() == JOBS_JSON_V0.name());
    if !has_v0 {
        return Ok(());
    }
    let mut max_seq = None;
    {
        let old = tx.open_table(JOBS_JSON_V0).map_err(|x| e(&x))?;
        for row in old.iter().map_err(|x| e(&x))? {
            let (k, v) = row.map_err(|x| e(&x))?;
            let record: JobRecord = serde_json::from_str(v.value()).map_err(|x| format!("job {}: {x}", k.value()))?;
            let key = job_key(record.id);
            jobs.insert(&key, encode(&record).map_err(|x| e(&x))?.as_slice()).map_err(|x| e(&x))?;
            sets.insert(job_set_key(&record.queue, &record.job_set, record.id).as_slice(), ()).map_err(|x| e(&x))?;
            if !record.state.is_terminal() || record.active_run().is_some() {
                live.insert(&key, ()).map_err(|x| e(&x))?;
            }
            max_seq = max_seq.max(Some(record.submit_seq));
        }
    }
    if let Some(s) = max_seq {
        let mut meta = tx.open_table(META).map_err(|x| e(&x))?;
        meta.insert(SUBMIT_SEQ, (s + 1).to_be_bytes().as_slice()).map_err(|x| e(&x))?;
    }
    tx.delete_table(JOBS_JSON_V0).map_err(|x| e(&x))?;
    Ok(())
}
