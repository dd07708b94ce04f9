//! Fair-share preemption, step one: evict preemptible running jobs in the scheduler's view.
//!
//! Each node is picked with `node_eviction_probability`; on a picked node every running job of a
//! preemptible class whose queue is above `protected_fraction_of_fair_share` of its adjusted fair
//! share is evicted, and gangs go whole. Evicted jobs leave their queue's allocation, go to the
//! front of their queue and still occupy their node (at a level that only jobs of their priority
//! or higher may take) until progressive filling either puts them back or gives their place away.

use super::cycle::{PoolCycle, Status};
use super::nodedb::Occupant;
use super::resvec::sub_from;
use std::collections::BTreeSet;

impl PoolCycle<'_> {
    pub(super) fn evict(&mut self, rng: &mut rand_pcg::Pcg64) {
        let p = self.cfg.node_eviction_probability;
        if p <= 0.0 {
            return;
        }
        let frac = self.cfg.protected_fraction_of_fair_share;
        let protected: Vec<bool> = self
            .queues
            .iter()
            // A small tolerance keeps a queue exactly at its share from flapping on rounding.
            .map(|q| q.actual_share <= frac * q.adjusted_fair_share + 1e-9)
            .collect();
        if protected.iter().all(|p| *p) {
            return;
        }
        let mut chosen: BTreeSet<u32> = BTreeSet::new();
        for n in 0..self.db.nodes.len() {
            if p < 1.0 && Self::draw(rng) >= p {
                continue;
            }
            let mut on_node: Vec<u32> = self.db.nodes[n].occupants.iter().map(|o| o.job).collect();
            on_node.sort_unstable();
            for j in on_node {
                let job = &self.jobs[j as usize];
                if job.status == Status::Running && self.pcs[job.pc as usize].preemptible && !protected[job.queue as usize] {
                    chosen.insert(j);
                    if let Some(g) = &job.info.gang {
                        if let Some(members) = self.running_gangs.get(&(job.queue, g.id.as_str())) {
                            chosen.extend(members.iter().copied());
                        }
                    }
                }
            }
        }
        let mut per_queue: Vec<Vec<u32>> = vec![Vec::new(); self.queues.len()];
        for &j in &chosen {
            let job = &self.jobs[j as usize];
            let Some(node) = job.node() else { continue };
            let req = self.req(j);
            let (q, pc, prio_idx, seq) = (job.queue, job.pc, job.prio_idx, job.seq);
            self.db.remove(node, j);
            self.db.add(node, Occupant { job: j, queue: q, freed_at: self.levels.evicted_freed_at(prio_idx as usize), evicted: true, seq, req: req.clone() });
            self.jobs[j as usize].status = Status::Evicted;
            sub_from(&mut self.queues[q as usize].alloc, &req);
            sub_from(&mut self.queues[q as usize].alloc_by_pc[pc as usize], &req);
            per_queue[q as usize].push(j);
        }
        self.evicted_count += chosen.len();
        for (q, mut list) in per_queue.into_iter().enumerate() {
            // One entry per gang (its first member in queue order); the rest travel with it.
            list.sort_by_key(|&j| (self.jobs[j as usize].order_key(), j));
            let mut seen = rustc_hash::FxHashSet::default();
            list.retain(|&j| match &self.jobs[j as usize].info.gang {
                Some(g) => seen.insert(g.id.clone()),
                None => true,
            });
            self.queues[q].evicted = list;
        }
    }
}
