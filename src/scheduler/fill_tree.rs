//! The cycle's steps through the queue tree ([`super::hierarchy`]): hierarchical fair shares,
//! progressive filling by picking a leaf level by level, and the parents' reports.

use super::context::PoolCycle;
use super::decisions::QueueShare;
#[cfg(test)]
use super::hierarchy::{FULL_PICKS, Hierarchy};
use super::queue::Turn;
use super::rate_limit::RateLimits;
use super::resvec::{ResVec, add_to};
use crate::model::QueueName;
use std::collections::BTreeMap;

impl<'a> PoolCycle<'a> {
    /// Builds the queue tree even for flat queues (tests: the tree's path must then decide as
    /// the flat one does), and recomputes the shares through it.
    #[cfg(test)]
    pub(super) fn force_tree(&mut self) {
        self.tree = Hierarchy::build(&self.queues, self.view().default_priority(), self.view().layout.zero(), true);
        self.tree_shares();
    }

    /// Sets every queue's fair share and adjusted fair share through the tree (parents included,
    /// for the report). Called by `compute_shares` when the pool has a tree.
    pub(super) fn tree_shares(&mut self) {
        let Some(tree) = self.tree.take() else { return };
        let weights: Vec<f64> = self.queues.iter().map(|q| 1.0 / q.priority_factor).collect();
        let demands: Vec<f64> = self.queues.iter().map(|q| self.view().cost.share(&q.demand)).collect();
        let active: Vec<bool> = self.queues.iter().map(|q| q.active).collect();
        let (plain, adjusted) = tree.shares(&weights, &demands, &active);
        for (i, q) in self.queues.iter_mut().enumerate() {
            q.fair_share = plain[i];
            q.adjusted_fair_share = adjusted[i];
            q.overshare = q.actual_share - q.adjusted_fair_share;
        }
        self.tree = Some(tree);
    }

    /// Adjusted fair shares through the tree for the given demand of each queue.
    pub(super) fn tree_adjusted_shares(&self, demand: &[ResVec]) -> Option<Vec<f64>> {
        let tree = self.tree.as_deref()?;
        let weights: Vec<f64> = self.queues.iter().map(|q| 1.0 / q.priority_factor).collect();
        let demands: Vec<f64> = demand.iter().map(|d| self.view().cost.share(d)).collect();
        let active: Vec<bool> = self.queues.iter().map(|q| q.active).collect();
        Some(tree.shares(&weights, &demands, &active).1)
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

impl PoolCycle<'_> {
    /// The name of queue `q`'s parent in the tree.
    pub(super) fn tree_parent_name(&self, q: u32) -> Option<QueueName> {
        let p = self.tree.as_deref()?.parent_of(q)?;
        Some(self.queues[p as usize].name.clone())
    }

    /// The report of every parent queue with an active subtree: its subtree's allocation at the
    /// start and end of the cycle, its demand, and its level's shares.
    pub(super) fn parent_reports(&self) -> BTreeMap<usize, QueueShare> {
        let Some(tree) = self.tree.as_deref() else { return BTreeMap::new() };
        let n = self.queues.len();
        let (mut alloc, mut start, mut demand) =
            (self.queues.iter().map(|q| q.alloc.clone()).collect::<Vec<_>>(), Vec::with_capacity(n), Vec::new());
        start.extend(self.queues.iter().map(|q| q.alloc_start.clone()));
        demand.extend(self.queues.iter().map(|q| q.demand.clone()));
        let mut active: Vec<bool> = self.queues.iter().map(|q| q.active).collect();
        for &v in tree.post_order() {
            if let Some(p) = tree.parent_of(v) {
                let (v, p) = (v as usize, p as usize);
                let (a, s, d) = (alloc[v].clone(), start[v].clone(), demand[v].clone());
                add_to(&mut alloc[p], &a);
                add_to(&mut start[p], &s);
                add_to(&mut demand[p], &d);
                active[p] |= active[v];
            }
        }
        (0..n)
            .filter(|&i| tree.is_parent(i as u32) && active[i])
            .map(|i| {
                let q = &self.queues[i];
                let share = QueueShare {
                    queue: q.name.clone(),
                    weight: 1.0 / q.priority_factor,
                    fair_share: q.fair_share,
                    adjusted_fair_share: q.adjusted_fair_share,
                    actual_share: self.view().cost.share(&start[i]),
                    share_after: self.view().cost.share(&alloc[i]),
                    protected: q.protected,
                    allocated: self.view().layout.named(&alloc[i]),
                    demand: self.view().layout.named(&demand[i]),
                    home_allocated: Default::default(),
                    guest_allocated: Default::default(),
                    usage: self.view().cost.share(&start[i]),
                    parent: self.tree_parent_name(i as u32),
                    is_parent: true,
                    proportional_target: None,
                };
                (i, share)
            })
            .collect()
    }
}
