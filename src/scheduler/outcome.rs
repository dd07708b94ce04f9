//! The outcome of one pool's cycle: leases for placed jobs, preemptions with who took each
//! victim's place and why, failed gang members, a reason for every job that waits, and the
//! pool's report of shares, and the record of queue usage it leaves ([`super::usage`]).
//!
//! Apart because it only reads the finished cycle: it follows displacements to their end rather
//! than tracking them while filling.

use super::context::PoolCycle;
use super::decisions::{
    Decisions, Failure, Lease, PoolReport, Preemption, PreemptionReason, QueueShare, Reason, Unscheduled,
};
use super::job::{Origin, Status};
use super::usage::{FORGOTTEN, UsageSample};
use crate::model::QueueName;
use rustc_hash::FxHashSet as HashSet;
use std::collections::BTreeMap;
use std::sync::Arc;

impl PoolCycle<'_> {
    /// Turns the cycle's outcome into decisions.
    pub(super) fn finish(self, out: &mut Decisions, done: &mut HashSet<crate::model::JobId>) {
        for (ji, (j, fate)) in self.jobs.iter().zip(self.ledger.fates()).enumerate() {
            let new = j.origin == Origin::Queued;
            match fate.status {
                Status::Placed | Status::Returned if new => {
                    let Some(n) = fate.node.map(|n| self.view().nodes[n as usize]) else { continue };
                    done.insert(j.id);
                    out.leases.push(Lease {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        pool: self.view().pool.clone(),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                    });
                }
                Status::Evicted | Status::Preempted if !new => {
                    let Some(n) = fate.node.map(|n| self.view().nodes[n as usize]) else { continue };
                    out.preemptions.push(Preemption {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                        reason: self.preemption_reason(ji as u32),
                    });
                }
                Status::Failed => {
                    done.insert(j.id);
                    out.failures.push(Failure {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        reason: fate.reason.as_deref().cloned().unwrap_or(Reason::NoPool),
                    });
                }
                // Placed earlier in the cycle, then evicted again and not back: stays queued.
                Status::Evicted | Status::Waiting | Status::Preempted => {
                    let reason = match (fate.displaced_by, &fate.reason) {
                        (Some(by), _) if fate.status != Status::Waiting => Some(Arc::new(Reason::Displaced {
                            by: self.jobs[self.final_holder(by, fate.node) as usize].id,
                        })),
                        (_, r) => r.clone(),
                    };
                    if let Some(r) = reason {
                        out.unscheduled.push(Unscheduled { job_id: j.id, reason: r });
                    }
                }
                Status::Running | Status::Placed | Status::Returned => {}
            }
        }
        for q in &self.queues {
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
            match (holds, fate.displaced_by) {
                (false, Some(y)) => x = y,
                _ => break,
            }
        }
        x
    }

    /// Who holds the place job `x` lost, if anyone still does.
    fn place_holder(&self, x: u32) -> Option<u32> {
        let m = self.ledger.fate(x);
        let by = self.final_holder(m.displaced_by?, m.node);
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
                .gang_members(j.queue, g.id.as_str())
                .into_iter()
                .find_map(|x| self.place_holder(x))
                .or_else(|| fate.displaced_by.map(|by| self.final_holder(by, None)))
                .map(|by| (g.id.clone(), by)),
            _ => None,
        };
        let reason = match (own, via_gang) {
            (Some(by), _) => {
                let b = &self.jobs[by as usize];
                let home = fate
                    .node
                    .filter(|&n| self.view().earmarks.is_guest(n, j.queue) && self.view().earmarks.is_home(n, b.queue));
                if let Some(n) = home {
                    PreemptionReason::Reserved {
                        by: b.id,
                        by_queue: b.info.queue.clone(),
                        node: self.view().nodes[n as usize].name.clone(),
                    }
                } else if b.class_priority > j.class_priority {
                    PreemptionReason::Urgency {
                        by: b.id,
                        by_priority_class: self.view().priority_classes[b.priority_class as usize].name.clone(),
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
                    pool: self.view().pool.clone(),
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
        let targets = self.policy.as_ref().and_then(|p| p.targets.as_ref());
        PoolReport {
            pool: self.view().pool.clone(),
            policy: self.policy.as_ref().map(|p| p.policy).unwrap_or_default(),
            total: self.view().layout.named(&self.view().total),
            nodes: self.view().nodes.len(),
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
                        share_after: self.view().cost.share(&q.alloc),
                        protected: q.protected,
                        allocated: self.view().layout.named(&q.alloc),
                        demand: self.view().layout.named(&q.demand),
                        home_allocated: earmarked.get(i).map(|a| self.view().layout.named(&a.0)).unwrap_or_default(),
                        guest_allocated: earmarked.get(i).map(|a| self.view().layout.named(&a.1)).unwrap_or_default(),
                        usage: q.usage,
                        parent: self.tree_parent_name(i as u32),
                        is_parent: false,
                        proportional_target: targets.map(|(s, t)| {
                            let mut r = crate::model::Resources::new();
                            r.set(self.view().layout.name(*s).clone(), t[i]);
                            r
                        }),
                    }
                })
                .collect(),
            evicted: self.ledger.evicted_count(),
            jobs_tried: self.ledger.jobs_tried(),
            queue_priority: self.tree.as_ref().map(|t| t.first_priorities().clone()).unwrap_or_default(),
        }
    }
}

impl PoolCycle<'_> {
    /// The record the cycle leaves for its pool: each queue's average and its share after the
    /// cycle; queues with neither are left out.
    pub(super) fn usage_record(&self) -> BTreeMap<QueueName, UsageSample> {
        self.queues
            .iter()
            .map(|q| (q.name.clone(), UsageSample { usage: q.usage, current: self.view().cost.share(&q.alloc) }))
            .filter(|(_, s)| s.usage >= FORGOTTEN || s.current > 0.0)
            .collect()
    }
}
