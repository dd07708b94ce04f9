//! Stored executors: the `executors` rows (an executor's nodes), and the node reports of the
//! log's executor command.

use super::job::QuantitiesRecord;
use super::placement::TaintRecord;
use crate::model::{ExecutorName, Node, NodeName, PoolName, Resources};
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
