//! The server's TOML configuration: `[server]`, `[scheduler]` (the same keys as a simulation
//! scenario's `config`), `[auth]`, `[cluster]`, `[tls]`, and in a file shared with `convoy agent`,
//! `[agent]`. Every key has a default, so no file is needed; durations are text (`"30s"`, `"5m"`)
//! or a number of seconds; an unknown key or a bad value is refused with an error naming the key
//! (`server.max_lease_wait`).
//!
//! Plain HTTP is for loopback only: a server that listens on another address needs `[tls]`, or
//! `server.plain_http = true` to say that clear text on the network is intended.

use crate::agent::AgentConfig;
use crate::model::FieldError;
use crate::model::duration::{format_duration, serde_text, serde_text_opt};
use crate::scheduler::SchedulerConfig;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`: listening, storage, limits of the API.
    pub server: ServerConfig,
    /// `[scheduler]`: the scheduler's settings (the same keys as a simulation scenario's `config`).
    pub scheduler: SchedulerConfig,
    /// `[auth]`: bearer tokens and the cluster secret.
    pub auth: AuthConfig,
    /// `[cluster]`: the members of a new cluster, and Raft's timings.
    pub cluster: ClusterConfig,
    /// `[tls]`: HTTPS on the listen address; plain HTTP without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// `[agent]` of a file that configures both commands. Read so that its keys and values are
    /// checked here too (a typo fails `convoy server` as it fails `convoy agent`); the server does
    /// not use it. Rules that depend on the agent's machine are left to `convoy agent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentConfig>,
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
    /// Longest a request that needs the leader (a write, a lease poll, a run report, a consistent
    /// read) waits on it when it reaches another server, following the leader through a failover,
    /// before the client gets a 503. Unset: two election timeouts (`cluster.election_timeout`
    /// doubled, twice) plus `write_timeout`; lease polls and followed output add `max_lease_wait`.
    #[serde(with = "serde_text_opt", skip_serializing_if = "Option::is_none")]
    pub relay_timeout: Option<Duration>,
    /// Free space kept on the data directory's file system, in bytes or a quantity (`64Mi`,
    /// `1Gi`). Below it, submissions and queue changes are refused with 507 (and a leader of
    /// several servers refuses every write and hands its leadership over); below a quarter of
    /// it, every write is. See docs/operations.md, "A full disk".
    #[serde(with = "crate::model::quantity::serde_bytes")]
    pub disk_reserve: u64,
    /// How much of an ended run's output the server keeps, for when its agent no longer has
    /// it: the last bytes of standard output and standard error, up to this many in all (a
    /// quantity such as `64Ki`; at most 64Ki, 0 keeps none). While the agent keeps the run
    /// (`keep_finished`), `convoy logs` reads the whole output from it.
    #[serde(with = "crate::model::quantity::serde_bytes")]
    pub finished_output_tail: u64,
    /// Size of the database's page cache, in MiB (at least 16; default 64). More keeps more of
    /// a large store's pages in the process; what it does not hold, the kernel's page cache
    /// serves.
    pub db_cache_mb: usize,
    /// How long a finished job is kept (record, runs, output, events, client id) before it is
    /// deleted. At least 1s; there is no "keep for ever".
    #[serde(with = "serde_text")]
    pub job_retention: Duration,
    /// Log as JSON lines instead of text.
    pub log_json: bool,
    /// Serve plain HTTP on a listen address other than loopback, without `[tls]`. Insecure:
    /// bearer tokens and the cluster secret cross the network in clear text.
    pub plain_http: bool,
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
            max_lease_wait: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            relay_timeout: None,
            disk_reserve: 64 << 20,
            finished_output_tail: crate::state::MAX_LOG_TAIL as u64,
            db_cache_mb: 64,
            job_retention: Duration::from_secs(7 * 86400),
            log_json: false,
            plain_http: false,
        }
    }
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Members of a new cluster, this server included. On first start with an empty data dir the
    /// servers form the cluster once all of them are reachable and none belongs to a cluster yet;
    /// later starts ignore the list (membership lives in Raft; change it with `convoy cluster
    /// add|remove`). Empty: a one-server cluster.
    pub peers: Vec<PeerConfig>,
    /// How often the leader sends heartbeats. Also the timeout of one append to a follower, which
    /// includes the follower's fsync: keep it well above the disk's latency.
    #[serde(with = "serde_text")]
    pub heartbeat_interval: Duration,
    /// A follower that hears no leader for between this and twice this starts an election, so a
    /// failover takes about one to two of these.
    #[serde(with = "serde_text")]
    pub election_timeout: Duration,
    /// Build a snapshot once this many log entries were applied since the last one; the log
    /// behind it is then purged.
    pub snapshot_every_entries: u64,
    /// Log entries kept behind a snapshot, so a member that lags a little catches up from the log
    /// rather than from a snapshot.
    pub log_entries_kept: u64,
    /// How long the leader waits for each chunk of a snapshot it sends to a member that must
    /// catch up by snapshot. The last chunk's wait includes the member installing the whole
    /// snapshot, so this must be above the install time of the largest state (`convoy bench
    /// snapshot` prints it).
    #[serde(with = "serde_text")]
    pub snapshot_install_timeout: Duration,
    /// How far back `convoy replay` can reach: the log is kept this long behind the present, with
    /// older snapshot files kept (under `snapshots/replay/`) as the states replay starts from.
    /// `"off"` (the default): the log is purged `log_entries_kept` entries behind each snapshot,
    /// and replay reaches the cycles after the latest snapshot. docs/operations.md gives the disk
    /// cost; when the disk runs low the log is purged as with `"off"`.
    #[serde(with = "crate::model::duration::serde_text_or_off")]
    pub replay_retention: Option<Duration>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            peers: vec![],
            heartbeat_interval: Duration::from_millis(100),
            election_timeout: Duration::from_millis(400),
            snapshot_every_entries: 10_000,
            log_entries_kept: 1_000,
            // See `RaftSettings::install_snapshot_timeout`: 1M jobs install in ~7 s on 2 cores.
            snapshot_install_timeout: Duration::from_secs(120),
            replay_retention: None,
        }
    }
}

impl ClusterConfig {
    /// The longest a follower waits for a leader before it starts an election.
    pub fn election_timeout_max(&self) -> Duration {
        self.election_timeout.saturating_mul(2)
    }

    /// How long a request waits for a leader to be elected (or to answer after a leader change)
    /// before it gives up: two of the longest election timeouts.
    pub fn leader_wait(&self) -> Duration {
        self.election_timeout_max().saturating_mul(2)
    }
}

/// One member of a new cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// Its `server.node_id`.
    pub id: u64,
    /// Its base URL as the others reach it (its `server.advertise`).
    pub addr: String,
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
    /// The bearer token itself (compared exactly).
    pub token: String,
    /// Who the token is (matched against queue owners).
    pub principal: String,
    /// Groups the principal belongs to (matched against queue groups).
    #[serde(default)]
    pub groups: Vec<String>,
    /// What the token may do.
    pub roles: Vec<Role>,
}

/// One user name and password, accepted as HTTP Basic credentials (as Armada's `armadactl` and
/// clients send them); the user is a principal like a token's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The user name, which is also the principal (matched against queue owners).
    pub name: String,
    /// The password (compared exactly).
    pub password: String,
    /// Groups the user belongs to (matched against queue groups).
    #[serde(default)]
    pub groups: Vec<String>,
    /// What the user may do.
    pub roles: Vec<Role>,
}

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Off only when explicitly set to false (the embedded default binds to 127.0.0.1).
    pub enabled: bool,
    /// The accepted bearer tokens.
    pub tokens: Vec<TokenConfig>,
    /// The accepted Basic user names and passwords.
    pub users: Vec<UserConfig>,
    /// Shared secret for Raft RPC between servers.
    pub cluster_secret: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { enabled: true, tokens: vec![], users: vec![], cluster_secret: None }
    }
}

/// `[tls]`: the server serves HTTPS only (the API, the executor API and the peer RPC on its one
/// listen address) with this certificate, and its peer RPC client trusts `ca`. Paths are PEM
/// files; SIGHUP reloads `cert` and `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain: its certificate first, then any intermediates.
    pub cert: PathBuf,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates that sign the other servers' certificates, the only ones the peer RPC
    /// client trusts. Without it, the operating system's trust store.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

impl TlsConfig {
    /// Checks that the files load: the certificate chain, a key that matches it, and the CA.
    /// The error names the key (`tls.cert`, `tls.key`, `tls.ca`) and the file.
    pub fn validate(&self) -> Result<(), FieldError> {
        crate::certs::check_server_files(&self.cert, &self.key, self.ca.as_deref())
            .map_err(|e| FieldError::new(e.key, format!("{}: {}", e.path.display(), e.problem)))
    }
}

/// Why a server configuration was refused; `origin` is the file (or `defaults`). The shape the
/// agent's configuration shares ([`crate::config_file`]).
pub use crate::config_file::ConfigFileError as ConfigError;

/// Checks that `url` is an `http://` or `https://` base URL with a host others can reach (not a
/// wildcard address).
fn check_url(key: &str, url: &str) -> Result<(), FieldError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| FieldError::new(key, format!("{url:?} must start with http:// or https://")))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(FieldError::new(key, format!("{url:?} has no host")));
    }
    if host == "0.0.0.0" || host == "::" || host == "*" {
        return Err(FieldError::new(
            key,
            format!("{url:?} is a wildcard address; give the address others reach this server at"),
        ));
    }
    Ok(())
}

impl Config {
    /// Longest a request that needs the leader waits on it (`server.relay_timeout`, or its
    /// default: [`ClusterConfig::leader_wait`] plus `write_timeout`).
    pub fn relay_timeout(&self) -> Duration {
        self.server.relay_timeout.unwrap_or_else(|| self.cluster.leader_wait() + self.server.write_timeout)
    }

    /// Loads a file, or the local defaults when `path` is `None`: every default, listening on
    /// 127.0.0.1 only, with auth explicitly off (as `convoy up` runs).
    pub fn load(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            let c = Config::local();
            c.validate().map_err(|e| ConfigError::Invalid {
                origin: "defaults".into(),
                key: e.field,
                message: e.message,
            })?;
            return Ok(c);
        };
        let text = crate::config_file::read(path)?;
        Config::parse(&text, &path.display().to_string())
    }

    /// The built-in local configuration: defaults, loopback listener, auth off.
    pub fn local() -> Config {
        Config { auth: AuthConfig { enabled: false, ..AuthConfig::default() }, ..Config::default() }
    }

    /// Parses TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = crate::config_file::deserialize(text, origin, "")?;
        config.validate().map_err(|e| ConfigError::Invalid {
            origin: origin.to_string(),
            key: e.field,
            message: e.message,
        })?;
        Ok(config)
    }

    /// Checks `[cluster]`, and the `[server]` keys that must agree with it.
    fn validate_cluster(&self) -> Result<(), FieldError> {
        let c = &self.cluster;
        if self.auth.enabled && !c.peers.is_empty() && self.auth.cluster_secret.is_none() {
            return Err(FieldError::new(
                "auth.cluster_secret",
                "is required with [cluster] peers when auth is enabled: without it anyone who reaches this port could \
                 act as a peer (send log entries, call elections)",
            ));
        }
        if c.heartbeat_interval < Duration::from_millis(10) {
            return Err(FieldError::new("cluster.heartbeat_interval", "must be at least 10ms"));
        }
        if c.election_timeout < c.heartbeat_interval.saturating_mul(3) {
            return Err(FieldError::new(
                "cluster.election_timeout",
                format!(
                    "must be at least three heartbeats ({}), or followers start elections while the leader is fine",
                    format_duration(c.heartbeat_interval.saturating_mul(3))
                ),
            ));
        }
        if c.snapshot_every_entries == 0 {
            return Err(FieldError::new("cluster.snapshot_every_entries", "must be at least 1"));
        }
        if c.snapshot_install_timeout < Duration::from_secs(1) {
            return Err(FieldError::new("cluster.snapshot_install_timeout", "must be at least 1s"));
        }
        // A poll held for the longest wait, then a failover, must not look like a lost executor.
        let needed = self.server.max_lease_wait + c.election_timeout_max().saturating_mul(2);
        if self.server.executor_timeout <= needed {
            return Err(FieldError::new(
                "server.executor_timeout",
                format!(
                    "must be above server.max_lease_wait plus two elections ({}): an executor whose poll is held \
                     that long across a failover would be declared lost",
                    format_duration(needed)
                ),
            ));
        }
        if let Some(t) = self.server.relay_timeout
            && t < c.leader_wait()
        {
            return Err(FieldError::new(
                "server.relay_timeout",
                format!(
                    "must be at least two election timeouts ({}): a request must be able to wait out a failover",
                    format_duration(c.leader_wait())
                ),
            ));
        }
        if let Some(a) = &self.server.advertise {
            check_url("server.advertise", a)?;
        }
        if c.peers.is_empty() {
            return Ok(());
        }
        let mut ids = std::collections::BTreeSet::new();
        for (i, p) in c.peers.iter().enumerate() {
            if p.id == 0 {
                return Err(FieldError::new(format!("cluster.peers[{i}].id"), "must be at least 1"));
            }
            if !ids.insert(p.id) {
                return Err(FieldError::new(format!("cluster.peers[{i}].id"), format!("{} is listed twice", p.id)));
            }
            check_url(&format!("cluster.peers[{i}].addr"), &p.addr)?;
        }
        let node_id = self.server.node_id;
        let Some(me) = c.peers.iter().find(|p| p.id == node_id) else {
            return Err(FieldError::new(
                "cluster.peers",
                format!("must list this server (server.node_id = {node_id})"),
            ));
        };
        match &self.server.advertise {
            None => Err(FieldError::new(
                "server.advertise",
                format!("must be set with cluster.peers, to this server's entry there ({})", me.addr),
            )),
            Some(a) if a.trim_end_matches('/') != me.addr.trim_end_matches('/') => Err(FieldError::new(
                "server.advertise",
                format!("{a} differs from this server's entry in cluster.peers ({})", me.addr),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Checks that traffic beyond this machine is encrypted unless `server.plain_http` says
    /// otherwise, and that with `[tls]` `server.advertise` is an `https://` URL.
    fn validate_transport(&self) -> Result<(), FieldError> {
        let s = &self.server;
        match (&self.tls, s.plain_http) {
            (Some(_), true) => {
                return Err(FieldError::new(
                    "server.plain_http",
                    "contradicts [tls]: with [tls] the server serves HTTPS only; remove one of them",
                ));
            }
            (None, false) if !s.listen.ip().is_loopback() => {
                return Err(FieldError::new(
                    "server.listen",
                    format!(
                        "{} is not a loopback address, so plain HTTP would carry tokens and the cluster secret \
                         across the network: configure [tls] (cert and key), or set server.plain_http = true to \
                         accept that (insecure)",
                        s.listen
                    ),
                ));
            }
            _ => {}
        }
        // Without [tls], https:// may be right: a proxy in front of a loopback listener.
        if self.tls.is_some()
            && let Some(a) = s.advertise.as_deref().filter(|a| a.starts_with("http://"))
        {
            return Err(FieldError::new(
                "server.advertise",
                format!("{a} must start with https://: with [tls] the server serves HTTPS only"),
            ));
        }
        Ok(())
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
        if s.finished_output_tail > crate::state::MAX_LOG_TAIL as u64 {
            return Err(FieldError::new(
                "server.finished_output_tail",
                format!("{} bytes is above the most a run's record holds, 64Ki", s.finished_output_tail),
            ));
        }
        if s.db_cache_mb < 16 {
            return Err(FieldError::new("server.db_cache_mb", "must be at least 16"));
        }
        // Finished jobs must go some time: without retention the database grows for ever. Below
        // a second is a typo (a number of seconds read as milliseconds, or a missing unit).
        if s.job_retention < Duration::from_secs(1) {
            return Err(FieldError::new(
                "server.job_retention",
                "must be at least 1s (finished jobs are always deleted after it; e.g. \"7d\")",
            ));
        }
        if s.node_id == 0 {
            return Err(FieldError::new("server.node_id", "must be at least 1"));
        }
        self.validate_cluster()?;
        if self.auth.enabled && self.auth.tokens.is_empty() && self.auth.users.is_empty() {
            return Err(FieldError::new(
                "auth.tokens",
                "auth is enabled but no tokens are configured; add tokens (or users) or set auth.enabled = false",
            ));
        }
        for (i, u) in self.auth.users.iter().enumerate() {
            // Basic credentials are "name:password": a colon in the name would split elsewhere.
            if u.name.is_empty() || u.name.contains(':') {
                return Err(FieldError::new(format!("auth.users[{i}].name"), "must be non-empty and without ':'"));
            }
            if u.password.chars().count() < 12 {
                return Err(FieldError::new(format!("auth.users[{i}].password"), "must be at least 12 characters"));
            }
            if u.roles.is_empty() {
                return Err(FieldError::new(format!("auth.users[{i}].roles"), "needs at least one role"));
            }
        }
        let mut secrets: Vec<(String, &str)> = Vec::new();
        secrets.extend(self.auth.cluster_secret.as_deref().map(|s| ("auth.cluster_secret".to_string(), s)));
        secrets.extend(
            self.auth.tokens.iter().enumerate().map(|(i, t)| (format!("auth.tokens[{i}].token"), t.token.as_str())),
        );
        secrets.extend(
            self.auth.users.iter().enumerate().map(|(i, u)| (format!("auth.users[{i}].password"), u.password.as_str())),
        );
        for (key, value) in secrets {
            crate::model::placeholder::refuse(&key, value)?;
        }
        for (i, t) in self.auth.tokens.iter().enumerate() {
            if t.token.chars().count() < 16 {
                return Err(FieldError::new(format!("auth.tokens[{i}].token"), "must be at least 16 characters"));
            }
            if t.roles.is_empty() {
                return Err(FieldError::new(format!("auth.tokens[{i}].roles"), "needs at least one role"));
            }
        }
        self.validate_transport()?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_of_the_examples_are_refused_naming_the_key() {
        let text = r#"
[auth]
enabled = true
cluster_secret = "a-real-secret-of-some-length"
tokens = [
  { token = "0123456789abcdef0123", principal = "ops", roles = ["admin"] },
  { token = "replace-with-a-long-random-team-token", principal = "alice", roles = ["submitter"] },
]
"#;
        let e = Config::parse(text, "f").unwrap_err().to_string();
        assert!(e.contains("auth.tokens[1].token") && e.contains("placeholder"), "{e}");
        let secret = text.replace("a-real-secret-of-some-length", "Replace-With-One-Secret");
        let e = Config::parse(&secret, "f").unwrap_err().to_string();
        assert!(e.contains("auth.cluster_secret") && e.contains("placeholder"), "{e}");
        Config::parse(&text.replace("replace-with-a-long-random-team-token", "team-token-0123456789"), "f").unwrap();
    }

    #[test]
    fn cluster_rules_name_their_key() {
        let peers = r#"
[cluster]
peers = [ { id = 1, addr = "https://a.example:8080" }, { id = 2, addr = "https://b.example:8080/" } ]
"#;
        let parse = |text: &str| Config::parse(&format!("{text}\n[auth]\nenabled = false\n"), "f");
        let ok = parse(&format!("[server]\nnode_id = 2\nadvertise = \"https://b.example:8080\"\n{peers}"))
            .expect("a valid member");
        assert_eq!(ok.cluster.peers.len(), 2);
        let err = |text: &str| parse(text).unwrap_err().to_string();
        let cases = [
            (
                format!("[server]\nnode_id = 3\nadvertise = \"https://c.example:8080\"\n{peers}"),
                "f: cluster.peers: must list this server (server.node_id = 3)",
            ),
            (format!("[server]\nnode_id = 1\n{peers}"), "f: server.advertise: must be set with cluster.peers"),
            (
                format!("[server]\nnode_id = 1\nadvertise = \"https://x.example:8080\"\n{peers}"),
                "f: server.advertise: https://x.example:8080 differs",
            ),
            (
                "[server]\nadvertise = \"http://0.0.0.0:8080\"\n".to_string(),
                "f: server.advertise: \"http://0.0.0.0:8080\" is a wildcard",
            ),
            (
                "[server]\nadvertise = \"convoy-1:8080\"\n".to_string(),
                "f: server.advertise: \"convoy-1:8080\" must start with http",
            ),
            (
                "[cluster]\npeers = [ { id = 1, addr = \"http://a:1\" }, { id = 1, addr = \"http://b:1\" } ]\n"
                    .to_string(),
                "f: cluster.peers[1].id: 1 is listed twice",
            ),
            (
                "[cluster]\nheartbeat_interval = \"200ms\"\nelection_timeout = \"500ms\"\n".to_string(),
                "f: cluster.election_timeout: must be at least three heartbeats (600ms)",
            ),
            (
                "[server]\nexecutor_timeout = \"30s\"\n".to_string(),
                "f: server.executor_timeout: must be above server.max_lease_wait plus two elections (31s 600ms)",
            ),
        ];
        for (text, want) in cases {
            let got = err(&text);
            assert!(got.starts_with(want), "{text}\n  got: {got}\n want: {want}");
        }
        // With auth on, peers need the cluster secret.
        let member = format!("[server]\nnode_id = 2\nadvertise = \"https://b.example:8080\"\n{peers}");
        let tokens =
            "[auth]\ntokens = [ { token = \"0123456789abcdef0123\", principal = \"a\", roles = [\"admin\"] } ]\n";
        let got = Config::parse(&format!("{member}{tokens}"), "f").unwrap_err().to_string();
        assert!(got.starts_with("f: auth.cluster_secret: is required with [cluster] peers"), "{got}");
        Config::parse(&format!("{member}{tokens}cluster_secret = \"a-long-shared-secret-0123456789\"\n"), "f")
            .expect("with the secret");
    }

    #[test]
    fn transport_rules_name_their_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["convoy-1.example".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        let (cert_path, key_path) = (dir.path().join("server.crt"), dir.path().join("server.key"));
        std::fs::write(&cert_path, cert.pem()).expect("write certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        let tls = format!("[tls]\ncert = {:?}\nkey = {:?}\n", cert_path.display(), key_path.display());
        let parse = |text: &str| Config::parse(&format!("{text}\n[auth]\nenabled = false\n"), "f");
        let wildcard = "[server]\nlisten = \"0.0.0.0:8080\"\n";

        // Loopback: plain HTTP is fine, with or without a file.
        parse("[server]\nlisten = \"127.0.0.1:8080\"\n").expect("loopback, plain");
        parse("[server]\nlisten = \"[::1]:8080\"\n").expect("IPv6 loopback, plain");
        // Beyond this machine: TLS, or the explicit opt-out.
        let e = parse(wildcard).unwrap_err().to_string();
        assert!(e.starts_with("f: server.listen: 0.0.0.0:8080 is not a loopback address"), "{e}");
        assert!(e.contains("[tls]") && e.contains("server.plain_http = true"), "{e}");
        let c = parse(&format!("{wildcard}plain_http = true\n")).expect("plain HTTP by choice");
        assert!(c.server.plain_http && c.tls.is_none());
        let c = parse(&format!("{wildcard}advertise = \"https://convoy-1.example:8080\"\n{tls}")).expect("TLS");
        assert_eq!(c.tls.as_ref().map(|t| &t.cert), Some(&cert_path));

        let cases = [
            (format!("{wildcard}plain_http = true\n{tls}"), "f: server.plain_http: contradicts [tls]"),
            (
                format!("{wildcard}advertise = \"http://convoy-1.example:8080\"\n{tls}"),
                "f: server.advertise: http://convoy-1.example:8080 must start with https://",
            ),
            (
                format!("{wildcard}{}", tls.replace("server.key", "missing.key")),
                &format!("f: tls.key: {}: cannot read the file", dir.path().join("missing.key").display()),
            ),
            (format!("{wildcard}{tls}ca = {:?}\n", key_path.display()), "f: tls.ca: "),
        ];
        for (text, want) in cases {
            let got = parse(&text).unwrap_err().to_string();
            assert!(got.starts_with(want), "{text}\n  got: {got}\n want: {want}");
        }
    }

    #[test]
    fn the_page_cache_default_is_the_stores() {
        // A server and the tools that open its store alone (bench, replay) size the cache alike.
        assert_eq!(ServerConfig::default().db_cache_mb << 20, crate::store::DEFAULT_CACHE_BYTES);
    }

    #[test]
    fn example_file_parses_and_is_the_defaults() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml")).unwrap();
        let c = Config::parse(&text, "config.example.toml").unwrap();
        // The example turns auth off and shows a token, the rest are defaults; its agent section
        // is the agent's defaults for a server on this machine.
        let d = Config { auth: c.auth.clone(), agent: c.agent.clone(), ..Config::default() };
        assert_eq!(c, d);
        assert_eq!(c.agent, Some(AgentConfig::new(vec!["http://127.0.0.1:8080".into()])));
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
        let e = Config::parse("[server]\njob_retention = 0\n[auth]\nenabled = false\n", "f").unwrap_err().to_string();
        assert!(e.starts_with("f: server.job_retention: must be at least 1s"), "{e}");
        let c = Config::parse("[server]\njob_retention = \"36h\"\n[auth]\nenabled = false\n", "f").unwrap();
        assert_eq!(c.server.job_retention, Duration::from_secs(36 * 3600));
        let e = Config::parse("[server]\nmax_lease_wait = \"a while\"\n", "f").unwrap_err().to_string();
        assert!(e.starts_with("f: server.max_lease_wait: duration \"a while\" is invalid"), "{e}");
    }

    #[test]
    fn tokens_of_fewer_than_16_characters_are_refused() {
        let token =
            |t: &str| format!("[auth]\ntokens = [{{ token = \"{t}\", principal = \"ops\", roles = [\"admin\"] }}]\n");
        let e = Config::parse(&token("fifteen-chars-x"), "f").unwrap_err().to_string();
        assert_eq!(e, "f: auth.tokens[0].token: must be at least 16 characters");
        assert!(Config::parse(&token("sixteen-chars-xy"), "f").is_ok());
        // Characters, not bytes: eight two-byte letters are too few.
        let e = Config::parse(&token("éééééééé"), "f").unwrap_err().to_string();
        assert!(e.contains("must be at least 16 characters"), "{e}");
    }

    #[test]
    fn basic_users_are_checked_and_may_stand_in_for_tokens() {
        let user = |name: &str, password: &str, roles: &str| {
            format!("[auth]\nusers = [{{ name = \"{name}\", password = \"{password}\", roles = [{roles}] }}]\n")
        };
        let c = Config::parse(&user("alice", "long-enough-password", "\"submitter\""), "f").unwrap();
        assert_eq!(c.auth.users[0].name, "alice");
        assert_eq!(c.auth.users[0].roles, [Role::Submitter]);
        let e = Config::parse(&user("al:ice", "long-enough-password", "\"admin\""), "f").unwrap_err().to_string();
        assert!(e.starts_with("f: auth.users[0].name: "), "{e}");
        let e = Config::parse(&user("alice", "short", "\"admin\""), "f").unwrap_err().to_string();
        assert!(e.starts_with("f: auth.users[0].password: must be at least 12 characters"), "{e}");
        let e = Config::parse(&user("alice", "long-enough-password", ""), "f").unwrap_err().to_string();
        assert!(e.starts_with("f: auth.users[0].roles: needs at least one role"), "{e}");
    }

    #[test]
    fn an_agent_section_is_checked_but_not_used() {
        let off = "[auth]\nenabled = false\n";
        let c = Config::parse(&format!("{off}[agent]\nservers = [\"http://a:1\"]\npoll_wait = \"5s\"\n"), "f").unwrap();
        let agent = c.agent.as_ref().expect("the agent section");
        assert_eq!(agent.poll_wait, Duration::from_secs(5));
        assert_eq!(Config { agent: None, ..c }, Config::local());
        let e = Config::parse(&format!("{off}[agent]\n[agent.process]\nbogus = 1\n"), "f").unwrap_err().to_string();
        assert!(e.starts_with("f: agent.process.bogus: unknown field"), "{e}");
        let e = Config::parse(&format!("{off}[agent]\nmax_backoff = \"later\"\n"), "f").unwrap_err().to_string();
        assert!(e.starts_with("f: agent.max_backoff: duration"), "{e}");
    }

    #[test]
    fn replay_retention_is_off_or_a_duration() {
        let off = "[auth]\nenabled = false\n";
        assert_eq!(Config::parse(off, "f").unwrap().cluster.replay_retention, None);
        let c = Config::parse(&format!("{off}[cluster]\nreplay_retention = \"1h\"\n"), "f").unwrap();
        assert_eq!(c.cluster.replay_retention, Some(Duration::from_secs(3600)));
        let c = Config::parse(&format!("{off}[cluster]\nreplay_retention = \"off\"\n"), "f").unwrap();
        assert_eq!(c.cluster.replay_retention, None);
        let e =
            Config::parse(&format!("{off}[cluster]\nreplay_retention = \"a while\"\n"), "f").unwrap_err().to_string();
        assert!(e.contains("cluster.replay_retention") && e.contains("or \"off\""), "{e}");
    }
}
