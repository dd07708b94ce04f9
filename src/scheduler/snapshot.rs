//! The scheduler's input: everything one cycle looks at, as plain data.

use super::rate_limit::RateLimiterState;
use crate::model::{
    ExecutorName, GangSpec, JobId, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources,
};
use std::sync::Arc;

/// The scheduling-relevant facts about one job. Shared (`Arc`) between the state indexes and
/// snapshots so taking a snapshot copies pointers, not jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub id: JobId,
    pub queue: QueueName,
    pub priority_class: PriorityClassName,
    /// Priority within the queue; lower runs first.
    pub priority: u32,
    /// Global submission sequence number (ties within a queue go to the earliest).
    pub submit_seq: u64,
    pub requirements: Requirements,
    pub gang: Option<Arc<GangSpec>>,
    /// Pools the job may run in; empty = any.
    pub pools: Vec<PoolName>,
}

/// A job holding resources on a node (leased, pending or running).
#[derive(Debug, Clone, PartialEq)]
pub struct RunningJob {
    pub job: Arc<JobInfo>,
    pub executor: ExecutorName,
    pub node: NodeName,
}

/// A queue with its queued jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSnapshot {
    pub queue: Queue,
    /// Queued jobs. Ideally already in scheduling order (priority class priority desc, job
    /// priority asc, submit sequence asc); they are sorted if not. A caller may pass only a
    /// prefix (at least `max_queue_lookback` jobs) of a long queue and give the whole queue's
    /// requests in `queued_demand`.
    pub queued: Vec<Arc<JobInfo>>,
    /// Sum of the requests of all queued jobs, if `queued` is not the whole queue.
    pub queued_demand: Option<Resources>,
}

/// Everything a cycle reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub nodes: Vec<Node>,
    pub queues: Vec<QueueSnapshot>,
    pub running: Vec<RunningJob>,
    /// Token buckets as the previous cycle left them.
    pub rate_limits: RateLimiterState,
}
