//! The order of jobs within a queue, defined once for the scheduler and the state.
//!
//! Within a queue: priority-class priority (higher first), then job priority (lower first), then
//! submit sequence (earlier first) — [`QueueOrderKey`]. The state keeps its queued jobs in this
//! order. During a cycle the scheduler also has jobs it evicted, which go before the others of
//! their class priority so that they get the first chance to return — [`CycleOrderKey`], the same
//! order with that one step added. Jobs of one gang travel together, at the position of their
//! first member.

use std::cmp::Ordering;

/// A job's place in its queue's order: smaller keys go first.
///
/// 16 bytes: the state holds one for every queued job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueOrderKey {
    class_priority: i32,
    priority: u32,
    submit_seq: u64,
}

impl QueueOrderKey {
    /// `class_priority` is the priority of the job's priority class, `priority` its own priority
    /// within the queue.
    pub fn new(class_priority: i32, priority: u32, submit_seq: u64) -> Self {
        QueueOrderKey { class_priority, priority, submit_seq }
    }

    /// The job's place during a cycle, `evicted` if the scheduler evicted it in this cycle.
    pub(crate) fn with_evicted(self, evicted: bool) -> CycleOrderKey {
        CycleOrderKey { key: self, evicted }
    }
}

impl Ord for QueueOrderKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .class_priority
            .cmp(&self.class_priority)
            .then_with(|| self.priority.cmp(&other.priority))
            .then_with(|| self.submit_seq.cmp(&other.submit_seq))
    }
}

impl PartialOrd for QueueOrderKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A job's place in its queue's order during a cycle: the [`QueueOrderKey`] order, except that
/// jobs evicted in this cycle go before the others of their class priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CycleOrderKey {
    key: QueueOrderKey,
    evicted: bool,
}

impl Ord for CycleOrderKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .key
            .class_priority
            .cmp(&self.key.class_priority)
            .then_with(|| other.evicted.cmp(&self.evicted))
            .then_with(|| self.key.cmp(&other.key))
    }
}

impl PartialOrd for CycleOrderKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(class_priority: i32, evicted: bool, priority: u32, seq: u64) -> CycleOrderKey {
        QueueOrderKey::new(class_priority, priority, seq).with_evicted(evicted)
    }

    #[test]
    fn order_key_sorts_as_documented() {
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
    fn evicted_jobs_lead_only_within_their_class_priority() {
        let mut v = vec![
            k(100, false, 0, 0),
            k(100, true, 7, 5),
            k(200, false, 9, 9),
            k(100, true, 2, 8),
            k(-5, true, 0, 1),
            k(100, true, 2, 3),
            k(0, false, 0, 2),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                k(200, false, 9, 9),
                k(100, true, 2, 3),
                k(100, true, 2, 8),
                k(100, true, 7, 5),
                k(100, false, 0, 0),
                k(0, false, 0, 2),
                k(-5, true, 0, 1),
            ]
        );
    }

    #[test]
    fn ties_fall_to_the_submit_sequence() {
        let q = QueueOrderKey::new;
        assert!(q(7, 3, 1) < q(7, 3, 2));
        assert_eq!(q(7, 3, 1).cmp(&q(7, 3, 1)), Ordering::Equal);
        assert!(k(7, false, 3, 1) < k(7, false, 3, 2));
        assert!(k(7, true, 3, 1) < k(7, true, 3, 2));
        assert_eq!(k(7, true, 3, 1).cmp(&k(7, true, 3, 1)), Ordering::Equal);
        assert_ne!(k(7, true, 3, 1), k(7, false, 3, 1));
    }

    #[test]
    fn queue_keys_stay_small() {
        assert_eq!(std::mem::size_of::<QueueOrderKey>(), 16);
    }

    fn class_priority() -> impl Strategy<Value = i32> {
        prop_oneof![Just(i32::MIN), Just(i32::MAX), -3i32..3]
    }

    fn job() -> impl Strategy<Value = (i32, u32, u64)> {
        (class_priority(), 0u32..3, 0u64..3)
    }

    proptest! {
        /// The queue order is (class priority reversed, priority, sequence), and a cycle without
        /// evicted jobs keeps it.
        #[test]
        fn queue_order_is_the_plain_tuple_and_the_cycle_keeps_it(a in job(), b in job()) {
            let tuple = |(c, p, s): (i32, u32, u64)| (std::cmp::Reverse(c), p, s);
            let key = |(c, p, s): (i32, u32, u64)| QueueOrderKey::new(c, p, s);
            prop_assert_eq!(key(a).cmp(&key(b)), tuple(a).cmp(&tuple(b)));
            prop_assert_eq!(key(a).with_evicted(false).cmp(&key(b).with_evicted(false)), key(a).cmp(&key(b)));
            prop_assert_eq!(key(a).with_evicted(true).cmp(&key(b).with_evicted(true)), key(a).cmp(&key(b)));
        }
    }
}
