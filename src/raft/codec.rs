//! Byte encoding of everything the `raft` module stores or sends (bincode 2, standard config),
//! and the conversions from I/O and redb errors to openraft's `StorageError`.

use super::types::{NodeId, StorageError};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io;

/// Encodes a value with bincode's standard configuration.
pub fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Decodes a value written by [`encode`]. Trailing bytes are an error: they mean the bytes are
/// not what we think they are.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if read != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} trailing bytes after a {}", bytes.len() - read, std::any::type_name::<T>()),
        ));
    }
    Ok(value)
}

/// Wraps any redb error (or other error) as an `io::Error`.
pub fn io_err<E: Into<redb::Error>>(e: E) -> io::Error {
    io::Error::other(e.into())
}

/// Builds openraft's storage error for a failed operation on `subject`.
pub fn storage_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: &io::Error) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(e)).into()
}

/// Runs blocking disk work (fsyncing commits, whole-table reads) off the async worker threads.
pub async fn blocking<T, F>(f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| io::Error::other(format!("storage task failed: {e}")))?
}
