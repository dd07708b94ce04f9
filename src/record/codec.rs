//! The one binary codec of every record: bincode 2's standard configuration (little-endian
//! variable-length integers, positional fields) through serde.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A record could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Encoding failed (a value the format cannot hold).
    #[error("cannot encode {what}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// bincode's reason.
        #[source]
        source: bincode::error::EncodeError,
    },
    /// The bytes are not a valid encoding of the expected record.
    #[error("cannot decode {what}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// bincode's reason.
        #[source]
        source: bincode::error::DecodeError,
    },
    /// The bytes hold a valid record followed by more bytes: they are not what we think they are.
    #[error("{extra} trailing bytes after {what}")]
    Trailing {
        /// What was being decoded.
        what: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a record.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config())
        .map_err(|source| CodecError::Encode { what: std::any::type_name::<T>(), source })
}

/// Decodes a record written by [`encode`]. Trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let what = std::any::type_name::<T>();
    let (value, read) =
        bincode::serde::decode_from_slice(bytes, config()).map_err(|source| CodecError::Decode { what, source })?;
    if read != bytes.len() {
        return Err(CodecError::Trailing { what, extra: bytes.len() - read });
    }
    Ok(value)
}

/// Decodes the value at the start of `bytes`, ignoring what follows: for the version number a
/// record carries first, read before deciding how to read the rest.
pub(crate) fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let what = std::any::type_name::<T>();
    bincode::serde::decode_from_slice(bytes, config())
        .map(|(v, _)| v)
        .map_err(|source| CodecError::Decode { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut bytes = encode(&(1u64, "a".to_string())).unwrap();
        assert_eq!(decode::<(u64, String)>(&bytes).unwrap(), (1, "a".to_string()));
        bytes.push(0);
        let e = decode::<(u64, String)>(&bytes).unwrap_err();
        assert!(matches!(e, CodecError::Trailing { extra: 1, .. }), "{e}");
        assert!(matches!(decode::<(u64, String)>(&bytes[..1]), Err(CodecError::Decode { .. })));
    }
}
