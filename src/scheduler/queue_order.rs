//! Order within a queue, and the stream of candidate gangs a queue offers during a cycle.
//!
//! Within a queue: priority-class priority (higher first), then evicted jobs before queued ones,
//! then job priority (lower first), then submit sequence (earlier first). Jobs of one gang travel
//! together, at the position of their first member.

use std::cmp::Ordering;

/// Sort key of a job within its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OrderKey {
    pub class_priority: i32,
    pub evicted: bool,
    pub priority: u32,
    pub seq: u64,
}

impl Ord for OrderKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .class_priority
            .cmp(&self.class_priority)
            .then_with(|| other.evicted.cmp(&self.evicted))
            .then_with(|| self.priority.cmp(&other.priority))
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for OrderKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Heap entry for progressive filling: the most urgent next gang first; among equals the queue
/// whose cost after scheduling it (divided by its weight) is smallest; then the queue name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turn {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    #[test]
    fn order_key_sorts_as_documented() {
        let k = |class_priority, evicted, priority, seq| OrderKey { class_priority, evicted, priority, seq };
        let mut v = vec![
            k(20000, false, 0, 1),
            k(30000, false, 5, 9),
            k(20000, true, 9, 7),
            k(20000, false, 0, 0),
            k(30000, false, 1, 10),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                k(30000, false, 1, 10),
                k(30000, false, 5, 9),
                k(20000, true, 9, 7),
                k(20000, false, 0, 0),
                k(20000, false, 0, 1)
            ]
        );
    }

    #[test]
    fn turns_pop_urgent_then_cheapest_then_name() {
        let mut h = BinaryHeap::new();
        h.push(Turn { urgency: 20000, cost_after: 0.1, queue: 0 });
        h.push(Turn { urgency: 30000, cost_after: 0.9, queue: 2 });
        h.push(Turn { urgency: 20000, cost_after: 0.1, queue: 1 });
        h.push(Turn { urgency: 20000, cost_after: 0.05, queue: 3 });
        let order: Vec<u32> = std::iter::from_fn(|| h.pop().map(|t| t.queue)).collect();
        assert_eq!(order, vec![2, 3, 0, 1]);
    }
}
