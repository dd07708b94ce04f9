//! Earmarked nodes (Armada: "earmark nodes for a particular set of jobs, but allowing them to be
//! used by other jobs when not used for their primary purpose").
//!
//! A node labelled `convoy.io/reserved-for=<queue>[,<queue>...]` ([`RESERVED_FOR_LABEL`]) is
//! reserved for those queues: their jobs are *at home* there. A job of another queue may use it
//! only as a *guest*, and only if its priority class is preemptible; a job of a non-preemptible
//! class never goes there. A guest is preempted as soon as a job at home needs its room, whatever
//! the priorities and fair shares, and a guest never displaces a job at home.
//!
//! How a cycle holds to that:
//! - The label's value is part of the node type (it is a label every cycle with earmarked nodes
//!   looks at), so each type is wholly reserved for one set of queues or not at all; a job's
//!   [`Access`] to a type follows from its queue and class.
//! - Guests occupy their node at the guest level `G` ([`super::nodedb::Levels::with_guest_level`]),
//!   below every priority level: a job at home that searches `G` displaces guests and nothing else,
//!   before any urgency or fair-share displacement.
//! - Guests search earmarked nodes only at level 0 (no displacement at all) and return to them
//!   only at level 0, so nothing they do displaces a job at home (or another guest).
//! - Where nothing has to move, a job takes its home nodes first, then nodes reserved for nobody,
//!   then, as a guest, nodes reserved for others: guests keep off earmarked nodes while there is
//!   room elsewhere, and jobs at home use their own nodes before the shared ones.
//!
//! This file holds the pool's earmarks (data); the cycle's steps on them are in
//! `earmark_placement.rs`.
//!
//! Jobs already on a node when it was earmarked stay; those of other queues count as guests (a job
//! at home that needs the room displaces them).

use super::node_types::NodeTypes;

use crate::model::{Node, QueueName, RESERVED_FOR_LABEL};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

/// What a job may do on the nodes of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Not earmarked: the usual rules.
    Open,
    /// Earmarked for the job's queue: the usual rules, and guests give way.
    Home,
    /// Earmarked for others, and the job is preemptible: only where nothing has to move.
    Guest,
    /// Earmarked for others, and the job is not preemptible: never.
    Barred,
}

/// One set of home queues, as one label value names it.
#[derive(Debug, Clone)]
struct Reservation {
    /// The cycle's queues at home (indexes, ascending).
    homes: SmallVec<[u32; 2]>,
    /// Every valid queue name of the label, for reasons (a queue need not exist yet).
    names: Vec<QueueName>,
}

/// The pool's earmarked nodes during one cycle.
#[derive(Debug, Clone, Default)]
pub(crate) struct Earmarks {
    /// Per node: 0 if not earmarked, else 1 + its index in `reservations`.
    node_res: Vec<u32>,
    /// Per node type, the same.
    type_res: Vec<u32>,
    reservations: Vec<Reservation>,
    /// Per queue: an id shared by the queues at home in the same reservations (0: in none).
    queue_profile: Vec<u32>,
}

/// True if any node carries the earmark label.
pub(super) fn any_earmarked(nodes: &[&Node]) -> bool {
    nodes.iter().any(|n| n.labels.contains_key(RESERVED_FOR_LABEL))
}

impl Earmarks {
    /// The earmarks of `nodes` (in the cycle's order), for queues numbered by `queue_index`.
    /// A label entry that is not a valid queue name names no queue; a node whose label names no
    /// queue of the cycle is still earmarked, for nobody here (only guests may use it).
    pub(super) fn new(nodes: &[&Node], queue_index: &HashMap<&str, u32>, queues: usize) -> Self {
        let mut by_value: HashMap<&str, u32> = HashMap::default();
        let mut reservations: Vec<Reservation> = Vec::new();
        let node_res = nodes
            .iter()
            .map(|n| {
                let Some(value) = n.labels.get(RESERVED_FOR_LABEL) else { return 0 };
                *by_value.entry(value.as_str()).or_insert_with(|| {
                    let names: Vec<QueueName> =
                        value.split(',').filter_map(|part| QueueName::new(part.trim()).ok()).collect();
                    let mut homes: SmallVec<[u32; 2]> =
                        names.iter().filter_map(|q| queue_index.get(q.as_str()).copied()).collect();
                    homes.sort_unstable();
                    homes.dedup();
                    reservations.push(Reservation { homes, names });
                    reservations.len() as u32
                })
            })
            .collect();
        // Queues at home in the same reservations behave alike: they share verdicts.
        let mut profiles: HashMap<Vec<u32>, u32> = HashMap::default();
        profiles.insert(Vec::new(), 0);
        let queue_profile = (0..queues as u32)
            .map(|q| {
                let homes: Vec<u32> =
                    (0..reservations.len() as u32).filter(|&r| reservations[r as usize].homes.contains(&q)).collect();
                let next = profiles.len() as u32;
                *profiles.entry(homes).or_insert(next)
            })
            .collect();
        Earmarks { node_res, type_res: Vec::new(), reservations, queue_profile }
    }

    /// True if the pool has earmarked nodes.
    #[inline]
    pub(super) fn active(&self) -> bool {
        !self.reservations.is_empty()
    }

    /// Records the reservation of each node type (all nodes of a type share it, since the label
    /// is part of the type).
    pub(super) fn set_types(&mut self, types: &NodeTypes) {
        if self.active() {
            self.type_res = types.types.iter().map(|t| self.node_res[t.rep as usize]).collect();
        }
    }

    fn access(&self, res: u32, queue: u32, preemptible: bool) -> Access {
        match res {
            0 => Access::Open,
            r if self.reservations[r as usize - 1].homes.contains(&queue) => Access::Home,
            _ if preemptible => Access::Guest,
            _ => Access::Barred,
        }
    }

    /// What a job of `queue` may do on nodes of type `t`.
    pub(super) fn access_type(&self, t: u32, queue: u32, preemptible: bool) -> Access {
        if !self.active() {
            return Access::Open;
        }
        self.access(self.type_res[t as usize], queue, preemptible)
    }

    /// True if a job of `queue` on node `n` is a guest there.
    #[inline]
    pub(super) fn is_guest(&self, n: u32, queue: u32) -> bool {
        self.active() && matches!(self.access(self.node_res[n as usize], queue, true), Access::Guest)
    }

    /// True if node `n` is earmarked for `queue`.
    #[inline]
    pub(super) fn is_home(&self, n: u32, queue: u32) -> bool {
        self.active() && self.access(self.node_res[n as usize], queue, true) == Access::Home
    }

    /// Jobs with equal requirements and priority but another profile may be placed differently:
    /// part of the cache keys of verdicts. 0 when the pool has no earmarked nodes.
    #[inline]
    pub(super) fn profile(&self, queue: u32, preemptible: bool) -> u32 {
        if !self.active() {
            return 0;
        }
        1 + 2 * self.queue_profile[queue as usize] + u32::from(preemptible)
    }

    /// The home queues named by the reservations of node types `types`, without repeats.
    pub(super) fn names_of(&self, types: &[u32]) -> Vec<QueueName> {
        let mut out: Vec<QueueName> = Vec::new();
        for &t in types {
            let r = self.type_res[t as usize];
            if r == 0 {
                continue;
            }
            for name in &self.reservations[r as usize - 1].names {
                if !out.contains(name) {
                    out.push(name.clone());
                }
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutorName, NodeName, PoolName, Resources};

    fn node(name: &str, reserved: Option<&str>) -> Node {
        let mut labels = crate::model::Labels::new();
        if let Some(v) = reserved {
            labels.insert(RESERVED_FOR_LABEL.to_string(), v.to_string());
        }
        Node {
            name: NodeName::new(name).unwrap(),
            executor: ExecutorName::new("e").unwrap(),
            pool: PoolName::default_pool(),
            labels,
            taints: vec![],
            allocatable: Resources::parse([("cpu", "1")]).unwrap(),
            unallocatable: Resources::new(),
            unschedulable: false,
        }
    }

    #[test]
    fn access_follows_the_label_the_queue_and_the_class() {
        let nodes =
            [node("a", None), node("b", Some("A, B")), node("c", Some("C,not a queue")), node("d", Some("A,B"))];
        let refs: Vec<&Node> = nodes.iter().collect();
        assert!(any_earmarked(&refs));
        let index: HashMap<&str, u32> = [("A", 0), ("B", 1), ("C", 2), ("D", 3)].into_iter().collect();
        let e = Earmarks::new(&refs, &index, 4);
        assert!(e.active());
        // "A, B" and "A,B" are two label values, hence two reservations of the same queues.
        assert_eq!(e.node_res, vec![0, 1, 2, 3]);
        assert_eq!(e.reservations[1].names, vec![QueueName::new("C").unwrap()]);
        let acc = |n: usize, q: u32, p: bool| e.access(e.node_res[n], q, p);
        assert_eq!(acc(0, 3, false), Access::Open);
        assert_eq!(acc(1, 0, false), Access::Home);
        assert_eq!(acc(1, 1, true), Access::Home);
        assert_eq!(acc(1, 2, true), Access::Guest);
        assert_eq!(acc(1, 2, false), Access::Barred);
        assert_eq!(acc(2, 2, false), Access::Home);
        assert!(e.is_guest(1, 3) && !e.is_guest(1, 0) && !e.is_guest(0, 3));
        assert!(e.is_home(3, 1) && !e.is_home(2, 1));
        // A and B share a profile (home in the same reservations); C and D have their own.
        assert_eq!(e.profile(0, false), e.profile(1, false));
        assert_ne!(e.profile(0, false), e.profile(0, true));
        assert_ne!(e.profile(2, false), e.profile(3, false));
        assert_eq!(e.profile(3, false), 1, "queues at home nowhere share profile 0");
    }

    #[test]
    fn no_label_no_earmarks() {
        let nodes = [node("a", None)];
        let refs: Vec<&Node> = nodes.iter().collect();
        assert!(!any_earmarked(&refs));
        let e = Earmarks::new(&refs, &HashMap::default(), 0);
        assert!(!e.active());
        assert_eq!(e.profile(0, true), 0);
    }
}
