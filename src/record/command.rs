//! The commands of the Raft log: every change to the replicated state is one of these. The leader
//! chooses ids and timestamps before proposing, so applying a command is deterministic (see
//! `state::State::apply`).
//!
//! Two types share the job:
//! - [`CommandRecord`] is the frozen byte format: every command any log format ever held, in its
//!   position (the variant order is the format), superseded forms included. The golden tests
//!   decode every fixture into it and encode it back byte for byte.
//! - [`Command`] is what the rest of Convoy builds and the state machine applies: one variant per
//!   meaning, in its newest shape. It is decoded through [`CommandRecord`], each superseded form
//!   converted into the current command in one place (`wire.rs`), and written as the newest
//!   form of its meaning, the bytes [`CommandRecord`] writes for it.

mod wire;

pub use wire::CommandRecord;

use super::executor::{NodeFaultRecord, NodeRecord};
use super::job::{GangRecord, JobStateRecord, PayloadRecord, PodRecord, RequirementsRecord};
use super::job_policy::{RetryRecord, SubmitPoliciesRecord};
use super::queue::{QueuePoliciesRecord, QueueRecord, QueueTreeRecord, retry_record_of};
use super::reservation::ReservationRecord;
use super::schedule::{ScheduleInputsRecord, SchedulerConfigRecord};
use super::usage::QueueUsageRecord;
use crate::model::{
    ExecutorName, JobId, JobSetName, Namespace, NodeName, PoolName, PriorityClassName, QueueName, RunId,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A change to the replicated state, as Convoy builds and applies it: one variant per meaning.
///
/// Decoding reads any [`CommandRecord`] (every log format's commands) and converts a superseded
/// form into its current command; encoding writes the newest form of each meaning (see
/// [`CommandRecord`] for the positions), so `decode(encode(c)) == c` for every command.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "CommandRecord")]
pub enum Command {
    /// Several commands in one log entry (group commit); answered with one response each.
    Batch(Vec<Command>),
    /// Creates a queue with its place in the queue tree, its guarantee, its preemption policy
    /// and its retry policy. Written as [`CommandRecord::CreateQueueWithRetry`] when it has a
    /// retry policy, else as [`CommandRecord::CreateQueueWithPolicies`];
    /// [`CommandRecord::CreateQueue`] of older logs reads as a top-level queue with default tree
    /// settings, [`CommandRecord::CreateQueueInTree`] as a queue without a guarantee or fence,
    /// and every form before [`CommandRecord::CreateQueueWithRetry`] as a queue without a retry
    /// policy.
    CreateQueue {
        /// The new queue's settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
        /// Its guarantee and preemption policy.
        policies: QueuePoliciesRecord,
        /// Its retry policy (boxed: few queues have one).
        retry: Option<Box<RetryRecord>>,
    },
    /// Replaces a queue's settings, its place in the tree and policies included. Written as
    /// [`CommandRecord::UpdateQueueWithRetry`] when it has a retry policy, else as
    /// [`CommandRecord::UpdateQueueWithPolicies`]; [`CommandRecord::UpdateQueue`] of older logs
    /// reads as making the queue a top-level one with default settings (which every queue was
    /// then), [`CommandRecord::UpdateQueueInTree`] as leaving it without a guarantee or fence,
    /// every form before [`CommandRecord::UpdateQueueWithRetry`] as leaving it without a retry
    /// policy.
    UpdateQueue {
        /// The queue's new settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
        /// Its guarantee and preemption policy.
        policies: QueuePoliciesRecord,
        /// Its retry policy (boxed: few queues have one).
        retry: Option<Box<RetryRecord>>,
    },
    /// Deletes a queue. Refused if the queue has non-terminal jobs, unless `force` (they are
    /// cancelled).
    DeleteQueue {
        /// The queue.
        name: QueueName,
        /// Cancel its live jobs.
        force: bool,
        /// When (ms since the epoch).
        at_ms: i64,
    },
    /// Submits jobs to a job set, each with its Kubernetes namespace, dependencies and retry
    /// policy, recording who submitted them. Written as [`CommandRecord::SubmitWithPolicies`] when
    /// a job has a dependency or a retry policy, else as [`CommandRecord::SubmitByOwner`] (as
    /// [`CommandRecord::SubmitInNamespaces`] without an owner); [`CommandRecord::Submit`] and
    /// [`CommandRecord::SubmitInNamespaces`] of older logs read as jobs without an owner (and, for
    /// the first, without a namespace), and every older form as jobs without policies.
    Submit {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// When (ms since the epoch).
        at_ms: i64,
        /// The authenticated principal that submitted them (the anonymous principal's name with
        /// auth off); none only in entries of logs older than format 8.
        owner: Option<String>,
        /// The jobs, validated, with their ids, namespaces and policies.
        jobs: Vec<PolicyJob>,
    },
    /// Cancels the given jobs (or the whole job set), optionally only those in `states`.
    Cancel {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// Only these jobs (default: the job set's live jobs).
        job_ids: Option<Vec<JobId>>,
        /// Only jobs in these states.
        states: Option<Vec<JobStateRecord>>,
        /// Why.
        reason: String,
        /// When (ms since the epoch).
        at_ms: i64,
    },
    /// Changes the priority of the given jobs (or of the whole job set).
    Reprioritize {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// Only these jobs (default: the job set's live jobs).
        job_ids: Option<Vec<JobId>>,
        /// The new priority.
        priority: u32,
        /// When (ms since the epoch).
        at_ms: i64,
    },
    /// Preempts the given running jobs.
    Preempt {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// The jobs.
        job_ids: Vec<JobId>,
        /// Why.
        reason: String,
        /// When (ms since the epoch).
        at_ms: i64,
    },
    /// One scheduling cycle's decisions. Refused unless `term` is the term of the log entry that
    /// carries it, so a deposed leader's decisions never apply.
    Schedule {
        /// The term of the leader that ran the cycle.
        term: u64,
        /// When (ms since the epoch).
        at_ms: i64,
        /// Jobs placed on nodes.
        leases: Vec<NewLease>,
        /// Running jobs preempted.
        preemptions: Vec<JobVerdict>,
        /// Queued jobs failed (e.g. a gang's remainder below its minimum).
        failures: Vec<JobVerdict>,
        /// What the cycle ran on beyond the state, for replay (log format 10; `None` in entries
        /// of older logs). Written as [`CommandRecord::ScheduleWithInputs`], or without inputs as
        /// the older [`CommandRecord::Schedule`].
        inputs: Option<ScheduleInputsRecord>,
    },
    /// An executor's node inventory changed (or the executor is new).
    UpsertExecutor {
        /// The executor.
        executor: ExecutorName,
        /// Its nodes.
        nodes: Vec<NodeRecord>,
        /// When (ms since the epoch).
        at_ms: i64,
    },
    /// Run state changes reported by an executor: each failure with whether its node is to blame,
    /// the pod the run became and, with a final event, what the run used; and the quarantine
    /// policy in force. A lost run sends its job back to the queue unless it already had
    /// `max_attempted_runs` runs. Written as [`CommandRecord::RunEventsWithUsage`]; the older
    /// run-events forms read with what they lack left out (see `wire.rs`).
    RunEvents {
        /// The executor reporting.
        executor: ExecutorName,
        /// When (ms since the epoch, the leader's clock): the time failures are counted at.
        at_ms: i64,
        /// The events, in order.
        events: Vec<UsageRunReport>,
        /// Most runs a job may have.
        max_attempted_runs: u32,
        /// When failures of a node quarantine it, and for how long.
        quarantine: QuarantinePolicyRecord,
    },
    /// The executor stopped polling: its nodes leave the pool and its runs are lost.
    ExecutorLost {
        /// The executor.
        executor: ExecutorName,
        /// When (ms since the epoch).
        at_ms: i64,
        /// Most runs a job may have.
        max_attempted_runs: u32,
    },
    /// Deletes finished jobs whose retention ran out: their records (with their runs), payloads,
    /// events, index rows, and the client ids naming them. Log format 2.
    ///
    /// The leader names the jobs, read from its `finished` index (finish time, then id), because
    /// finished jobs live only on disk and applying reads only memory. `purges` makes the list
    /// safe to apply anywhere: it is refused unless exactly `purges` purges were applied before
    /// it, so every job it names is still stored (only a purge removes a finished job, and a
    /// finished job never changes again).
    PurgeFinished {
        /// Purges applied when the leader read the jobs.
        purges: u64,
        /// The cutoff the leader used (its clock minus `job_retention`, ms since the epoch): a job
        /// named here that finished at or after it is kept.
        before_ms: i64,
        /// The jobs, in the order of the `finished` index.
        jobs: Vec<PurgeTarget>,
    },
    /// Lifts a node's quarantine and forgets its counted failures (an admin's order). Refused
    /// unless the node is quarantined at `at_ms`. Log format 4.
    LiftQuarantine {
        /// The node's executor.
        executor: ExecutorName,
        /// The node.
        node: NodeName,
        /// When (ms since the epoch).
        at_ms: i64,
    },
    /// Records the queues' usage as a scheduling cycle computed it (with `queue_usage_halftime`),
    /// replacing the record before. Refused unless `term` is the term of the log entry that
    /// carries it, like [`Command::Schedule`]. Log format 5.
    RecordUsage {
        /// The term of the leader that ran the cycle.
        term: u64,
        /// The usage.
        usage: QueueUsageRecord,
    },
    /// Records the scheduler configuration the leader runs its cycles with (before its first
    /// cycle, and whenever it differs from the recorded one), so that replay finds the
    /// configuration each cycle's hash names. Refused unless `term` is the entry's term, like
    /// [`Command::Schedule`]. Log format 10.
    RecordSchedulerConfig {
        /// The term of the leader that records it.
        term: u64,
        /// The configuration.
        config: SchedulerConfigRecord,
    },
    /// Records how the leader's cycle changed node reservations since its previous cycle: each
    /// becomes an event of the jobs concerned that are still queued. Refused unless `term` is the
    /// entry's term, like [`Command::Schedule`]. Log format 13.
    RecordReservations {
        /// The term of the leader that ran the cycle.
        term: u64,
        /// When (ms since the epoch): the cycle's `now`.
        at_ms: i64,
        /// Reservations new in this cycle, or holding other nodes than in the previous one.
        reserved: Vec<ReservationRecord>,
        /// Reservations of the previous cycle that ended without their jobs starting.
        released: Vec<ReservationRecord>,
    },
}

impl Command {
    /// The command creating `queue`, with its place in the tree and its policies.
    pub fn create_queue(queue: crate::model::Queue) -> Self {
        let (tree, policies, retry) =
            (QueueTreeRecord::of(&queue), QueuePoliciesRecord::of(&queue), retry_record_of(&queue).map(Box::new));
        Command::CreateQueue { queue: queue.into(), tree, policies, retry }
    }

    /// The command replacing `queue`'s settings, its place in the tree included.
    pub fn update_queue(queue: crate::model::Queue) -> Self {
        let (tree, policies, retry) =
            (QueueTreeRecord::of(&queue), QueuePoliciesRecord::of(&queue), retry_record_of(&queue).map(Box::new));
        Command::UpdateQueue { queue: queue.into(), tree, policies, retry }
    }
}

/// A run event with, for a failure, whether the run's node is to blame. Format: log format 4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultedRunReport {
    /// The event as reported.
    pub report: RunReport,
    /// Set when the run failed (or never started) because of its node.
    pub node_fault: Option<NodeFaultRecord>,
}

/// A job of [`CommandRecord::SubmitInNamespaces`] and its successors ([`Command::Submit`]).
/// Format: log format 7.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespacedJob {
    /// The job as [`CommandRecord::Submit`] carries it.
    pub job: NewJob,
    /// Its Kubernetes namespace; none: its agent's.
    pub namespace: Option<Namespace>,
}

/// A job without a namespace: it runs in its agent's (as every job of [`CommandRecord::Submit`]).
impl From<NewJob> for NamespacedJob {
    fn from(job: NewJob) -> Self {
        NamespacedJob { job, namespace: None }
    }
}

/// A job of [`CommandRecord::SubmitWithPolicies`] ([`Command::Submit`]). Format: log format 11.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyJob {
    /// The job as [`CommandRecord::SubmitInNamespaces`] carries it.
    pub job: NamespacedJob,
    /// Its dependencies and retry policy.
    pub policies: SubmitPoliciesRecord,
}

/// A job without dependencies or retry policy (as every job of the older submit forms).
impl From<NamespacedJob> for PolicyJob {
    fn from(job: NamespacedJob) -> Self {
        PolicyJob { job, policies: SubmitPoliciesRecord::default() }
    }
}

/// A job without namespace, dependencies or retry policy.
impl From<NewJob> for PolicyJob {
    fn from(job: NewJob) -> Self {
        PolicyJob::from(NamespacedJob::from(job))
    }
}

/// A run event of [`CommandRecord::RunEventsWithPods`]. Format: log format 7.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRunReport {
    /// The event with its node fault, as [`CommandRecord::RunEventsWithFaults`] carries it.
    pub event: FaultedRunReport,
    /// The pod the run became, when the executor reported one.
    pub pod: Option<PodRecord>,
}

/// A run event of [`CommandRecord::RunEventsWithUsage`] ([`Command::RunEvents`]). Format: log format 9.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRunReport {
    /// The event with its node fault and pod, as [`CommandRecord::RunEventsWithPods`] carries it.
    pub event: PodRunReport,
    /// What the run used, with a final event when the executor measured it.
    pub usage: Option<RunUsageRecord>,
}

/// What a run used. Format: log format 9 and state schema 9 (the `run_usage` table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunUsageRecord {
    /// CPU time in milliseconds.
    pub cpu_ms: u64,
    /// Peak resident memory in bytes.
    pub peak_memory_bytes: u64,
}

impl From<crate::model::RunUsage> for RunUsageRecord {
    fn from(u: crate::model::RunUsage) -> Self {
        RunUsageRecord { cpu_ms: u.cpu_ms, peak_memory_bytes: u.peak_memory_bytes }
    }
}

impl From<RunUsageRecord> for crate::model::RunUsage {
    fn from(u: RunUsageRecord) -> Self {
        crate::model::RunUsage { cpu_ms: u.cpu_ms, peak_memory_bytes: u.peak_memory_bytes }
    }
}

/// Node quarantine settings as the leader had them. Format: log format 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinePolicyRecord {
    /// Failures of a node within the window that quarantine it (0: off).
    pub max_failures: u32,
    /// Length of the window, in ms.
    pub window_ms: u64,
    /// Length of a quarantine, in ms.
    pub duration_ms: u64,
}

/// A job as the leader proposes it: validated, id chosen. Format: log format 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    /// The job's id.
    pub id: JobId,
    /// Idempotency key within the queue.
    pub client_id: Option<String>,
    /// Priority within the queue (lower first).
    pub priority: u32,
    /// Priority class.
    pub priority_class: PriorityClassName,
    /// What the job needs from a node.
    pub requirements: RequirementsRecord,
    /// Gang membership.
    pub gang: Option<GangRecord>,
    /// Annotations as submitted.
    pub annotations: BTreeMap<String, String>,
    /// Labels as submitted.
    pub labels: BTreeMap<String, String>,
    /// Grace period between SIGTERM and SIGKILL.
    pub termination_grace_period_ms: u64,
    /// Longest the job may run.
    pub active_deadline_seconds: u64,
    /// What the agent needs to start it.
    pub payload: PayloadRecord,
}

/// A placement decided by the scheduler, with the run id the leader chose. Format: log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewLease {
    /// The job placed.
    pub job_id: JobId,
    /// The new run's id.
    pub run_id: RunId,
    /// Executor of the node.
    pub executor: ExecutorName,
    /// The node.
    pub node: NodeName,
    /// The node's pool.
    pub pool: PoolName,
}

/// A job the scheduler preempted or failed, with the reason. Format: log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVerdict {
    /// The job.
    pub job_id: JobId,
    /// Why.
    pub reason: String,
}

/// What happened to a run, as its executor reported it. Format: log format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunReportKind {
    /// Accepted by the runtime, not started yet.
    Pending,
    /// Started.
    Running,
    /// Exited 0.
    Succeeded,
    /// Exited non-zero, exceeded its deadline, or was killed.
    Failed,
    /// Never started for a reason of the node: the job goes back to the queue.
    Returned,
}

/// One run event from an executor. Format: log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run.
    pub run_id: RunId,
    /// Its job.
    pub job_id: JobId,
    /// What happened.
    pub kind: RunReportKind,
    /// When, on the agent's clock (ms since the epoch).
    pub time_ms: Option<i64>,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Short cause.
    pub reason: Option<String>,
    /// Longer explanation.
    pub message: Option<String>,
    /// Last lines of output, with the final event.
    pub log_tail: Option<String>,
}

/// A finished job named by [`Command::PurgeFinished`], with what deleting it needs from its
/// record (which applying cannot read: it is on disk only). Format: log format 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeTarget {
    /// The job.
    pub job_id: JobId,
    /// When it finished (ms since the epoch): its key in the `finished` index.
    pub finished_ms: i64,
    /// Its queue.
    pub queue: QueueName,
    /// Its job set.
    pub job_set: JobSetName,
    /// Its idempotency key, freed with it unless it names another job by now.
    pub client_id: Option<String>,
}
