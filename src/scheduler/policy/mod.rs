//! Pool policies: how one pool is scheduled. `fair_share` (the default) is Armada's dominant
//! resource fairness with eviction ([`super::fill`]); the other two are Determined's:
//!
//! - [`PoolPolicy::Priority`] (`priority.rs`): strict priority by job priority across every
//!   queue of the pool, with head-of-line blocking, GPU and zero-slot jobs in separate lines, and
//!   optional preemption of lower-priority preemptible jobs;
//! - [`PoolPolicy::Proportional`] (`proportional.rs`): the pool's GPUs (or its dominant resource)
//!   divided among the queues in proportion to demand × weight, capped at demand; queues start
//!   jobs up to their target, and preemptible jobs of queues above it are preempted.
//!
//! Both reuse the cycle's machinery: the node db (level 0: what is free now, best fit), gang
//! placement (whole or not at all, within one executor), node selectors, tolerations, cordons and
//! quarantine, limits and rate limits, and the decisions' reasons. Neither evicts for fair share
//! nor preempts by priority class. The placement hook ([`PoolCycle::try_place_policy`]) is only
//! taken in pools with one of these policies; `fair_share` pools run exactly as before.
//!
//! See docs/pool-policies.md.

pub(crate) mod priority;
pub(crate) mod proportional;

#[cfg(test)]
mod tests;

pub use super::config::PoolPolicyConfig;
use super::context::PoolCycle;
use super::decisions::{PreemptionReason, Reason};
use super::job::Status;
use super::policy_state::PolicyState;
use super::rate_limit::RateLimits;
use super::rate_limit::RateScope;
use super::resvec::{ResVec, add_to, fits, sub_from};
use super::snapshot::Snapshot;
pub use crate::model::PoolPolicy;
use crate::model::{JobId, ResourceName};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;
use std::sync::Arc;

/// The GPU resource: it splits jobs into lines (`priority`) and is what `proportional` divides.
pub(crate) fn gpu() -> ResourceName {
    ResourceName::gpu()
}

impl<'a> PoolCycle<'a> {
    /// Sets the pool up for a policy other than `fair_share` (after [`PoolCycle::new`]).
    pub(super) fn start_policy(&mut self, policy: PoolPolicy, preemption: bool, snapshot: &Snapshot) {
        debug_assert!(policy != PoolPolicy::FairShare);
        let gpu = gpu();
        let gpu_class = self.view().classes.iter().map(|c| c.reqs.requests.get(gpu.as_str()) > 0).collect();
        let capacity = self
            .view()
            .nodes
            .iter()
            .map(|n| {
                let mut c = self.view().layout.dense_lossy(&n.allocatable);
                sub_from(&mut c, &self.view().layout.dense_lossy(&n.unallocatable));
                c
            })
            .collect();
        let running: std::collections::HashSet<JobId> = self.jobs.running().map(|j| self.jobs[j as usize].id).collect();
        let started = snapshot
            .running
            .iter()
            .filter(|r| running.contains(&r.job.id))
            .map(|r| (r.job.id, r.leased_at_ms))
            .collect();
        self.policy = Some(Box::new(PolicyState {
            policy,
            preemption,
            started,
            gpu_class,
            capacity,
            preempted: HashMap::default(),
            targets: None,
        }));
    }

    /// Stops taking queue `q`'s queued jobs when the global rate limit is spent or the queue has
    /// had `lookback` tries, noting why on the queue; true if it stopped.
    pub(super) fn stop_queued(&mut self, q: u32, lookback: usize, rate: &RateLimits) -> bool {
        if self.ledger.rate_stop().is_none() && rate.global_exhausted() {
            self.ledger.stop_for_rate(Arc::new(Reason::RateLimited { scope: RateScope::Global }));
        }
        let qc = &self.queues[q as usize];
        let stop = match self.ledger.rate_stop() {
            Some(r) => r.clone(),
            None if qc.taken >= lookback => {
                Arc::new(Reason::LookbackLimit { queue: qc.name.clone(), limit: self.view().cfg.max_queue_lookback })
            }
            None => return false,
        };
        let qc = &mut self.queues[q as usize];
        qc.queued_stopped = true;
        qc.note.get_or_insert(stop);
        true
    }

    /// True if job `j` is in the GPU line (it requests a GPU).
    pub(super) fn in_gpu_line(&self, j: u32) -> bool {
        let class = self.jobs[j as usize].class as usize;
        self.policy.as_ref().is_some_and(|p| p.gpu_class.get(class).copied().unwrap_or(false))
    }

    /// When job `j` was leased (jobs placed in this cycle: now, i.e. after every running one).
    pub(super) fn started_ms(&self, j: u32) -> i64 {
        let job = &self.jobs[j as usize];
        if job.was_queued() {
            return i64::MAX;
        }
        self.policy.as_ref().and_then(|p| p.started.get(&job.id).copied()).unwrap_or(i64::MIN)
    }

    /// Placement in a pool with a policy: where the job fits now (level 0: nothing moves, tier
    /// and best fit as always); failing that, in a `priority` pool with preemption, where
    /// preempting lower-priority jobs makes it fit. Returns the level used (0, or 1 with
    /// preemption) as [`PoolCycle::try_place`] does. A job inside a preemption fence preempts
    /// only jobs inside it ([`super::fence`]); when that alone stops it, `fence_stop` says so.
    pub(super) fn try_place_policy(&mut self, j: u32, types: &[u32], req: &ResVec) -> Option<u8> {
        self.fence_stop = None;
        let q = self.jobs[j as usize].queue;
        if let Some(n) = self.db.find(0, types, q, req) {
            self.place_displacing(j, n, req, Vec::new());
            return Some(0);
        }
        let st = self.policy.as_ref()?;
        if st.policy != PoolPolicy::Priority || !st.preemption {
            return None;
        }
        let fence = self.fence_if_any(j);
        let Some((n, victims)) = self.priority_victims(j, types, req, fence) else {
            // Stopped by the fence if preempting outside it would have made room.
            self.fence_stop = fence.filter(|_| self.priority_victims(j, types, req, None).is_some());
            return None;
        };
        self.place_displacing(j, n, req, victims);
        Some(1)
    }

    /// `priority` with preemption: the node where job `j` fits after preempting running jobs of
    /// its line with a strictly higher priority number whose class is preemptible, and those
    /// victims. On each node victims go lowest priority first, then latest started, then newest
    /// submitted, and any not needed after all are kept. Among nodes: the one whose most
    /// important victim is least important, then the fewest victims, then the latest started
    /// victims (by the earliest start among them), then the newest submitted, then node order.
    /// Inside preemption fence `fence`, only jobs inside it are victims ([`super::fence`]).
    fn priority_victims(&self, j: u32, types: &[u32], req: &ResVec, fence: Option<u32>) -> Option<(u32, Vec<u32>)> {
        let job = &self.jobs[j as usize];
        let (prio, line) = (job.priority, self.in_gpu_line(j));
        // (u32::MAX - most important victim's priority, victims, Reverse(earliest start),
        // Reverse(oldest submission), node)
        type Score = (u32, usize, std::cmp::Reverse<i64>, std::cmp::Reverse<u64>, u32);
        let mut best: Option<(Score, Vec<u32>)> = None;
        for &t in types {
            for &n in &self.db.type_nodes[t as usize] {
                let node = &self.db.nodes[n as usize];
                let mut cands: SmallVec<[(u32, i64, u64, u32); 8]> = node
                    .occupants
                    .iter()
                    .filter(|o| !o.evicted)
                    .filter_map(|o| {
                        let v = &self.jobs[o.job as usize];
                        let eligible =
                            matches!(self.ledger.status(o.job), Status::Running | Status::Placed | Status::Returned)
                                && v.priority > prio
                                && self.view().priority_classes[v.priority_class as usize].preemptible
                                && self.in_gpu_line(o.job) == line
                                && fence.is_none_or(|f| self.may_displace(f, o.job));
                        eligible.then(|| (v.priority, self.started_ms(o.job), v.seq, o.job))
                    })
                    .collect();
                if cands.is_empty() {
                    continue;
                }
                // Lowest priority (highest number) first, then latest started, then newest.
                cands.sort_unstable_by(|a, b| b.cmp(a));
                let mut free = node.free[0].clone();
                let mut taken: SmallVec<[usize; 8]> = SmallVec::new();
                for (i, c) in cands.iter().enumerate() {
                    if fits(req, &free) {
                        break;
                    }
                    add_to(&mut free, &self.req(c.3));
                    taken.push(i);
                }
                if !fits(req, &free) {
                    continue;
                }
                // Keep back, most important first, whoever is not needed after all.
                let mut victims: Vec<u32> = Vec::with_capacity(taken.len());
                for &i in taken.iter().rev() {
                    let r = self.req(cands[i].3);
                    let mut trial = free.clone();
                    sub_from(&mut trial, &r);
                    if fits(req, &trial) {
                        free = trial;
                    } else {
                        victims.push(cands[i].3);
                    }
                }
                victims.reverse();
                let top = victims.iter().map(|&v| self.jobs[v as usize].priority).min().unwrap_or(u32::MAX);
                let earliest = victims.iter().map(|&v| self.started_ms(v)).min().unwrap_or(i64::MAX);
                let oldest = victims.iter().map(|&v| self.jobs[v as usize].seq).min().unwrap_or(u64::MAX);
                let score = (u32::MAX - top, victims.len(), std::cmp::Reverse(earliest), std::cmp::Reverse(oldest), n);
                if best.as_ref().is_none_or(|(b, _)| score < *b) {
                    best = Some((score, victims));
                }
            }
        }
        best.map(|((.., n), victims)| (n, victims))
    }

    /// Preempts running job `v` (and the running members of its gang) for the policy, with
    /// `reason`; frees its room at once.
    pub(super) fn preempt_for_policy(&mut self, v: u32, reason: PreemptionReason) {
        let mut all: SmallVec<[u32; 4]> = smallvec::smallvec![v];
        if let Some(g) = self.jobs[v as usize].info.gang.clone() {
            let q = self.jobs[v as usize].queue;
            all.extend(self.gang_members(q, g.id.as_str()).into_iter().filter(|&m| m != v));
        }
        for m in all {
            if !matches!(self.ledger.status(m), Status::Running | Status::Returned) {
                continue;
            }
            let Some(node) = self.ledger.held_node(m) else { continue };
            let job = &self.jobs[m as usize];
            let (q, pc) = (job.queue, job.priority_class);
            let Some(occ) = self.db.remove(node, m) else { continue };
            self.set_status(m, Status::Preempted, None);
            self.alloc(q, pc, &occ.req, false);
            // The gang goes for the same reason as `v`.
            if let Some(st) = self.policy.as_mut() {
                st.preempted.insert(m, reason.clone());
            }
        }
        // Room was freed: verdicts cached before no longer hold.
        self.ledger.forget_verdicts();
    }

    /// True if a job that waits for `reason` waits for room (so in a `priority` pool it blocks
    /// the lower priorities of its line), not for a limit, a rate or a node it can never have.
    pub(super) fn waits_for_room(reason: &Reason) -> bool {
        match reason {
            Reason::NoCapacity { .. } | Reason::ReservedNodes { .. } | Reason::PreemptionFence { .. } => true,
            Reason::Gang { detail, .. } => detail.as_deref().is_none_or(Self::waits_for_room),
            _ => false,
        }
    }

    /// True if the job (or gang) could run in this pool were it empty: a node it may use is big
    /// enough; for a gang, the empty nodes of one executor hold at least its minimum cardinality
    /// of members like its first.
    pub(super) fn could_ever_fit(&mut self, members: &[u32]) -> bool {
        let Some(&first) = members.first() else { return false };
        let Ok((req, types)) = self.job_targets(first) else { return false };
        let Some(st) = self.policy.as_ref() else { return true };
        let need = match &self.jobs[first as usize].info.gang {
            Some(g) if members.len() > 1 => u64::from(g.min_cardinality.max(1)),
            _ => 1,
        };
        let mut per_executor: SmallVec<[(u32, u64); 4]> = SmallVec::new();
        for &t in &types {
            let exec = self.view().types.types[t as usize].executor;
            for &n in &self.db.type_nodes[t as usize] {
                let cap = &st.capacity[n as usize];
                // How many such members the empty node holds.
                let holds = req
                    .iter()
                    .zip(cap.iter())
                    .filter(|(r, _)| **r > 0)
                    .map(|(r, c)| (c.max(&0) / r) as u64)
                    .min()
                    .unwrap_or(need);
                match per_executor.iter_mut().find(|(e, _)| *e == exec) {
                    Some((_, count)) => *count += holds,
                    None => per_executor.push((exec, holds)),
                }
            }
        }
        per_executor.iter().any(|(_, count)| *count >= need)
    }

    /// The reason to give a job that waits behind `blocker`.
    pub(super) fn behind(&self, blocker: u32) -> Arc<Reason> {
        let b = &self.jobs[blocker as usize];
        Arc::new(Reason::BehindHigherPriority { pool: self.view().pool.clone(), job: b.id, priority: b.priority })
    }
}
