//! The server's TOML configuration: `[server]`, `[scheduler]` (the same keys as a simulation
//! scenario's `config`), `[auth]`. Every key has a default, so no file is needed; a bad value is
//! refused with an error naming the key.

use crate::model::FieldError;
use crate::model::duration::serde_text;
use crate::scheduler::SchedulerConfig;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub scheduler: SchedulerConfig,
    pub auth: AuthConfig,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address the HTTP API (and Raft RPC) listens on.
    pub listen: SocketAddr,
    /// Address others reach this server at (defaults to `http://<listen>`).
    pub advertise: Option<String>,
    /// Where the database lives.
    pub data_dir: PathBuf,
    /// This server's Raft node id.
    pub node_id: u64,
    /// Largest request body, in bytes.
    pub max_request_bytes: usize,
    /// Most jobs in one submission.
    pub max_jobs_per_request: usize,
    /// An executor that has not polled for this long is lost.
    #[serde(with = "serde_text")]
    pub executor_timeout: Duration,
    /// A job whose runs were lost this many times fails.
    pub max_attempted_runs: u32,
    /// Longest termination grace period a job may ask for.
    #[serde(with = "serde_text")]
    pub max_termination_grace_period: Duration,
    /// Deadline of jobs without `activeDeadlineSeconds` that request no GPU.
    #[serde(with = "serde_text")]
    pub default_cpu_job_deadline: Duration,
    /// Deadline of jobs without `activeDeadlineSeconds` that request a GPU.
    #[serde(with = "serde_text")]
    pub default_gpu_job_deadline: Duration,
    /// Refuse jobs that request more of a resource than any known node has.
    pub reject_jobs_larger_than_any_node: bool,
    /// Longest a lease poll is held open.
    #[serde(with = "serde_text")]
    pub max_lease_wait: Duration,
    /// How long a write may wait for its batch to be committed before the client gets a 503.
    #[serde(with = "serde_text")]
    pub write_timeout: Duration,
    /// Size of the database's page cache, in MiB.
    pub db_cache_mb: usize,
    /// Log as JSON lines instead of text.
    pub log_json: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            advertise: None,
            data_dir: PathBuf::from("./convoy-data"),
            node_id: 1,
            max_request_bytes: 16 << 20,
            max_jobs_per_request: 10_000,
            executor_timeout: Duration::from_secs(60),
            max_attempted_runs: 5,
            max_termination_grace_period: Duration::from_secs(300),
            default_cpu_job_deadline: Duration::from_secs(3 * 86400),
            default_gpu_job_deadline: Duration::from_secs(14 * 86400),
            reject_jobs_larger_than_any_node: true,
            max_lease_wait: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            db_cache_mb: 256,
            log_json: false,
        }
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Submit to, cancel in and read queues they own (by name or group).
    Submitter,
    /// The executor API.
    Executor,
}

/// One bearer token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub token: String,
    /// Who the token is (matched against queue owners).
    pub principal: String,
    #[serde(default)]
    pub groups: Vec<String>,
    pub roles: Vec<Role>,
}

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Off only when explicitly set to false (the embedded default binds to 127.0.0.1).
    pub enabled: bool,
    pub tokens: Vec<TokenConfig>,
    /// Shared secret for Raft RPC between servers.
    pub cluster_secret: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { enabled: true, tokens: vec![], cluster_secret: None }
    }
}

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {key}: {message}")]
    Invalid { path: String, key: String, message: String },
}

impl Config {
    /// Loads a file, or the local defaults when `path` is `None`: every default, listening on
    /// 127.0.0.1 only, with auth explicitly off (as `convoy up` runs).
    pub fn load(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            let c = Config::local();
            c.validate().map_err(|e| ConfigError::Invalid {
                path: "defaults".into(),
                key: e.field,
                message: e.message,
            })?;
            return Ok(c);
        };
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: shown.clone(), error })?;
        Config::parse(&text, &shown)
    }

    /// The built-in local configuration: defaults, loopback listener, auth off.
    pub fn local() -> Config {
        Config { auth: AuthConfig { enabled: false, ..AuthConfig::default() }, ..Config::default() }
    }

    /// Parses TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::parse(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_string(), message: e.to_string() })?;
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Invalid { path: origin.to_string(), key, message: e.into_inner().message().to_string() }
        })?;
        config.validate().map_err(|e| ConfigError::Invalid {
            path: origin.to_string(),
            key: e.field,
            message: e.message,
        })?;
        Ok(config)
    }

    /// Checks the rules serde cannot.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.scheduler.validate().map_err(|e| e.within("scheduler"))?;
        let s = &self.server;
        if s.max_attempted_runs == 0 {
            return Err(FieldError::new("server.max_attempted_runs", "must be at least 1"));
        }
        if s.executor_timeout < Duration::from_secs(1) {
            return Err(FieldError::new("server.executor_timeout", "must be at least 1s"));
        }
        if s.max_termination_grace_period < Duration::from_secs(1) {
            return Err(FieldError::new("server.max_termination_grace_period", "must be at least 1s"));
        }
        if s.max_jobs_per_request == 0 {
            return Err(FieldError::new("server.max_jobs_per_request", "must be at least 1"));
        }
        if s.max_request_bytes < 1024 {
            return Err(FieldError::new("server.max_request_bytes", "must be at least 1024"));
        }
        if s.db_cache_mb < 16 {
            return Err(FieldError::new("server.db_cache_mb", "must be at least 16"));
        }
        if s.node_id == 0 {
            return Err(FieldError::new("server.node_id", "must be at least 1"));
        }
        if self.auth.enabled && self.auth.tokens.is_empty() {
            return Err(FieldError::new(
                "auth.tokens",
                "auth is enabled but no tokens are configured; add tokens or set auth.enabled = false",
            ));
        }
        for (i, t) in self.auth.tokens.iter().enumerate() {
            if t.token.len() < 16 {
                return Err(FieldError::new(format!("auth.tokens[{i}].token"), "must be at least 16 characters"));
            }
            if t.roles.is_empty() {
                return Err(FieldError::new(format!("auth.tokens[{i}].roles"), "needs at least one role"));
            }
        }
        Ok(())
    }

    /// The address others reach this server at.
    pub fn advertise(&self) -> String {
        self.server.advertise.clone().unwrap_or_else(|| format!("http://{}", self.server.listen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses_and_is_the_defaults() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml")).unwrap();
        let c = Config::parse(&text, "config.example.toml").unwrap();
        // The example turns auth off and shows a token, the rest are defaults.
        let d = Config { auth: c.auth.clone(), ..Config::default() };
        assert_eq!(c, d);
    }

    #[test]
    fn bad_values_name_the_key() {
        let e =
            Config::parse("[server]\nmax_attempted_runs = 0\n[auth]\nenabled = false\n", "f").unwrap_err().to_string();
        assert!(e.contains("server.max_attempted_runs"), "{e}");
        let e = Config::parse("[server]\nexecutor_timeout = \"soon\"\n", "f").unwrap_err().to_string();
        assert!(e.contains("server.executor_timeout"), "{e}");
        let e = Config::parse("[server]\nbogus = 1\n", "f").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = Config::parse("[scheduler]\nnode_eviction_probability = 2.0\n[auth]\nenabled = false\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scheduler.node_eviction_probability"), "{e}");
        let e = Config::parse("", "f").unwrap_err().to_string();
        assert!(e.contains("auth.tokens"), "{e}");
    }
}
