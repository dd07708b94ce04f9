//! Snapshot export and import: the whole state (every table but the Raft log) read in one
//! consistent read transaction, and written back in one write transaction.

use super::codec::{decode_row, encode_row};
use super::tables::*;
use super::{Store, StoreError};
use crate::record::{STATE_SCHEMA_VERSION, SnapshotRecord};
use redb::{ReadableTable, TableDefinition, WriteTransaction};

fn clear<K: redb::Key + 'static, V: redb::Value + 'static>(
    tx: &WriteTransaction,
    t: TableDefinition<K, V>,
) -> Result<(), StoreError> {
    let mut table = tx.open_table(t)?;
    table.retain(|_, _| false)?;
    Ok(())
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

    /// Exports the state tables as of this view.
    pub fn export(&self) -> Result<Vec<u8>, StoreError> {
        export_from(&self.tx)
    }
}

impl Store {
    /// Exports the state tables.
    pub fn export(&self) -> Result<Vec<u8>, StoreError> {
        export_from(&self.read()?)
    }

    /// Pins the current state for a later [`ExportView::export`].
    pub fn pin_export(&self) -> Result<ExportView, StoreError> {
        Ok(ExportView { tx: self.read()? })
    }
}

fn export_from(tx: &redb::ReadTransaction) -> Result<Vec<u8>, StoreError> {
    let mut e = SnapshotRecord { schema_version: STATE_SCHEMA_VERSION, ..Default::default() };
    for row in tx.open_table(META)?.iter()? {
        let (k, v) = row?;
        if k.value() != SCHEMA_VERSION {
            e.meta.push((k.value().to_string(), v.value().to_vec()));
        }
    }
    for row in tx.open_table(QUEUES)?.iter()? {
        let (k, v) = row?;
        e.queues.push((k.value().to_string(), v.value().to_vec()));
    }
    for row in tx.open_table(JOBS)?.iter()? {
        let (k, v) = row?;
        e.jobs.push((*k.value(), v.value().to_vec()));
    }
    for row in tx.open_table(PAYLOADS)?.iter()? {
        let (k, v) = row?;
        e.payloads.push((*k.value(), v.value().to_vec()));
    }
    for row in tx.open_table(LIVE_JOBS)?.iter()? {
        e.live_jobs.push(*row?.0.value());
    }
    for row in tx.open_table(JOB_SETS)?.iter()? {
        e.job_sets.push(row?.0.value().to_vec());
    }
    for row in tx.open_table(EVENTS)?.iter()? {
        let (k, v) = row?;
        e.events.push((k.value().to_vec(), v.value().to_vec()));
    }
    for row in tx.open_table(EVENT_SEQS)?.iter()? {
        let (k, v) = row?;
        e.event_seqs.push((k.value().to_vec(), v.value()));
    }
    for row in tx.open_table(CLIENT_IDS)?.iter()? {
        let (k, v) = row?;
        e.client_ids.push((k.value().to_vec(), *v.value()));
    }
    for row in tx.open_table(EXECUTORS)?.iter()? {
        let (k, v) = row?;
        e.executors.push((k.value().to_string(), v.value().to_vec()));
    }
    for row in tx.open_table(FINISHED)?.iter()? {
        e.finished.push(*row?.0.value());
    }
    encode_row("snapshot", &e)
}

impl Store {
    /// Replaces the state tables with an export, inside `tx` (the caller commits, so the raft
    /// metadata can go in the same transaction).
    pub fn import_into(&self, tx: &WriteTransaction, data: &[u8]) -> Result<(), StoreError> {
        // The schema version comes first in every snapshot format: read it alone, so that a
        // snapshot of another version is refused for what it is, not as corrupt.
        let found = SnapshotRecord::schema_version_of(data)
            .map_err(|source| StoreError::Corrupt { what: "snapshot".into(), source })?;
        if found != STATE_SCHEMA_VERSION {
            return Err(StoreError::SnapshotVersion { found, expected: STATE_SCHEMA_VERSION });
        }
        let e: SnapshotRecord = decode_row(data, || "snapshot".into())?;
        clear(tx, QUEUES)?;
        clear(tx, JOBS)?;
        clear(tx, PAYLOADS)?;
        clear(tx, LIVE_JOBS)?;
        clear(tx, JOB_SETS)?;
        clear(tx, EVENTS)?;
        clear(tx, EVENT_SEQS)?;
        clear(tx, CLIENT_IDS)?;
        clear(tx, EXECUTORS)?;
        clear(tx, FINISHED)?;
        {
            let mut t = tx.open_table(META)?;
            // The state's counters go too: one the snapshot lacks is one its state never had.
            for key in [SUBMIT_SEQ, PURGES, MAX_JOB_ID] {
                t.remove(key)?;
            }
            for (k, v) in &e.meta {
                t.insert(k.as_str(), v.as_slice())?;
            }
        }
        {
            let mut t = tx.open_table(QUEUES)?;
            for (k, v) in &e.queues {
                t.insert(k.as_str(), v.as_slice())?;
            }
        }
        {
            let mut t = tx.open_table(JOBS)?;
            for (k, v) in &e.jobs {
                t.insert(k, v.as_slice())?;
            }
        }
        {
            let mut t = tx.open_table(PAYLOADS)?;
            for (k, v) in &e.payloads {
                t.insert(k, v.as_slice())?;
            }
        }
        {
            let mut t = tx.open_table(LIVE_JOBS)?;
            for k in &e.live_jobs {
                t.insert(k, ())?;
            }
        }
        {
            let mut t = tx.open_table(JOB_SETS)?;
            for k in &e.job_sets {
                t.insert(k.as_slice(), ())?;
            }
        }
        {
            let mut t = tx.open_table(EVENTS)?;
            for (k, v) in &e.events {
                t.insert(k.as_slice(), v.as_slice())?;
            }
        }
        {
            let mut t = tx.open_table(EVENT_SEQS)?;
            for (k, v) in &e.event_seqs {
                t.insert(k.as_slice(), *v)?;
            }
        }
        {
            let mut t = tx.open_table(CLIENT_IDS)?;
            for (k, v) in &e.client_ids {
                t.insert(k.as_slice(), v)?;
            }
        }
        {
            let mut t = tx.open_table(EXECUTORS)?;
            for (k, v) in &e.executors {
                t.insert(k.as_str(), v.as_slice())?;
            }
        }
        {
            let mut t = tx.open_table(FINISHED)?;
            for k in &e.finished {
                t.insert(k, ())?;
            }
        }
        Ok(())
    }
}
