//! The order of jobs within a queue, defined once for the scheduler and the state.
//!
//! Within a queue: priority-class priority (higher first), then jobs evicted in the current cycle
//! before the others, then job priority (lower first), then submit sequence (earlier first). The
//! state keeps its queued jobs in this order (they are never evicted there); the scheduler merges
//! evicted, retried and queued jobs by it. Jobs of one gang travel together, at the position of
//! their first member.

use std::cmp::Ordering;

/// A job's place in its queue's order: smaller keys go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueOrderKey {
    class_priority: i32,
    evicted: bool,
    priority: u32,
    submit_seq: u64,
}

impl QueueOrderKey {
    /// Key of a job that has not been evicted: `class_priority` is the priority of its priority
    /// class, `priority` its own priority within the queue.
    pub fn queued(class_priority: i32, priority: u32, submit_seq: u64) -> Self {
        QueueOrderKey { class_priority, evicted: false, priority, submit_seq }
    }

    /// The same key for a job evicted in the current cycle if `evicted`: such jobs go before the
    /// others of their class priority, so that they get the first chance to return.
    pub fn with_evicted(self, evicted: bool) -> Self {
        QueueOrderKey { evicted, ..self }
    }
}

impl Ord for QueueOrderKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .class_priority
            .cmp(&self.class_priority)
            .then_with(|| other.evicted.cmp(&self.evicted))
            .then_with(|| self.priority.cmp(&other.priority))
            .then_with(|| self.submit_seq.cmp(&other.submit_seq))
    }
}

impl PartialOrd for QueueOrderKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(class_priority: i32, evicted: bool, priority: u32, seq: u64) -> QueueOrderKey {
        QueueOrderKey::queued(class_priority, priority, seq).with_evicted(evicted)
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
        assert!(k(7, false, 3, 1) < k(7, false, 3, 2));
        assert!(k(7, true, 3, 1) < k(7, true, 3, 2));
        assert_eq!(k(7, false, 3, 1).cmp(&k(7, false, 3, 1)), Ordering::Equal);
        assert_eq!(k(7, true, 3, 1).cmp(&k(7, true, 3, 1)), Ordering::Equal);
        assert_ne!(k(7, true, 3, 1), k(7, false, 3, 1));
        assert_eq!(QueueOrderKey::queued(7, 3, 1).with_evicted(false), QueueOrderKey::queued(7, 3, 1));
    }

    fn class_priority() -> impl Strategy<Value = i32> {
        prop_oneof![Just(i32::MIN), Just(i32::MAX), -3i32..3]
    }

    proptest! {
        /// Without eviction the key orders exactly as (class priority reversed, priority, sequence).
        #[test]
        fn queued_keys_order_as_the_plain_tuple(
            a in (class_priority(), 0u32..3, 0u64..3),
            b in (class_priority(), 0u32..3, 0u64..3),
        ) {
            let tuple = |(c, p, s): (i32, u32, u64)| (std::cmp::Reverse(c), p, s);
            let key = |(c, p, s): (i32, u32, u64)| QueueOrderKey::queued(c, p, s);
            prop_assert_eq!(key(a).cmp(&key(b)), tuple(a).cmp(&tuple(b)));
        }
    }
}
