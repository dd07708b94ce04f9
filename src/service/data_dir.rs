//! Reading a server's data directory without disturbing the server: its files are copied to a
//! temporary directory (again while they change under the copy) and read there, so the server
//! may be running (its lock and its files are left alone). Used by `convoy simulate
//! --from-data-dir` ([`super::scenario`]) and `convoy replay` ([`super::replay`]).

use crate::raft::{EntryPayload, LogStore};
use crate::state::Command;
use crate::store::StoreError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a data directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// The directory does not exist.
    #[error("{0} does not exist")]
    NotFound(PathBuf),
    /// The path is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// The directory has no state database.
    #[error("{0} does not exist: is the directory a convoy server's data directory (server.data_dir)?")]
    NoDatabase(PathBuf),
    /// A database could not be copied (no permission, I/O error, no room in the temporary
    /// directory).
    #[error("cannot copy {from} to {to}")]
    Copy {
        /// The database.
        from: PathBuf,
        /// Where the copy was going.
        to: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The database changed during every copy (a busy server).
    #[error("{0} changed while it was being copied, {COPY_ATTEMPTS} times: try again, or stop the server")]
    Busy(PathBuf),
    /// The copy of the state could not be opened or read.
    #[error("reading the copy of {path}")]
    Store {
        /// The database.
        path: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The copy of the Raft log could not be read, or its entries not applied.
    #[error("replaying the copy of the raft log {path}")]
    Log {
        /// The log's database.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Copies of a live database tried before giving up.
const COPY_ATTEMPTS: u32 = 5;

/// A temporary directory, removed when dropped.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    /// A new, empty temporary directory for reading copies of `for_file` (named in the error).
    pub(super) fn new(what: &str, for_file: &Path) -> Result<TempDir, DataDirError> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = TempDir(std::env::temp_dir().join(format!("convoy-{what}-{}-{nanos}", std::process::id())));
        std::fs::create_dir_all(&tmp.0).map_err(|source| DataDirError::Copy {
            from: for_file.to_path_buf(),
            to: tmp.0.clone(),
            source,
        })?;
        Ok(tmp)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the file `from` to `to`, again while the file changes during the copy.
pub(super) fn copy_steady(from: &Path, to: &Path) -> Result<(), DataDirError> {
    let copy_err = |source| DataDirError::Copy { from: from.to_path_buf(), to: to.to_path_buf(), source };
    let stamp = |p: &Path| std::fs::metadata(p).map(|m| (m.len(), m.modified().ok()));
    for attempt in 1..=COPY_ATTEMPTS {
        let before = stamp(from).map_err(copy_err)?;
        std::fs::copy(from, to).map_err(copy_err)?;
        if stamp(from).map_err(copy_err)? == before {
            return Ok(());
        }
        if attempt < COPY_ATTEMPTS {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    Err(DataDirError::Busy(from.to_path_buf()))
}

/// Checks that `dir` is a directory holding `file` (its state or log database).
pub(super) fn check_data_dir(dir: &Path, file: &Path) -> Result<(), DataDirError> {
    if !dir.exists() {
        return Err(DataDirError::NotFound(dir.to_path_buf()));
    }
    if !dir.is_dir() {
        return Err(DataDirError::NotADirectory(dir.to_path_buf()));
    }
    if !file.is_file() {
        return Err(DataDirError::NoDatabase(file.to_path_buf()));
    }
    Ok(())
}

/// A copy of a data directory's Raft log (`raft.redb`), opened for reading.
pub(super) struct LogCopy {
    log: LogStore,
}

/// Entries read from a copied log at a time.
const CHUNK: u64 = 1000;

impl LogCopy {
    /// Copies the log at `path` into `scratch` and opens the copy (a log of a newer format is
    /// refused).
    pub(super) fn take(path: &Path, scratch: &TempDir) -> Result<LogCopy, DataDirError> {
        let copy = scratch.0.join("raft.redb");
        copy_steady(path, &copy)?;
        let log_err = |source| DataDirError::Log { path: path.to_path_buf(), source };
        let db = redb::Database::create(&copy).map_err(|e| log_err(std::io::Error::other(e)))?;
        let log = LogStore::open(Arc::new(db)).map_err(log_err)?;
        Ok(LogCopy { log })
    }

    /// The indexes of the first and last entries the log holds, if any.
    pub(super) fn held(&self) -> std::io::Result<Option<(u64, u64)>> {
        self.log.held_range()
    }

    /// Calls `each` with every command of the entries in `from..=to` (a batch as one command),
    /// with the entry's index and term, in log order, reading a chunk of entries at a time.
    pub(super) fn each_command(
        &self,
        from: u64,
        to: u64,
        mut each: impl FnMut(u64, u64, Command),
    ) -> std::io::Result<()> {
        let mut at = from;
        while at <= to {
            let end = to.min(at.saturating_add(CHUNK - 1));
            for entry in self.log.read_entries(at..=end)? {
                if let EntryPayload::Normal(cmd) = entry.payload {
                    each(entry.log_id.index, entry.log_id.leader_id.term, cmd);
                }
            }
            at = end + 1;
        }
        Ok(())
    }
}
