//! The scheduler's input: everything one cycle looks at, as plain data.

use super::config::SchedulerConfig;
use super::rate_limit::RateLimiterState;
use super::usage::QueueUsage;
use crate::model::{
    ExecutorName, GangSpec, JobId, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources,
};
use rustc_hash::FxHashSet as HashSet;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The scheduling-relevant facts about one job. Shared (`Arc`) between the state indexes and
/// snapshots so taking a snapshot copies pointers, not jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: QueueName,
    /// Its priority class (names are shared, so classes compare by address on hot paths).
    pub priority_class: PriorityClassName,
    /// Priority within the queue; lower runs first.
    pub priority: u32,
    /// Global submission sequence number (ties within a queue go to the earliest).
    pub submit_seq: u64,
    /// Requests and placement constraints, interned: identical jobs share one allocation.
    pub requirements: Requirements,
    /// Its gang, if it is a member of one.
    pub gang: Option<Arc<GangSpec>>,
    /// Pools the job may run in; empty = any.
    pub pools: Vec<PoolName>,
    /// Not to be scheduled before this time (ms since the epoch): a retry's back-off.
    pub not_before_ms: Option<i64>,
}

impl JobInfo {
    /// True if this job and `other` may run in a common pool (no pools named: any).
    pub fn shares_a_pool_with(&self, other: &JobInfo) -> bool {
        self.pools.is_empty() || other.pools.is_empty() || other.pools.iter().any(|p| self.pools.contains(p))
    }
}

/// A job holding resources on a node (leased, pending or running).
#[derive(Debug, Clone, PartialEq)]
pub struct RunningJob {
    /// The job.
    pub job: Arc<JobInfo>,
    /// The executor of its node.
    pub executor: ExecutorName,
    /// The node it holds resources on.
    pub node: NodeName,
    /// When the scheduler placed its run (ms since the epoch): pool policies preempt the latest
    /// started first.
    pub leased_at_ms: i64,
}

/// A queue with its queued jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSnapshot {
    /// The queue's settings.
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
    /// Every node of every live executor, in every pool.
    pub nodes: Vec<Node>,
    /// Every queue, with its queued jobs.
    pub queues: Vec<QueueSnapshot>,
    /// Jobs holding resources on nodes.
    pub running: Vec<RunningJob>,
    /// Token buckets as the previous cycle left them.
    pub rate_limits: RateLimiterState,
    /// Queues' usage as last recorded (see [`super::usage`]; empty without a half-time).
    pub usage: QueueUsage,
    /// Nodes under quarantine, with when each one's ends (ms since the epoch): no new placements
    /// go to them before then (while `now_ms < until`, and only if `quarantine.max_failures` is
    /// set). Their running jobs stay.
    pub quarantined: BTreeMap<(ExecutorName, NodeName), i64>,
    /// Queued jobs' waits and deadlines, running jobs' starts and deadlines: read only with
    /// `gang_reservation_after` set ([`super::reservation`]), and left empty otherwise.
    pub job_times: BTreeMap<JobId, super::reservation_plan::JobTimes>,
}

impl Snapshot {
    /// The nodes whose quarantine holds at `now_ms` (none when quarantine is off).
    pub fn quarantined_at(&self, cfg: &SchedulerConfig, now_ms: i64) -> HashSet<(&str, &str)> {
        if !cfg.quarantine.enabled() {
            return HashSet::default();
        }
        self.quarantined
            .iter()
            .filter(|(_, until)| now_ms < **until)
            .map(|((e, n), _)| (e.as_str(), n.as_str()))
            .collect()
    }
}
