//! Storage I/O helpers of the `raft` module: error conversions to what openraft expects, and
//! running blocking disk work off the async threads. Bytes are encoded with the one record codec
//! (`record::codec`).

use super::types::{NodeId, StorageError};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use std::io;

/// Wraps any redb error (or other error) as an `io::Error`, keeping it as the source.
pub(crate) fn io_err<E: Into<redb::Error>>(e: E) -> io::Error {
    io::Error::other(e.into())
}

/// A stored or received record that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("{what} is corrupt")]
pub(crate) struct CorruptRecord {
    what: String,
    #[source]
    source: crate::record::CodecError,
}

/// A record that did not decode, as an `io::Error` naming what it was.
pub(crate) fn corrupt(what: impl Into<String>, source: crate::record::CodecError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, CorruptRecord { what: what.into(), source })
}

/// A record that could not be encoded, as an `io::Error`.
pub(crate) fn encode_err(e: crate::record::CodecError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// Builds openraft's storage error for a failed operation on `subject`.
pub(crate) fn storage_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: &io::Error) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(e)).into()
}

/// Runs blocking disk work (fsyncing commits, whole-table reads) off the async worker threads.
pub(crate) async fn blocking<T, F>(f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| io::Error::other(format!("storage task failed: {e}")))?
}
