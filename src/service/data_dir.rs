//! Reading a server's data directory without disturbing the server: its files are copied to a
//! temporary directory (again while they change under the copy) and read there, so the server
//! may be running (its lock and its files are left alone). Used by `convoy simulate
//! --from-data-dir` ([`super::scenario`]) and `convoy replay` ([`super::replay`]).

use crate::store::StoreError;
use std::path::{Path, PathBuf};

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
