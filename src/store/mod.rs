//! Durable storage on redb: tables and key encodings, writing the state machine's changes,
//! loading the state at start-up, queries for the API and for retention, snapshots streamed out
//! and in, the state digest and schema migrations.

mod codec;
mod digest;
mod load;
pub(crate) mod migrate;
mod queries;
mod retention;
pub(crate) mod snapshot_stream;
pub(crate) mod tables;
mod writes;

pub use queries::{JobFilter, JobPage, TEXT_SCAN};
pub use retention::PurgePlan;

use crate::record::CodecError;
pub use digest::StateDigest;
pub use snapshot_stream::{ExportView, IMPORT_ROWS_PER_TX, ImportStats};
pub use tables::RAFT_APPLIED;
pub use writes::write_changes;

use redb::{Database, ReadableDatabase};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Storage failures. redb's and the codec's errors are kept as sources.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb failed (I/O, a corrupt file, a transaction or table error).
    #[error(transparent)]
    Database(#[from] redb::Error),
    /// The database's directory could not be created.
    #[error("cannot create the data directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another process has the database open: a second server on the same data directory.
    #[error(
        "the database {path} is open in another process: is another convoy server (or convoy up) running on this \
         data directory?"
    )]
    InUse {
        /// The database file.
        path: PathBuf,
    },
    /// A stored value does not decode as the record it should be.
    #[error("stored {what} is corrupt")]
    Corrupt {
        /// Which value (table and key).
        what: String,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
    /// A stored value breaks a rule that is not the codec's (a wrong length, a missing row).
    #[error("stored {what} is malformed: {detail}")]
    Malformed {
        /// Which value.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A record could not be encoded.
    #[error("cannot encode {what}")]
    Encode {
        /// Which value.
        what: &'static str,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
    /// The database was written by a newer Convoy.
    #[error(
        "the database at {path} has schema version {found}, newer than this binary supports ({supported}): it was \
         written by a newer convoy; run that version or newer"
    )]
    TooNew {
        /// The database file.
        path: String,
        /// Its schema version.
        found: u32,
        /// The newest this binary reads.
        supported: u32,
    },
    /// The database cannot be upgraded (a pre-release format).
    #[error("the database cannot be upgraded: {reason}")]
    Unsupported {
        /// Why.
        reason: String,
    },
    /// A snapshot from a server of another schema version.
    #[error(
        "the snapshot has state schema version {found} and this binary uses {expected}: every server of a \
         cluster must run the same schema version"
    )]
    SnapshotVersion {
        /// The snapshot's schema version.
        found: u32,
        /// This binary's.
        expected: u32,
    },
    /// A snapshot stream could not be read or written (a corrupt or truncated snapshot file, or
    /// an I/O error).
    #[error("snapshot stream: {0}")]
    Stream(#[source] std::io::Error),
    /// A migration step failed.
    #[error("migrating the database at {path} to schema version {version} ({name}) failed")]
    Migration {
        /// The database file.
        path: String,
        /// The version the step leads to.
        version: u32,
        /// The step's name.
        name: &'static str,
        /// Why.
        #[source]
        source: Box<StoreError>,
    },
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Database(e.into())
            }
        }
    )*};
}
db_err!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Default size of redb's page cache. The state lives in memory anyway, so the cache serves
/// writes and the API's reads of job records and events; pages it does not hold are read from
/// the kernel's page cache. 64 MiB: against 256, a restart on 1M jobs holds 540 B less RSS per
/// queued job, and writes scattered over the store, a snapshot's build and its install were no
/// slower (docs/benchmarks.md, "Memory per queued job").
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

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
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { path: dir.to_path_buf(), source })?;
        }
        let db = Database::builder().set_cache_size(cache_bytes).create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse { path: path.to_path_buf() },
            e => e.into(),
        })?;
        migrate::run(&db, &path.display().to_string())?;
        if snapshot_stream::drop_staging(&db)? {
            tracing::warn!(path = %path.display(), "dropped the staging tables of a snapshot install that was interrupted");
        }
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
mod snapshot_tests;
#[cfg(test)]
mod tests;
