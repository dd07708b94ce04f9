//! Nodes as reported by agents.

use super::names::{ExecutorName, NameError, NodeName, PoolName, QueueName};
use super::placement::{Labels, Taint};
use super::resources::Resources;
use serde::{Deserialize, Serialize};

/// A node of an executor: a Kubernetes node or a bare-metal machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Node name, unique within its executor.
    pub name: NodeName,
    /// The executor that reports the node.
    pub executor: ExecutorName,
    /// Pool the node is scheduled in (default `default`).
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    /// Node labels, which jobs' node selectors and node affinity match.
    #[serde(default)]
    pub labels: Labels,
    /// Node taints: a job is placed here only if it tolerates them (`PreferNoSchedule` excepted).
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// What the node offers in all.
    pub allocatable: Resources,
    /// Resources used by things Convoy did not start (system pods, other workloads).
    #[serde(default)]
    pub unallocatable: Resources,
    /// Cordoned: no new jobs are placed here; running jobs stay.
    #[serde(default)]
    pub unschedulable: bool,
}

impl Node {
    /// What Convoy may use on the node: allocatable minus what others use.
    pub fn capacity(&self) -> Resources {
        let mut c = self.allocatable.clone();
        c.sub(&self.unallocatable);
        c
    }
}

/// Why a run failed (or never started) because of its node rather than the job: such failures
/// count toward the node's quarantine. A job's own failure (non-zero exit, its deadline, its own
/// memory limit, a bad spec) is none of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeFault {
    /// The pod or process never started on the node: the node refused or did not admit it, or
    /// the runtime could not start it there.
    NotStarted,
    /// The node could not pull the job's image.
    ImagePull,
    /// The node ran short of memory (or another resource) and evicted or killed the job.
    NodePressure,
    /// The node went away or shut down under the run.
    NodeLost,
}

impl NodeFault {
    /// Every fault, in order.
    pub const ALL: [NodeFault; 4] =
        [NodeFault::NotStarted, NodeFault::ImagePull, NodeFault::NodePressure, NodeFault::NodeLost];

    /// The fault's name as used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeFault::NotStarted => "not_started",
            NodeFault::ImagePull => "image_pull",
            NodeFault::NodePressure => "node_pressure",
            NodeFault::NodeLost => "node_lost",
        }
    }
}

impl std::fmt::Display for NodeFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Node label that earmarks a node for queues: `convoy.io/reserved-for=<queue>[,<queue>...]`.
/// Jobs of those queues are at home on the node; jobs of other queues may use it only as
/// preemptible guests, preempted as soon as a job at home needs the room. Agents set it from
/// their `reserved_for` keys; the kubernetes runtime reads it from the node's labels, or from the
/// node's annotation of the same name (a Kubernetes label value cannot hold a comma).
pub const RESERVED_FOR_LABEL: &str = "convoy.io/reserved-for";

/// Node label naming the runtime that runs the node's jobs: `process` for the process runtime
/// (which runs `containers[0].command` and nothing else of a pod spec).
pub(crate) const RUNTIME_LABEL: &str = "convoy.io/runtime";

/// Whether a node with these labels runs jobs as processes: its runtime label says so, or (agents
/// from before the runtime label) it has the confinement label only process nodes carry.
pub(crate) fn runs_processes(labels: &Labels) -> bool {
    labels.get(RUNTIME_LABEL).is_some_and(|r| r == "process") || labels.contains_key("convoy.io/confinement")
}

/// The queues named by a `convoy.io/reserved-for` value: names separated by commas, spaces
/// around them ignored. Refuses an empty value, an empty entry and an invalid name.
pub fn parse_reserved_for(value: &str) -> Result<Vec<QueueName>, NameError> {
    let mut out: Vec<QueueName> = Vec::new();
    for part in value.split(',') {
        let name = QueueName::new(part.trim())?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// The `convoy.io/reserved-for` value naming `queues`.
pub fn reserved_for_value(queues: &[QueueName]) -> String {
    queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_for_values_parse() {
        let names = |v: &str| parse_reserved_for(v).map(|q| q.iter().map(|n| n.to_string()).collect::<Vec<_>>());
        assert_eq!(names("A").unwrap(), vec!["A"]);
        assert_eq!(names("ml, physics ,ml").unwrap(), vec!["ml", "physics"]);
        assert!(names("").is_err());
        assert!(names("A,,B").is_err());
        assert_eq!(parse_reserved_for("a b").unwrap_err().value, "a b");
        let queues = parse_reserved_for("x.1,y_2").unwrap();
        assert_eq!(reserved_for_value(&queues), "x.1,y_2");
    }
}
