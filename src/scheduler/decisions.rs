//! The scheduler's output: leases, preemptions, failures, and why the rest waits.

use super::rate_limit::RateLimiterState;
pub use super::rate_limit::RateScope;
use super::usage::QueueUsage;
use crate::model::PoolPolicy;
use crate::model::{ExecutorName, JobId, NodeName, PoolName, PriorityClassName, QueueName, ResourceName, Resources};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Why a job that was tried was not scheduled (or failed).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// No node of the pool passes the job's selector, affinity, tolerations or cordon state.
    NoMatchingNode {
        /// The pool tried.
        pool: PoolName,
        /// Which constraint rules the nodes out, with how many nodes each rules out.
        detail: String,
    },
    /// The job requests a resource no node of the pool offers.
    UnknownResource {
        /// The pool tried.
        pool: PoolName,
        /// The resource no node offers.
        resource: ResourceName,
    },
    /// Nodes match, but none has room, even counting what the job may preempt.
    NoCapacity {
        /// The pool tried.
        pool: PoolName,
        /// What the job needs that no node has free, as quantities (`8 cpu`).
        missing: String,
    },
    /// The queue would exceed its limit for a resource.
    QueueLimit {
        /// The job's queue.
        queue: QueueName,
        /// The resource at its limit.
        resource: ResourceName,
    },
    /// The queue would exceed its limit for a resource within one priority class.
    PriorityClassLimit {
        /// The job's queue.
        queue: QueueName,
        /// The job's priority class.
        priority_class: PriorityClassName,
        /// The resource at its limit.
        resource: ResourceName,
    },
    /// Not enough members of a gang fit.
    Gang {
        /// The gang id.
        gang: String,
        /// Members that would fit.
        fit: u32,
        /// Members in all.
        cardinality: u32,
        /// Fewest members that may be placed.
        minimum: u32,
        /// Why the first member that did not fit did not.
        detail: Option<Arc<Reason>>,
    },
    /// Fewer members of a gang are queued than its minimum cardinality.
    GangIncomplete {
        /// The gang id.
        gang: String,
        /// Members queued.
        queued: u32,
        /// Members in all.
        cardinality: u32,
    },
    /// The queue's lookback limit was reached before this job's turn.
    LookbackLimit {
        /// The queue.
        queue: QueueName,
        /// Jobs tried per queue and cycle (`max_queue_lookback`).
        limit: usize,
    },
    /// The scheduling rate limit was reached.
    RateLimited {
        /// The bucket that ran dry.
        scope: RateScope,
    },
    /// A gang needs more tokens at once than a full bucket holds: no cycle can schedule it while
    /// that burst is in force.
    GangBeyondBurst {
        /// The gang's members offered together.
        size: u64,
        /// The bucket whose burst is smaller.
        scope: RateScope,
        /// That bucket's burst.
        burst: u64,
    },
    /// A lease made earlier in the same cycle was withdrawn for a more urgent job.
    Displaced {
        /// The more urgent job that took the place.
        by: JobId,
    },
    /// An evicted gang member could not return, so the whole gang was preempted.
    GangMemberLost {
        /// The gang id.
        gang: String,
    },
    /// An evicted job whose node no longer has room for it.
    NoRoomOnNode {
        /// The node it was evicted from.
        node: NodeName,
    },
    /// None of the job's pools has nodes.
    NoPool,
    /// The job's queue is cordoned: its queued jobs wait until it is uncordoned.
    QueueCordoned {
        /// The queue.
        queue: QueueName,
    },
    /// The nodes that would take the job are earmarked for other queues, and its priority class
    /// is not preemptible, so it may not use them as a guest.
    ReservedNodes {
        /// The pool tried.
        pool: PoolName,
        /// The queues those nodes are earmarked for.
        queues: Vec<QueueName>,
    },
    /// In a `priority` pool: a job of a higher priority (lower number) of the same line (GPU or
    /// zero-slot) waits for room, so no lower-priority job starts (head-of-line blocking).
    BehindHigherPriority {
        /// The pool.
        pool: PoolName,
        /// The first higher-priority job of the line that waits for room.
        job: JobId,
        /// Its job priority.
        priority: u32,
    },
    /// The pool has too little left of a floating resource (counted per pool, not per node).
    FloatingResource {
        /// The pool tried.
        pool: PoolName,
        /// The floating resource.
        resource: ResourceName,
        /// What the pool has left of it, as a quantity.
        left: String,
        /// The pool's amount of it, as a quantity.
        capacity: String,
        /// What the job (or gang) requests of it, as a quantity.
        requested: String,
    },
    /// Nodes match but none has room, and fair-share eviction spared running jobs of queues
    /// above their share because they have run less than their minimum runtime before
    /// preemption (`min_runtime_before_preemption`).
    MinRuntime {
        /// The pool tried.
        pool: PoolName,
        /// What the job needs that no node has free, as quantities (`8 cpu`).
        missing: String,
        /// Running jobs spared in this cycle.
        spared: usize,
        /// Seconds until the first of them may be evicted.
        ready_in_seconds: u64,
    },
    /// A retried job waits out its back-off (its retry policy's `backoff_seconds`).
    RetryBackoff {
        /// When the back-off ends (ms since the epoch, the leader's clock).
        until_ms: i64,
    },
    /// The job fits only by urgency-preempting jobs outside the preemption fence around its
    /// queue (`preemption_policy = fence`), which it may not do.
    PreemptionFence {
        /// The pool tried.
        pool: PoolName,
        /// The fenced queue (the job's queue or an ancestor).
        fence: QueueName,
    },
    /// In a `proportional` pool: the job would take its queue above its target.
    ProportionalTarget {
        /// The job's queue.
        queue: QueueName,
        /// The pool.
        pool: PoolName,
        /// The resource divided (`nvidia.com/gpu`, or the pool's dominant resource).
        resource: ResourceName,
        /// The queue's target, as a quantity.
        target: String,
        /// What the queue holds, as a quantity.
        allocated: String,
    },
    /// The job (or its gang) waited at the head of its queue for `gang_reservation_after`
    /// without fitting: nodes are reserved for it ([`super::reservation`]).
    HoldsReservation {
        /// The pool of the nodes.
        pool: PoolName,
        /// The reserved nodes.
        nodes: Vec<NodeName>,
        /// When it is expected to fit there (ms since the epoch), if the running jobs' deadlines
        /// say.
        expected_start_ms: Option<i64>,
    },
    /// The job would fit on nodes reserved for another job, and its deadline does not end
    /// before that reservation's expected start.
    KeptOffReservation {
        /// The pool.
        pool: PoolName,
        /// The reserved nodes it would fit on.
        nodes: Vec<NodeName>,
        /// The job they are reserved for.
        job: JobId,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoMatchingNode { pool, detail } => {
                write!(f, "no node in pool {pool} matches the job's constraints: {detail}")
            }
            Reason::UnknownResource { pool, resource } => write!(f, "no node in pool {pool} offers {resource}"),
            Reason::NoCapacity { pool, missing } => write!(f, "no node with {missing} free in pool {pool}"),
            Reason::QueueLimit { queue, resource } => write!(f, "queue {queue} at its {resource} limit"),
            Reason::PriorityClassLimit { queue, priority_class, resource } => {
                write!(f, "queue {queue} at its {resource} limit for priority class {priority_class}")
            }
            Reason::Gang { gang, fit, cardinality, minimum, detail } => {
                write!(f, "gang {gang}: {fit} of {cardinality} members fit")?;
                if minimum < cardinality {
                    write!(f, " (minimum {minimum})")?;
                }
                if let Some(d) = detail {
                    write!(f, "; {d}")?;
                }
                Ok(())
            }
            Reason::GangIncomplete { gang, queued, cardinality } => {
                write!(f, "gang {gang}: only {queued} of {cardinality} members are queued")
            }
            Reason::LookbackLimit { queue, limit } => {
                write!(f, "lookback limit reached ({limit} jobs tried in queue {queue} this cycle)")
            }
            Reason::RateLimited { scope: RateScope::Global } => write!(f, "rate limited (global scheduling rate)"),
            Reason::RateLimited { scope: RateScope::Queue } => write!(f, "rate limited (queue scheduling rate)"),
            Reason::GangBeyondBurst { size, scope, burst } => {
                let which = if *scope == RateScope::Global { "global" } else { "queue" };
                write!(
                    f,
                    "a gang of {size} needs more than the {which} scheduling burst of {burst}: it cannot be scheduled at this rate limit"
                )
            }
            Reason::Displaced { by } => write!(f, "lease withdrawn in the same cycle for more urgent job {by}"),
            Reason::GangMemberLost { gang } => write!(f, "gang {gang}: a member could not return to its node"),
            Reason::NoRoomOnNode { node } => write!(f, "no room left on its node {node}"),
            Reason::NoPool => write!(f, "no pool the job may run in has nodes"),
            Reason::QueueCordoned { queue } => {
                write!(f, "queue {queue} is cordoned: its queued jobs wait until it is uncordoned")
            }
            Reason::RetryBackoff { until_ms } => {
                write!(f, "retry back-off until {}", crate::model::retry_time(*until_ms))
            }
            Reason::ReservedNodes { pool, queues } => {
                let names: Vec<&str> = queues.iter().map(QueueName::as_str).collect();
                write!(
                    f,
                    "the nodes that would take the job in pool {pool} are reserved for queue{} {}; only jobs of a \
                     preemptible priority class may use them as guests",
                    if names.len() == 1 { "" } else { "s" },
                    if names.is_empty() { "(none of this pool's)".to_string() } else { names.join(", ") }
                )
            }
            Reason::PreemptionFence { pool, fence } => write!(
                f,
                "no room in pool {pool} without preempting jobs outside queue {fence}, whose preemption fence stops \
                 its jobs from displacing them (preemption_policy = fence)"
            ),
            Reason::BehindHigherPriority { pool, job, priority } => {
                write!(f, "behind higher-priority pending job {job} (priority {priority}) in pool {pool}")
            }
            Reason::FloatingResource { pool, resource, left, capacity, requested } => write!(
                f,
                "pool {pool} has {left} of {capacity} {resource} left (floating resource); the job needs {requested}"
            ),
            Reason::MinRuntime { pool, missing, spared, ready_in_seconds } => write!(
                f,
                "no node with {missing} free in pool {pool}; fair-share eviction spared {spared} running job{} that \
                 ran less than min_runtime_before_preemption (the first may be evicted in {ready_in_seconds}s)",
                if *spared == 1 { "" } else { "s" }
            ),
            Reason::ProportionalTarget { queue, pool, resource, target, allocated } => write!(
                f,
                "queue {queue} at its proportional target in pool {pool}: holds {allocated} of {target} {resource}, \
                 and the job would take it above"
            ),
            Reason::HoldsReservation { pool, nodes, expected_start_ms } => {
                let nodes: Vec<&str> = nodes.iter().map(|n| n.as_str()).collect();
                write!(
                    f,
                    "reserved node{} {} in pool {pool}; ",
                    if nodes.len() == 1 { "" } else { "s" },
                    nodes.join(", ")
                )?;
                match expected_start_ms {
                    Some(at) => write!(f, "expected to fit at {}", super::reservation_plan::format_time(*at)),
                    None => write!(f, "expected start unknown (the running jobs there have no known end)"),
                }
            }
            Reason::KeptOffReservation { pool, nodes, job } => {
                let nodes: Vec<&str> = nodes.iter().map(|n| n.as_str()).collect();
                write!(
                    f,
                    "node{} {} in pool {pool} reserved for job {job} until it fits; only jobs whose deadline ends \
                     before the reservation's expected start may use {}",
                    if nodes.len() == 1 { "" } else { "s" },
                    nodes.join(", "),
                    if nodes.len() == 1 { "it" } else { "them" }
                )
            }
        }
    }
}

/// Why a running job was preempted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PreemptionReason {
    /// Evicted for fair share and its place was taken.
    FairShare {
        /// The job that took its place.
        by: JobId,
        /// That job's queue.
        by_queue: QueueName,
    },
    /// Removed for a job of a higher priority class.
    Urgency {
        /// The job that needed the room.
        by: JobId,
        /// That job's priority class.
        by_priority_class: PriorityClassName,
    },
    /// Evicted with its gang; another member's place was taken, so the gang could not return.
    GangMember {
        /// The gang id.
        gang: String,
        /// The job that took a member's place.
        by: JobId,
        /// That job's queue.
        by_queue: QueueName,
    },
    /// A guest on a node earmarked for other queues, preempted because a job at home there needed
    /// the room (whatever the priorities and fair shares).
    Reserved {
        /// The job at home that took the room.
        by: JobId,
        /// That job's queue (one the node is earmarked for).
        by_queue: QueueName,
        /// The earmarked node.
        node: NodeName,
    },
    /// In a `priority` pool with preemption: removed for a pending job of a higher job priority
    /// (lower number) that did not fit otherwise.
    JobPriority {
        /// The job that needed the room.
        by: JobId,
        /// That job's priority.
        by_priority: u32,
        /// The preempted job's priority.
        priority: u32,
    },
    /// In a `proportional` pool: its queue held more than its target.
    ProportionalTarget {
        /// The queue.
        queue: QueueName,
        /// The pool.
        pool: PoolName,
        /// The resource divided.
        resource: ResourceName,
        /// The queue's target, as a quantity.
        target: String,
    },
    /// Evicted and could not return for another reason.
    NotRescheduled {
        /// Why it could not return.
        reason: Reason,
    },
}

impl fmt::Display for PreemptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreemptionReason::FairShare { by, by_queue } => {
                write!(f, "preempted for fair share: its node was given to job {by} of queue {by_queue}")
            }
            PreemptionReason::Urgency { by, by_priority_class } => {
                write!(f, "preempted by more urgent job {by} (priority class {by_priority_class})")
            }
            PreemptionReason::GangMember { gang, by, by_queue } => {
                write!(f, "preempted with its gang {gang}: a member's node was given to job {by} of queue {by_queue}")
            }
            PreemptionReason::Reserved { by, by_queue, node } => {
                write!(
                    f,
                    "preempted as a guest: node {node} is reserved for queue {by_queue}, whose job {by} needed the room"
                )
            }
            PreemptionReason::JobPriority { by, by_priority, priority } => {
                write!(f, "preempted (priority {priority}) by higher-priority job {by} (priority {by_priority})")
            }
            PreemptionReason::ProportionalTarget { queue, pool, resource, target } => {
                write!(
                    f,
                    "preempted: queue {queue} held more than its proportional target of {target} {resource} in pool {pool}"
                )
            }
            PreemptionReason::NotRescheduled { reason } => {
                write!(f, "evicted for fair share and not rescheduled: {reason}")
            }
        }
    }
}

/// A new placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lease {
    /// The job placed.
    pub job_id: JobId,
    /// Its queue.
    pub queue: QueueName,
    /// The node's pool.
    pub pool: PoolName,
    /// The node's executor.
    pub executor: ExecutorName,
    /// The node.
    pub node: NodeName,
}

/// A running job to stop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preemption {
    /// The job to stop.
    pub job_id: JobId,
    /// Its queue.
    pub queue: QueueName,
    /// The executor running it.
    pub executor: ExecutorName,
    /// The node it runs on.
    pub node: NodeName,
    /// Why.
    pub reason: PreemptionReason,
}

/// A queued job that fails for good (e.g. a gang member beyond what fit).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The job that fails.
    pub job_id: JobId,
    /// Its queue.
    pub queue: QueueName,
    /// Why.
    pub reason: Reason,
}

/// A job that was tried and stays queued.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unscheduled {
    /// The job.
    pub job_id: JobId,
    /// Why it waits (shared by jobs that wait for the same reason).
    pub reason: Arc<Reason>,
}

/// One queue's standing in one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueShare {
    /// The queue.
    pub queue: QueueName,
    /// `1 / priority_factor`.
    pub weight: f64,
    /// `weight / Σ weights` over the pool's active queues.
    pub fair_share: f64,
    /// Fair share capped by demand, with the surplus shared among the others (water filling).
    pub adjusted_fair_share: f64,
    /// Share at the start of the cycle.
    pub actual_share: f64,
    /// Share after the cycle's decisions.
    pub share_after: f64,
    /// True if the queue was protected from fair-share eviction in this cycle: its share was at
    /// or below `protected_fraction_of_fair_share` of the larger of its fair share and its
    /// adjusted fair share, at the start of the cycle and (if the cycle rebalanced) after
    /// filling.
    pub protected: bool,
    /// Resources held at the end of the cycle.
    pub allocated: Resources,
    /// Resources held plus resources requested by queued jobs.
    pub demand: Resources,
    /// Of `allocated`, what is held on nodes earmarked for this queue.
    pub home_allocated: Resources,
    /// Of `allocated`, what is held as a guest on nodes earmarked for other queues.
    pub guest_allocated: Resources,
    /// The queue's usage that ordered it in this cycle: the moving average of its share with
    /// `queue_usage_halftime`, else `actual_share`.
    pub usage: f64,
    /// The queue's parent in the queue tree (none: a top-level queue).
    pub parent: Option<QueueName>,
    /// True for a parent queue: its shares, allocation and demand are its subtree's.
    pub is_parent: bool,
    /// In a `proportional` pool: the queue's target of the resource divided.
    pub proportional_target: Option<Resources>,
    /// With a guarantee (its own, or its children's for a parent): its guarantee floor in the
    /// cycle as a share of the pool, after nesting and scaling: the share of the part of its
    /// demand that holds, of every resource, the smaller of its guarantee and its demand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guaranteed_share: Option<f64>,
    /// True if its guarantee was scaled down because the guarantees at its level add up to more
    /// than the pool (or than its parent's guarantee).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub guarantee_scaled: bool,
}

/// One floating resource of a pool after a cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FloatingUse {
    /// The floating resource.
    pub resource: ResourceName,
    /// The pool's amount (milli-units, as resources are stored).
    pub capacity: i64,
    /// What the pool's leased and running jobs hold, with this cycle's placements.
    pub allocated: i64,
}

/// What a cycle saw and did in one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolReport {
    /// The pool.
    pub pool: PoolName,
    /// How the pool was scheduled.
    pub policy: PoolPolicy,
    /// What its schedulable nodes offer in all (allocatable minus what others use).
    pub total: Resources,
    /// Its nodes.
    pub nodes: usize,
    /// Every active queue's standing in it.
    pub queues: Vec<QueueShare>,
    /// Running jobs evicted for fair share in the scheduler's view this cycle.
    pub evicted: usize,
    /// Jobs the cycle tried to place.
    pub jobs_tried: usize,
    /// Running jobs fair-share eviction spared this cycle because they had run less than their
    /// minimum runtime before preemption.
    pub evictions_spared_min_runtime: usize,
    /// The pool's floating resources: its amount of each and what its jobs hold after the cycle.
    pub floating: Vec<FloatingUse>,
    /// With a queue tree: the effective priority each queue with something to offer showed its
    /// parent (for a top-level queue, the priority the top level compared) at the cycle's first
    /// pick. Empty for flat queues.
    pub queue_priority: BTreeMap<QueueName, i32>,
}

/// Everything one cycle decided.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Decisions {
    /// New placements.
    pub leases: Vec<Lease>,
    /// Running jobs to stop.
    pub preemptions: Vec<Preemption>,
    /// Queued jobs that fail for good.
    pub failures: Vec<Failure>,
    /// Jobs tried that stay queued, with why.
    pub unscheduled: Vec<Unscheduled>,
    /// Why a queue's remaining (untried) jobs wait, e.g. lookback or rate limit.
    pub queue_notes: BTreeMap<QueueName, Arc<Reason>>,
    /// What the cycle saw and did, per pool.
    pub pools: Vec<PoolReport>,
    /// Token buckets to pass to the next cycle.
    pub rate_limits: RateLimiterState,
    /// Queues' usage to record (with `queue_usage_halftime` only), for the next cycles.
    pub usage: Option<QueueUsage>,
    /// Nodes held for jobs that waited too long for room (with `gang_reservation_after` only).
    pub reservations: Vec<super::reservation_plan::Reservation>,
}
