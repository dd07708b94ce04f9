//! Each node's verdict on one job at the start of a cycle: why it could not take the job, or
//! what it had free. What `convoy replay --job` prints for the nodes of the job's pools.

use super::conditions::{free_on, held_by_node};
use crate::model::{ExecutorName, NodeName, PoolName, Resources};
use crate::scheduler::config::SchedulerConfig;
use crate::scheduler::node_types::mismatch;
use crate::scheduler::snapshot::{JobInfo, Snapshot};
use std::fmt;

/// One node of the job's pools, as the cycle found it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeVerdict {
    /// The node's executor.
    pub executor: ExecutorName,
    /// The node.
    pub node: NodeName,
    /// Its pool.
    pub pool: PoolName,
    /// What it said about the job.
    pub verdict: Verdict,
}

/// Why a node could not take the job, or that it could.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Cordoned.
    Cordoned,
    /// Quarantined until this time (ms since the epoch).
    Quarantined {
        /// When the quarantine ends.
        until_ms: i64,
    },
    /// The job's selector, affinity or tolerations rule it out (the words say which).
    Mismatch(String),
    /// Too little free, before any preemption: what the job asks for and what was free.
    Short {
        /// What was free.
        free: Resources,
    },
    /// Enough free for the job, before anything the cycle placed.
    Fits {
        /// What was free.
        free: Resources,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Cordoned => f.write_str("cordoned"),
            Verdict::Quarantined { until_ms } => write!(f, "quarantined until {until_ms} ms"),
            Verdict::Mismatch(words) => write!(f, "does not match: the job's requirements {words}"),
            Verdict::Short { free } => write!(f, "too little free: {free}"),
            Verdict::Fits { free } => write!(f, "fits: {free} free"),
        }
    }
}

/// The verdict of every node of `job`'s pools (every node when it names none), in the snapshot's
/// node order, at `now_ms` under `cfg` (quarantines end by the clock).
pub fn node_verdicts(snapshot: &Snapshot, cfg: &SchedulerConfig, job: &JobInfo, now_ms: i64) -> Vec<NodeVerdict> {
    let held = held_by_node(snapshot);
    let quarantined = snapshot.quarantined_at(cfg, now_ms);
    snapshot
        .nodes
        .iter()
        .filter(|n| job.pools.is_empty() || job.pools.contains(&n.pool))
        .map(|n| {
            let verdict = if n.unschedulable {
                Verdict::Cordoned
            } else if quarantined.contains(&(n.executor.as_str(), n.name.as_str())) {
                let until_ms = snapshot.quarantined.get(&(n.executor.clone(), n.name.clone())).copied().unwrap_or(0);
                Verdict::Quarantined { until_ms }
            } else if let Some(words) = mismatch(n, &job.requirements) {
                Verdict::Mismatch(words)
            } else {
                let free = free_on(n, &held);
                if job.requirements.requests.fits_in(&free) { Verdict::Fits { free } } else { Verdict::Short { free } }
            };
            NodeVerdict { executor: n.executor.clone(), node: n.name.clone(), pool: n.pool.clone(), verdict }
        })
        .collect()
}
