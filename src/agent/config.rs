//! Agent configuration: a TOML file of its own or the `[agent]` section of the combined config.
//!
//! Every key has a default except `servers`; `validate` checks the rest and names the offending
//! key in its error.

use crate::model::{ExecutorName, Labels, NodeName, PoolName, Resources, Taint};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Environment variable read when `token` is not set in the file.
pub const TOKEN_ENV: &str = "CONVOY_EXECUTOR_TOKEN";

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading agent config {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// The text is not valid TOML for this structure.
    #[error("agent config: {0}")]
    Parse(#[from] toml::de::Error),
    /// A key holds a value that is not allowed.
    #[error("agent config: `{key}`: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.to_string(), message: message.into() }
}

/// Which runtime runs the leased jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    /// Jobs run as local processes on this machine (bare metal).
    #[default]
    Process,
    /// Declared nodes; jobs only pretend to run (load tests).
    Fake,
    /// Jobs run as pods of the Kubernetes cluster the agent talks to.
    Kubernetes,
}

impl std::str::FromStr for RuntimeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "process" => Ok(RuntimeKind::Process),
            "fake" => Ok(RuntimeKind::Fake),
            "kubernetes" => Ok(RuntimeKind::Kubernetes),
            other => Err(format!("unknown runtime {other:?} (use process, fake or kubernetes)")),
        }
    }
}

impl RuntimeKind {
    /// The runtime's name as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Process => "process",
            RuntimeKind::Fake => "fake",
            RuntimeKind::Kubernetes => "kubernetes",
        }
    }
}

/// Configuration of `convoy agent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Name of this executor (one Kubernetes cluster or one machine), as the server knows it.
    /// Default: this machine's host name.
    #[serde(default = "default_executor")]
    pub executor: ExecutorName,
    /// Base URLs of the control-plane servers, e.g. `["http://10.0.0.1:8080", "http://10.0.0.2:8080"]`.
    /// The agent talks to one at a time and moves to the next when one is unreachable.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Bearer token of this executor. Default: the `CONVOY_EXECUTOR_TOKEN` environment variable;
    /// none when neither is set (servers with authentication switched off).
    #[serde(default)]
    pub token: Option<String>,
    /// Directory for the agent's own state (process runtime: one directory per run with the job's
    /// output and exit status). Default: `./convoy-agent`.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Longest the server may hold a lease poll open, in seconds (1 to 60). Default: 20.
    #[serde(default = "default_poll_wait")]
    pub poll_wait: u64,
    /// At most this many new leases per poll answer. Default: 1000.
    #[serde(default = "default_max_leases")]
    pub max_leases: u32,
    /// At most this many run events per `/events` request. Default: 1000.
    #[serde(default = "default_event_batch")]
    pub event_batch: usize,
    /// Longest pause between retries of a failed request, in seconds. Default: 30.
    #[serde(default = "default_max_backoff")]
    pub max_backoff: u64,
    /// Which runtime runs the jobs: `process`, `fake` or `kubernetes`. Default: `process`.
    #[serde(default)]
    pub runtime: RuntimeKind,
    /// Settings of the `process` runtime.
    #[serde(default)]
    pub process: ProcessConfig,
    /// Settings of the `fake` runtime.
    #[serde(default)]
    pub fake: FakeConfig,
    /// Settings of the `kubernetes` runtime.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
}

/// `[agent.process]`: run jobs as local processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// Name of the one node this machine is. Default: the host name.
    #[serde(default = "default_node_name")]
    pub node: NodeName,
    /// Pool of the node. Default: `default`.
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    /// Labels of the node (what node selectors and affinities match).
    #[serde(default)]
    pub labels: Labels,
    /// Taints of the node.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Overrides of what the node offers, e.g. `{ cpu = "6", memory = "16Gi", "nvidia.com/gpu" = "1" }`;
    /// resources not named here are read from the OS (cpu and memory).
    #[serde(default)]
    pub allocatable: Option<Resources>,
    /// The `convoy` executable that supervises each job (`convoy agent-supervise`). Default: the
    /// running executable.
    #[serde(default)]
    pub supervisor: Option<PathBuf>,
    /// Hours to keep the directories of runs whose result was reported. Default: 24.
    #[serde(default = "default_keep_finished_hours")]
    pub keep_finished_hours: u64,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            node: default_node_name(),
            pool: PoolName::default_pool(),
            labels: Labels::new(),
            taints: Vec::new(),
            allocatable: None,
            supervisor: None,
            keep_finished_hours: default_keep_finished_hours(),
        }
    }
}

/// `[agent.fake]`: declared nodes, simulated jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeConfig {
    /// Groups of identical nodes (`[[agent.fake.node_groups]]`).
    #[serde(default)]
    pub node_groups: Vec<FakeNodeGroup>,
}

/// A group of identical fake nodes, named `<name_prefix>-<index>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeNodeGroup {
    /// Number of nodes in the group (at least 1).
    pub count: u32,
    /// Node names are this prefix, a dash and the index from 0. Default: `fake`.
    #[serde(default = "default_fake_prefix")]
    pub name_prefix: String,
    /// Pool of the nodes. Default: `default`.
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    /// What each node offers, e.g. `{ cpu = "32", memory = "128Gi" }`.
    pub allocatable: Resources,
    /// Labels of each node.
    #[serde(default)]
    pub labels: Labels,
    /// Taints of each node.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

/// `[agent.kubernetes]`: run jobs as pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Namespace the pods (and their services and ingresses) are created in. Default: `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Kubeconfig file. Default: in-cluster configuration when running in a pod, else
    /// `$KUBECONFIG` or `~/.kube/config`.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context. Default: the file's current context.
    #[serde(default)]
    pub context: Option<String>,
    /// Node label whose value is the node's pool; nodes without it are in pool `default`.
    /// Default: `convoy.io/pool`.
    #[serde(default = "default_pool_label")]
    pub pool_label: String,
    /// Seconds between refreshes of the node inventory (nodes and foreign pods). Default: 10.
    #[serde(default = "default_inventory_refresh")]
    pub inventory_refresh_seconds: u64,
    /// Delete a pod once its result was reported. Default: true.
    #[serde(default = "default_true")]
    pub delete_finished_pods: bool,
    /// Seconds past a kill's grace period after which a pod still present is deleted with grace
    /// period 0 (a node that does not answer). Default: 30.
    #[serde(default = "default_force_delete_after")]
    pub force_delete_after_seconds: u64,
    /// Lines of the pod's log sent with its final event (0: none). Default: 100.
    #[serde(default = "default_log_tail_lines")]
    pub log_tail_lines: u32,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespace: default_namespace(),
            kubeconfig: None,
            context: None,
            pool_label: default_pool_label(),
            inventory_refresh_seconds: default_inventory_refresh(),
            delete_finished_pods: true,
            force_delete_after_seconds: default_force_delete_after(),
            log_tail_lines: default_log_tail_lines(),
        }
    }
}

impl AgentConfig {
    /// A configuration with every default and the given servers.
    pub fn new(servers: Vec<String>) -> Self {
        Self {
            executor: default_executor(),
            servers,
            token: None,
            data_dir: default_data_dir(),
            poll_wait: default_poll_wait(),
            max_leases: default_max_leases(),
            event_batch: default_event_batch(),
            max_backoff: default_max_backoff(),
            runtime: RuntimeKind::default(),
            process: ProcessConfig::default(),
            fake: FakeConfig::default(),
            kubernetes: KubernetesConfig::default(),
        }
    }

    /// Parses TOML text: either an agent file (keys at the top level) or a combined config, in
    /// which case the `[agent]` table is used.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text)?;
        let cfg: AgentConfig = match table.get("agent") {
            Some(toml::Value::Table(agent)) => agent.clone().try_into()?,
            Some(_) => return Err(invalid("agent", "must be a table")),
            None => table.try_into()?,
        };
        Ok(cfg)
    }

    /// Reads and parses a TOML file (see [`AgentConfig::from_toml_str`]).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_toml_str(&text)
    }

    /// The token to send: `token`, else `CONVOY_EXECUTOR_TOKEN`, else none.
    pub fn resolved_token(&self) -> Option<String> {
        self.token.clone().filter(|t| !t.is_empty()).or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()))
    }

    /// Checks every key; the error names the first offending one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.servers.is_empty() {
            return Err(invalid("servers", "at least one server address is needed, e.g. [\"http://127.0.0.1:8080\"]"));
        }
        for (i, s) in self.servers.iter().enumerate() {
            let key = format!("servers[{i}]");
            let url = reqwest::Url::parse(s).map_err(|e| invalid(&key, format!("{s:?} is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(&key, format!("{s:?}: the scheme must be http or https")));
            }
            if url.host_str().is_none_or(str::is_empty) {
                return Err(invalid(&key, format!("{s:?} has no host")));
            }
            if url.query().is_some() || url.fragment().is_some() {
                return Err(invalid(&key, format!("{s:?}: a base URL takes no query or fragment")));
            }
        }
        if !(1..=60).contains(&self.poll_wait) {
            return Err(invalid("poll_wait", format!("{} is outside 1..=60 seconds", self.poll_wait)));
        }
        if self.max_leases == 0 {
            return Err(invalid("max_leases", "must be at least 1"));
        }
        if self.event_batch == 0 {
            return Err(invalid("event_batch", "must be at least 1"));
        }
        if self.max_backoff == 0 {
            return Err(invalid("max_backoff", "must be at least 1 second"));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        match self.runtime {
            RuntimeKind::Process => self.validate_process(),
            RuntimeKind::Fake => self.validate_fake(),
            RuntimeKind::Kubernetes => self.validate_kubernetes(),
        }
    }

    fn validate_process(&self) -> Result<(), ConfigError> {
        if let Some((name, v)) = self.process.allocatable.iter().flat_map(|a| a.iter()).find(|(_, v)| *v < 0) {
            return Err(invalid(&format!("process.allocatable.{name}"), format!("{v} is negative")));
        }
        if let Some(p) = &self.process.supervisor
            && !p.is_file()
        {
            return Err(invalid(
                "process.supervisor",
                format!("{} is not a file (it must be the convoy executable)", p.display()),
            ));
        }
        if self.process.keep_finished_hours == 0 {
            return Err(invalid("process.keep_finished_hours", "must be at least 1"));
        }
        Ok(())
    }

    fn validate_fake(&self) -> Result<(), ConfigError> {
        if self.fake.node_groups.is_empty() {
            return Err(invalid("fake.node_groups", "the fake runtime needs at least one node group"));
        }
        let mut prefixes = std::collections::HashSet::new();
        for (i, g) in self.fake.node_groups.iter().enumerate() {
            let key = format!("fake.node_groups[{i}]");
            if g.count == 0 {
                return Err(invalid(&format!("{key}.count"), "must be at least 1"));
            }
            let sample = format!("{}-{}", g.name_prefix, g.count - 1);
            if let Err(e) = NodeName::new(&sample) {
                return Err(invalid(&format!("{key}.name_prefix"), e.to_string()));
            }
            if !prefixes.insert(g.name_prefix.as_str()) {
                return Err(invalid(
                    &format!("{key}.name_prefix"),
                    format!("{:?} is used by two groups", g.name_prefix),
                ));
            }
            if g.allocatable.is_zero() {
                return Err(invalid(
                    &format!("{key}.allocatable"),
                    "a node must offer something, e.g. { cpu = \"8\", memory = \"32Gi\" }",
                ));
            }
        }
        Ok(())
    }

    fn validate_kubernetes(&self) -> Result<(), ConfigError> {
        let k = &self.kubernetes;
        if !is_dns_label(&k.namespace) {
            return Err(invalid("kubernetes.namespace", format!("{:?} is not a valid namespace name", k.namespace)));
        }
        if !is_label_value(self.executor.as_str()) {
            return Err(invalid(
                "executor",
                format!(
                    "{:?} must also be a valid Kubernetes label value (at most 63 letters, digits, '-', '_', '.') for the kubernetes runtime",
                    self.executor.as_str()
                ),
            ));
        }
        if k.pool_label.is_empty() {
            return Err(invalid("kubernetes.pool_label", "must not be empty"));
        }
        if k.inventory_refresh_seconds == 0 {
            return Err(invalid("kubernetes.inventory_refresh_seconds", "must be at least 1"));
        }
        Ok(())
    }
}

/// True if `s` is a valid Kubernetes label value (empty is valid).
pub fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// This machine's host name, if it is a valid node name.
pub fn host_name() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    NodeName::new(h).is_ok().then(|| h.to_string())
}

fn default_executor() -> ExecutorName {
    host_name().and_then(|h| ExecutorName::new(&h).ok()).unwrap_or_else(ExecutorName::default_executor)
}

fn default_node_name() -> NodeName {
    host_name()
        .and_then(|h| NodeName::new(&h).ok())
        .unwrap_or_else(|| NodeName::new("localhost").expect("a valid node name literal"))
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("convoy-agent")
}
fn default_poll_wait() -> u64 {
    20
}
fn default_max_leases() -> u32 {
    1000
}
fn default_event_batch() -> usize {
    1000
}
fn default_max_backoff() -> u64 {
    30
}
fn default_keep_finished_hours() -> u64 {
    24
}
fn default_fake_prefix() -> String {
    "fake".to_string()
}
fn default_namespace() -> String {
    "default".to_string()
}
fn default_pool_label() -> String {
    "convoy.io/pool".to_string()
}
fn default_inventory_refresh() -> u64 {
    10
}
fn default_true() -> bool {
    true
}
fn default_force_delete_after() -> u64 {
    30
}
fn default_log_tail_lines() -> u32 {
    100
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_agent_file_and_combined_section() {
        let own = AgentConfig::from_toml_str(
            r#"
            executor = "rack-1"
            servers = ["http://127.0.0.1:8080"]
            runtime = "fake"
            [[fake.node_groups]]
            count = 3
            name_prefix = "gpu"
            allocatable = { cpu = "8", memory = "32Gi", "nvidia.com/gpu" = "2" }
            taints = [{ key = "gpu", value = "true", effect = "NoSchedule" }]
            "#,
        )
        .expect("agent file parses");
        own.validate().expect("valid");
        assert_eq!(own.runtime, RuntimeKind::Fake);
        assert_eq!(own.fake.node_groups[0].allocatable.get("nvidia.com/gpu"), 2000);
        assert_eq!(own.poll_wait, 20);

        let combined = AgentConfig::from_toml_str(
            r#"
            [server]
            listen = "0.0.0.0:8080"
            [agent]
            executor = "bare"
            servers = ["http://a:1", "https://b:2/base"]
            [agent.process]
            pool = "cpu"
            allocatable = { cpu = "2" }
            "#,
        )
        .expect("combined file parses");
        combined.validate().expect("valid");
        assert_eq!(combined.process.pool.as_str(), "cpu");
        assert_eq!(combined.servers.len(), 2);
    }

    #[test]
    fn errors_name_the_key() {
        let mut c = AgentConfig::new(vec![]);
        assert!(c.validate().unwrap_err().to_string().contains("`servers`"));
        c.servers = vec!["ftp://x".into()];
        assert!(c.validate().unwrap_err().to_string().contains("`servers[0]`"));
        c.servers = vec!["http://x:1".into()];
        c.poll_wait = 0;
        assert!(c.validate().unwrap_err().to_string().contains("`poll_wait`"));
        c.poll_wait = 5;
        c.runtime = RuntimeKind::Fake;
        assert!(c.validate().unwrap_err().to_string().contains("`fake.node_groups`"));
        c.runtime = RuntimeKind::Kubernetes;
        c.kubernetes.namespace = "Bad_NS".into();
        assert!(c.validate().unwrap_err().to_string().contains("`kubernetes.namespace`"));
        let e = AgentConfig::from_toml_str("servers = [\"http://x\"]\nbogus = 1\n").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = AgentConfig::from_toml_str("executor = \"a b\"\nservers = [\"http://x\"]\n").unwrap_err();
        assert!(e.to_string().contains("executor"), "{e}");
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("abc-1.x_y"));
        assert!(!is_label_value("a:b"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
