//! Fair-share preemption: evict preemptible jobs in the scheduler's view.
//!
//! Each node is picked with `node_eviction_probability`; on a picked node every job of a
//! preemptible class whose queue is above its protected share is evicted, and gangs go whole. A
//! queue's protected share is, as in Armada, `protected_fraction_of_fair_share` times the larger
//! of its fair share (`weight / Σ weights` of the active queues) and its adjusted (demand-capped)
//! fair share: a heavily weighted queue that asks for little keeps what it has. With guaranteed
//! resources both shares are raised to the queue's guarantee floor and the others' lowered
//! ([`super::guarantee`]), so a queue below its guarantee evicts the preemptible jobs of queues
//! holding more than the larger of their guarantee and their fair share. Evicted jobs
//! leave their queue's allocation, go to the front of their queue and still occupy their node (at
//! a level that only jobs of their priority or higher may take), ranked by the order in which
//! they would return ([`super::return_order`]), until progressive filling either puts them back
//! or gives their place away.
//!
//! Protection is judged first on the shares at the start of the cycle and then again after
//! filling: a queue that this cycle's placements pushed above its protected share is evicted and
//! the queues' waiting jobs are offered once more ([`Eviction::rebalance`]). Without that second
//! look the rebalancing would only happen in the next cycle, so a cycle with nothing new would
//! still preempt.
//!
//! [`Eviction`] borrows what eviction reads (the pool, the jobs, their gangs, the queue tree) and
//! what it changes (the queues' allocations and protection, the node db's evicted occupants, the
//! return order, the ledger, its own rounds); the cycle lends them (`PoolCycle::eviction`).

use super::decisions::Reason;
use super::hierarchy::Hierarchy;
use super::job::{CycleJobs, GangIndex, Status};
use super::ledger::Ledger;
use super::min_runtime::MinRuntime;
use super::nodedb::NodeDb;
use super::queue::CycleQueue;
use super::queue_order::CycleOrderKey;
use super::resvec::{ResVec, sub_from};
use super::return_order::return_order;
use super::return_walk::ReturnWalk;
use super::view::PoolView;
use rand_core::Rng;
use std::collections::BTreeSet;

/// What eviction keeps from one round to the next in a cycle.
#[derive(Debug, Default)]
pub(super) struct EvictionRounds {
    /// Nodes drawn for fair-share eviction this cycle.
    drawn: Vec<bool>,
    /// Evict-and-refill rounds after the first fill.
    rebalances: usize,
}

/// Fair-share eviction over the parts of the cycle it reads and changes.
pub(super) struct Eviction<'c, 'a> {
    /// The pool.
    pub view: &'c PoolView<'a>,
    /// The jobs taking part.
    pub jobs: &'c CycleJobs<'a>,
    /// The gangs' members (gangs are evicted whole).
    pub gangs: &'c GangIndex<'a>,
    /// The queue tree, if the pool has one (its fair shares).
    pub tree: Option<&'c Hierarchy>,
    /// The queues: their allocations, protection, evicted and retried jobs.
    pub queues: &'c mut [CycleQueue<'a>],
    /// The node db, where evicted jobs stay as evicted occupants.
    pub db: &'c mut NodeDb,
    /// The evicted jobs, last to return first.
    pub returns: &'c mut ReturnWalk,
    /// The jobs' fates and the cycle's tallies.
    pub ledger: &'c mut Ledger,
    /// The nodes drawn and the rounds done.
    pub rounds: &'c mut EvictionRounds,
    /// Running jobs too young to evict, and whom eviction spared.
    pub min_runtime: &'c mut MinRuntime,
}

impl Eviction<'_, '_> {
    /// Draws the nodes eligible for eviction and evicts the queues above their protected share.
    pub(super) fn evict(&mut self, rng: &mut rand_pcg::Pcg64) {
        let p = self.view.cfg.node_eviction_probability;
        self.rounds.drawn = (0..self.db.nodes.len()).map(|_| p >= 1.0 || (p > 0.0 && draw(rng) < p)).collect();
        let shares: Vec<f64> = self.queues.iter().map(|q| q.adjusted_fair_share).collect();
        let over = self.over_share(&shares);
        self.evict_queues(&over);
    }

    /// Queues above their protected share now, given their adjusted fair shares; the others
    /// keep their `protected` mark.
    fn over_share(&mut self, adjusted: &[f64]) -> Vec<bool> {
        let frac = self.view.cfg.protected_fraction_of_fair_share;
        let over: Vec<bool> = self
            .queues
            .iter()
            .zip(adjusted)
            // A small tolerance keeps a queue exactly at its share from flapping on rounding.
            .map(|(q, a)| self.view.cost.share(&q.alloc) > frac * q.fair_share.max(*a) + 1e-9)
            .collect();
        for (q, &o) in self.queues.iter_mut().zip(&over) {
            if o {
                q.protected = false;
            }
        }
        over
    }

    /// Adjusted fair shares as the next cycle will see them: preempted and failed jobs no longer
    /// count as demand.
    fn adjusted_shares_now(&self) -> Vec<f64> {
        let mut demand: Vec<ResVec> = self.queues.iter().map(|q| q.demand.clone()).collect();
        let gone = self
            .jobs
            .running()
            .filter(|&j| matches!(self.ledger.status(j), Status::Evicted | Status::Preempted))
            .chain(self.ledger.failed().iter().copied().filter(|&j| self.ledger.status(j) == Status::Failed));
        for j in gone {
            let q = self.jobs[j as usize].queue as usize;
            sub_from(&mut demand[q], &self.req(j));
        }
        if let Some(tree) = self.tree_adjusted_shares(&demand) {
            return tree;
        }
        let active: Vec<usize> = (0..self.queues.len()).filter(|&i| self.queues[i].active).collect();
        let weights: Vec<f64> = active.iter().map(|&i| 1.0 / self.queues[i].priority_factor).collect();
        let demands: Vec<f64> = active.iter().map(|&i| self.view.cost.share(&demand[i])).collect();
        let adjusted = super::fairness::adjusted_fair_shares(&weights, &demands);
        let mut out = vec![0.0; self.queues.len()];
        for (k, &i) in active.iter().enumerate() {
            out[i] = adjusted[k];
        }
        out
    }

    /// Evicts the preemptible jobs of `queues` on eviction nodes; true if any was evicted.
    fn evict_queues(&mut self, queues: &[bool]) -> bool {
        if self.view.cfg.node_eviction_probability <= 0.0 || !queues.iter().any(|q| *q) {
            return false;
        }
        let mut chosen: BTreeSet<u32> = BTreeSet::new();
        for n in 0..self.db.nodes.len() {
            if !self.rounds.drawn[n] {
                continue;
            }
            for o in &self.db.nodes[n].occupants {
                let job = &self.jobs[o.job as usize];
                if o.evicted
                    || !queues[job.queue as usize]
                    || !self.view.priority_classes[job.priority_class as usize].preemptible
                {
                    continue;
                }
                let members: Vec<u32> = match &job.info.gang {
                    Some(g) => self
                        .gangs
                        .members(job.queue, g.id.as_str())
                        .into_iter()
                        .filter(|&m| self.ledger.held_node(m).is_some())
                        .collect(),
                    None => Vec::new(),
                };
                // A job (or gang) that has not run its minimum runtime stays.
                let wait =
                    std::iter::once(o.job).chain(members.iter().copied()).map(|m| self.min_runtime.eviction_wait(m));
                let wait = wait.max().unwrap_or(0);
                if wait > 0 {
                    self.min_runtime.note_spared(o.job, wait);
                    continue;
                }
                chosen.insert(o.job);
                chosen.extend(members);
            }
        }
        if chosen.is_empty() {
            return false;
        }
        let mut per_queue: Vec<Vec<u32>> = vec![Vec::new(); self.queues.len()];
        for &j in &chosen {
            if self.ledger.held_node(j).is_none() {
                continue;
            }
            let req = self.req(j);
            let job = &self.jobs[j as usize];
            let (q, pc) = (job.queue, job.priority_class);
            self.ledger.change(j, |f| f.status = Status::Evicted);
            sub_from(&mut self.queues[q as usize].alloc, &req);
            sub_from(&mut self.queues[q as usize].alloc_by_priority_class[pc as usize], &req);
            per_queue[q as usize].push(j);
        }
        let evicted = chosen.iter().filter(|&&j| !self.jobs[j as usize].was_queued()).count();
        self.ledger.count_evicted(evicted);
        for list in &mut per_queue {
            list.sort_by_key(|&j| (self.order_key(j), j));
        }
        self.leave_evicted(&per_queue, &chosen);
        for (q, mut list) in per_queue.into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            // One entry per gang (its first member in queue order); the rest travel with it.
            let mut seen = rustc_hash::FxHashSet::default();
            list.retain(|&j| match &self.jobs[j as usize].info.gang {
                Some(g) => seen.insert(g.id.clone()),
                None => true,
            });
            let qc = &mut self.queues[q];
            qc.evicted = list;
            qc.evicted_pos = 0;
        }
        true
    }

    /// After filling: if jobs still wait for room while queues are above their protected share
    /// (because this cycle's placements pushed them there, or because the order of turns let them
    /// take back places a waiting job could have had), evicts those queues again and offers the
    /// waiting jobs once more. True if there is anything to fill again.
    pub(super) fn rebalance(&mut self) -> bool {
        if self.rounds.rebalances >= MAX_REBALANCES {
            return false;
        }
        self.rounds.rebalances += 1;
        if !self.jobs.queued().any(|j| self.waits_for_room(j)) {
            return false;
        }
        let shares = self.adjusted_shares_now();
        let over = self.over_share(&shares);
        // With earmarked nodes, a displacement that freed more than it took (a larger victim, a
        // broken gang) left room that jobs tried before it, guests among them (which may not
        // displace anyone), may take; and a guest whose new place a job at home took may find
        // another: offer the waiting jobs once more too.
        let reoffer = self.view.earmarks.active() && self.ledger.take_reoffer();
        if !self.evict_queues(&over) && !reoffer {
            return false;
        }
        // Listed after the eviction, which changes only jobs that hold a place, never a waiting
        // one: the list is what it was before it. Most rebalances evict nobody, and listing every
        // waiting job first (most of the queued jobs, under load) was then thrown away.
        let mut retry: Vec<Vec<u32>> = vec![Vec::new(); self.queues.len()];
        let mut seen_gangs = rustc_hash::FxHashSet::default();
        for j in self.jobs.queued() {
            if !self.waits_for_room(j) {
                continue;
            }
            let job = &self.jobs[j as usize];
            if let Some(g) = &job.info.gang
                && !seen_gangs.insert((job.queue, g.id.clone()))
            {
                continue;
            }
            retry[job.queue as usize].push(j);
        }
        self.ledger.forget_verdicts();
        for (q, list) in self.queues.iter_mut().zip(retry) {
            q.retry = list;
            q.retry_pos = 0;
        }
        true
    }

    /// True if queued job `j` waits for room that a rebalance may free: it is waiting, for a
    /// reason about room rather than a rule.
    fn waits_for_room(&self, j: u32) -> bool {
        let fate = self.ledger.fate(j);
        fate.status == Status::Waiting
            && matches!(
                fate.reason.as_deref(),
                Some(
                    Reason::NoCapacity { .. }
                        | Reason::ReservedNodes { .. }
                        | Reason::Gang { .. }
                        | Reason::Displaced { .. }
                        | Reason::GangMemberLost { .. }
                        | Reason::MinRuntime { .. }
                        | Reason::FloatingResource { .. }
                )
            )
    }

    /// Leaves the jobs just evicted (`lists`, each queue's in queue order, gang members included;
    /// `chosen`, the same jobs as a set) on their nodes as evicted occupants, ranked by when they
    /// would return ([`return_order`]): below every job still evicted from an earlier round, so
    /// that those give their places up first.
    fn leave_evicted(&mut self, lists: &[Vec<u32>], chosen: &BTreeSet<u32>) {
        let order = return_order(self.view, self.jobs, self.queues, lists);
        let base = self.returns.ranks_below(order.len());
        for (i, &j) in order.iter().enumerate() {
            let Some(node) = self.ledger.fate(j).node else { continue };
            let freed_at = self.view.freed_at(&self.jobs[j as usize], node, true);
            let Some(mut occ) = self.db.remove(node, j) else { continue };
            occ.freed_at = freed_at;
            occ.evicted = true;
            occ.return_rank = base + i as u32;
            self.db.add(node, occ);
        }
        self.returns.restart(self.db, self.ledger.fates(), chosen, &order);
    }

    /// Adjusted fair shares through the tree for the given demand of each queue.
    fn tree_adjusted_shares(&self, demand: &[ResVec]) -> Option<Vec<f64>> {
        let tree = self.tree?;
        let weights: Vec<f64> = self.queues.iter().map(|q| 1.0 / q.priority_factor).collect();
        let demands: Vec<f64> = demand.iter().map(|d| self.view.cost.share(d)).collect();
        let active: Vec<bool> = self.queues.iter().map(|q| q.active).collect();
        Some(tree.shares(&weights, &demands, &active).adjusted)
    }

    /// Job `j`'s dense requests.
    #[inline]
    fn req(&self, j: u32) -> ResVec {
        self.view.job_req(&self.jobs[j as usize])
    }

    /// Job `j`'s place in its queue's order, evicted jobs first.
    #[inline]
    fn order_key(&self, j: u32) -> CycleOrderKey {
        self.jobs[j as usize].order_key(self.ledger.fate(j))
    }
}

/// Most extra evict-and-refill rounds in one cycle.
const MAX_REBALANCES: usize = 3;

/// A uniform draw in [0, 1).
fn draw(rng: &mut rand_pcg::Pcg64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
