//! Agent configuration: a TOML file of its own, or the `[agent]` section of a combined file that
//! `convoy server` reads too.
//!
//! Every key has a default except `servers`; durations are text (`"20s"`, `"24h"`) or a number of
//! seconds. Keys are named `agent.<key>` in errors whichever file they came from, and `validate`
//! checks the rules serde cannot, naming the first offending key.
//!
//! This module holds what every agent reads (the executor's name, the servers, the token and CA,
//! the polling, the file loading and the combined file), and the rules the sections share (key
//! names in errors, node labels, resource names). Each runtime's section is a file beside it:
//! [`ProcessConfig`] (`process.rs`), [`KubernetesConfig`] (`kubernetes.rs`), [`FakeConfig`]
//! (`fake.rs`). They stay here rather than in the runtimes' rooms because they are one file format:
//! one reader finds every key the agent accepts in one folder, the sections share the way errors
//! name their keys, and `convoy server` and the packaging tests read the same format without
//! reaching into a runtime.

mod fake;
mod kubernetes;
mod process;

pub use fake::{FakeConfig, FakeNodeGroup};
pub(crate) use kubernetes::is_label_value;
pub use kubernetes::{IngressDefaults, KubernetesConfig};
pub use process::{ProcessConfig, Supervisors};

use crate::config_file;
use crate::model::duration::{format_duration, serde_text};
use crate::model::{ExecutorName, Labels, NodeName, QueueName, RESERVED_FOR_LABEL, Resources};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable read when `token` is not set in the file.
pub const TOKEN_ENV: &str = "CONVOY_EXECUTOR_TOKEN";

/// What `validate` names as the origin of its errors (the file and the flags together).
const VALIDATED: &str = "agent config";

/// Why an agent configuration was refused: the shape the server's configuration shares
/// ([`crate::config_file`]).
pub use crate::config_file::ConfigFileError as AgentConfigError;

/// Resource names Kubernetes defines (besides `hugepages-<size>`); other resources are
/// extended ones, named `<domain>/<name>` (`nvidia.com/gpu`).
const STANDARD_RESOURCES: [&str; 5] = ["cpu", "memory", "ephemeral-storage", "pods", "storage"];

/// What is odd about a resource name a node offers: not a standard one and not `<domain>/<name>`,
/// so most likely a misspelling (`cpus`) that jobs will never ask for.
pub fn unusual_resource(name: &str) -> Option<String> {
    if STANDARD_RESOURCES.contains(&name) || name.starts_with("hugepages-") || name.contains('/') {
        return None;
    }
    let hint = crate::model::spelling::did_you_mean(name, STANDARD_RESOURCES);
    Some(format!(
        "{name:?} is not a standard resource name{hint} (extended resources are named <domain>/<name>, such as \
         nvidia.com/gpu); jobs that ask for cpu or memory will not count it"
    ))
}

/// Logs a warning for each unusual resource name under `key`.
fn warn_unusual_resources(key: &str, r: &Resources) {
    for (name, _) in r.iter() {
        if let Some(why) = unusual_resource(name.as_str()) {
            tracing::warn!(key = %format!("agent.{key}.{name}"), "{why}");
        }
    }
}

/// An error about `agent.<key>`.
fn invalid(key: &str, message: impl Into<String>) -> AgentConfigError {
    AgentConfigError::Invalid { origin: VALIDATED.to_string(), key: format!("agent.{key}"), message: message.into() }
}

/// A combined file: the agent's section, and the server's sections (which `convoy server` reads
/// and checks; the agent only lets them be).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CombinedFile {
    agent: AgentConfig,
    #[serde(default, rename = "server")]
    _server: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "scheduler")]
    _scheduler: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "auth")]
    _auth: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "cluster")]
    _cluster: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "tls")]
    _tls: Option<serde::de::IgnoredAny>,
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
    /// CA certificates (PEM file) that sign the servers' certificates: the only ones trusted for
    /// `https://` servers. Default: the operating system's trust store.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Directory for the agent's own state (process runtime: one directory per run with the job's
    /// output and exit status). Default: `./convoy-agent`.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Longest the server may hold a lease poll open (1s to 60s). Default: 20s.
    #[serde(default = "default_poll_wait", with = "serde_text")]
    pub poll_wait: Duration,
    /// At most this many new leases per poll answer. Default: 1000.
    #[serde(default = "default_max_leases")]
    pub max_leases: u32,
    /// At most this many run events per `/events` request. Default: 1000.
    #[serde(default = "default_event_batch")]
    pub event_batch: usize,
    /// Longest pause between retries of a failed request (at least 1s). Default: 30s.
    #[serde(default = "default_max_backoff", with = "serde_text")]
    pub max_backoff: Duration,
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

impl AgentConfig {
    /// A configuration with every default and the given servers.
    pub fn new(servers: Vec<String>) -> Self {
        Self {
            executor: default_executor(),
            servers,
            token: None,
            ca: None,
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

    /// Parses TOML text: either an agent file (keys at the top level) or a combined file, in
    /// which case its `[agent]` section is used. Errors name `origin`.
    pub fn parse(text: &str, origin: &str) -> Result<Self, AgentConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| AgentConfigError::syntax(origin, e))?;
        if table.contains_key("agent") {
            let file: CombinedFile = config_file::deserialize(text, origin, "")?;
            Ok(file.agent)
        } else {
            config_file::deserialize(text, origin, "agent")
        }
    }

    /// Parses TOML text (see [`AgentConfig::parse`]).
    pub fn from_toml_str(text: &str) -> Result<Self, AgentConfigError> {
        Self::parse(text, VALIDATED)
    }

    /// Reads and parses a TOML file (see [`AgentConfig::parse`]).
    pub fn from_file(path: &Path) -> Result<Self, AgentConfigError> {
        let text = config_file::read(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The token to send: `token`, else `CONVOY_EXECUTOR_TOKEN`, else none.
    pub fn resolved_token(&self) -> Option<String> {
        self.token.clone().filter(|t| !t.is_empty()).or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()))
    }

    /// Checks every key; the error names the first offending one.
    pub fn validate(&self) -> Result<(), AgentConfigError> {
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
        if let Some(ca) = &self.ca {
            crate::certs::client_roots(ca).map_err(|e| invalid("ca", e.to_string()))?;
        }
        if let Some(t) = &self.token {
            crate::model::placeholder::refuse("token", t).map_err(|e| invalid("token", e.message))?;
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.poll_wait) {
            return Err(invalid("poll_wait", format!("{} is outside 1s to 60s", format_duration(self.poll_wait))));
        }
        if self.max_leases == 0 {
            return Err(invalid("max_leases", "must be at least 1"));
        }
        if self.event_batch == 0 {
            return Err(invalid("event_batch", "must be at least 1"));
        }
        if self.max_backoff < Duration::from_secs(1) {
            return Err(invalid("max_backoff", "must be at least 1s"));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        match self.runtime {
            RuntimeKind::Process => self.process.validate(),
            RuntimeKind::Fake => self.fake.validate(),
            RuntimeKind::Kubernetes => self.kubernetes.validate(&self.executor),
        }
    }
}

/// `reserved_for` of `[agent.<section>]` and the node labels beside it may not both earmark the
/// node.
fn check_reserved_for(section: &str, reserved_for: &[QueueName], labels: &Labels) -> Result<(), AgentConfigError> {
    if !reserved_for.is_empty() && labels.contains_key(RESERVED_FOR_LABEL) {
        return Err(invalid(
            &format!("{section}.reserved_for"),
            format!("the labels set {RESERVED_FOR_LABEL} too; earmark the node in one place"),
        ));
    }
    if let Some(value) = labels.get(RESERVED_FOR_LABEL) {
        crate::model::parse_reserved_for(value)
            .map_err(|e| invalid(&format!("{section}.labels.\"{RESERVED_FOR_LABEL}\""), e.to_string()))?;
    }
    Ok(())
}

/// A node's labels as the agent reports them: `labels`, with `reserved_for` as the
/// `convoy.io/reserved-for` label.
pub fn node_labels(labels: &Labels, reserved_for: &[QueueName]) -> Labels {
    let mut out = labels.clone();
    if !reserved_for.is_empty() {
        out.insert(RESERVED_FOR_LABEL.to_string(), crate::model::reserved_for_value(reserved_for));
    }
    out
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

fn default_data_dir() -> PathBuf {
    PathBuf::from("convoy-agent")
}
fn default_poll_wait() -> Duration {
    Duration::from_secs(20)
}
fn default_max_leases() -> u32 {
    1000
}
fn default_event_batch() -> usize {
    1000
}
fn default_max_backoff() -> Duration {
    Duration::from_secs(30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_resource_names_of_a_node_are_noticed() {
        let w = unusual_resource("cpus").expect("a warning");
        assert!(w.contains("\"cpus\"") && w.contains("did you mean \"cpu\"?"), "{w}");
        for fine in ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu", "example.org/fpga"] {
            assert_eq!(unusual_resource(fine), None, "{fine}");
        }
    }

    #[test]
    fn an_example_placeholder_token_is_refused() {
        let mut c = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\nruntime = \"fake\"\n[[fake.node_groups]]\ncount = 1\nallocatable = { cpu = \"8\" }\n",
        )
        .unwrap();
        c.validate().unwrap();
        c.token = Some("replace-with-a-long-random-agent-token".into());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("agent.token") && e.contains("placeholder"), "{e}");
    }

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
        assert_eq!(own.poll_wait, Duration::from_secs(20));

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
        assert!(c.validate().unwrap_err().to_string().contains("agent.servers:"));
        c.servers = vec!["ftp://x".into()];
        assert!(c.validate().unwrap_err().to_string().contains("agent.servers[0]:"));
        c.servers = vec!["http://x:1".into()];
        c.poll_wait = Duration::ZERO;
        assert!(c.validate().unwrap_err().to_string().contains("agent.poll_wait:"));
        c.poll_wait = Duration::from_secs(5);
        c.runtime = RuntimeKind::Fake;
        assert!(c.validate().unwrap_err().to_string().contains("agent.fake.node_groups:"));
        c.runtime = RuntimeKind::Kubernetes;
        c.kubernetes.namespace = "Bad_NS".into();
        assert!(c.validate().unwrap_err().to_string().contains("agent.kubernetes.namespace:"));
        let e = AgentConfig::from_toml_str("servers = [\"http://x\"]\nbogus = 1\n").unwrap_err();
        assert!(e.to_string().contains("agent.bogus: unknown field `bogus`"), "{e}");
        let e = AgentConfig::from_toml_str("executor = \"a b\"\nservers = [\"http://x\"]\n").unwrap_err();
        assert!(e.to_string().contains("agent.executor:"), "{e}");
        let e = AgentConfig::parse("[agent]\n[agent.process]\nbogus = 1\n", "f.toml").unwrap_err();
        assert!(e.to_string().starts_with("f.toml: agent.process.bogus: unknown field"), "{e}");
        let e = AgentConfig::parse("[agent]\n[extra]\n", "f.toml").unwrap_err();
        assert!(e.to_string().starts_with("f.toml: extra: unknown field"), "{e}");
        let e = AgentConfig::parse("servers = [\"http://x\"]\n[server]\n", "f.toml").unwrap_err();
        assert!(e.to_string().starts_with("f.toml: agent.server: unknown field"), "{e}");
        let e = AgentConfig::parse("servers = [", "f.toml").unwrap_err();
        assert!(e.to_string().starts_with("f.toml: TOML parse error"), "{e}");
    }

    #[test]
    fn durations_are_text_or_seconds_and_bad_ones_name_the_key() {
        let c = AgentConfig::from_toml_str(
            "poll_wait = \"1m\"\nmax_backoff = 2\n[process]\nkeep_finished = \"2h\"\n[kubernetes]\ninventory_refresh = \"500ms\"\nforce_delete_after = \"1m\"\n",
        )
        .unwrap();
        assert_eq!((c.poll_wait, c.max_backoff), (Duration::from_secs(60), Duration::from_secs(2)));
        assert_eq!(c.process.keep_finished, Duration::from_secs(7200));
        assert_eq!(c.kubernetes.inventory_refresh, Duration::from_millis(500));
        assert_eq!(c.kubernetes.force_delete_after, Duration::from_secs(60));
        for (text, key) in [
            ("poll_wait = \"soon\"\n", "agent.poll_wait"),
            ("[process]\nkeep_finished = \"-1s\"\n", "agent.process.keep_finished"),
            ("[kubernetes]\nforce_delete_after = \"later\"\n", "agent.kubernetes.force_delete_after"),
        ] {
            let e = AgentConfig::from_toml_str(text).unwrap_err().to_string();
            assert!(e.contains(&format!("{key}: duration")), "{text}: {e}");
        }
        let mut c = AgentConfig::new(vec!["http://x".into()]);
        c.poll_wait = Duration::from_secs(61);
        assert!(c.validate().unwrap_err().to_string().contains("agent.poll_wait: 1m 1s is outside 1s to 60s"));
    }

    #[test]
    fn older_spellings_of_duration_keys_still_read() {
        let c = AgentConfig::from_toml_str(
            "poll_wait = 20\nmax_backoff = 30\n[process]\nkeep_finished_hours = 3\n[kubernetes]\ninventory_refresh_seconds = 7\nforce_delete_after_seconds = 0\n",
        )
        .unwrap();
        assert_eq!(c.process.keep_finished, Duration::from_secs(3 * 3600));
        assert_eq!(c.kubernetes.inventory_refresh, Duration::from_secs(7));
        assert_eq!(c.kubernetes.force_delete_after, Duration::ZERO);
        let e = AgentConfig::from_toml_str("[process]\nkeep_finished = \"1h\"\nkeep_finished_hours = 1\n").unwrap_err();
        assert!(e.to_string().contains("agent.process: keep_finished and keep_finished_hours"), "{e}");
    }

    #[test]
    fn supervisors_are_shared_unless_asked_per_job_and_other_values_name_the_key() {
        assert_eq!(AgentConfig::from_toml_str("").unwrap().process.supervisors, Supervisors::Shared);
        let c = AgentConfig::from_toml_str("[process]\nsupervisors = \"per-job\"\n").unwrap();
        assert_eq!(c.process.supervisors, Supervisors::PerJob);
        let e = AgentConfig::from_toml_str("[process]\nsupervisors = \"threads\"\n").unwrap_err().to_string();
        assert!(e.contains("agent.process.supervisors") && e.contains("per-job"), "{e}");
    }

    #[test]
    fn reserved_for_becomes_the_node_label_and_bad_values_name_the_key() {
        let c = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\n[process]\nreserved_for = [\"ml\", \"physics\"]\nlabels = { rack = \"r1\" }\n",
        )
        .unwrap();
        c.validate().unwrap();
        let labels = node_labels(&c.process.labels, &c.process.reserved_for);
        assert_eq!(labels.get(RESERVED_FOR_LABEL).map(String::as_str), Some("ml,physics"));
        assert_eq!(labels.get("rack").map(String::as_str), Some("r1"));
        assert_eq!(node_labels(&Labels::new(), &[]), Labels::new());

        let fake = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\nruntime = \"fake\"\n[[fake.node_groups]]\ncount = 2\nallocatable = { cpu = \"8\" }\nreserved_for = [\"A\"]\n",
        )
        .unwrap();
        fake.validate().unwrap();
        assert_eq!(fake.fake.node_groups[0].reserved_for, vec![QueueName::new("A").unwrap()]);

        let e =
            AgentConfig::from_toml_str("servers = [\"http://x\"]\n[process]\nreserved_for = [\"a b\"]\n").unwrap_err();
        assert!(e.to_string().contains("agent.process.reserved_for[0]: queue name \"a b\" is invalid"), "{e}");
        let both = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\n[process]\nreserved_for = [\"A\"]\nlabels = { \"convoy.io/reserved-for\" = \"B\" }\n",
        )
        .unwrap();
        assert!(both.validate().unwrap_err().to_string().contains("agent.process.reserved_for: the labels set"));
        let bad_label = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\n[process]\nlabels = { \"convoy.io/reserved-for\" = \"A,,B\" }\n",
        )
        .unwrap();
        let e = bad_label.validate().unwrap_err().to_string();
        assert!(e.contains("agent.process.labels.\"convoy.io/reserved-for\": queue name \"\" is invalid"), "{e}");
    }
}
