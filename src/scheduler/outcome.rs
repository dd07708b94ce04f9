//! The outcome of one pool's cycle: leases for placed jobs, preemptions with who took each
//! victim's place and why, failed gang members, a reason for every job that waits, and the
//! pool's report of shares, and the record of queue usage it leaves ([`super::usage`]).
//!
//! Apart because it only reads the finished cycle: it follows displacements to their end rather
//! than tracking them while filling. [`Outcome`] borrows, read-only, the parts of the cycle it
//! reads (the cycle lends them, `PoolCycle::outcome`).

use super::decisions::{
    Decisions, Failure, FloatingUse, Lease, PoolReport, Preemption, PreemptionReason, QueueShare, Reason, Unscheduled,
};
use super::hierarchy::Hierarchy;
use super::job::{CycleJobs, GangIndex, Origin, Status};
use super::ledger::Ledger;
use super::policy_state::PolicyState;
use super::queue::CycleQueue;
use super::resvec::{ResVec, add_to};
use super::usage::{FORGOTTEN, UsageSample};
use super::view::PoolView;
use crate::model::{PoolPolicy, QueueName};
use rustc_hash::FxHashSet as HashSet;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The finished cycle, as the outcome reads it.
pub(super) struct Outcome<'c, 'a> {
    /// The pool.
    pub view: &'c PoolView<'a>,
    /// The jobs that took part.
    pub jobs: &'c CycleJobs<'a>,
    /// What happened to them.
    pub ledger: &'c Ledger,
    /// The queues, with their allocations at the end.
    pub queues: &'c [CycleQueue<'a>],
    /// The gangs' members.
    pub gangs: &'c GangIndex<'a>,
    /// The queue tree, if the pool has one.
    pub tree: Option<&'c Hierarchy>,
    /// The policy's state, in a pool not scheduled by `fair_share`.
    pub policy: Option<&'c PolicyState>,
    /// Running jobs eviction spared for their minimum runtime.
    pub spared: usize,
}

/// What a job's fate at the end of the cycle puts in the decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A queued job placed (or put back): a lease.
    Lease,
    /// A running job evicted and not back, or preempted: a preemption.
    Preemption,
    /// A job the cycle failed: a failure, with its reason.
    Failure,
    /// A queued job that stays queued, with its reason if it was tried (placed earlier in the
    /// cycle, then evicted again and not back, stays queued too).
    Waits,
    /// A running job that keeps its place.
    Nothing,
}

impl Entry {
    fn of(origin: Origin, status: Status) -> Entry {
        let new = origin == Origin::Queued;
        match status {
            Status::Placed | Status::Returned if new => Entry::Lease,
            Status::Evicted | Status::Preempted if !new => Entry::Preemption,
            Status::Failed => Entry::Failure,
            Status::Evicted | Status::Waiting | Status::Preempted => Entry::Waits,
            Status::Running | Status::Placed | Status::Returned => Entry::Nothing,
        }
    }
}

impl Outcome<'_, '_> {
    /// Turns the cycle's outcome into decisions.
    pub(super) fn finish(&self, out: &mut Decisions, done: &mut HashSet<crate::model::JobId>) {
        // Sized first: a cycle over a million queued jobs leaves most of them waiting, and growing
        // the list by doubling copied it and touched twice its pages.
        let (mut leases, mut waiting) = (0, 0);
        for (j, fate) in self.jobs.iter().zip(self.ledger.fates()) {
            match Entry::of(j.origin(), fate.status) {
                Entry::Lease => leases += 1,
                Entry::Waits => waiting += 1,
                _ => {}
            }
        }
        out.leases.reserve(leases);
        out.unscheduled.reserve(waiting);
        done.reserve(leases);
        for (ji, (j, fate)) in self.jobs.iter().zip(self.ledger.fates()).enumerate() {
            match Entry::of(j.origin(), fate.status) {
                Entry::Lease => {
                    let Some(n) = fate.node.map(|n| self.view.nodes[n as usize]) else { continue };
                    done.insert(j.id);
                    out.leases.push(Lease {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        pool: self.view.pool.clone(),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                    });
                }
                Entry::Preemption => {
                    let Some(n) = fate.node.map(|n| self.view.nodes[n as usize]) else { continue };
                    out.preemptions.push(Preemption {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                        reason: self.preemption_reason(ji as u32),
                    });
                }
                Entry::Failure => {
                    done.insert(j.id);
                    out.failures.push(Failure {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        reason: fate.reason.as_deref().cloned().unwrap_or(Reason::NoPool),
                    });
                }
                Entry::Waits => {
                    let reason = match (fate.displaced_by(), &fate.reason) {
                        (Some(by), _) if fate.status != Status::Waiting => Some(Arc::new(Reason::Displaced {
                            by: self.jobs[self.final_holder(by, fate.node) as usize].id,
                        })),
                        (_, r) => r.clone(),
                    };
                    if let Some(r) = reason {
                        out.unscheduled.push(Unscheduled { job_id: j.id, reason: r });
                    }
                }
                Entry::Nothing => {}
            }
        }
        for q in self.queues {
            if let Some(n) = &q.note {
                out.queue_notes.entry(q.name.clone()).or_insert_with(|| n.clone());
            }
        }
        out.pools.push(self.pool_report());
    }

    /// Who finally took a victim's place: follows displacements of displacers from `x` (a
    /// displacer that was itself displaced, or moved elsewhere, passes the place on).
    fn final_holder(&self, mut x: u32, node: Option<u32>) -> u32 {
        for _ in 0..self.jobs.len() {
            let fate = self.ledger.fate(x);
            let holds = fate.scheduled() && (node.is_none() || fate.node == node);
            match (holds, fate.displaced_by()) {
                (false, Some(y)) => x = y,
                _ => break,
            }
        }
        x
    }

    /// Who holds the place job `x` lost, if anyone still does.
    fn place_holder(&self, x: u32) -> Option<u32> {
        let m = self.ledger.fate(x);
        let by = self.final_holder(m.displaced_by()?, m.node);
        let b = self.ledger.fate(by);
        (b.scheduled() && b.node == m.node).then_some(by)
    }

    /// Why running job `ji`, evicted and not back or preempted, lost its place.
    fn preemption_reason(&self, ji: u32) -> PreemptionReason {
        let (j, fate) = (&self.jobs[ji as usize], self.ledger.fate(ji));
        let cascaded = matches!(fate.reason.as_deref(), Some(Reason::GangMemberLost { .. }));
        let own = if cascaded { None } else { self.place_holder(ji).or_else(|| self.earmark_taker(ji)) };
        // A gang member that kept its place went because another member lost one.
        let via_gang = match (&own, &j.info.gang) {
            (None, Some(g)) => self
                .gangs
                .members(j.queue, g.id.as_str())
                .into_iter()
                .find_map(|x| self.place_holder(x))
                .or_else(|| fate.displaced_by().map(|by| self.final_holder(by, None)))
                .map(|by| (g.id.clone(), by)),
            _ => None,
        };
        let reason = match (own, via_gang) {
            (Some(by), _) => {
                let b = &self.jobs[by as usize];
                let home = fate
                    .node
                    .filter(|&n| self.view.earmarks.is_guest(n, j.queue) && self.view.earmarks.is_home(n, b.queue));
                if let Some(n) = home {
                    PreemptionReason::Reserved {
                        by: b.id,
                        by_queue: b.info.queue.clone(),
                        node: self.view.nodes[n as usize].name.clone(),
                    }
                } else if b.class_priority > j.class_priority {
                    PreemptionReason::Urgency {
                        by: b.id,
                        by_priority_class: self.view.priority_classes[b.priority_class as usize].name.clone(),
                    }
                } else {
                    PreemptionReason::FairShare { by: b.id, by_queue: b.info.queue.clone() }
                }
            }
            (None, Some((gang, by))) => {
                let b = &self.jobs[by as usize];
                PreemptionReason::GangMember { gang, by: b.id, by_queue: b.info.queue.clone() }
            }
            (None, None) => PreemptionReason::NotRescheduled {
                reason: fate.reason.as_deref().cloned().unwrap_or(Reason::NoCapacity {
                    pool: self.view.pool.clone(),
                    missing: "its resources".to_string(),
                }),
            },
        };
        // A pool policy's own victim: the policy says why.
        self.policy_preemption(ji, own).unwrap_or(reason)
    }

    /// The pool's report: every active queue's (and parent's) shares, allocation and demand.
    fn pool_report(&self) -> PoolReport {
        let earmarked = self.earmarked_allocation();
        let parents = self.parent_reports();
        let targets = self.policy.and_then(|p| p.targets.as_ref());
        PoolReport {
            pool: self.view.pool.clone(),
            policy: self.policy.map(|p| p.policy).unwrap_or_default(),
            total: self.view.layout.named(&self.view.total),
            nodes: self.view.nodes.len(),
            evictions_spared_min_runtime: self.spared,
            floating: self
                .view
                .floating
                .iter()
                .map(|&(s, capacity)| FloatingUse {
                    resource: self.view.layout.name(s).clone(),
                    capacity,
                    allocated: self.queues.iter().map(|q| q.alloc[s]).sum(),
                })
                .collect(),
            queues: self
                .queues
                .iter()
                .enumerate()
                .filter(|(i, q)| q.active || parents.contains_key(i))
                .map(|(i, q)| {
                    if let Some(p) = parents.get(&i) {
                        return p.clone();
                    }
                    QueueShare {
                        queue: q.name.clone(),
                        weight: 1.0 / q.priority_factor,
                        fair_share: q.fair_share,
                        adjusted_fair_share: q.adjusted_fair_share,
                        actual_share: q.actual_share,
                        share_after: self.view.cost.share(&q.alloc),
                        protected: q.protected,
                        allocated: self.view.layout.named(&q.alloc),
                        demand: self.view.layout.named(&q.demand),
                        home_allocated: earmarked.get(i).map(|a| self.view.layout.named(&a.0)).unwrap_or_default(),
                        guest_allocated: earmarked.get(i).map(|a| self.view.layout.named(&a.1)).unwrap_or_default(),
                        usage: q.usage,
                        parent: self.tree_parent_name(i as u32),
                        is_parent: false,
                        proportional_target: targets.map(|(s, t)| {
                            let mut r = crate::model::Resources::new();
                            r.set(self.view.layout.name(*s).clone(), t[i]);
                            r
                        }),
                        guaranteed_share: guaranteed_share(q),
                        guarantee_scaled: q.guarantee_scaled,
                    }
                })
                .collect(),
            evicted: self.ledger.evicted_count(),
            jobs_tried: self.ledger.jobs_tried(),
            queue_priority: self.tree.map(|t| t.first_priorities().clone()).unwrap_or_default(),
        }
    }

    /// The record the cycle leaves for its pool: each queue's average and its share after the
    /// cycle; queues with neither are left out.
    pub(super) fn usage_record(&self) -> BTreeMap<QueueName, UsageSample> {
        self.queues
            .iter()
            .map(|q| (q.name.clone(), UsageSample { usage: q.usage, current: self.view.cost.share(&q.alloc) }))
            .filter(|(_, s)| s.usage >= FORGOTTEN || s.current > 0.0)
            .collect()
    }

    /// Job `j`'s dense requests.
    fn req(&self, j: u32) -> ResVec {
        self.view.job_req(&self.jobs[j as usize])
    }

    /// Why the pool's policy preempted job `j`, if it did: in a `priority` pool, for `by`, the
    /// job that finally took its place (judged at the end of the cycle, so trials of a gang that
    /// were rolled back leave no trace); in a `proportional` pool, its queue's target.
    fn policy_preemption(&self, j: u32, by: Option<u32>) -> Option<PreemptionReason> {
        let st = self.policy?;
        match st.policy {
            PoolPolicy::Priority => by.map(|b| {
                let b = &self.jobs[b as usize];
                PreemptionReason::JobPriority {
                    by: b.id,
                    by_priority: b.priority,
                    priority: self.jobs[j as usize].priority,
                }
            }),
            _ => st.preempted.get(&j).cloned(),
        }
    }

    /// In a pool with earmarked nodes, who took the room of running job `j`, evicted and unable to
    /// return, when no chain of displacements says: room it held was given up in the cycle (by
    /// the withdrawn placement of a job that had displaced it) and then taken, without displacing
    /// anyone, by jobs placed on its node — on an earmarked node, for a guest, by jobs at home
    /// there first. The latest such job, jobs at home preferred.
    fn earmark_taker(&self, j: u32) -> Option<u32> {
        if !self.view.earmarks.active() {
            return None;
        }
        let n = self.ledger.fate(j).node?;
        let guest = self.view.earmarks.is_guest(n, self.jobs[j as usize].queue);
        let placed_here = |x: u32| {
            let fate = self.ledger.fate(x);
            matches!(fate.status, Status::Placed | Status::Returned) && fate.node == Some(n)
        };
        let latest = |home: bool| {
            (0..self.jobs.len() as u32)
                .rev()
                .find(|&x| placed_here(x) && (!home || self.view.earmarks.is_home(n, self.jobs[x as usize].queue)))
        };
        if guest { latest(true).or_else(|| latest(false)) } else { latest(false) }
    }

    /// Per queue, what its jobs hold at the end of the cycle on nodes earmarked for it (home) and
    /// on nodes earmarked for others (guest). Empty when the pool has no earmarked nodes.
    fn earmarked_allocation(&self) -> Vec<(ResVec, ResVec)> {
        if !self.view.earmarks.active() {
            return Vec::new();
        }
        let mut out = vec![(self.view.layout.zero(), self.view.layout.zero()); self.queues.len()];
        for (j, (job, fate)) in self.jobs.iter().zip(self.ledger.fates()).enumerate() {
            let Some(n) = fate.node.filter(|_| fate.scheduled()) else { continue };
            let q = job.queue;
            if self.view.earmarks.is_home(n, q) {
                add_to(&mut out[q as usize].0, &self.req(j as u32));
            } else if self.view.earmarks.is_guest(n, q) {
                add_to(&mut out[q as usize].1, &self.req(j as u32));
            }
        }
        out
    }

    /// The name of queue `q`'s parent in the tree.
    fn tree_parent_name(&self, q: u32) -> Option<QueueName> {
        let p = self.tree?.parent_of(q)?;
        Some(self.queues[p as usize].name.clone())
    }

    /// The report of every parent queue with an active subtree: its subtree's allocation at the
    /// start and end of the cycle, its demand, and its level's shares.
    fn parent_reports(&self) -> BTreeMap<usize, QueueShare> {
        let Some(tree) = self.tree else { return BTreeMap::new() };
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
                    actual_share: self.view.cost.share(&start[i]),
                    share_after: self.view.cost.share(&alloc[i]),
                    protected: q.protected,
                    allocated: self.view.layout.named(&alloc[i]),
                    demand: self.view.layout.named(&demand[i]),
                    home_allocated: Default::default(),
                    guest_allocated: Default::default(),
                    usage: self.view.cost.share(&start[i]),
                    parent: self.tree_parent_name(i as u32),
                    is_parent: true,
                    proportional_target: None,
                    guaranteed_share: guaranteed_share(q),
                    guarantee_scaled: q.guarantee_scaled,
                };
                (i, share)
            })
            .collect()
    }
}

/// The queue's guarantee floor for the report: shown for a queue with a guarantee of its own or
/// one through its children.
fn guaranteed_share(q: &super::queue::CycleQueue<'_>) -> Option<f64> {
    (q.guaranteed_share > 0.0 || !q.snap.queue.guaranteed.is_zero()).then_some(q.guaranteed_share)
}
