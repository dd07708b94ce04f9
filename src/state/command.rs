//! Commands as the state machine sees them: what applying one may touch, and what it answers.
//! The commands themselves are records of the Raft log (`record::command`), every older form read
//! as the current command there.

use crate::model::{JobId, NodeFault, RunPod};
use crate::record::RunUsageRecord;
use serde::{Deserialize, Serialize};

pub use crate::record::command::{
    Command, FaultedRunReport, JobVerdict, NamespacedJob, NewJob, NewLease, PodRunReport, PolicyJob, PurgeTarget,
    QuarantinePolicyRecord, RunReport, RunReportKind, UsageRunReport,
};

/// A run event as the state applies it: the report, whether its node is to blame, the pod the run
/// became, and what it used (with a final event).
pub(super) struct ReportedEvent {
    pub(super) report: RunReport,
    pub(super) node_fault: Option<NodeFault>,
    pub(super) pod: Option<RunPod>,
    pub(super) usage: Option<RunUsageRecord>,
}

impl From<UsageRunReport> for ReportedEvent {
    fn from(e: UsageRunReport) -> Self {
        let UsageRunReport { event: PodRunReport { event: FaultedRunReport { report, node_fault }, pod }, usage } = e;
        ReportedEvent { report, node_fault: node_fault.map(NodeFault::from), pod: pod.map(RunPod::from), usage }
    }
}

impl Command {
    /// Roughly how many jobs, runs or nodes applying this touches: where the Raft adapter runs
    /// an apply depends on it. Commands whose reach is a whole job set, queue or executor count
    /// as [`UNBOUNDED_WEIGHT`].
    pub fn apply_weight(&self) -> usize {
        match self {
            Command::Batch(cmds) => cmds.iter().fold(0, |sum, c| sum.saturating_add(c.apply_weight())),
            Command::CreateQueue { .. } | Command::UpdateQueue { .. } => 1,
            Command::Submit { jobs, .. } => jobs.len(),
            Command::Cancel { job_ids: Some(ids), .. } | Command::Reprioritize { job_ids: Some(ids), .. } => ids.len(),
            Command::Preempt { job_ids, .. } => job_ids.len(),
            Command::Schedule { leases, preemptions, failures, .. } => {
                leases.len() + preemptions.len() + failures.len()
            }
            Command::UpsertExecutor { nodes, .. } => nodes.len(),
            Command::RunEvents { events, .. } => events.len(),
            Command::LiftQuarantine { .. } => 1,
            Command::PurgeFinished { jobs, .. } => jobs.len(),
            Command::RecordUsage { .. } | Command::RecordSchedulerConfig { .. } => 1,
            Command::RecordReservations { reserved, released, .. } => {
                reserved.iter().chain(released).map(|r| r.jobs.len()).sum()
            }
            Command::DeleteQueue { .. }
            | Command::Cancel { job_ids: None, .. }
            | Command::Reprioritize { job_ids: None, .. }
            | Command::ExecutorLost { .. } => UNBOUNDED_WEIGHT,
        }
    }
}

/// [`Command::apply_weight`] of a command whose reach is not known before applying it.
pub const UNBOUNDED_WEIGHT: usize = usize::MAX / 2;

/// What kind of rule a refused command broke. The API maps it to an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectKind {
    /// The command is malformed or asks for something impossible.
    Invalid,
    /// Something it names does not exist.
    NotFound,
    /// It conflicts with the current state (exists already, cordoned, not finished, stale term).
    Conflict,
}

/// Why a command was refused at apply time (the API checked it, but the state moved on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// What kind of rule was broken.
    pub kind: RejectKind,
    /// The offending field of the request, if one is to blame.
    pub field: Option<String>,
    /// What was wrong, for people.
    pub message: String,
}

/// The result of applying a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Done.
    Ok,
    /// The jobs a command created or touched (submit: one id per submitted job, in order).
    JobIds(Vec<JobId>),
    /// Counts of what a scheduling cycle changed.
    Scheduled {
        /// Jobs placed.
        leased: u32,
        /// Running jobs preempted.
        preempted: u32,
        /// Queued jobs failed.
        failed: u32,
    },
    /// Run events taken in.
    Accepted(u32),
    /// Refused.
    Rejected(Rejection),
    /// One response per command of a batch.
    Batch(Vec<Response>),
}
