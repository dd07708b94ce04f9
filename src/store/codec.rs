//! Binary encoding of stored values (bincode 2 with serde, standard config).

use super::StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes a value.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).map_err(|e| StoreError::Encode(e.to_string()))
}

/// Decodes a value read from `what` (named in the error if the bytes are bad).
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
