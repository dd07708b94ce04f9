//! Whose place a job takes when it must displace evicted jobs.
//!
//! Evicted jobs may only return to their own node, so which evicted job gives its place to a
//! newcomer decides which queue ends up short. As in Armada, the evicted jobs are ranked by the
//! order in which progressive filling would put them back if nothing else were scheduled
//! ([`PoolCycle::return_order_of`]), and a job that must displace evicted jobs takes the place of
//! those that would return last ([`PoolCycle::fair_share_node`]): the jobs of the queues that
//! would end furthest above the others. A queue therefore only loses places to a queue whose
//! share, after the place changes hands, is no larger than its own: max-min fairness, whatever
//! nodes the queues happened to occupy. The walk over the evicted jobs, last to return first, is
//! in `return_walk.rs`. Evicted jobs returning to a node that has too little room
//! for all of them go back in the same order ([`super::nodedb::NodeDb::victims`]).

use super::context::PoolCycle;
use super::queue::Turn;
use super::resvec::{ResVec, add_to};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::collections::{BTreeSet, BinaryHeap};

impl PoolCycle<'_> {
    /// The order in which progressive filling would put back `lists` (each queue's evicted jobs,
    /// in queue order, gang members included) starting from the queues' allocations now, if
    /// nothing else were scheduled: the most urgent gang first, then the queue whose cost after
    /// it is lowest, then the queue name; a gang's members one after the other.
    pub(super) fn return_order_of(&self, lists: &[Vec<u32>]) -> Vec<u32> {
        let mut out = Vec::with_capacity(lists.iter().map(Vec::len).sum());
        // Members of each gang, in queue order, by (queue, gang id).
        let mut gangs: HashMap<(u32, &str), SmallVec<[u32; 4]>> = HashMap::default();
        for list in lists {
            for &j in list {
                let job = &self.jobs[j as usize];
                if let Some(g) = &job.info.gang {
                    gangs.entry((job.queue, g.id.as_str())).or_default().push(j);
                }
            }
        }
        let mut done: HashSet<(u32, &str)> = HashSet::default();
        let mut pos = vec![0usize; lists.len()];
        // Queue q's next unit (a job, or a gang's members) with its requests and turn, given
        // what the queue would hold by then.
        let mut next = |q: usize, alloc: &ResVec| -> Option<(SmallVec<[u32; 4]>, ResVec, Turn)> {
            loop {
                let &j = lists[q].get(pos[q])?;
                pos[q] += 1;
                let job = &self.jobs[j as usize];
                let members: SmallVec<[u32; 4]> = match &job.info.gang {
                    Some(g) => {
                        let key = (job.queue, g.id.as_str());
                        if !done.insert(key) {
                            continue;
                        }
                        gangs.get(&key).cloned().unwrap_or_else(|| smallvec::smallvec![j])
                    }
                    None => smallvec::smallvec![j],
                };
                let mut req = self.req(members[0]);
                for &m in &members[1..] {
                    add_to(&mut req, &self.req(m));
                }
                let qc = &self.queues[q];
                let cost_after = self.view().cost.share_with(alloc, &req) * qc.priority_factor;
                let turn = Turn { urgency: job.class_priority, cost_after, queue: q as u32 };
                return Some((members, req, turn));
            }
        };
        let mut alloc: Vec<ResVec> = (0..lists.len())
            .map(|q| if lists[q].is_empty() { ResVec::new() } else { self.queues[q].alloc.clone() })
            .collect();
        let mut current: Vec<Option<(SmallVec<[u32; 4]>, ResVec)>> = vec![None; lists.len()];
        let mut heap = BinaryHeap::new();
        for q in 0..lists.len() {
            if let Some((members, req, turn)) = next(q, &alloc[q]) {
                current[q] = Some((members, req));
                heap.push(turn);
            }
        }
        while let Some(turn) = heap.pop() {
            let q = turn.queue as usize;
            let Some((members, req)) = current[q].take() else { continue };
            out.extend_from_slice(&members);
            add_to(&mut alloc[q], &req);
            if let Some((members, req, turn)) = next(q, &alloc[q]) {
                current[q] = Some((members, req));
                heap.push(turn);
            }
        }
        out
    }

    /// Leaves the jobs just evicted (`lists`, as for [`Self::return_order_of`]; `chosen`, the same
    /// jobs as a set) on their nodes as evicted occupants, ranked by when they would return:
    /// below every job still evicted from an earlier round, so that those give their places up
    /// first.
    pub(super) fn leave_evicted(&mut self, lists: &[Vec<u32>], chosen: &BTreeSet<u32>) {
        let order = self.return_order_of(lists);
        let base = self.returns.ranks_below(order.len());
        for (i, &j) in order.iter().enumerate() {
            let Some(node) = self.ledger.fate(j).node else { continue };
            let freed_at = self.freed_at(j, node, true);
            let Some(mut occ) = self.db.remove(node, j) else { continue };
            occ.freed_at = freed_at;
            occ.evicted = true;
            occ.return_rank = base + i as u32;
            self.db.add(node, occ);
        }
        self.returns.restart(&self.db, self.ledger.fates(), chosen, &order);
    }

    /// The node where a job needing `req` on nodes of `types` takes the places of the evicted
    /// jobs freed at eviction level `level` that would return last ([`super::return_walk::ReturnWalk::fair_share_node`]).
    pub(super) fn fair_share_node(&mut self, level: u8, types: &[u32], req: &ResVec) -> Option<u32> {
        debug_assert!(self.view().levels.is_eviction_level(level));
        self.returns.fair_share_node(&self.db, self.ledger.fates(), self.ledger.recording(), level, types, req)
    }
}
