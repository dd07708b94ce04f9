//! Commands: every change to the replicated state is one of these, in the Raft log. The leader
//! chooses ids and timestamps before proposing, so applying a command is deterministic.

use crate::model::api::{NodeReport, RunEventReport};
use crate::model::{
    ExecutorName, GangSpec, JobId, JobPayload, JobSetName, JobState, NodeName, PoolName, PriorityClassName, Queue,
    QueueName, RunId, SchedulingRequirements,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job as the leader proposes it (validated, ids chosen).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    pub id: JobId,
    pub client_id: Option<String>,
    pub priority: u32,
    pub priority_class: PriorityClassName,
    pub requirements: SchedulingRequirements,
    pub gang: Option<GangSpec>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub termination_grace_period_ms: u64,
    pub active_deadline_seconds: u64,
    pub payload: JobPayload,
}

/// A placement decided by the scheduler, with the run id the leader chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewLease {
    pub job_id: JobId,
    pub run_id: RunId,
    pub executor: ExecutorName,
    pub node: NodeName,
    pub pool: PoolName,
}

/// A job the scheduler preempted or failed, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVerdict {
    pub job_id: JobId,
    pub reason: String,
}

/// A change to the replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Several commands in one log entry (group commit); answered with one response each.
    Batch(Vec<Command>),
    CreateQueue {
        queue: Queue,
    },
    UpdateQueue {
        queue: Queue,
    },
    /// Refused if the queue has non-terminal jobs, unless `force` (they are cancelled).
    DeleteQueue {
        name: QueueName,
        force: bool,
        at_ms: i64,
    },
    Submit {
        queue: QueueName,
        job_set: JobSetName,
        at_ms: i64,
        jobs: Vec<NewJob>,
    },
    /// Cancels the given jobs (or the whole job set), optionally only those in `states`.
    Cancel {
        queue: QueueName,
        job_set: JobSetName,
        job_ids: Option<Vec<JobId>>,
        states: Option<Vec<JobState>>,
        reason: String,
        at_ms: i64,
    },
    Reprioritize {
        queue: QueueName,
        job_set: JobSetName,
        job_ids: Option<Vec<JobId>>,
        priority: u32,
        at_ms: i64,
    },
    Preempt {
        queue: QueueName,
        job_set: JobSetName,
        job_ids: Vec<JobId>,
        reason: String,
        at_ms: i64,
    },
    /// One scheduling cycle's decisions. Refused unless `term` is the term of the log entry that
    /// carries it, so a deposed leader's decisions never apply.
    Schedule {
        term: u64,
        at_ms: i64,
        leases: Vec<NewLease>,
        preemptions: Vec<JobVerdict>,
        failures: Vec<JobVerdict>,
    },
    /// An executor's node inventory changed (or the executor is new).
    UpsertExecutor {
        executor: ExecutorName,
        nodes: Vec<NodeReport>,
        at_ms: i64,
    },
    /// Run state changes reported by an executor. A lost run sends its job back to the queue
    /// unless it already had `max_attempted_runs` runs.
    RunEvents {
        executor: ExecutorName,
        at_ms: i64,
        events: Vec<RunEventReport>,
        max_attempted_runs: u32,
    },
    /// The executor stopped polling: its nodes leave the pool and its runs are lost.
    ExecutorLost {
        executor: ExecutorName,
        at_ms: i64,
        max_attempted_runs: u32,
    },
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
            Command::DeleteQueue { .. }
            | Command::Cancel { job_ids: None, .. }
            | Command::Reprioritize { job_ids: None, .. }
            | Command::ExecutorLost { .. } => UNBOUNDED_WEIGHT,
        }
    }
}

/// [`Command::apply_weight`] of a command whose reach is not known before applying it.
pub const UNBOUNDED_WEIGHT: usize = usize::MAX / 2;

/// Why a command was refused at apply time (the API checked it, but the state moved on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// HTTP status to answer with (400, 404, 409).
    pub status: u16,
    pub field: Option<String>,
    pub message: String,
}

/// The result of applying a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    /// The jobs a command created or touched (submit: one id per submitted job, in order).
    JobIds(Vec<JobId>),
    /// Counts of what a scheduling cycle changed.
    Scheduled {
        leased: u32,
        preempted: u32,
        failed: u32,
    },
    /// Run events taken in.
    Accepted(u32),
    Rejected(Rejection),
    Batch(Vec<Response>),
}
