//! The `proportional` pool policy (Determined's fair-share scheduler).
//!
//! **What is divided.** In a pool whose nodes offer `nvidia.com/gpu`, its GPUs, in whole GPUs.
//! In a pool without GPUs, its dominant resource: of `dominant_resource_fairness_resources` the
//! pool offers, the one whose demand (summed over the pool's queues) is the largest fraction of
//! the pool's capacity (the first listed on ties), in its stored unit (millicores, bytes,
//! milli-units).
//!
//! **Targets** ([`proportional_targets`]). A queue's demand is what it holds in the pool plus
//! what its queued jobs request; queues with demand share the capacity in proportion to
//! demand × weight (weight = 1 / priority factor), no queue more than its demand, what capped
//! queues leave shared again among the others the same way. Targets are whole units: each gets
//! the integer part of its share, and the units left over go one by one to the largest
//! remainders (the queue first in name order on ties).
//!
//! **Preemption** (on unless `preemption = false`). A queue holding more than its target loses
//! preemptible jobs that hold some of the divided resource, the latest started first (newest
//! submitted on ties), until it holds no more than its target; a gang goes whole. Jobs of
//! non-preemptible classes are never preempted, so such a queue may stay above its target.
//!
//! **Filling.** Queues take turns, the one holding the smallest fraction of its target first:
//! each offers its next job in queue order, which starts if it fits now (no preemption) and keeps
//! the queue within its target; a job that would take the queue above its target waits, and the
//! queue offers its next one. Jobs that request none of the divided resource (CPU-only jobs in a
//! GPU pool) are not held to targets.

use super::super::context::PoolCycle;
use super::super::decisions::{PreemptionReason, Reason};
use super::super::job::Status;
use super::super::queue::Candidate;
use super::super::rate_limit::RateLimits;
use super::super::resvec::add_to;
use crate::model::quantity::{Unit, format_quantity};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Divides `capacity` units among claimants in proportion to `demands[i] × weights[i]`, none
/// more than its demand, what capped ones leave shared again among the others; whole units,
/// left-over units to the largest remainders (lowest index on ties). Claimants with no demand
/// or a weight that is not > 0 get nothing. The targets sum to `min(capacity, Σ demands)`.
pub(crate) fn proportional_targets(capacity: i64, demands: &[i64], weights: &[f64]) -> Vec<i64> {
    let n = demands.len();
    let mut targets = vec![0i64; n];
    let valid = |i: usize| demands[i] > 0 && weights[i].is_finite() && weights[i] > 0.0;
    let mut open: Vec<usize> = (0..n).filter(|&i| valid(i)).collect();
    let mut remaining = capacity.max(0);
    // Cap, round after round, every claimant whose share reaches its demand.
    loop {
        let total: f64 = open.iter().map(|&i| demands[i] as f64 * weights[i]).sum();
        if open.is_empty() || total <= 0.0 {
            break;
        }
        let (capped, still): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| remaining as f64 * weights[i] >= total);
        if capped.is_empty() {
            break;
        }
        for i in capped {
            targets[i] = demands[i];
            remaining -= demands[i];
        }
        remaining = remaining.max(0);
        open = still;
    }
    if open.is_empty() {
        return targets;
    }
    let total: f64 = open.iter().map(|&i| demands[i] as f64 * weights[i]).sum();
    let mut fractions: Vec<(f64, usize)> = Vec::with_capacity(open.len());
    let mut given = 0i64;
    for &i in &open {
        let share = remaining as f64 * (demands[i] as f64 * weights[i]) / total;
        let whole = (share.floor() as i64).clamp(0, demands[i]);
        targets[i] = whole;
        given += whole;
        fractions.push((share - whole as f64, i));
    }
    // Largest remainder first, lowest index on ties.
    fractions.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut left = remaining - given;
    while left > 0 {
        let before = left;
        for &(_, i) in &fractions {
            if left == 0 {
                break;
            }
            if targets[i] < demands[i] {
                targets[i] += 1;
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    targets
}

impl PoolCycle<'_> {
    /// The slot divided and its unit (see the module docs), or none if the pool offers nothing
    /// that could be.
    fn divided_slot(&self) -> Option<(usize, i64)> {
        if let Some(s) = self.view().layout.slot(super::gpu().as_str())
            && self.view().total[s] > 0
        {
            return Some((s, 1000));
        }
        let mut best: Option<(f64, usize)> = None;
        for r in &self.view().cfg.dominant_resource_fairness_resources {
            let Some(s) = self.view().layout.slot(r.as_str()) else { continue };
            if self.view().total[s] <= 0 {
                continue;
            }
            let demand: i64 = self.queues.iter().map(|q| q.demand[s]).sum();
            let ratio = demand as f64 / self.view().total[s] as f64;
            if best.is_none_or(|(b, _)| ratio > b) {
                best = Some((ratio, s));
            }
        }
        best.map(|(_, s)| (s, 1))
    }

    /// Fills the pool by proportional targets.
    pub(in super::super) fn fill_proportional(&mut self, rate: &mut RateLimits) {
        let divided = self.divided_slot();
        let targets: Option<Vec<i64>> = divided.map(|(s, unit)| {
            let demands: Vec<i64> = self.queues.iter().map(|q| (q.demand[s].max(0) + unit - 1) / unit).collect();
            let weights: Vec<f64> = self.queues.iter().map(|q| 1.0 / q.priority_factor).collect();
            proportional_targets(self.view().total[s] / unit, &demands, &weights)
                .into_iter()
                .map(|t| t * unit)
                .collect()
        });
        if let (Some((s, _)), Some(t)) = (divided, &targets)
            && let Some(st) = self.policy.as_mut()
        {
            st.targets = Some((s, t.clone()));
        }
        let preemption = self.policy.as_ref().is_some_and(|p| p.preemption);
        if let (Some((s, _)), Some(t), true) = (divided, &targets, preemption) {
            self.preempt_above_targets(s, t);
        }

        let lookback =
            if self.view().cfg.max_queue_lookback == 0 { usize::MAX } else { self.view().cfg.max_queue_lookback };
        let ratio = |cycle: &Self, q: usize| -> u64 {
            let (Some((s, _)), Some(t)) = (divided, &targets) else { return 0 };
            let r = if t[q] > 0 { cycle.queues[q].alloc[s].max(0) as f64 / t[q] as f64 } else { 0.0 };
            r.to_bits()
        };
        // Per queue: the reason its jobs wait at its target, while its allocation stays the same.
        let mut at_target: Vec<Option<(i64, Arc<Reason>)>> = vec![None; self.queues.len()];
        let mut heap: BinaryHeap<Reverse<(u64, u32)>> =
            (0..self.queues.len()).map(|q| Reverse((ratio(self, q), q as u32))).collect();
        while let Some(Reverse((_, q))) = heap.pop() {
            if self.queues[q as usize].queued_stopped {
                continue;
            }
            let Some(pos) = self.peek_queued(q) else { continue };
            if self.stop_queued(q, lookback, rate) {
                continue;
            }
            let members = self.take_queued(q, pos);
            if let Some(&first) = members.first() {
                let gang = if members.len() > 1 || self.jobs[first as usize].gang {
                    self.jobs[first as usize].info.gang.clone()
                } else {
                    None
                };
                let mut req = self.view().layout.zero();
                for &m in &members {
                    add_to(&mut req, &self.req(m));
                }
                let over = match (divided, &targets) {
                    (Some((s, _)), Some(t)) => {
                        (req[s] > 0 && self.queues[q as usize].alloc[s] + req[s] > t[q as usize]).then_some((s, t))
                    }
                    _ => None,
                };
                match over {
                    Some((s, t)) => {
                        let alloc = self.queues[q as usize].alloc[s];
                        let reason = match &at_target[q as usize] {
                            Some((a, r)) if *a == alloc => r.clone(),
                            _ => {
                                let r = self.at_target_reason(q, s, t[q as usize]);
                                at_target[q as usize] = Some((alloc, r.clone()));
                                r
                            }
                        };
                        for &m in &members {
                            self.set_reason(m, reason.clone());
                        }
                    }
                    None => {
                        self.attempt(q, Candidate { jobs: members, evicted: false, gang, req }, rate);
                    }
                }
            }
            heap.push(Reverse((ratio(self, q as usize), q)));
        }
    }

    /// Preempts, queue by queue, preemptible jobs of queues above their target.
    fn preempt_above_targets(&mut self, s: usize, targets: &[i64]) {
        for (q, &target) in targets.iter().enumerate() {
            if self.queues[q].alloc[s] <= target {
                continue;
            }
            let mut victims: Vec<(i64, u64, u32)> = self
                .jobs
                .running()
                .filter(|&j| {
                    let job = &self.jobs[j as usize];
                    job.queue as usize == q
                        && self.ledger.status(j) == Status::Running
                        && self.view().priority_classes[job.priority_class as usize].preemptible
                        && self.req(j)[s] > 0
                })
                .map(|j| (self.started_ms(j), self.jobs[j as usize].seq, j))
                .collect();
            // Latest started first, then newest submitted.
            victims.sort_unstable_by(|a, b| b.cmp(a));
            let unit = Unit::for_resource(self.view().layout.name(s).as_str());
            for (_, _, v) in victims {
                if self.queues[q].alloc[s] <= target {
                    break;
                }
                if self.ledger.status(v) != Status::Running {
                    continue;
                }
                let reason = PreemptionReason::ProportionalTarget {
                    queue: self.queues[q].name.clone(),
                    pool: self.view().pool.clone(),
                    resource: self.view().layout.name(s).clone(),
                    target: format_quantity(target, unit),
                };
                self.preempt_for_policy(v, reason);
            }
        }
    }

    fn at_target_reason(&self, q: u32, s: usize, target: i64) -> Arc<Reason> {
        let unit = Unit::for_resource(self.view().layout.name(s).as_str());
        Arc::new(Reason::ProportionalTarget {
            queue: self.queues[q as usize].name.clone(),
            pool: self.view().pool.clone(),
            resource: self.view().layout.name(s).clone(),
            target: format_quantity(target, unit),
            allocated: format_quantity(self.queues[q as usize].alloc[s], unit),
        })
    }
}
