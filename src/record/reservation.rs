//! What a leader's scheduling cycle tells the state of node reservations: the changes since its
//! previous cycle, which the state machine records as job events (log format 13).

use crate::model::{ExecutorName, JobId, NodeName, PoolName};
use serde::{Deserialize, Serialize};

/// Nodes held for a job (or a gang's queued members) until it fits. Format: log format 13.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationRecord {
    /// The jobs the nodes are held for (a gang's queued members; the job alone otherwise).
    pub jobs: Vec<JobId>,
    /// The pool of the nodes.
    pub pool: PoolName,
    /// The nodes.
    pub nodes: Vec<ReservedNodeRecord>,
    /// When the jobs are expected to fit (ms since the epoch); none if not known.
    pub expected_start_ms: Option<i64>,
}

/// One reserved node. Format: log format 13.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReservedNodeRecord {
    /// The node's executor.
    pub executor: ExecutorName,
    /// The node.
    pub node: NodeName,
}
