//! The frozen form of the log's commands and its one conversion into the current ones.
//!
//! - [`CommandRecord`] lists every command any log format held, superseded ones in their place.
//! - `From<CommandRecord> for Command` converts each superseded form into the current command,
//!   field by field: this is where an old log's entry is given its meaning today.
//! - [`Command`]'s `Serialize` writes each meaning as its newest form through [`CommandRef`], a
//!   mirror of [`CommandRecord`] that borrows the command (submits carry tens of thousands of
//!   jobs: no copy) and whose superseded positions cannot be built.

use super::{
    Command, FaultedRunReport, JobVerdict, NamespacedJob, NewJob, NewLease, PodRunReport, PolicyJob, PurgeTarget,
    QuarantinePolicyRecord, RunReport, ScheduleInputsRecord, SchedulerConfigRecord, UsageRunReport,
};
use crate::model::{ExecutorName, JobId, JobSetName, NodeName, QueueName};
use crate::record::executor::NodeRecord;
use crate::record::job::JobStateRecord;
use crate::record::job_policy::RetryRecord;
use crate::record::queue::{QueuePoliciesRecord, QueueRecord, QueueTreeRecord};
use crate::record::reservation::ReservationRecord;
use crate::record::usage::QueueUsageRecord;
use serde::{Deserialize, Serialize, Serializer};

/// Every command of every log format, in its position: the frozen byte format of [`Command`].
/// Format: log format 13 (the variant order is the format; log format 1 is the same list without
/// [`CommandRecord::PurgeFinished`] (format 3), format 3 without
/// [`CommandRecord::RunEventsWithFaults`] and [`CommandRecord::LiftQuarantine`] (format 4),
/// format 4 without [`CommandRecord::RecordUsage`] (format 5), format 5 without
/// [`CommandRecord::CreateQueueInTree`] and [`CommandRecord::UpdateQueueInTree`] (format 6),
/// format 6 without [`CommandRecord::SubmitInNamespaces`] and
/// [`CommandRecord::RunEventsWithPods`] (format 7), format 7 without
/// [`CommandRecord::SubmitByOwner`] (format 8), format 8 without
/// [`CommandRecord::RunEventsWithUsage`] (format 9), format 9 without
/// [`CommandRecord::ScheduleWithInputs`] and [`CommandRecord::RecordSchedulerConfig`] (format 10),
/// format 10 without [`CommandRecord::SubmitWithPolicies`] (format 11), format 11 without
/// [`CommandRecord::CreateQueueWithPolicies`] and [`CommandRecord::UpdateQueueWithPolicies`]
/// (format 12), format 12 without [`CommandRecord::CreateQueueWithRetry`],
/// [`CommandRecord::UpdateQueueWithRetry`] and [`CommandRecord::RecordReservations`] (format 13),
/// so every older command decodes, and encodes back, unchanged).
///
/// The rest of Convoy builds and applies [`Command`], which reads through it
/// (`From<CommandRecord> for Command`); only the golden tests, and tests applying an older log's
/// command, build one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandRecord {
    /// Several commands in one log entry (group commit); answered with one response each.
    Batch(Vec<CommandRecord>),
    /// Creates a queue. Superseded (format 6): read as [`Command::CreateQueue`].
    CreateQueue {
        /// The new queue.
        queue: QueueRecord,
    },
    /// Replaces a queue's settings. Superseded (format 6): read as [`Command::UpdateQueue`].
    UpdateQueue {
        /// The queue's new settings.
        queue: QueueRecord,
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
    /// Submits jobs to a job set. Superseded (format 7): read as [`Command::Submit`].
    Submit {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// When (ms since the epoch).
        at_ms: i64,
        /// The jobs, validated, with their ids.
        jobs: Vec<NewJob>,
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
    /// Run state changes reported by an executor. A lost run sends its job back to the queue
    /// unless it already had `max_attempted_runs` runs.
    ///
    /// Superseded (format 4): read as [`Command::RunEvents`].
    RunEvents {
        /// The executor reporting.
        executor: ExecutorName,
        /// When (ms since the epoch, the leader's clock).
        at_ms: i64,
        /// What happened to its runs.
        events: Vec<RunReport>,
        /// Most runs a job may have.
        max_attempted_runs: u32,
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
    /// Run state changes reported by an executor, each failure with whether its node is to
    /// blame, and the quarantine policy in force. Log format 4: the leader proposes this instead
    /// of [`CommandRecord::RunEvents`], whose entries in older logs apply as before (counting nothing
    /// against nodes).
    ///
    /// Superseded (format 7): read as [`Command::RunEvents`].
    RunEventsWithFaults {
        /// The executor reporting.
        executor: ExecutorName,
        /// When (ms since the epoch, the leader's clock): the time failures are counted at.
        at_ms: i64,
        /// What happened to its runs.
        events: Vec<FaultedRunReport>,
        /// Most runs a job may have.
        max_attempted_runs: u32,
        /// When failures of a node quarantine it, and for how long.
        quarantine: QuarantinePolicyRecord,
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
    /// carries it, like [`CommandRecord::Schedule`]. Log format 5.
    RecordUsage {
        /// The term of the leader that ran the cycle.
        term: u64,
        /// The usage.
        usage: QueueUsageRecord,
    },
    /// Creates a queue with its place in the queue tree. Log format 6: the leader proposes this
    /// instead of [`CommandRecord::CreateQueue`], whose entries in older logs create top-level queues.
    ///
    /// Superseded (format 12): read as [`Command::CreateQueue`].
    CreateQueueInTree {
        /// The new queue's settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
    },
    /// Replaces a queue's settings, its place in the tree included. Log format 6 (older logs'
    /// [`CommandRecord::UpdateQueue`] entries make the queue a top-level one with default settings,
    /// which every queue was then).
    ///
    /// Superseded (format 12): read as [`Command::UpdateQueue`].
    UpdateQueueInTree {
        /// The queue's new settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
    },
    /// Submits jobs to a job set, each with its Kubernetes namespace. Log format 7: the leader
    /// proposes this instead of [`CommandRecord::Submit`], whose entries in older logs submit jobs
    /// without a namespace (they run in their agent's).
    ///
    /// Superseded (format 8): read as [`Command::Submit`], and still written for a submit without
    /// an owner (one read from an older log).
    SubmitInNamespaces {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// When (ms since the epoch).
        at_ms: i64,
        /// The jobs, validated, with their ids and namespaces.
        jobs: Vec<NamespacedJob>,
    },
    /// Run state changes reported by an executor, as [`CommandRecord::RunEventsWithFaults`], each with
    /// the pod the run became when the executor reported one. Log format 7: the leader proposes
    /// this instead of [`CommandRecord::RunEventsWithFaults`], whose entries in older logs apply as
    /// before (runs without pods).
    ///
    /// Superseded (format 9): read as [`Command::RunEvents`].
    RunEventsWithPods {
        /// The executor reporting.
        executor: ExecutorName,
        /// When (ms since the epoch, the leader's clock).
        at_ms: i64,
        /// What happened to its runs.
        events: Vec<PodRunReport>,
        /// Most runs a job may have.
        max_attempted_runs: u32,
        /// When failures of a node quarantine it, and for how long.
        quarantine: QuarantinePolicyRecord,
    },
    /// Submits jobs, as [`CommandRecord::SubmitInNamespaces`], recording who submitted them (their
    /// owner). Log format 8: the leader proposes this instead, and entries of older logs apply
    /// as before (jobs without an owner).
    SubmitByOwner {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// When (ms since the epoch).
        at_ms: i64,
        /// The authenticated principal that submitted them (the anonymous principal's name with
        /// auth off).
        owner: String,
        /// The jobs, validated, with their ids and namespaces.
        jobs: Vec<NamespacedJob>,
    },
    /// Run events as [`CommandRecord::RunEventsWithPods`], a final one with what the run used. Log
    /// format 9: the leader proposes this instead, and entries of older logs apply as before
    /// (runs without a usage).
    RunEventsWithUsage {
        /// The executor reporting.
        executor: ExecutorName,
        /// When (ms since the epoch, the leader's clock).
        at_ms: i64,
        /// The events, in order.
        events: Vec<UsageRunReport>,
        /// Most runs a job may have.
        max_attempted_runs: u32,
        /// When failures of a node quarantine it, and for how long.
        quarantine: QuarantinePolicyRecord,
    },
    /// A cycle's decisions as [`CommandRecord::Schedule`], with what the cycle ran on beyond the
    /// state. Log format 10: the leader proposes this instead; older entries read as cycles
    /// without inputs.
    ScheduleWithInputs {
        /// The term of the leader that ran the cycle.
        term: u64,
        /// When (ms since the epoch): the `now` the scheduler was given.
        at_ms: i64,
        /// Jobs placed on nodes.
        leases: Vec<NewLease>,
        /// Running jobs preempted.
        preemptions: Vec<JobVerdict>,
        /// Queued jobs failed.
        failures: Vec<JobVerdict>,
        /// Seed, applied index, configuration hash, scheduler version, rate-limit buckets.
        inputs: ScheduleInputsRecord,
    },
    /// The scheduler configuration a leader runs its cycles with. Log format 10.
    RecordSchedulerConfig {
        /// The term of the leader that records it.
        term: u64,
        /// The configuration.
        config: SchedulerConfigRecord,
    },
    /// Submits jobs as [`CommandRecord::SubmitByOwner`], each with its dependencies and retry
    /// policy. Log format 11: the leader proposes this for a submission with any of them.
    SubmitWithPolicies {
        /// The queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// When (ms since the epoch).
        at_ms: i64,
        /// The principal that submitted them.
        owner: Option<String>,
        /// The jobs, validated, with their ids, namespaces and policies.
        jobs: Vec<PolicyJob>,
    },
    /// Creates a queue with its place in the tree, its guarantee and its preemption policy. Log
    /// format 12: the leader proposes this instead of [`CommandRecord::CreateQueueInTree`], whose
    /// entries in older logs create queues without a guarantee or fence.
    CreateQueueWithPolicies {
        /// The new queue's settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
        /// Its guarantee and preemption policy.
        policies: QueuePoliciesRecord,
    },
    /// Replaces a queue's settings, its place in the tree and its policies included. Log format
    /// 12 (older logs' [`CommandRecord::UpdateQueueInTree`] entries leave the queue without a
    /// guarantee or fence, which every queue was then).
    UpdateQueueWithPolicies {
        /// The queue's new settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
        /// Its guarantee and preemption policy.
        policies: QueuePoliciesRecord,
    },
    /// Creates a queue as [`CommandRecord::CreateQueueWithPolicies`], with a retry policy for its
    /// jobs. Log format 13: the leader proposes this for a queue that has a retry policy (every
    /// older queue command reads as a queue without one).
    CreateQueueWithRetry {
        /// The new queue's settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
        /// Its guarantee and preemption policy.
        policies: QueuePoliciesRecord,
        /// Its retry policy (boxed: it is rare).
        retry: Box<RetryRecord>,
    },
    /// Replaces a queue's settings as [`CommandRecord::UpdateQueueWithPolicies`], giving it a
    /// retry policy. Log format 13: the leader proposes this for a queue that has a retry policy.
    UpdateQueueWithRetry {
        /// The queue's new settings.
        queue: QueueRecord,
        /// Its parent, priority offset and policies.
        tree: QueueTreeRecord,
        /// Its guarantee and preemption policy.
        policies: QueuePoliciesRecord,
        /// Its retry policy (boxed: it is rare).
        retry: Box<RetryRecord>,
    },
    /// How the leader's cycle changed node reservations since its previous cycle. Log format 13.
    RecordReservations {
        /// The term of the leader that ran the cycle.
        term: u64,
        /// When (ms since the epoch).
        at_ms: i64,
        /// Reservations new in this cycle, or holding other nodes.
        reserved: Vec<ReservationRecord>,
        /// Reservations that ended without their jobs starting.
        released: Vec<ReservationRecord>,
    },
}

/// The quarantine policy of run events from logs older than format 4, which carried none: off,
/// as they applied (nothing counts against nodes).
const QUARANTINE_OFF: QuarantinePolicyRecord = QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 };

/// A run event of a form older than [`CommandRecord::RunEventsWithUsage`]: without a pod or a
/// usage, which those forms did not carry.
fn without_pod(event: FaultedRunReport) -> UsageRunReport {
    UsageRunReport { event: PodRunReport { event, pod: None }, usage: None }
}

/// Reads every form of the log as the command it means today. Superseded forms become the
/// current command with what they lack set as they applied before the field existed:
/// - [`CommandRecord::CreateQueue`], [`CommandRecord::UpdateQueue`]: a top-level queue with
///   default tree settings ([`QueueTreeRecord::default`]) and no policies;
///   [`CommandRecord::CreateQueueInTree`], [`CommandRecord::UpdateQueueInTree`]: no policies
///   ([`QueuePoliciesRecord::default`]: no guarantee, no fence); every queue command before
///   [`CommandRecord::CreateQueueWithRetry`], [`CommandRecord::UpdateQueueWithRetry`]: no retry
///   policy;
/// - [`CommandRecord::Submit`]: jobs without a namespace (their agent's) and without an owner;
///   [`CommandRecord::SubmitInNamespaces`]: without an owner;
/// - [`CommandRecord::RunEvents`]: no node fault, pod or usage, and quarantine off;
///   [`CommandRecord::RunEventsWithFaults`]: no pod or usage; [`CommandRecord::RunEventsWithPods`]:
///   no usage.
impl From<CommandRecord> for Command {
    fn from(r: CommandRecord) -> Self {
        match r {
            CommandRecord::Batch(cmds) => Command::Batch(cmds.into_iter().map(Command::from).collect()),
            CommandRecord::CreateQueue { queue } => Command::CreateQueue {
                queue,
                tree: QueueTreeRecord::default(),
                policies: QueuePoliciesRecord::default(),
                retry: None,
            },
            CommandRecord::UpdateQueue { queue } => Command::UpdateQueue {
                queue,
                tree: QueueTreeRecord::default(),
                policies: QueuePoliciesRecord::default(),
                retry: None,
            },
            CommandRecord::CreateQueueInTree { queue, tree } => {
                Command::CreateQueue { queue, tree, policies: QueuePoliciesRecord::default(), retry: None }
            }
            CommandRecord::UpdateQueueInTree { queue, tree } => {
                Command::UpdateQueue { queue, tree, policies: QueuePoliciesRecord::default(), retry: None }
            }
            CommandRecord::CreateQueueWithPolicies { queue, tree, policies } => {
                Command::CreateQueue { queue, tree, policies, retry: None }
            }
            CommandRecord::UpdateQueueWithPolicies { queue, tree, policies } => {
                Command::UpdateQueue { queue, tree, policies, retry: None }
            }
            CommandRecord::CreateQueueWithRetry { queue, tree, policies, retry } => {
                Command::CreateQueue { queue, tree, policies, retry: Some(retry) }
            }
            CommandRecord::UpdateQueueWithRetry { queue, tree, policies, retry } => {
                Command::UpdateQueue { queue, tree, policies, retry: Some(retry) }
            }
            CommandRecord::RecordReservations { term, at_ms, reserved, released } => {
                Command::RecordReservations { term, at_ms, reserved, released }
            }
            CommandRecord::DeleteQueue { name, force, at_ms } => Command::DeleteQueue { name, force, at_ms },
            CommandRecord::Submit { queue, job_set, at_ms, jobs } => {
                let jobs = jobs.into_iter().map(PolicyJob::from).collect();
                Command::Submit { queue, job_set, at_ms, owner: None, jobs }
            }
            CommandRecord::SubmitInNamespaces { queue, job_set, at_ms, jobs } => {
                let jobs = jobs.into_iter().map(PolicyJob::from).collect();
                Command::Submit { queue, job_set, at_ms, owner: None, jobs }
            }
            CommandRecord::SubmitByOwner { queue, job_set, at_ms, owner, jobs } => {
                let jobs = jobs.into_iter().map(PolicyJob::from).collect();
                Command::Submit { queue, job_set, at_ms, owner: Some(owner), jobs }
            }
            CommandRecord::SubmitWithPolicies { queue, job_set, at_ms, owner, jobs } => {
                Command::Submit { queue, job_set, at_ms, owner, jobs }
            }
            CommandRecord::Cancel { queue, job_set, job_ids, states, reason, at_ms } => {
                Command::Cancel { queue, job_set, job_ids, states, reason, at_ms }
            }
            CommandRecord::Reprioritize { queue, job_set, job_ids, priority, at_ms } => {
                Command::Reprioritize { queue, job_set, job_ids, priority, at_ms }
            }
            CommandRecord::Preempt { queue, job_set, job_ids, reason, at_ms } => {
                Command::Preempt { queue, job_set, job_ids, reason, at_ms }
            }
            CommandRecord::Schedule { term, at_ms, leases, preemptions, failures } => {
                Command::Schedule { term, at_ms, leases, preemptions, failures, inputs: None }
            }
            CommandRecord::ScheduleWithInputs { term, at_ms, leases, preemptions, failures, inputs } => {
                Command::Schedule { term, at_ms, leases, preemptions, failures, inputs: Some(inputs) }
            }
            CommandRecord::UpsertExecutor { executor, nodes, at_ms } => {
                Command::UpsertExecutor { executor, nodes, at_ms }
            }
            CommandRecord::RunEvents { executor, at_ms, events, max_attempted_runs } => {
                let events = events
                    .into_iter()
                    .map(|report| without_pod(FaultedRunReport { report, node_fault: None }))
                    .collect();
                Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine: QUARANTINE_OFF }
            }
            CommandRecord::RunEventsWithFaults { executor, at_ms, events, max_attempted_runs, quarantine } => {
                let events = events.into_iter().map(without_pod).collect();
                Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine }
            }
            CommandRecord::RunEventsWithPods { executor, at_ms, events, max_attempted_runs, quarantine } => {
                let events = events.into_iter().map(|event| UsageRunReport { event, usage: None }).collect();
                Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine }
            }
            CommandRecord::RunEventsWithUsage { executor, at_ms, events, max_attempted_runs, quarantine } => {
                Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine }
            }
            CommandRecord::ExecutorLost { executor, at_ms, max_attempted_runs } => {
                Command::ExecutorLost { executor, at_ms, max_attempted_runs }
            }
            CommandRecord::PurgeFinished { purges, before_ms, jobs } => {
                Command::PurgeFinished { purges, before_ms, jobs }
            }
            CommandRecord::LiftQuarantine { executor, node, at_ms } => {
                Command::LiftQuarantine { executor, node, at_ms }
            }
            CommandRecord::RecordUsage { term, usage } => Command::RecordUsage { term, usage },
            CommandRecord::RecordSchedulerConfig { term, config } => Command::RecordSchedulerConfig { term, config },
        }
    }
}

/// A superseded position of [`CommandRef`]: no value, so it is never written.
#[derive(Debug, Serialize)]
enum Superseded {}

/// [`CommandRecord`] borrowing a [`Command`], for writing it without a copy: the same variants in
/// the same positions, each field as [`CommandRecord`] writes it, and the forms no [`Command`] is
/// written as made impossible ([`Superseded`]). The tests check that each command writes the
/// bytes of its newest [`CommandRecord`].
#[derive(Serialize)]
#[allow(dead_code, reason = "the superseded positions are never built: they only hold their place")]
enum CommandRef<'a> {
    Batch(&'a [Command]),
    CreateQueue(Superseded),
    UpdateQueue(Superseded),
    DeleteQueue {
        name: &'a QueueName,
        force: bool,
        at_ms: i64,
    },
    Submit(Superseded),
    Cancel {
        queue: &'a QueueName,
        job_set: &'a JobSetName,
        job_ids: &'a Option<Vec<JobId>>,
        states: &'a Option<Vec<JobStateRecord>>,
        reason: &'a str,
        at_ms: i64,
    },
    Reprioritize {
        queue: &'a QueueName,
        job_set: &'a JobSetName,
        job_ids: &'a Option<Vec<JobId>>,
        priority: u32,
        at_ms: i64,
    },
    Preempt {
        queue: &'a QueueName,
        job_set: &'a JobSetName,
        job_ids: &'a [JobId],
        reason: &'a str,
        at_ms: i64,
    },
    Schedule {
        term: u64,
        at_ms: i64,
        leases: &'a [NewLease],
        preemptions: &'a [JobVerdict],
        failures: &'a [JobVerdict],
    },
    UpsertExecutor {
        executor: &'a ExecutorName,
        nodes: &'a [NodeRecord],
        at_ms: i64,
    },
    RunEvents(Superseded),
    ExecutorLost {
        executor: &'a ExecutorName,
        at_ms: i64,
        max_attempted_runs: u32,
    },
    PurgeFinished {
        purges: u64,
        before_ms: i64,
        jobs: &'a [PurgeTarget],
    },
    RunEventsWithFaults(Superseded),
    LiftQuarantine {
        executor: &'a ExecutorName,
        node: &'a NodeName,
        at_ms: i64,
    },
    RecordUsage {
        term: u64,
        usage: &'a QueueUsageRecord,
    },
    CreateQueueInTree(Superseded),
    UpdateQueueInTree(Superseded),
    /// A submit without an owner (only read from logs older than format 8) is written in the
    /// newest form that has none, so that it reads back the same.
    SubmitInNamespaces {
        queue: &'a QueueName,
        job_set: &'a JobSetName,
        at_ms: i64,
        jobs: WithoutPolicies<'a>,
    },
    RunEventsWithPods(Superseded),
    SubmitByOwner {
        queue: &'a QueueName,
        job_set: &'a JobSetName,
        at_ms: i64,
        owner: &'a str,
        jobs: WithoutPolicies<'a>,
    },
    RunEventsWithUsage {
        executor: &'a ExecutorName,
        at_ms: i64,
        events: &'a [UsageRunReport],
        max_attempted_runs: u32,
        quarantine: &'a QuarantinePolicyRecord,
    },
    ScheduleWithInputs {
        term: u64,
        at_ms: i64,
        leases: &'a [NewLease],
        preemptions: &'a [JobVerdict],
        failures: &'a [JobVerdict],
        inputs: &'a ScheduleInputsRecord,
    },
    RecordSchedulerConfig {
        term: u64,
        config: &'a SchedulerConfigRecord,
    },
    SubmitWithPolicies {
        queue: &'a QueueName,
        job_set: &'a JobSetName,
        at_ms: i64,
        owner: &'a Option<String>,
        jobs: &'a [PolicyJob],
    },
    CreateQueueWithPolicies {
        queue: &'a QueueRecord,
        tree: &'a QueueTreeRecord,
        policies: &'a QueuePoliciesRecord,
    },
    UpdateQueueWithPolicies {
        queue: &'a QueueRecord,
        tree: &'a QueueTreeRecord,
        policies: &'a QueuePoliciesRecord,
    },
    CreateQueueWithRetry {
        queue: &'a QueueRecord,
        tree: &'a QueueTreeRecord,
        policies: &'a QueuePoliciesRecord,
        retry: &'a RetryRecord,
    },
    UpdateQueueWithRetry {
        queue: &'a QueueRecord,
        tree: &'a QueueTreeRecord,
        policies: &'a QueuePoliciesRecord,
        retry: &'a RetryRecord,
    },
    RecordReservations {
        term: u64,
        at_ms: i64,
        reserved: &'a [ReservationRecord],
        released: &'a [ReservationRecord],
    },
}

/// Jobs without policies, written as the `Vec<NamespacedJob>` of the older submit forms.
struct WithoutPolicies<'a>(&'a [PolicyJob]);

impl Serialize for WithoutPolicies<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|j| &j.job))
    }
}

impl<'a> From<&'a Command> for CommandRef<'a> {
    fn from(c: &'a Command) -> Self {
        match c {
            Command::Batch(cmds) => CommandRef::Batch(cmds),
            Command::CreateQueue { queue, tree, policies, retry: Some(retry) } => {
                CommandRef::CreateQueueWithRetry { queue, tree, policies, retry }
            }
            Command::CreateQueue { queue, tree, policies, retry: None } => {
                CommandRef::CreateQueueWithPolicies { queue, tree, policies }
            }
            Command::UpdateQueue { queue, tree, policies, retry: Some(retry) } => {
                CommandRef::UpdateQueueWithRetry { queue, tree, policies, retry }
            }
            Command::UpdateQueue { queue, tree, policies, retry: None } => {
                CommandRef::UpdateQueueWithPolicies { queue, tree, policies }
            }
            Command::DeleteQueue { name, force, at_ms } => {
                CommandRef::DeleteQueue { name, force: *force, at_ms: *at_ms }
            }
            Command::Submit { queue, job_set, at_ms, owner, jobs } if jobs.iter().any(|j| !j.policies.is_empty()) => {
                CommandRef::SubmitWithPolicies { queue, job_set, at_ms: *at_ms, owner, jobs }
            }
            Command::Submit { queue, job_set, at_ms, owner: Some(owner), jobs } => {
                CommandRef::SubmitByOwner { queue, job_set, at_ms: *at_ms, owner, jobs: WithoutPolicies(jobs) }
            }
            Command::Submit { queue, job_set, at_ms, owner: None, jobs } => {
                CommandRef::SubmitInNamespaces { queue, job_set, at_ms: *at_ms, jobs: WithoutPolicies(jobs) }
            }
            Command::Cancel { queue, job_set, job_ids, states, reason, at_ms } => {
                CommandRef::Cancel { queue, job_set, job_ids, states, reason, at_ms: *at_ms }
            }
            Command::Reprioritize { queue, job_set, job_ids, priority, at_ms } => {
                CommandRef::Reprioritize { queue, job_set, job_ids, priority: *priority, at_ms: *at_ms }
            }
            Command::Preempt { queue, job_set, job_ids, reason, at_ms } => {
                CommandRef::Preempt { queue, job_set, job_ids, reason, at_ms: *at_ms }
            }
            Command::Schedule { term, at_ms, leases, preemptions, failures, inputs: None } => {
                CommandRef::Schedule { term: *term, at_ms: *at_ms, leases, preemptions, failures }
            }
            Command::Schedule { term, at_ms, leases, preemptions, failures, inputs: Some(inputs) } => {
                CommandRef::ScheduleWithInputs { term: *term, at_ms: *at_ms, leases, preemptions, failures, inputs }
            }
            Command::UpsertExecutor { executor, nodes, at_ms } => {
                CommandRef::UpsertExecutor { executor, nodes, at_ms: *at_ms }
            }
            Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine } => {
                CommandRef::RunEventsWithUsage {
                    executor,
                    at_ms: *at_ms,
                    events,
                    max_attempted_runs: *max_attempted_runs,
                    quarantine,
                }
            }
            Command::ExecutorLost { executor, at_ms, max_attempted_runs } => {
                CommandRef::ExecutorLost { executor, at_ms: *at_ms, max_attempted_runs: *max_attempted_runs }
            }
            Command::PurgeFinished { purges, before_ms, jobs } => {
                CommandRef::PurgeFinished { purges: *purges, before_ms: *before_ms, jobs }
            }
            Command::LiftQuarantine { executor, node, at_ms } => {
                CommandRef::LiftQuarantine { executor, node, at_ms: *at_ms }
            }
            Command::RecordUsage { term, usage } => CommandRef::RecordUsage { term: *term, usage },
            Command::RecordSchedulerConfig { term, config } => {
                CommandRef::RecordSchedulerConfig { term: *term, config }
            }
            Command::RecordReservations { term, at_ms, reserved, released } => {
                CommandRef::RecordReservations { term: *term, at_ms: *at_ms, reserved, released }
            }
        }
    }
}

/// Writes the newest form of the command's meaning (see `CommandRef`).
impl Serialize for Command {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CommandRef::from(self).serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Queue;
    use crate::record::queue::queue_in_tree;
    use crate::scheduler::QuarantinePolicy;

    #[test]
    fn run_events_without_a_policy_read_with_the_policy_they_applied_with() {
        // Before format 4 run events applied with `QuarantinePolicy::default()`.
        let QuarantinePolicyRecord { max_failures, window_ms, duration_ms } = QUARANTINE_OFF;
        assert_eq!(QuarantinePolicy { max_failures, window_ms, duration_ms }, QuarantinePolicy::default());
    }

    #[test]
    fn queues_without_a_tree_read_as_the_top_level_queues_they_applied_as() {
        // Before format 6 a queue command applied as `Queue::from(record)`.
        let mut q = Queue::new(QueueName::new("old").unwrap(), 2.0);
        q.cordoned = true;
        let record = QueueRecord::from(q);
        assert_eq!(queue_in_tree(record.clone(), QueueTreeRecord::default()), Queue::from(record));
    }

    #[test]
    fn every_command_reads_back_as_itself() {
        let submit = |owner: Option<&str>| Command::Submit {
            queue: QueueName::new("q").unwrap(),
            job_set: JobSetName::new("s").unwrap(),
            at_ms: 7,
            owner: owner.map(str::to_string),
            jobs: vec![],
        };
        let cmds = Command::Batch(vec![
            submit(None),
            submit(Some("alice")),
            Command::create_queue(Queue::new(QueueName::new("q").unwrap(), 1.0)),
            Command::RunEvents {
                executor: ExecutorName::new("e").unwrap(),
                at_ms: 1,
                events: vec![],
                max_attempted_runs: 2,
                quarantine: QUARANTINE_OFF,
            },
        ]);
        let bytes = crate::record::encode(&cmds).unwrap();
        assert_eq!(crate::record::decode::<Command>(&bytes).unwrap(), cmds);
    }
}
