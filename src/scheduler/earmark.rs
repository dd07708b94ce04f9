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
//! Jobs already on a node when it was earmarked stay; those of other queues count as guests (a job
//! at home that needs the room displaces them).

use super::context::{Origin, PoolCycle, Status};
use super::decisions::Reason;
use super::node_types::NodeTypes;
use super::resvec::{ResVec, add_to};
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
    /// Since the last fill pass, a displacement freed more room than the displacing job took, or
    /// withdrew a guest's new placement for a job at home (which need not be more urgent, so it may
    /// come after jobs the guest could have displaced nobody for elsewhere): waiting jobs are
    /// offered again.
    pub(super) reoffer: bool,
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
        Earmarks { node_res, type_res: Vec::new(), reservations, queue_profile, reoffer: false }
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
    fn names_of(&self, types: &[u32]) -> Vec<QueueName> {
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

impl PoolCycle<'_> {
    /// True if job `j` is preemptible.
    fn preemptible(&self, j: u32) -> bool {
        self.pcs[self.jobs[j as usize].pc as usize].preemptible
    }

    /// The level at which job `j` is freed on node `n`: a guest's at the guest level, whatever its
    /// class; anyone else's as its priority (and eviction) says.
    #[inline]
    pub(super) fn freed_at(&self, j: u32, n: u32, evicted: bool) -> u8 {
        let job = &self.jobs[j as usize];
        if let Some(g) = self.levels.guest_level()
            && self.earmarks.is_guest(n, job.queue)
        {
            return g;
        }
        if evicted {
            self.levels.evicted_freed_at(job.prio_idx as usize)
        } else {
            self.levels.running_freed_at(job.prio_idx as usize)
        }
    }

    /// Node types `j` may use at all: `types` without the earmarked ones it is barred from, or why
    /// it may use none.
    #[inline]
    pub(super) fn allowed_types(&self, j: u32, types: Vec<u32>) -> Result<Vec<u32>, Reason> {
        if !self.earmarks.active() {
            return Ok(types);
        }
        let (q, preemptible) = (self.jobs[j as usize].queue, self.preemptible(j));
        let (allowed, barred): (Vec<u32>, Vec<u32>) =
            types.iter().partition(|&&t| self.earmarks.access_type(t, q, preemptible) != Access::Barred);
        if allowed.is_empty() && !barred.is_empty() {
            return Err(Reason::ReservedNodes { pool: self.pool.clone(), queues: self.earmarks.names_of(&barred) });
        }
        Ok(allowed)
    }

    /// [`PoolCycle::try_place`] in a pool with earmarked nodes. Where nothing has to move: home
    /// nodes, then nodes reserved for nobody, then others' earmarked nodes as a guest. Then, at
    /// the guest level, home nodes whose guests make the room; then the usual displacement levels
    /// on home and open nodes.
    pub(super) fn try_place_earmarked(&mut self, j: u32, types: &[u32], req: &ResVec) -> Option<u8> {
        let job = &self.jobs[j as usize];
        let (q, max) = (job.queue, self.levels.max_search_level(job.prio_idx as usize));
        let preemptible = self.preemptible(j);
        let (mut home, mut open, mut guest) = (Vec::new(), Vec::new(), Vec::new());
        for &t in types {
            match self.earmarks.access_type(t, q, preemptible) {
                Access::Home => home.push(t),
                Access::Open => open.push(t),
                Access::Guest => guest.push(t),
                Access::Barred => {}
            }
        }
        for set in [&home, &open, &guest] {
            if !set.is_empty()
                && let Some(n) = self.db.find(0, set, q, req)
            {
                self.place_displacing(j, n, req, Vec::new());
                return Some(0);
            }
        }
        let guest_level = self.levels.guest_level();
        let mut displacing = home.clone();
        displacing.extend(open);
        for l in 1..=max {
            if self.db.level_is_redundant(l) {
                continue;
            }
            let set = if Some(l) == guest_level { &home } else { &displacing };
            if set.is_empty() {
                continue;
            }
            if let Some((n, victims)) = self.least_harmful_node(l, set, q, req) {
                self.place_displacing(j, n, req, victims);
                return Some(l);
            }
        }
        None
    }

    /// Why `j` (with dense requests `req`) waits if the reason is an earmark: it is barred from
    /// earmarked nodes where it would fit without moving anyone.
    pub(super) fn earmark_reason(&mut self, j: u32, req: &ResVec) -> Option<Reason> {
        if !self.earmarks.active() || self.preemptible(j) {
            return None;
        }
        let q = self.jobs[j as usize].queue;
        let constraint = self.classes[self.jobs[j as usize].class as usize].constraint;
        let barred: Vec<u32> = self
            .matching_types(constraint)
            .into_iter()
            .filter(|&t| self.earmarks.access_type(t, q, false) == Access::Barred)
            .filter(|&t| self.db.type_nodes[t as usize].iter().any(|&n| self.db.fits_at(n, 0, req)))
            .collect();
        if barred.is_empty() {
            return None;
        }
        Some(Reason::ReservedNodes { pool: self.pool.clone(), queues: self.earmarks.names_of(&barred) })
    }

    /// After filling, in a pool with earmarked nodes: running jobs still evicted could not return
    /// and will be preempted, yet they hold their room until the cycle ends. A guest may not take
    /// the room of an evicted job at home (where anyone else could have displaced it), so without
    /// this it would get that room only in the next cycle. Releases that room and, if jobs wait
    /// for room, fills once more.
    pub(super) fn refill_earmarked(&mut self, rate: &mut super::rate_limit::RateLimits) {
        if !self.earmarks.active() {
            return;
        }
        let lost: Vec<u32> = (0..self.running_count as u32)
            .filter(|&j| {
                let job = &self.jobs[j as usize];
                job.status == Status::Evicted && job.origin != Origin::Queued
            })
            .collect();
        let mut retry: Vec<Vec<u32>> = vec![Vec::new(); self.queues.len()];
        let mut seen_gangs = rustc_hash::FxHashSet::default();
        for j in self.running_count as u32..self.jobs.len() as u32 {
            let job = &self.jobs[j as usize];
            let waits_for_room = job.status == Status::Waiting
                && matches!(
                    job.reason.as_deref(),
                    Some(Reason::NoCapacity { .. } | Reason::ReservedNodes { .. } | Reason::Gang { .. })
                );
            if !waits_for_room || job.info.gang.as_ref().is_some_and(|g| !seen_gangs.insert((job.queue, g.id.clone())))
            {
                continue;
            }
            retry[job.queue as usize].push(j);
        }
        if lost.is_empty() || retry.iter().all(Vec::is_empty) {
            return;
        }
        for j in lost {
            if let Some(n) = self.jobs[j as usize].node() {
                self.db.remove(n, j);
            }
            // Preempted, as it would have been; who displaced it stays recorded for the outcome.
            self.jobs[j as usize].status = Status::Preempted;
        }
        self.unschedulable.clear();
        self.gang_unschedulable.clear();
        for (q, list) in self.queues.iter_mut().zip(retry) {
            q.retry = list;
            q.retry_pos = 0;
        }
        self.fill(rate);
    }

    /// In a pool with earmarked nodes, who took the room of running job `j`, evicted and unable to
    /// return, when no chain of displacements says: room it held was given up in the cycle (by
    /// the withdrawn placement of a job that had displaced it) and then taken, without displacing
    /// anyone, by jobs placed on its node — on an earmarked node, for a guest, by jobs at home
    /// there first. The latest such job, jobs at home preferred.
    pub(super) fn earmark_taker(&self, j: u32) -> Option<u32> {
        if !self.earmarks.active() {
            return None;
        }
        let job = &self.jobs[j as usize];
        let n = job.node?;
        let guest = self.earmarks.is_guest(n, job.queue);
        let placed_here =
            |x: &&super::context::CJob<'_>| matches!(x.status, Status::Placed | Status::Returned) && x.node == Some(n);
        let latest = |home: bool| {
            (0..self.jobs.len() as u32).rev().find(|&x| {
                placed_here(&&self.jobs[x as usize]) && (!home || self.earmarks.is_home(n, self.jobs[x as usize].queue))
            })
        };
        if guest { latest(true).or_else(|| latest(false)) } else { latest(false) }
    }

    /// Per queue, what its jobs hold at the end of the cycle on nodes earmarked for it (home) and
    /// on nodes earmarked for others (guest). Empty when the pool has no earmarked nodes.
    pub(super) fn earmarked_allocation(&self) -> Vec<(ResVec, ResVec)> {
        if !self.earmarks.active() {
            return Vec::new();
        }
        let mut out = vec![(self.layout.zero(), self.layout.zero()); self.queues.len()];
        for (j, job) in self.jobs.iter().enumerate() {
            let Some(n) = job.node.filter(|_| job.scheduled()) else { continue };
            let q = job.queue;
            if self.earmarks.is_home(n, q) {
                add_to(&mut out[q as usize].0, &self.req(j as u32));
            } else if self.earmarks.is_guest(n, q) {
                add_to(&mut out[q as usize].1, &self.req(j as u32));
            }
        }
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
