//! A simulated job: where it is, and its dependencies and retry policy with their progress.

use crate::model::{DependencyCondition, RetryPolicy};
use crate::scheduler::JobInfo;
use std::sync::Arc;

/// State of a simulated job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SimState {
    /// Waiting to be scheduled.
    Queued,
    /// Placed on a node.
    Running,
    /// Evicted by the scheduler; it is not queued again.
    Preempted,
    /// Failed by the scheduler (e.g. a gang member beyond what fit), or by a round's `fail`.
    Failed,
    /// Finished by a round's `finish`.
    Succeeded,
    /// Cancelled by a round's `cancel`.
    Cancelled,
}

impl SimState {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            SimState::Queued => "queued",
            SimState::Running => "running",
            SimState::Preempted => "preempted",
            SimState::Failed => "failed",
            SimState::Succeeded => "succeeded",
            SimState::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct SimJob {
    pub(super) name: String,
    pub(super) info: Arc<JobInfo>,
    pub(super) state: SimState,
    /// Index into the node list while running.
    pub(super) node: Option<usize>,
    pub(super) reason: Option<String>,
    /// When it was last placed (the round's time).
    pub(super) leased_at_ms: i64,
    /// When it was submitted (the round's time, or the entry's `queued_at_seconds`).
    pub(super) queued_at_ms: i64,
    /// When its run began running, if the scenario's `running` entry says (its deadline counts
    /// from it); `None` once the simulation places it again.
    pub(super) running_at_ms: Option<i64>,
    /// Its deadline in ms, if the scenario gives one.
    pub(super) deadline_ms: Option<i64>,
    /// Dependencies and retry policy, if it has any.
    pub(super) policies: Option<Box<SimPolicies>>,
}

/// A simulated job's dependencies and retry policy, with their progress.
#[derive(Debug, Clone, Default)]
pub(super) struct SimPolicies {
    /// Jobs waited for (by index), the outcome waited for, and whether it came.
    pub(super) deps: Vec<(usize, DependencyCondition, bool)>,
    /// When a failed run is retried.
    pub(super) retry: Option<RetryPolicy>,
    /// Runs that failed so far.
    pub(super) failed: u32,
}

impl SimPolicies {
    /// True while a dependency is not met.
    pub(super) fn waiting(&self) -> bool {
        self.deps.iter().any(|d| !d.2)
    }
}
