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
    /// The three above as one number that orders turns as they do (see [`Turn::new`]): the heap
    /// of turns compares it once per level of every sift, for every candidate of the cycle.
    order: u128,
}

impl Turn {
    /// The turn of `queue`'s next candidate. Turns are only made here, and never changed after,
    /// so `order` always matches the three parts.
    pub(super) fn new(urgency: i32, cost_after: f64, queue: u32) -> Self {
        // Each part mapped to an unsigned number whose order is the part's order in the turn:
        // urgency ascending (sign bit flipped), cost descending (`f64::total_cmp`'s order, as a
        // biased integer, inverted), queue descending (inverted).
        let urgency_part = (urgency as u32 ^ 0x8000_0000) as u128;
        let bits = cost_after.to_bits() as i64;
        let total_order = bits ^ ((((bits >> 63) as u64) >> 1) as i64);
        let cost_part = !((total_order as u64) ^ (1 << 63)) as u128;
        let queue_part = !queue as u128;
        Turn { urgency, cost_after, queue, order: urgency_part << 96 | cost_part << 32 | queue_part }
    }
}

impl PartialEq for Turn {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}
impl Eq for Turn {}

impl Ord for Turn {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the best turn.
    fn cmp(&self, other: &Self) -> Ordering {
        self.order.cmp(&other.order)
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order the turn's number gives, written out part by part.
    fn by_parts(a: &Turn, b: &Turn) -> Ordering {
        a.urgency
            .cmp(&b.urgency)
            .then_with(|| b.cost_after.total_cmp(&a.cost_after))
            .then_with(|| b.queue.cmp(&a.queue))
    }

    proptest::proptest! {
        #[test]
        fn turns_order_by_urgency_then_lower_cost_then_lower_queue(
            a in (proptest::num::i32::ANY, proptest::num::f64::ANY, proptest::num::u32::ANY),
            b in (proptest::num::i32::ANY, proptest::num::f64::ANY, proptest::num::u32::ANY),
            same_urgency: bool,
            same_cost: bool,
        ) {
            let ta = Turn::new(a.0, a.1, a.2);
            let b = (if same_urgency { a.0 } else { b.0 }, if same_cost { a.1 } else { b.1 }, b.2);
            let tb = Turn::new(b.0, b.1, b.2);
            proptest::prop_assert_eq!(ta.cmp(&tb), by_parts(&ta, &tb));
            proptest::prop_assert_eq!(tb.cmp(&ta), by_parts(&tb, &ta));
        }
    }

    #[test]
    fn costs_of_either_sign_and_zeros_order_as_total_cmp() {
        let costs = [f64::NEG_INFINITY, -2.5, -0.0, 0.0, 1e-300, 0.25, 0.5, 7.0, f64::INFINITY];
        for (i, &x) in costs.iter().enumerate() {
            for (k, &y) in costs.iter().enumerate() {
                // The lower cost is the better turn.
                assert_eq!(Turn::new(0, x, 0).cmp(&Turn::new(0, y, 0)), k.cmp(&i), "{x} against {y}");
            }
        }
    }
}
