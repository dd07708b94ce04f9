//! Agent configuration: a TOML file of its own, or the `[agent]` section of a combined file that
//! `convoy server` reads too.
//!
//! Every key has a default except `servers`; durations are text (`"20s"`, `"24h"`) or a number of
//! seconds. Keys are named `agent.<key>` in errors whichever file they came from, and `validate`
//! checks the rules serde cannot, naming the first offending key.

use crate::model::duration::{format_duration, serde_text};
use crate::model::{ExecutorName, Labels, NodeName, PoolName, QueueName, RESERVED_FOR_LABEL, Resources, Taint};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable read when `token` is not set in the file.
pub const TOKEN_ENV: &str = "CONVOY_EXECUTOR_TOKEN";

/// What `validate` names as the origin of its errors (the file and the flags together).
const VALIDATED: &str = "agent config";

/// Why an agent configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentConfigError {
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

/// An error about `agent.<key>`.
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

/// `[agent.process]`: run jobs as local processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "ProcessFile")]
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
    /// Queues the node is earmarked for, e.g. `["ml", "physics"]`: their jobs are at home on it,
    /// other queues' jobs may use it only as preemptible guests. Sent as the node label
    /// `convoy.io/reserved-for`. Default: none (not earmarked).
    #[serde(default)]
    pub reserved_for: Vec<QueueName>,
    /// Overrides of what the node offers, e.g. `{ cpu = "6", memory = "16Gi", "nvidia.com/gpu" = "1" }`;
    /// resources not named here are read from the OS (cpu and memory).
    #[serde(default)]
    pub allocatable: Option<Resources>,
    /// The `convoy` executable the agent starts as its supervisor spawner (`convoy
    /// agent-supervise --spawner`, which forks a supervisor per job). Default: the running
    /// executable.
    #[serde(default)]
    pub supervisor: Option<PathBuf>,
    /// How long to keep the directories of runs whose result was reported (at least 1s).
    /// Default: 24h. Also read from `keep_finished_hours`, a number of hours, its older spelling.
    #[serde(with = "serde_text")]
    pub keep_finished: Duration,
    /// cgroup limits of jobs (`[agent.process.limits]`).
    #[serde(default)]
    pub limits: crate::agent::runtime::process::confine::LimitsConfig,
    /// The node's GPUs (indices or UUIDs, as `CUDA_VISIBLE_DEVICES` takes them). Default: what
    /// `nvidia-smi` lists, none without it.
    #[serde(default)]
    pub gpus: Option<Vec<String>>,
    /// The Unix user jobs run as: a user name, or rules mapping queues to users. Default: the
    /// agent's own user.
    #[serde(default)]
    pub run_as: Option<crate::agent::runtime::process::confine::RunAs>,
    /// Let `run_as` name root. Default: false.
    #[serde(default)]
    pub allow_root: bool,
}

/// `[agent.process]` as written: [`ProcessConfig`] with `keep_finished_hours` (a number of
/// hours), the older spelling of `keep_finished`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessFile {
    #[serde(default = "default_node_name")]
    node: NodeName,
    #[serde(default = "PoolName::default_pool")]
    pool: PoolName,
    #[serde(default)]
    labels: Labels,
    #[serde(default)]
    taints: Vec<Taint>,
    #[serde(default)]
    reserved_for: Vec<QueueName>,
    #[serde(default)]
    allocatable: Option<Resources>,
    #[serde(default)]
    supervisor: Option<PathBuf>,
    #[serde(default, deserialize_with = "some_duration")]
    keep_finished: Option<Duration>,
    #[serde(default)]
    keep_finished_hours: Option<u64>,
    #[serde(default)]
    limits: crate::agent::runtime::process::confine::LimitsConfig,
    #[serde(default)]
    gpus: Option<Vec<String>>,
    #[serde(default)]
    run_as: Option<crate::agent::runtime::process::confine::RunAs>,
    #[serde(default)]
    allow_root: bool,
}

impl TryFrom<ProcessFile> for ProcessConfig {
    type Error = String;
    fn try_from(f: ProcessFile) -> Result<Self, String> {
        let keep_finished = match (f.keep_finished, f.keep_finished_hours) {
            (Some(_), Some(_)) => {
                return Err("keep_finished and keep_finished_hours (its older spelling) are both set; keep one".into());
            }
            (Some(d), None) => d,
            (None, Some(hours)) => Duration::from_secs(hours.saturating_mul(3600)),
            (None, None) => default_keep_finished(),
        };
        Ok(ProcessConfig {
            node: f.node,
            pool: f.pool,
            labels: f.labels,
            taints: f.taints,
            reserved_for: f.reserved_for,
            allocatable: f.allocatable,
            supervisor: f.supervisor,
            keep_finished,
            limits: f.limits,
            gpus: f.gpus,
            run_as: f.run_as,
            allow_root: f.allow_root,
        })
    }
}

/// A duration key that may be absent.
fn some_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    serde_text::deserialize(d).map(Some)
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            node: default_node_name(),
            pool: PoolName::default_pool(),
            labels: Labels::new(),
            taints: Vec::new(),
            reserved_for: Vec::new(),
            allocatable: None,
            supervisor: None,
            keep_finished: default_keep_finished(),
            limits: Default::default(),
            gpus: None,
            run_as: None,
            allow_root: false,
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
    /// Record each run's start and end in `<data_dir>/fake-runs.jsonl`, so that a restarted
    /// agent finds its runs again (as the process runtime does from its run directories).
    /// Default: false (runs live in memory, and a restart loses them as a node loss would).
    #[serde(default)]
    pub journal: bool,
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
    /// Queues the nodes are earmarked for (as `[agent.process] reserved_for`). Default: none.
    #[serde(default)]
    pub reserved_for: Vec<QueueName>,
}

/// `[agent.kubernetes]`: run jobs as pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Namespace the pods (and their services and ingresses) of jobs that name no namespace of
    /// their own are created in. Default: `default`.
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
    /// Time between refreshes of the node inventory (nodes and foreign pods; at least 1s).
    /// Default: 10s. Also read from `inventory_refresh_seconds`, its older spelling.
    #[serde(default = "default_inventory_refresh", alias = "inventory_refresh_seconds", with = "serde_text")]
    pub inventory_refresh: Duration,
    /// Delete a pod once its result was reported. Default: true.
    #[serde(default = "default_true")]
    pub delete_finished_pods: bool,
    /// Time past a kill's grace period after which a pod still present is deleted with grace
    /// period 0 (a node that does not answer). Default: 30s. Also read from
    /// `force_delete_after_seconds`, its older spelling.
    #[serde(default = "default_force_delete_after", alias = "force_delete_after_seconds", with = "serde_text")]
    pub force_delete_after: Duration,
    /// Lines of the pod's log sent with its final event (0: none). Default: 100.
    #[serde(default = "default_log_tail_lines")]
    pub log_tail_lines: u32,
    /// `[agent.kubernetes.ingress]`: what the agent adds to the ingresses it creates (Armada's
    /// executor ingress settings).
    #[serde(default)]
    pub ingress: IngressDefaults,
}

/// `[agent.kubernetes.ingress]`: the agent's part of a job's ingresses. The hosts and TLS secrets
/// of the ingresses built from Armada's ingress configs (docs/armada-grpc.md) end with these
/// suffixes, and every ingress the agent creates carries these annotations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressDefaults {
    /// DNS suffix of the hosts (`<port>-<pod>.<namespace>.<host_suffix>`), e.g.
    /// `jobs.example.com`; where the placeholder `{host_suffix}` stands. Default: none (the host
    /// ends with the namespace).
    #[serde(default)]
    pub host_suffix: Option<String>,
    /// Suffix of the default TLS secret name (`<namespace>-<cert_name_suffix>`) of an ingress
    /// config with TLS and no `cert_name`; where `{cert_suffix}` stands. Default: none (the
    /// secret is named after the namespace).
    #[serde(default)]
    pub cert_name_suffix: Option<String>,
    /// Annotations set on every ingress the agent creates (e.g. the ingress class); an
    /// ingress's own annotation of the same key wins.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespace: default_namespace(),
            kubeconfig: None,
            context: None,
            pool_label: default_pool_label(),
            inventory_refresh: default_inventory_refresh(),
            delete_finished_pods: true,
            force_delete_after: default_force_delete_after(),
            log_tail_lines: default_log_tail_lines(),
            ingress: IngressDefaults::default(),
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
        let syntax =
            |e: toml::de::Error| AgentConfigError::Parse { origin: origin.to_string(), message: e.to_string() };
        let table: toml::Table = toml::from_str(text).map_err(syntax)?;
        let de = toml::Deserializer::parse(text).map_err(syntax)?;
        let keyed = |e: serde_path_to_error::Error<toml::de::Error>, prefix: &str| {
            let path = e.path().to_string();
            let key = match (prefix, path.as_str()) {
                ("", p) => p.to_string(),
                (pre, ".") => pre.to_string(),
                (pre, p) => format!("{pre}.{p}"),
            };
            AgentConfigError::Invalid { origin: origin.to_string(), key, message: e.into_inner().message().to_string() }
        };
        if table.contains_key("agent") {
            let file: CombinedFile = serde_path_to_error::deserialize(de).map_err(|e| keyed(e, ""))?;
            Ok(file.agent)
        } else {
            serde_path_to_error::deserialize(de).map_err(|e| keyed(e, "agent"))
        }
    }

    /// Parses TOML text (see [`AgentConfig::parse`]).
    pub fn from_toml_str(text: &str) -> Result<Self, AgentConfigError> {
        Self::parse(text, VALIDATED)
    }

    /// Reads and parses a TOML file (see [`AgentConfig::parse`]).
    pub fn from_file(path: &Path) -> Result<Self, AgentConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AgentConfigError::Read { path: path.to_path_buf(), source })?;
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
            RuntimeKind::Process => self.validate_process(),
            RuntimeKind::Fake => self.validate_fake(),
            RuntimeKind::Kubernetes => self.validate_kubernetes(),
        }
    }

    fn validate_process(&self) -> Result<(), AgentConfigError> {
        check_reserved_for("process", &self.process.reserved_for, &self.process.labels)?;
        if let Some((name, v)) = self.process.allocatable.iter().flat_map(|a| a.iter()).find(|(_, v)| *v < 0) {
            return Err(invalid(&format!("process.allocatable.{name}"), format!("{v} is negative")));
        }
        if let Some(a) = &self.process.allocatable {
            warn_unusual_resources("process.allocatable", a);
        }
        if let Some(p) = &self.process.supervisor
            && !p.is_file()
        {
            return Err(invalid(
                "process.supervisor",
                format!("{} is not a file (it must be the convoy executable)", p.display()),
            ));
        }
        if self.process.keep_finished < Duration::from_secs(1) {
            return Err(invalid("process.keep_finished", "must be at least 1s"));
        }
        if let Some(r) = &self.process.run_as {
            r.validate().map_err(|(key, msg)| invalid(&key, msg))?;
        }
        let name = &self.process.limits.cgroup_name;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(invalid("process.limits.cgroup_name", format!("{name:?} must be one directory name")));
        }
        if let Some(i) = self.process.gpus.iter().flatten().position(|g| g.is_empty() || g.contains([',', ' '])) {
            return Err(invalid(&format!("process.gpus[{i}]"), "must be a GPU index or UUID (no commas or spaces)"));
        }
        Ok(())
    }

    fn validate_fake(&self) -> Result<(), AgentConfigError> {
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
            check_reserved_for(&key, &g.reserved_for, &g.labels)?;
            warn_unusual_resources(&format!("{key}.allocatable"), &g.allocatable);
            if g.allocatable.is_zero() {
                return Err(invalid(
                    &format!("{key}.allocatable"),
                    "a node must offer something, e.g. { cpu = \"8\", memory = \"32Gi\" }",
                ));
            }
        }
        Ok(())
    }

    fn validate_kubernetes(&self) -> Result<(), AgentConfigError> {
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
        if k.inventory_refresh < Duration::from_secs(1) {
            return Err(invalid("kubernetes.inventory_refresh", "must be at least 1s"));
        }
        if let Some(h) = &k.ingress.host_suffix
            && !(h.len() <= 253 && h.split('.').all(is_dns_label))
        {
            return Err(invalid(
                "kubernetes.ingress.host_suffix",
                format!(
                    "{h:?} is not a DNS name (lower-case labels of letters, digits and '-', e.g. \"jobs.example.com\")"
                ),
            ));
        }
        if let Some(c) = &k.ingress.cert_name_suffix
            && !(c.len() <= 200 && c.split('.').all(is_dns_label))
        {
            return Err(invalid(
                "kubernetes.ingress.cert_name_suffix",
                format!("{c:?} cannot end a Secret name (lower-case letters, digits, '-' and '.')"),
            ));
        }
        Ok(())
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
fn default_keep_finished() -> Duration {
    Duration::from_secs(24 * 3600)
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
fn default_inventory_refresh() -> Duration {
    Duration::from_secs(10)
}
fn default_true() -> bool {
    true
}
fn default_force_delete_after() -> Duration {
    Duration::from_secs(30)
}
fn default_log_tail_lines() -> u32 {
    100
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
    fn ingress_defaults_are_read_and_checked() {
        let mut c = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\nruntime = \"kubernetes\"\n[kubernetes.ingress]\nhost_suffix = \"jobs.example.com\"\ncert_name_suffix = \"wildcard\"\nannotations = { \"kubernetes.io/ingress.class\" = \"nginx\" }\n",
        )
        .unwrap();
        assert_eq!(
            c.kubernetes.ingress,
            IngressDefaults {
                host_suffix: Some("jobs.example.com".into()),
                cert_name_suffix: Some("wildcard".into()),
                annotations: [("kubernetes.io/ingress.class".to_string(), "nginx".to_string())].into(),
            }
        );
        c.validate().unwrap();
        c.kubernetes.ingress.host_suffix = Some(".example.com".into());
        assert!(
            c.validate().unwrap_err().to_string().contains("agent.kubernetes.ingress.host_suffix: \".example.com\"")
        );
        c.kubernetes.ingress.host_suffix = None;
        c.kubernetes.ingress.cert_name_suffix = Some("Tls".into());
        assert!(c.validate().unwrap_err().to_string().contains("agent.kubernetes.ingress.cert_name_suffix: \"Tls\""));
        let e =
            AgentConfig::from_toml_str("servers = [\"http://x\"]\n[kubernetes.ingress]\nhost = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("agent.kubernetes.ingress.host: unknown field"), "{e}");
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

    #[test]
    fn label_values() {
        assert!(is_label_value("abc-1.x_y"));
        assert!(!is_label_value("a:b"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
