//! What each follower acknowledged to this leader, to catch a follower that lost its data.
//!
//! Raft assumes a member never forgets what it acknowledged. A server whose data dir was wiped and
//! that comes back under the same node id breaks that: it answers the leader's appends as if it had
//! never seen them. openraft 0.9 then panics (the leader's record of what the member holds would
//! have to go backwards) and takes the leader down. The network client therefore remembers, per
//! follower and term, the highest index the follower acknowledged, and turns an answer that
//! contradicts it into a network error: openraft keeps retrying, the leader keeps serving, and the
//! log says what to do (remove the member and add it again, which starts its record afresh).
//!
//! Only answers within one term are compared: a new term starts every record afresh, and in a
//! later term a follower may legitimately drop entries it acknowledged to an earlier leader (they
//! were never committed).

use super::types::NodeId;
use std::collections::HashMap;
use std::sync::Mutex;

/// Highest acknowledged index per follower, with the term it was acknowledged in.
#[derive(Debug, Default)]
pub(crate) struct Acked {
    by_node: Mutex<HashMap<NodeId, (u64, u64)>>,
    /// Losses already logged, per member and term.
    reported: Mutex<std::collections::HashSet<(NodeId, u64)>>,
}

/// A follower's answer contradicts what it acknowledged before in the same term.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "node {node} acknowledged log entries up to {acked} in term {term} and now has only up to {now}: its data \
     was lost (a wiped data dir?). It cannot rejoin as it is: remove it (`convoy cluster remove {node}`) and add \
     it again (`convoy cluster add {node} ADDR`)"
)]
pub(crate) struct LostEntries {
    node: NodeId,
    term: u64,
    acked: u64,
    now: String,
}

impl Acked {
    /// Records that `node` holds the log up to `index` (None: nothing) in `term`; an error if it
    /// acknowledged more before in the same term.
    pub(crate) fn matched(&self, node: NodeId, term: u64, index: Option<u64>) -> Option<LostEntries> {
        let mut by_node = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        match by_node.get(&node) {
            Some(&(t, acked)) if t == term && index.is_none_or(|i| i < acked) => {
                Some(LostEntries { node, term, acked, now: index.map_or("nothing".into(), |i| i.to_string()) })
            }
            Some(&(t, acked)) if t == term && index.is_some_and(|i| i <= acked) => None,
            _ => {
                if let Some(i) = index {
                    by_node.insert(node, (term, i));
                }
                None
            }
        }
    }

    /// Forgets `node`: it left the cluster, and an addition starts its record afresh.
    pub(crate) fn forget(&self, node: NodeId) {
        self.by_node.lock().unwrap_or_else(|p| p.into_inner()).remove(&node);
        self.reported.lock().unwrap_or_else(|p| p.into_inner()).retain(|(n, _)| *n != node);
    }

    /// True the first time `e` is seen for its member and term (to log it once).
    pub(crate) fn first_report(&self, e: &LostEntries) -> bool {
        self.reported.lock().unwrap_or_else(|p| p.into_inner()).insert((e.node, e.term))
    }

    /// `node` does not hold the entry at `prev` (None: the log's start) in `term`: an error if it
    /// acknowledged it before in the same term.
    pub(crate) fn conflict(&self, node: NodeId, term: u64, prev: Option<u64>) -> Option<LostEntries> {
        let by_node = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        match (by_node.get(&node), prev) {
            (Some(&(t, acked)), Some(p)) if t == term && p <= acked => {
                Some(LostEntries { node, term, acked, now: format!("less than {p}") })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_that_forgets_within_a_term_is_caught() {
        let a = Acked::default();
        assert_eq!(a.matched(2, 5, Some(10)), None);
        assert_eq!(a.matched(2, 5, Some(12)), None);
        // Re-acknowledging what it has, or a conflict beyond it, is normal.
        assert_eq!(a.matched(2, 5, Some(12)), None);
        assert_eq!(a.conflict(2, 5, Some(13)), None);
        // A conflict at an entry it acknowledged, or a smaller match, is data loss.
        assert!(a.conflict(2, 5, Some(11)).is_some());
        let e = a.matched(2, 5, Some(3)).expect("lost");
        assert!(e.to_string().contains("convoy cluster remove 2"), "{e}");
        assert!(a.matched(2, 5, None).is_some());
        // Another term starts afresh; other nodes are apart.
        assert_eq!(a.conflict(2, 6, Some(1)), None);
        assert_eq!(a.matched(2, 6, Some(1)), None);
        assert_eq!(a.matched(3, 5, Some(1)), None);
        // Logged once per member and term; a removed member starts afresh.
        let e = a.matched(3, 5, None).expect("lost");
        assert!(a.first_report(&e));
        assert!(!a.first_report(&e));
        a.forget(3);
        assert_eq!(a.matched(3, 5, None), None);
        assert_eq!(a.conflict(3, 5, Some(1)), None);
    }
}
