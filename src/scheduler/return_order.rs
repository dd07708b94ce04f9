//! Whose place a job takes when it must displace evicted jobs.
//!
//! Evicted jobs may only return to their own node, so which evicted job gives its place to a
//! newcomer decides which queue ends up short. As in Armada, the evicted jobs are ranked by the
//! order in which progressive filling would put them back if nothing else were scheduled
//! ([`return_order`]), and a job that must displace evicted jobs takes the place of
//! those that would return last (`PoolCycle::fair_share_node`): the jobs of the queues that
//! would end furthest above the others. A queue therefore only loses places to a queue whose
//! share, after the place changes hands, is no larger than its own: max-min fairness, whatever
//! nodes the queues happened to occupy. The walk over the evicted jobs, last to return first, is
//! in `return_walk.rs`. Evicted jobs returning to a node that has too little room
//! for all of them go back in the same order ([`super::nodedb::NodeDb::victims`]).

use super::guarantee::below_floor_cost;
use super::job::CycleJob;
use super::queue::{CycleQueue, Turn};
use super::resvec::{ResVec, add_to};
use super::view::PoolView;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::collections::BinaryHeap;

/// The order in which progressive filling would put back `lists` (each queue's evicted jobs,
/// in queue order, gang members included) starting from the queues' allocations now, if
/// nothing else were scheduled: the most urgent gang first, then the queue whose cost after
/// it is lowest (a queue within its guarantee floor before any other, as in filling), then the
/// queue name; a gang's members one after the other.
pub(super) fn return_order(
    view: &PoolView<'_>,
    jobs: &[CycleJob<'_>],
    queues: &[CycleQueue<'_>],
    lists: &[Vec<u32>],
) -> Vec<u32> {
    let mut out = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    // Members of each gang, in queue order, by (queue, gang id).
    let mut gangs: HashMap<(u32, &str), SmallVec<[u32; 4]>> = HashMap::default();
    for list in lists {
        for &j in list {
            let job = &jobs[j as usize];
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
            let job = &jobs[j as usize];
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
            let mut req = view.job_req(&jobs[members[0] as usize]);
            for &m in &members[1..] {
                add_to(&mut req, &view.job_req(&jobs[m as usize]));
            }
            let qc = &queues[q];
            // As progressive filling orders queues: one still within its guarantee floor first.
            let share_after = view.cost.share_with(alloc, &req);
            let cost_after =
                below_floor_cost(share_after, qc.guaranteed_share).unwrap_or(share_after * qc.priority_factor);
            let turn = Turn::new(job.class_priority, cost_after, q as u32);
            return Some((members, req, turn));
        }
    };
    let mut alloc: Vec<ResVec> =
        (0..lists.len()).map(|q| if lists[q].is_empty() { ResVec::new() } else { queues[q].alloc.clone() }).collect();
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
