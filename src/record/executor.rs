//! Stored executors: the `executors` rows (an executor's nodes), the node reports of the log's
//! executor command, and the `node_health` rows (failures counted against a node, its
//! quarantine).

use super::job::QuantitiesRecord;
use super::placement::TaintRecord;
use crate::model::{ExecutorName, JobId, Node, NodeFault, NodeName, PoolName, Resources};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A node of an executor. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Node name within its executor.
    pub name: NodeName,
    /// Pool it belongs to.
    pub pool: PoolName,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<TaintRecord>,
    /// What the node offers in all.
    pub allocatable: QuantitiesRecord,
    /// What things Convoy did not start use.
    pub unallocatable: QuantitiesRecord,
    /// Cordoned.
    pub unschedulable: bool,
}

impl From<Node> for NodeRecord {
    fn from(n: Node) -> Self {
        // The executor is the record's owner, not stored per node.
        let Node { name, executor: _, pool, labels, taints, allocatable, unallocatable, unschedulable } = n;
        NodeRecord {
            name,
            pool,
            labels,
            taints: taints.into_iter().map(Into::into).collect(),
            allocatable: allocatable.into_map(),
            unallocatable: unallocatable.into_map(),
            unschedulable,
        }
    }
}

impl NodeRecord {
    /// The node, as a node of `executor`.
    pub fn into_node(self, executor: ExecutorName) -> Node {
        let NodeRecord { name, pool, labels, taints, allocatable, unallocatable, unschedulable } = self;
        Node {
            name,
            executor,
            pool,
            labels,
            taints: taints.into_iter().map(Into::into).collect(),
            allocatable: Resources::from_map(allocatable),
            unallocatable: Resources::from_map(unallocatable),
            unschedulable,
        }
    }
}

/// An executor and its nodes (`executors` rows). Format: state schema 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorRecord {
    /// The executor's name.
    pub name: ExecutorName,
    /// Its nodes as last reported.
    pub nodes: Vec<NodeRecord>,
    /// When they were last reported (ms since the epoch, the leader's clock).
    pub updated_at_ms: i64,
}

/// Why a run failed for a reason of its node. Format: log format 4, state schema 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The variants are `model::NodeFault`'s.
pub enum NodeFaultRecord {
    NotStarted,
    ImagePull,
    NodePressure,
    NodeLost,
}

impl From<NodeFault> for NodeFaultRecord {
    fn from(f: NodeFault) -> Self {
        match f {
            NodeFault::NotStarted => Self::NotStarted,
            NodeFault::ImagePull => Self::ImagePull,
            NodeFault::NodePressure => Self::NodePressure,
            NodeFault::NodeLost => Self::NodeLost,
        }
    }
}

impl From<NodeFaultRecord> for NodeFault {
    fn from(f: NodeFaultRecord) -> Self {
        match f {
            NodeFaultRecord::NotStarted => Self::NotStarted,
            NodeFaultRecord::ImagePull => Self::ImagePull,
            NodeFaultRecord::NodePressure => Self::NodePressure,
            NodeFaultRecord::NodeLost => Self::NodeLost,
        }
    }
}

/// One failure counted against a node. Format: state schema 4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFailureRecord {
    /// When it was reported (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// What went wrong.
    pub fault: NodeFaultRecord,
    /// The job whose run failed.
    pub job_id: JobId,
}

/// A node's quarantine. Format: state schema 4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineRecord {
    /// When it began (ms since the epoch).
    pub since_ms: i64,
    /// When it ends (ms since the epoch).
    pub until_ms: i64,
    /// Why, for people.
    pub reason: String,
}

/// A node's counted failures and its quarantine (`node_health` rows, by executor and node).
/// Format: state schema 4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHealthRecord {
    /// The node's executor.
    pub executor: ExecutorName,
    /// The node.
    pub node: NodeName,
    /// Failures counted since the last quarantine (or lift), oldest first.
    pub failures: Vec<NodeFailureRecord>,
    /// The latest quarantine, possibly over.
    pub quarantine: Option<QuarantineRecord>,
}
