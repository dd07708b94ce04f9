//! Rows in and out of the database through the one record codec (`record::codec`), with the
//! row named in the error.

use super::StoreError;
use crate::record;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes a row; `what` names its kind in the error.
pub(crate) fn encode_row<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    record::encode(value).map_err(|source| StoreError::Encode { what, source })
}

/// Decodes a row; `what` names it (table and key) in the error, and is only built on failure.
pub(crate) fn decode_row<T: DeserializeOwned>(bytes: &[u8], what: impl FnOnce() -> String) -> Result<T, StoreError> {
    record::decode(bytes).map_err(|source| StoreError::Corrupt { what: what(), source })
}
