//! Durable storage on redb: tables and key encodings, writing the state machine's changes,
//! loading the state at start-up, queries for the API, snapshot export/import and schema
//! migrations.

pub mod codec;
mod load;
pub mod migrate;
mod queries;
pub mod snapshot;
pub mod tables;
mod writes;

pub use queries::JobFilter;
pub use snapshot::ExportView;
pub use writes::write_changes;

use redb::{Database, ReadableDatabase};
use std::path::Path;
use std::sync::Arc;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("encoding failed: {0}")]
    Encode(String),
    #[error(
        "the database at {path} has schema version {found}, newer than this binary supports ({supported}); run a newer convoy"
    )]
    TooNew { path: String, found: u32, supported: u32 },
    #[error("migration to schema version {version} failed: {message}")]
    Migration { version: u32, message: String },
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Database(e.to_string())
            }
        }
    )*};
}
db_err!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Default size of redb's page cache: the state lives in memory anyway, so the cache serves
/// writes and the API's reads of job records and events.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// The server's database.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
}

impl Store {
    /// Opens (or creates) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with_cache(path, DEFAULT_CACHE_BYTES)
    }

    /// Like [`Store::open`], with redb's page cache limited to `cache_bytes`.
    pub fn open_with_cache(path: &Path, cache_bytes: usize) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Database(format!("creating {}: {e}", dir.display())))?;
        }
        let db = Database::builder().set_cache_size(cache_bytes).create(path)?;
        migrate::run(&db, &path.display().to_string())?;
        Ok(Store { db: Arc::new(db) })
    }

    /// The database handle (the Raft log lives in a file of its own, `raft.redb`).
    pub fn db(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// Begins a read transaction.
    pub fn read(&self) -> Result<redb::ReadTransaction, StoreError> {
        Ok(self.db.begin_read()?)
    }

    /// Begins a write transaction.
    pub fn write(&self) -> Result<redb::WriteTransaction, StoreError> {
        Ok(self.db.begin_write()?)
    }
}

#[cfg(test)]
mod tests;
