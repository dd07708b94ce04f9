//! The migration runner: reads the schema version, refuses databases newer than the binary,
//! and applies the files of `migrations/` in order.

use super::StoreError;
use super::tables::{META, SCHEMA_VERSION};
use redb::{Database, ReadableDatabase, TableHandle};

/// The migrations, from the top-level `migrations/` directory.
#[path = "../../migrations/mod.rs"]
pub(crate) mod steps;

/// The schema version this binary reads and writes.
pub(crate) const CURRENT_VERSION: u32 = crate::record::STATE_SCHEMA_VERSION;

/// The database's schema version (0 if it has none).
pub(crate) fn version(db: &Database) -> Result<u32, StoreError> {
    let tx = db.begin_read()?;
    let has_meta = tx.list_tables()?.any(|t| t.name() == META.name());
    if !has_meta {
        return Ok(0);
    }
    let meta = tx.open_table(META)?;
    let Some(v) = meta.get(SCHEMA_VERSION)? else { return Ok(0) };
    let b: [u8; 4] = v
        .value()
        .try_into()
        .map_err(|_| StoreError::Malformed { what: "meta.schema_version".into(), detail: "not 4 bytes".into() })?;
    Ok(u32::from_be_bytes(b))
}

/// Brings the database up to [`CURRENT_VERSION`].
pub(crate) fn run(db: &Database, path: &str) -> Result<(), StoreError> {
    let found = version(db)?;
    if found > CURRENT_VERSION {
        return Err(StoreError::TooNew { path: path.to_string(), found, supported: CURRENT_VERSION });
    }
    for m in steps::ALL.iter().filter(|m| m.version > found) {
        tracing::info!(version = m.version, name = m.name, "migrating database");
        let tx = db.begin_write()?;
        (m.run)(&tx).map_err(|e| StoreError::Migration {
            path: path.to_string(),
            version: m.version,
            name: m.name,
            source: Box::new(e),
        })?;
        {
            let mut meta = tx.open_table(META)?;
            meta.insert(SCHEMA_VERSION, m.version.to_be_bytes().as_slice())?;
        }
        tx.commit()?;
    }
    Ok(())
}
