//! `[agent.process]`: the process runtime's section (the node this machine is, its supervisor,
//! and how jobs are confined). The limits and the `run_as` rules are [`confine`]'s own types,
//! read here as they are written.

use super::{AgentConfigError, check_reserved_for, host_name, invalid, warn_unusual_resources};
use crate::agent::runtime::process::confine;
use crate::model::duration::serde_text;
use crate::model::{Labels, NodeName, PoolName, QueueName, Resources, Taint};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
    /// How unconfined jobs are supervised: `shared` (a thread each in a supervisor host, the
    /// default) or `per-job` (a process each). Confined jobs are not concerned: their cgroup
    /// slot's holder supervises them, or a process each without a slot. Default: `shared`.
    #[serde(default)]
    pub supervisors: Supervisors,
    /// How long to keep the directories of runs whose result was reported (at least 1s).
    /// Default: 24h. Also read from `keep_finished_hours`, a number of hours, its older spelling.
    #[serde(with = "serde_text")]
    pub keep_finished: Duration,
    /// cgroup limits of jobs (`[agent.process.limits]`).
    #[serde(default)]
    pub limits: confine::LimitsConfig,
    /// The node's GPUs (indices or UUIDs, as `CUDA_VISIBLE_DEVICES` takes them). Default: what
    /// `nvidia-smi` lists, none without it.
    #[serde(default)]
    pub gpus: Option<Vec<String>>,
    /// The Unix user jobs run as: a user name, or rules mapping queues to users. Default: the
    /// agent's own user.
    #[serde(default)]
    pub run_as: Option<confine::RunAs>,
    /// Let `run_as` name root. Default: false.
    #[serde(default)]
    pub allow_root: bool,
}

/// How the process runtime supervises jobs that run unconfined (confined jobs are supervised by
/// their cgroup slot's holder, inside the slot, or by a process each without one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Supervisors {
    /// A thread each in a supervisor host process: a fraction of a process's cost per job; the
    /// runs of one host share its fate if it is killed.
    #[default]
    Shared,
    /// A supervisor process each: one killed supervisor costs one run.
    PerJob,
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
    #[serde(default)]
    supervisors: Supervisors,
    #[serde(default, deserialize_with = "some_duration")]
    keep_finished: Option<Duration>,
    #[serde(default)]
    keep_finished_hours: Option<u64>,
    #[serde(default)]
    limits: confine::LimitsConfig,
    #[serde(default)]
    gpus: Option<Vec<String>>,
    #[serde(default)]
    run_as: Option<confine::RunAs>,
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
            supervisors: f.supervisors,
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
            supervisors: Supervisors::default(),
            keep_finished: default_keep_finished(),
            limits: Default::default(),
            gpus: None,
            run_as: None,
            allow_root: false,
        }
    }
}

impl ProcessConfig {
    /// Checks the section's keys (`agent.process.*`); the error names the first offending one.
    pub(super) fn validate(&self) -> Result<(), AgentConfigError> {
        check_reserved_for("process", &self.reserved_for, &self.labels)?;
        if let Some((name, v)) = self.allocatable.iter().flat_map(|a| a.iter()).find(|(_, v)| *v < 0) {
            return Err(invalid(&format!("process.allocatable.{name}"), format!("{v} is negative")));
        }
        if let Some(a) = &self.allocatable {
            warn_unusual_resources("process.allocatable", a);
        }
        if let Some(p) = &self.supervisor
            && !p.is_file()
        {
            return Err(invalid(
                "process.supervisor",
                format!("{} is not a file (it must be the convoy executable)", p.display()),
            ));
        }
        if self.keep_finished < Duration::from_secs(1) {
            return Err(invalid("process.keep_finished", "must be at least 1s"));
        }
        if let Some(r) = &self.run_as {
            r.validate().map_err(|(key, msg)| invalid(&key, msg))?;
        }
        let name = &self.limits.cgroup_name;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(invalid("process.limits.cgroup_name", format!("{name:?} must be one directory name")));
        }
        if let Some(i) = self.gpus.iter().flatten().position(|g| g.is_empty() || g.contains([',', ' '])) {
            return Err(invalid(&format!("process.gpus[{i}]"), "must be a GPU index or UUID (no commas or spaces)"));
        }
        Ok(())
    }
}

fn default_node_name() -> NodeName {
    host_name()
        .and_then(|h| NodeName::new(&h).ok())
        .unwrap_or_else(|| NodeName::new("localhost").expect("a valid node name literal"))
}

fn default_keep_finished() -> Duration {
    Duration::from_secs(24 * 3600)
}
