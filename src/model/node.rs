//! Nodes as reported by agents.

use super::names::{ExecutorName, NodeName, PoolName};
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
