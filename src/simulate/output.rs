//! What `convoy simulate` prints: one JSON document with a record per round.

use crate::model::QueueName;
use crate::scheduler::Decisions;
use serde::Serialize;
use std::collections::BTreeMap;

/// The whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Output {
    /// One record per round, in order.
    pub rounds: Vec<RoundOutput>,
}

/// One round: counts per queue, jobs per node and queue, and every job's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundOutput {
    /// The round's index, from 0.
    pub round: usize,
    /// Jobs placed by the round's cycle, per queue.
    pub scheduled: BTreeMap<QueueName, usize>,
    /// Running jobs the round's cycle preempted, per queue.
    pub preempted: BTreeMap<QueueName, usize>,
    /// Queued jobs the round's cycle failed, per queue.
    pub failed: BTreeMap<QueueName, usize>,
    /// Jobs running after the round, per queue.
    pub running: BTreeMap<QueueName, usize>,
    /// Jobs still queued after the round, per queue.
    pub queued: BTreeMap<QueueName, usize>,
    /// Running jobs per node and queue after the round, every node listed, with `quarantined:
    /// true` for a node under quarantine. Nodes are named `<executor>/<node>` when a node name is
    /// used by several executors.
    pub nodes: BTreeMap<String, NodeOutput>,
    /// Every job submitted so far, by name, as it is after the round.
    pub jobs: BTreeMap<String, JobOutput>,
    /// Finish, cancel or fail entries that did not apply (e.g. finishing a job that is not
    /// running).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// With a queue tree: the effective priority each queue with something to offer showed its
    /// parent at the cycle's first pick (for a top-level queue, the priority the top level
    /// compared). Absent for flat queues.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_priority: BTreeMap<QueueName, i32>,
    /// Nodes held for jobs that waited too long for room (`gang_reservation_after_seconds`), as
    /// the round's cycle left them. Absent when none is held.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<ReservationOutput>,
    /// The raw decisions, for tests.
    #[serde(skip)]
    pub decisions: Option<Decisions>,
}

/// The key of a node's quarantine flag in its record (beside the queues' counts).
pub const QUARANTINED_KEY: &str = "quarantined";

/// One node after the round: its running jobs per queue, and whether it is quarantined. It
/// reads as the map of counts (it dereferences to it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeOutput {
    /// Running jobs per queue.
    #[serde(flatten)]
    pub queues: BTreeMap<QueueName, usize>,
    /// Under quarantine after the round (written only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub quarantined: bool,
}

impl std::ops::Deref for NodeOutput {
    type Target = BTreeMap<QueueName, usize>;

    fn deref(&self) -> &Self::Target {
        &self.queues
    }
}

impl std::ops::DerefMut for NodeOutput {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.queues
    }
}

/// One job after the round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobOutput {
    /// `queued`, `running`, `preempted`, `failed`, `succeeded` or `cancelled`.
    pub state: &'static str,
    /// The node it runs on (named as in [`RoundOutput::nodes`]), while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why it waits, or why it was preempted or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Nodes held for a job or gang after the round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservationOutput {
    /// The job the nodes are held for (a gang's first member).
    pub job: String,
    /// Its gang, for a gang.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
    /// Its queue.
    pub queue: QueueName,
    /// The nodes' pool.
    pub pool: String,
    /// The reserved nodes (named as in [`RoundOutput::nodes`]).
    pub nodes: Vec<String>,
    /// When it is expected to fit there, in seconds of simulated time; absent when the running
    /// jobs' ends are not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_start_seconds: Option<f64>,
    /// Jobs of the round's cycle kept off the reserved nodes.
    pub kept_off: u32,
}
