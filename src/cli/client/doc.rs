//! Files the client verbs read: YAML or JSON (JSON is YAML), decoded into the API's types with
//! errors naming the file and the offending field.

use anyhow::Context;
use serde::de::DeserializeOwned;
use std::path::Path;

/// Reads a YAML or JSON file as a JSON value.
pub(super) fn read_value(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml_ng::from_str(&text).with_context(|| format!("{} is not JSON or YAML", path.display()))
}

/// Decodes a value read from `path` as `T`; the error names the file and the field.
pub(super) fn decode<T: DeserializeOwned>(value: serde_json::Value, path: &Path) -> anyhow::Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        anyhow::anyhow!("{}: {field}: {}", path.display(), e.into_inner())
    })
}

/// Reads a YAML or JSON file as `T`.
pub(super) fn read<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    decode(read_value(path)?, path)
}
