//! The cycle's steps through the queue tree ([`super::hierarchy`]): hierarchical fair shares,
//! progressive filling by picking a leaf level by level. The parents' reports are the outcome's
//! ([`super::outcome`]).

use super::context::PoolCycle;
#[cfg(test)]
use super::hierarchy::{FULL_PICKS, Hierarchy};
use super::queue::Turn;
use super::rate_limit::RateLimits;

impl<'a> PoolCycle<'a> {
    /// Builds the queue tree even for flat queues (tests: the tree's path must then decide as
    /// the flat one does), and recomputes the shares through it.
    #[cfg(test)]
    pub(super) fn force_tree(&mut self) {
        self.tree = Hierarchy::build(&self.queues, self.view().default_priority(), self.view().layout.zero(), true);
        self.fences = self.tree.as_ref().and_then(|t| t.fences().cloned()).map(Box::new);
        self.tree_shares();
    }

    /// Sets every queue's fair share and adjusted fair share through the tree (parents included,
    /// for the report). Called by `compute_shares` when the pool has a tree.
    pub(super) fn tree_shares(&mut self) {
        let Some(mut tree) = self.tree.take() else { return };
        let weights: Vec<f64> = self.queues.iter().map(|q| 1.0 / q.priority_factor).collect();
        let demands: Vec<f64> = self.queues.iter().map(|q| self.view().cost.share(&q.demand)).collect();
        let active: Vec<bool> = self.queues.iter().map(|q| q.active).collect();
        if self.queues.iter().any(|q| !q.snap.queue.guaranteed.is_zero()) {
            let view = self.view();
            let own: Vec<_> = self.queues.iter().map(|q| view.layout.dense_lossy(&q.snap.queue.guaranteed)).collect();
            let demand: Vec<_> = self.queues.iter().map(|q| q.demand.clone()).collect();
            tree.set_guarantees(&own, &demand, &view.total);
        }
        let shares = tree.shares(&weights, &demands, &active);
        tree.set_floors(&shares.floor);
        for (i, q) in self.queues.iter_mut().enumerate() {
            q.fair_share = shares.plain[i];
            q.adjusted_fair_share = shares.adjusted[i];
            q.overshare = q.actual_share - q.adjusted_fair_share;
            q.guaranteed_share = shares.floor[i];
            q.guarantee_scaled = shares.scaled[i];
        }
        self.tree = Some(tree);
    }

    /// Progressive filling through the tree: pick a leaf level by level, attempt its candidate,
    /// move it on, until no queue has anything to offer.
    pub(super) fn fill_tree(&mut self, rate: &mut RateLimits) {
        let Some(mut tree) = self.tree.take() else { return };
        let mut turns: Vec<Option<Turn>> = (0..self.queues.len() as u32).map(|q| self.advance(q, rate)).collect();
        // Between picks only the queue offered and the queues whose allocation an attempt
        // changed (placements, displacements, evictions, rollbacks: all through `alloc`) need
        // recomputing, with their ancestors.
        tree.start_picks();
        self.ledger.start_alloc_log();
        while let Some(q) = tree.pick(&self.queues, &self.view().cost, &turns) {
            tree.record_first_offers(&self.queues);
            self.offer_and_advance(q, &mut turns, rate);
            tree.mark_stale(q);
            for c in self.ledger.drain_alloc_log() {
                tree.mark_stale(c);
            }
            #[cfg(test)]
            if FULL_PICKS.with(std::cell::Cell::get) {
                tree.forget_picks();
            }
        }
        self.ledger.stop_alloc_log();
        self.tree = Some(tree);
    }

    fn offer_and_advance(&mut self, q: u32, turns: &mut [Option<Turn>], rate: &mut RateLimits) {
        if let Some(cand) = self.queues[q as usize].current.take() {
            self.attempt(q, cand, rate);
        }
        turns[q as usize] = self.advance(q, rate);
    }
}
