//! Reading a TOML configuration, shared by the server's (`config.rs`) and the agent's
//! (`agent/config/`): one error shape, and the reading that names the file and the key. It
//! imports nothing of Convoy, so the agent reads its file without the server's modules.

use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// Why a configuration was refused. The server's config and the agent's name it `ConfigError`
/// and `AgentConfigError`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The text is not TOML.
    #[error("{origin}: {message}")]
    Parse {
        /// The file, or where else the text came from.
        origin: String,
        /// The TOML parser's message, with the line.
        message: String,
    },
    /// A key is unknown or holds a value that is not allowed.
    #[error("{origin}: {key}: {message}")]
    Invalid {
        /// The file, or where else the value came from.
        origin: String,
        /// The key, with its section (`agent.servers[0]`).
        key: String,
        /// The rule the value breaks.
        message: String,
    },
}

impl ConfigFileError {
    /// The text from `origin` is not TOML.
    pub fn syntax(origin: &str, e: toml::de::Error) -> Self {
        ConfigFileError::Parse { origin: origin.to_string(), message: e.to_string() }
    }
}

/// The text of the file at `path`.
pub(crate) fn read(path: &Path) -> Result<String, ConfigFileError> {
    std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read { path: path.to_path_buf(), source })
}

/// Deserializes TOML `text` from `origin`. A key serde refuses is named by its path in the text,
/// after `prefix` when the text is a section of a larger file (`agent`: `agent.servers[0]`).
pub(crate) fn deserialize<T: DeserializeOwned>(text: &str, origin: &str, prefix: &str) -> Result<T, ConfigFileError> {
    let de = toml::Deserializer::parse(text).map_err(|e| ConfigFileError::syntax(origin, e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let key = match (prefix, path.as_str()) {
            ("", p) => p.to_string(),
            (pre, ".") => pre.to_string(),
            (pre, p) => format!("{pre}.{p}"),
        };
        ConfigFileError::Invalid { origin: origin.to_string(), key, message: e.into_inner().message().to_string() }
    })
}
