//! Jobs, runs and events as the control plane stores them.

use super::gang::GangSpec;
use super::names::{ExecutorName, JobId, JobSetName, NodeName, PoolName, PriorityClassName, QueueName, RunId};
use super::requirements::Requirements;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Sequence numbers of a job's events: the first two inline, without an allocation of their own.
pub type EventSeqs = smallvec::SmallVec<[u64; 2]>;

/// Where a job is in its life: `queued`, `leased`, `pending` or `running` until it ends, then
/// `succeeded`, `failed`, `cancelled` or `preempted` for good. A lost run sends the job back to `queued`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting to be scheduled (again, after a lost run).
    Queued,
    /// Placed on a node; its executor has not reported the run yet.
    Leased,
    /// Its executor accepted the run, which has not started yet (e.g. the image is pulling).
    Pending,
    /// Its run is running.
    Running,
    /// Its run exited 0.
    Succeeded,
    /// Its run failed, it ran out of attempts, or the scheduler gave up on it (e.g. a gang member
    /// beyond what fit).
    Failed,
    /// Cancelled by a user or by the deletion of its queue; its run may still be stopping.
    Cancelled,
    /// Preempted by a user or by the scheduler; its run may still be stopping.
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

/// Where one attempt to run a job is: `leased`, `pending` or `running` while it lasts, then
/// `succeeded`, `failed`, `cancelled`, `preempted` or `lost` for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Assigned to a node; the agent has not confirmed it yet.
    Leased,
    /// The executor accepted the run; the job has not started yet.
    Pending,
    /// The job runs.
    Running,
    /// The job exited 0.
    Succeeded,
    /// The job exited non-zero, outlived its deadline, or could not start.
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

/// What a run used, as `sacct` reports it: CPU time (user and system, of the job and the
/// descendants it waited for) and peak memory (the largest resident set of any of its processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunUsage {
    /// CPU time in milliseconds.
    pub cpu_ms: u64,
    /// Peak resident memory in bytes.
    pub peak_memory_bytes: u64,
}

/// An order to stop a run, waiting for the agent to confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRequest {
    /// When the stop was ordered (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// Time between SIGTERM and SIGKILL, in ms: the job's grace period.
    pub grace_period_ms: u64,
    /// Why the run is stopped: the cancel or preemption reason.
    pub reason: String,
}

/// One attempt to run a job. Its times are ms since the epoch, on the leader's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The run's id, chosen by the leader when it placed the run.
    pub run_id: RunId,
    /// Executor the run is leased to.
    pub executor: ExecutorName,
    /// Node of that executor the run is placed on.
    pub node: NodeName,
    /// Pool of the node.
    pub pool: PoolName,
    /// Where the run is.
    pub state: RunState,
    /// When the scheduler placed the run.
    pub leased_at_ms: i64,
    /// When the executor reported the run accepted (or running, if it skipped that step).
    pub pending_at_ms: Option<i64>,
    /// When the executor reported the run running.
    pub running_at_ms: Option<i64>,
    /// When the run ended: reported over by the executor, or lost.
    pub finished_at_ms: Option<i64>,
    /// Exit code of the job's process or main container, when the executor reported one.
    pub exit_code: Option<i32>,
    /// Short cause of the end (`deadline exceeded`, `executor <name> lost`, …).
    pub reason: Option<String>,
    /// Details of the end, as the executor reported them.
    pub message: Option<String>,
    /// Set when the run must be stopped (cancel, preempt) and the agent has not reported it over.
    pub kill: Option<KillRequest>,
    /// Last lines of output, shipped with the final event.
    pub log_tail: Option<String>,
    /// The Kubernetes pod the run became, as its agent reported it (none for processes).
    pub pod: Option<super::RunPod>,
}

/// A job: its spec, where it is in its life, and its runs (the pod spec is kept apart, see
/// [`JobPayload`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The job's id, a ULID chosen by the leader at submission.
    pub id: JobId,
    /// Queue the job was submitted to.
    pub queue: QueueName,
    /// Job set of the job within its queue.
    pub job_set: JobSetName,
    /// Order among the queue's jobs of the same priority class: lower first.
    pub priority: u32,
    /// Priority class, resolved at submission (the configured default if none was named).
    pub priority_class: PriorityClassName,
    /// Global submission sequence number: the last tie-break of queue order.
    pub submit_seq: u64,
    /// When the leader accepted the submission (ms since the epoch).
    pub submitted_at_ms: i64,
    /// The submission's idempotency key, unique within the queue.
    pub client_id: Option<String>,
    /// Annotations as submitted.
    pub annotations: BTreeMap<String, String>,
    /// Labels as submitted.
    pub labels: BTreeMap<String, String>,
    /// What the job needs from a node. Shared: the state interns them, so the live jobs asking
    /// for the same hold one allocation (and the scheduler's view holds it too).
    pub requirements: Requirements,
    /// Gang membership, from the annotations (shared with the scheduler's view of the job; boxed
    /// behind a pointer as most jobs are in no gang).
    pub gang: Option<Arc<GangSpec>>,
    /// Time between SIGTERM and SIGKILL when a run is stopped, in ms (at least 1000).
    pub termination_grace_period_ms: u64,
    /// Longest a run may last, in seconds: the pod spec's `activeDeadlineSeconds` or the server's
    /// default.
    pub active_deadline_seconds: u64,
    /// Where the job is in its life.
    pub state: JobState,
    /// Why the job ended (failed, cancelled, preempted), if it did.
    pub state_reason: Option<String>,
    /// Attempts to run the job, oldest first; at most one is not over.
    pub runs: Vec<Run>,
    /// Sequence numbers of this job's events in its job set's stream. A queued job has two
    /// (submitted, queued), held inline.
    pub event_seqs: EventSeqs,
    /// Kubernetes namespace of the job's pod, services and ingresses; none: the agent's own.
    pub namespace: Option<super::Namespace>,
    /// Its dependencies and retry policy, if it has any (kept in the `job_policies` table).
    pub policies: Option<Box<super::JobPolicies>>,
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

    /// Number of runs so far, the active one included (counted against `max_attempted_runs`).
    pub fn attempts(&self) -> usize {
        self.runs.len()
    }

    /// The first dependency not met yet: while there is one the job waits, out of its queue's
    /// order.
    pub fn waiting_on(&self) -> Option<&super::Dependency> {
        self.policies.as_ref().and_then(|p| p.waiting_on())
    }

    /// Runs that failed (not lost, cancelled or preempted): what a retry policy's
    /// `max_attempts` counts, as Armada counts genuine failures.
    pub fn failed_runs(&self) -> u32 {
        self.runs.iter().filter(|r| r.state == RunState::Failed).count() as u32
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
    /// The job was accepted.
    Submitted,
    /// The job entered its queue (right after `submitted`).
    Queued,
    /// The scheduler placed a run on a node (the message names it).
    Leased,
    /// The executor accepted the run.
    Pending,
    /// The run started.
    Running,
    /// The run exited 0: the job is over.
    Succeeded,
    /// The job failed: its run failed, it ran out of attempts, or the scheduler gave up on it.
    Failed,
    /// A user asked to cancel the job (the message gives the reason).
    CancelRequested,
    /// The job is cancelled: at once if it had no run, else once its run ended.
    Cancelled,
    /// A user or the scheduler preempted the job (the message gives the reason).
    PreemptRequested,
    /// The job's run ended after a preemption: the job is over.
    Preempted,
    /// The job's priority changed (the message gives the new one).
    Reprioritized,
    /// The run was lost (executor gone, or the run never started on its node): the job is queued
    /// again.
    Requeued,
}

/// One event of a job set's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Dense sequence number within the (queue, job set) stream, from 1.
    pub seq: u64,
    /// Job the event is about.
    pub job_id: JobId,
    /// When it happened (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// What happened.
    pub kind: EventKind,
    /// The run concerned, for the events of a run.
    pub run_id: Option<RunId>,
    /// Details for people: the node of a lease, a reason, why a run failed.
    pub message: Option<String>,
}
