//! Jobs, runs and events as the control plane stores them.

use super::gang::GangSpec;
use super::names::{ExecutorName, JobId, JobSetName, NodeName, PoolName, PriorityClassName, QueueName, RunId};
use super::requirements::SchedulingRequirements;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Leased,
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Preempted,
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 8] = [
        JobState::Queued,
        JobState::Leased,
        JobState::Pending,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Preempted,
    ];

    /// True once nothing more will happen to the job.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Preempted)
    }

    /// True while the job holds (or is about to hold) resources on a node.
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Leased | JobState::Pending | JobState::Running)
    }

    /// The state's name as used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Leased => "leased",
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Preempted => "preempted",
        }
    }

    /// Parses a state name.
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one attempt to run a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Assigned to a node; the agent has not confirmed it yet.
    Leased,
    Pending,
    Running,
    Succeeded,
    Failed,
    /// Killed because the job was cancelled.
    Cancelled,
    /// Killed because the job was preempted.
    Preempted,
    /// The executor went away, or the pod never started for a reason of the node: the job goes
    /// back to the queue.
    Lost,
}

impl RunState {
    /// True once the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunState::Leased | RunState::Pending | RunState::Running)
    }
}

/// An order to stop a run, waiting for the agent to confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRequest {
    pub at_ms: i64,
    pub grace_period_ms: u64,
    pub reason: String,
}

/// One attempt to run a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub run_id: RunId,
    pub executor: ExecutorName,
    pub node: NodeName,
    pub pool: PoolName,
    pub state: RunState,
    pub leased_at_ms: i64,
    pub pending_at_ms: Option<i64>,
    pub running_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Set when the run must be stopped (cancel, preempt) and the agent has not reported it over.
    pub kill: Option<KillRequest>,
    /// Last lines of output, shipped with the final event.
    pub log_tail: Option<String>,
}

/// A job: its spec, where it is in its life, and its runs (the pod spec is kept apart, see
/// [`JobPayload`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub queue: QueueName,
    pub job_set: JobSetName,
    pub priority: u32,
    pub priority_class: PriorityClassName,
    pub submit_seq: u64,
    pub submitted_at_ms: i64,
    pub client_id: Option<String>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub requirements: SchedulingRequirements,
    pub gang: Option<GangSpec>,
    pub termination_grace_period_ms: u64,
    pub active_deadline_seconds: u64,
    pub state: JobState,
    /// Why the job ended (failed, cancelled, preempted), if it did.
    pub state_reason: Option<String>,
    pub runs: Vec<Run>,
    /// Sequence numbers of this job's events in its job set's stream.
    pub event_seqs: Vec<u64>,
}

impl Job {
    /// The run that is not over, if any (there is at most one).
    pub fn active_run(&self) -> Option<&Run> {
        self.runs.iter().rev().find(|r| !r.state.is_terminal())
    }

    /// Mutable access to the active run.
    pub fn active_run_mut(&mut self) -> Option<&mut Run> {
        self.runs.iter_mut().rev().find(|r| !r.state.is_terminal())
    }

    /// Number of runs that ended as lost or that started (counted against `max_attempted_runs`).
    pub fn attempts(&self) -> usize {
        self.runs.len()
    }
}

/// What the agent needs to start a job, kept apart from the record so indexes never hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPayload {
    /// Kubernetes PodSpec, as JSON text.
    pub pod_spec: String,
    /// Kubernetes Service objects, as JSON text.
    pub services: Vec<String>,
    /// Kubernetes Ingress objects, as JSON text.
    pub ingresses: Vec<String>,
}

/// What happened to a job, appended per (queue, job set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Submitted,
    Queued,
    Leased,
    Pending,
    Running,
    Succeeded,
    Failed,
    CancelRequested,
    Cancelled,
    PreemptRequested,
    Preempted,
    Reprioritized,
    Requeued,
}

/// One event of a job set's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Dense sequence number within the (queue, job set) stream, from 1.
    pub seq: u64,
    pub job_id: JobId,
    pub at_ms: i64,
    pub kind: EventKind,
    pub run_id: Option<RunId>,
    pub message: Option<String>,
}
