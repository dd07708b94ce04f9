//! Whose place a job takes when it must displace evicted jobs.
//!
//! Evicted jobs may only return to their own node, so which evicted job gives its place to a
//! newcomer decides which queue ends up short. As in Armada, the evicted jobs are ranked by the
//! order in which progressive filling would put them back if nothing else were scheduled
//! ([`PoolCycle::return_order_of`]), and a job that must displace evicted jobs takes the place of
//! those that would return last ([`PoolCycle::fair_share_node`]): the jobs of the queues that
//! would end furthest above the others. A queue therefore only loses places to a queue whose
//! share, after the place changes hands, is no larger than its own: max-min fairness, whatever
//! nodes the queues happened to occupy. Evicted jobs returning to a node that has too little room
//! for all of them go back in the same order ([`super::nodedb::NodeDb::victims`]).

use super::context::PoolCycle;
use super::job::Status;
use super::nodedb::Occupant;
use super::queue::Turn;
use super::resvec::{ResVec, add_to, fits};
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
                let cost_after = self.view.cost.share_with(alloc, &req) * qc.priority_factor;
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
        let base = self.rank_floor.saturating_sub(order.len() as u32);
        for (i, &j) in order.iter().enumerate() {
            let job = &self.jobs[j as usize];
            let Some(node) = job.node else { continue };
            let freed_at = self.freed_at(j, node, true);
            let Some(mut occ) = self.db.remove(node, j) else { continue };
            occ.freed_at = freed_at;
            occ.evicted = true;
            occ.return_rank = base + i as u32;
            self.db.add(node, occ);
        }
        self.rank_floor = base;
        let mut walk: Vec<u32> = self.return_order[self.return_head..]
            .iter()
            .copied()
            .filter(|&j| j != GONE && !chosen.contains(&j) && self.evicted_occupant(j).is_some())
            .collect();
        walk.extend(order.iter().rev());
        self.return_order = walk;
        self.return_head = 0;
    }

    /// Job `j`'s node and occupancy if it is evicted and still holds its place there.
    pub(super) fn evicted_occupant(&self, j: u32) -> Option<(u32, &Occupant)> {
        let job = &self.jobs[j as usize];
        if job.status != Status::Evicted {
            return None;
        }
        let n = job.node?;
        self.db.nodes[n as usize].occupants.iter().find(|o| o.job == j && o.evicted).map(|o| (n, o))
    }

    /// The node where a job needing `req` on nodes of `types` takes the places of the evicted
    /// jobs freed at eviction level `level` that would return last: walking the evicted jobs from
    /// the last to return, the first node where what they free (with everything freed below
    /// `level`) makes room.
    ///
    /// Lower levels were searched first, so every node with room at this level needs some evicted
    /// job of this level to go, and the walk finds one of them if there is any. It stops after
    /// [`WALK_LIMIT`] evicted jobs, though (a large job among many small evicted ones, or evicted
    /// jobs on nodes the job may not use): then None, and the caller chooses among the nodes its
    /// tier and best-fit order ranks first, still by return rank.
    pub(super) fn fair_share_node(&mut self, level: u8, types: &[u32], req: &ResVec) -> Option<u32> {
        debug_assert!(self.view.levels.is_eviction_level(level));
        let below = (level - 1) as usize;
        let mut free = std::mem::take(&mut self.room_if_evicted_leave);
        free.clear();
        let mut found = None;
        let mut visited = 0;
        let mut i = self.return_head;
        while i < self.return_order.len() && visited < WALK_LIMIT {
            let j = self.return_order[i];
            i += 1;
            if j == GONE {
                continue;
            }
            visited += 1;
            let Some((n, occ)) = self.evicted_occupant(j) else {
                // Returned or displaced: gone for good, unless it happened in a trial that may
                // still be rolled back.
                if !self.ledger.recording() {
                    self.return_order[i - 1] = GONE;
                }
                continue;
            };
            let node = &self.db.nodes[n as usize];
            if occ.freed_at as usize != below + 1 || !types.contains(&node.type_id) {
                continue;
            }
            let f = free.entry(n).or_insert_with(|| node.free[below].clone());
            add_to(f, &occ.req);
            if fits(req, f) {
                found = Some(n);
                break;
            }
        }
        while self.return_head < self.return_order.len() && self.return_order[self.return_head] == GONE {
            self.return_head += 1;
        }
        self.room_if_evicted_leave = free;
        found
    }
}

/// Evicted jobs one placement looks at before falling back on the tier and best-fit order:
/// enough for jobs the size of the evicted ones, few enough that a cycle with many evicted jobs
/// stays fast.
const WALK_LIMIT: usize = 64;

/// An entry of [`PoolCycle::return_order`] that no longer holds a place.
const GONE: u32 = u32::MAX;
