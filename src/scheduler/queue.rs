//! A queue during one pool's cycle: its allocation and limits, its streams of candidates
//! (evicted, offered again, queued) and its shares; and the turn it bids for in progressive
//! filling. Data only: the steps that move it operate on the cycle ([`super::context`]).

use super::decisions::Reason;
use super::job::JobFacts;
use super::resvec::{Layout, ResVec};
use super::snapshot::{JobInfo, QueueSnapshot};
use crate::model::{GangSpec, QueueName};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::sync::Arc;

/// A queue's next gang.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub jobs: SmallVec<[u32; 1]>,
    pub evicted: bool,
    pub gang: Option<Arc<GangSpec>>,
    pub req: ResVec,
}

/// A queue during the cycle.
#[derive(Debug)]
pub(super) struct CycleQueue<'a> {
    pub snap: &'a QueueSnapshot,
    pub name: QueueName,
    pub priority_factor: f64,
    pub alloc: ResVec,
    pub alloc_by_priority_class: Vec<ResVec>,
    /// Absolute caps per slot (i64::MAX = none).
    pub limit: Option<ResVec>,
    pub priority_class_limits: Vec<Option<ResVec>>,
    /// Evicted jobs in queue order (gangs first-member order).
    pub evicted: Vec<u32>,
    pub evicted_pos: usize,
    /// The queue's queued jobs as given.
    pub queued: &'a [Arc<JobInfo>],
    /// What the cycle needs of each job of `queued`, copied in one pass so later steps need not
    /// read the jobs again (`class == u32::MAX`: not for this pool).
    pub facts: Vec<JobFacts>,
    /// Positions in `queued` in queue order, when `queued` is not already in order.
    pub order: Option<Vec<u32>>,
    /// Gang members (positions in `queued`, in queue order) by gang id.
    pub queued_gangs: HashMap<&'a str, Vec<u32>>,
    /// Gangs already offered.
    pub gangs_done: HashSet<&'a str>,
    /// Next position (in queue order) to look at.
    pub queued_pos: usize,
    /// Queued jobs offered so far, against the lookback limit.
    pub taken: usize,
    /// Jobs offered again after a rebalance, in queue order.
    pub retry: Vec<u32>,
    pub retry_pos: usize,
    /// Why the rest of the queue waits (lookback, rate limit).
    pub note: Option<Arc<Reason>>,
    pub queued_stopped: bool,
    pub current: Option<Candidate>,
    pub demand: ResVec,
    pub alloc_start: ResVec,
    pub active: bool,
    pub fair_share: f64,
    pub adjusted_fair_share: f64,
    pub actual_share: f64,
    /// Start share minus adjusted fair share: the victim preference among equals.
    pub overshare: f64,
    /// Usage that orders the queue: its decayed usage, else `actual_share` ([`super::usage`]).
    pub usage: f64,
    /// `usage - actual_share`, added to the queue's share when it is compared (0 without decay).
    pub usage_offset: f64,
    /// Never found above its protected share in this cycle, so fair-share eviction spared it.
    pub protected: bool,
    /// Its guarantee floor as a share of the pool (0: none): the share of the part of its demand
    /// its guarantee (after nesting and scaling) covers, resource by resource ([`super::guarantee`]).
    pub guaranteed_share: f64,
    /// Whether its guarantee was scaled down because its level's add up to more than they
    /// divide.
    pub guarantee_scaled: bool,
}

impl<'a> CycleQueue<'a> {
    /// A queue at the start of the cycle, before its jobs are read: nothing allocated, no
    /// limits, no candidates, no shares.
    pub(super) fn new(snap: &'a QueueSnapshot, layout: &Layout, priority_classes: usize) -> Self {
        CycleQueue {
            snap,
            name: snap.queue.name.clone(),
            priority_factor: snap.queue.priority_factor,
            alloc: layout.zero(),
            alloc_by_priority_class: vec![layout.zero(); priority_classes],
            limit: None,
            priority_class_limits: vec![None; priority_classes],
            evicted: vec![],
            evicted_pos: 0,
            queued: &[],
            facts: vec![],
            order: None,
            queued_gangs: HashMap::default(),
            gangs_done: HashSet::default(),
            queued_pos: 0,
            taken: 0,
            retry: vec![],
            retry_pos: 0,
            note: None,
            queued_stopped: false,
            current: None,
            demand: layout.zero(),
            alloc_start: layout.zero(),
            active: false,
            fair_share: 0.0,
            adjusted_fair_share: 0.0,
            actual_share: 0.0,
            overshare: 0.0,
            usage: 0.0,
            usage_offset: 0.0,
            protected: true,
            guaranteed_share: 0.0,
            guarantee_scaled: false,
        }
    }
}

/// Heap entry for progressive filling: the most urgent next gang first; among equals the queue
/// whose cost after scheduling it (divided by its weight) is smallest; then the queue name.
#[derive(Debug, Clone, Copy)]
pub(super) struct Turn {
    pub urgency: i32,
    pub cost_after: f64,
    /// Queues are numbered in name order, so this breaks ties by name.
    pub queue: u32,
}

impl PartialEq for Turn {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Turn {}

impl Ord for Turn {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the best turn.
    fn cmp(&self, other: &Self) -> Ordering {
        self.urgency
            .cmp(&other.urgency)
            .then_with(|| other.cost_after.total_cmp(&self.cost_after))
            .then_with(|| other.queue.cmp(&self.queue))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
