//! Gang placement: all members in one executor (and, with a node-uniformity label, on nodes that
//! share the label's value), all-or-nothing down to the minimum cardinality.
//!
//! Every candidate domain (executor, label value) is tried inside a transaction and rolled back;
//! the best one — most members placed, then least preemption, then the tightest fit — is then
//! placed for real. A gang that does not fit changes nothing.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::job::{GangShape, Status};
use super::queue::Candidate;
use super::resvec::ResVec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Outcome of trying a gang in one domain.
#[derive(Debug, Clone)]
struct Trial {
    placed: usize,
    max_level: u8,
    leftover: [i64; 4],
    /// Why the first member that did not fit did not (computed when it failed).
    first_failure: Option<Arc<Reason>>,
}

impl PoolCycle<'_> {
    /// Places a queued gang; returns how many members were placed.
    pub(super) fn place_gang(&mut self, _q: u32, cand: &Candidate) -> usize {
        let Some(gang) = cand.gang.clone() else { return 0 };
        let members: Vec<u32> = cand.jobs.to_vec();
        let present = members.len() as u32;
        let fail_all = |cycle: &mut Self, reason: Reason| {
            let reason = Arc::new(reason);
            for &m in &members {
                cycle.set_reason(m, reason.clone());
            }
        };
        if present < gang.min_cardinality {
            fail_all(
                self,
                Reason::GangIncomplete { gang: gang.id.clone(), queued: present, cardinality: gang.cardinality },
            );
            return 0;
        }
        // Every member's requests and node types.
        let mut targets: Vec<(ResVec, Vec<u32>)> = Vec::with_capacity(members.len());
        for &m in &members {
            match self.job_targets(m) {
                Ok(t) => targets.push(t),
                Err(detail) => {
                    fail_all(
                        self,
                        Reason::Gang {
                            gang: gang.id.clone(),
                            fit: 0,
                            cardinality: gang.cardinality,
                            minimum: gang.min_cardinality,
                            detail: Some(Arc::new(detail)),
                        },
                    );
                    return 0;
                }
            }
        }
        // Domains: executor, plus the uniformity label's value if there is one.
        let label = gang.node_uniformity_label.as_deref();
        let mut domains: BTreeMap<(u32, Option<&str>), Vec<u32>> = BTreeMap::new();
        let mut all_types: Vec<u32> = targets.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        all_types.sort_unstable();
        all_types.dedup();
        for t in all_types {
            let exec = self.types.types[t as usize].executor;
            let value = match label {
                Some(l) => match self.types.label(&self.nodes, t, l) {
                    Some(v) => Some(v),
                    None => continue,
                },
                None => None,
            };
            domains.entry((exec, value)).or_default().push(t);
        }
        let domains: Vec<Vec<u32>> = domains.into_values().collect();
        if domains.is_empty() {
            let detail = label
                .map(|l| format!("no matching node has label {l}"))
                .unwrap_or_else(|| "no matching node".to_string());
            fail_all(
                self,
                Reason::Gang {
                    gang: gang.id.clone(),
                    fit: 0,
                    cardinality: gang.cardinality,
                    minimum: gang.min_cardinality,
                    detail: Some(Arc::new(Reason::NoMatchingNode { pool: self.pool.clone(), detail })),
                },
            );
            return 0;
        }
        // Gangs of identical members share verdicts, and a domain without enough free resources
        // in total is not worth a trial.
        let first = &self.jobs[members[0] as usize];
        let same_class = members.iter().all(|&m| self.jobs[m as usize].class == first.class);
        let cache_key = same_class.then(|| GangShape {
            class: first.class,
            prio_idx: first.prio_idx,
            members: present,
            min_cardinality: gang.min_cardinality,
            uniformity_label: gang.node_uniformity_label.clone(),
            profile: if self.earmarks.active() {
                self.earmarks.profile(first.queue, self.pcs[first.pc as usize].preemptible)
            } else {
                0
            },
        });
        if let Some(r) = cache_key.as_ref().and_then(|k| self.gang_unschedulable.get(k)) {
            let r = r.clone();
            for &m in &members {
                self.set_reason(m, r.clone());
            }
            return 0;
        }
        let max_level = self.levels.max_search_level(first.prio_idx as usize);
        // Pool policies other than fair_share preempt by their own rules, which the levels do not
        // count: every domain gets a trial there.
        let domains: Vec<Vec<u32>> = if same_class && self.policy.is_none() {
            let mut need = targets[0].0.clone();
            for v in need.iter_mut() {
                *v *= i64::from(gang.min_cardinality);
            }
            let totals: Vec<ResVec> = domains
                .iter()
                .map(|dom| {
                    let mut total = self.layout.zero();
                    for &t in dom {
                        super::resvec::add_to(&mut total, self.db.type_free(max_level, t));
                    }
                    total
                })
                .collect();
            let viable: Vec<Vec<u32>> = domains
                .iter()
                .zip(&totals)
                .filter(|(_, total)| super::resvec::fits(&need, total))
                .map(|(d, _)| d.clone())
                .collect();
            if viable.is_empty() {
                // Nothing can work; one trial in the roomiest domain says how close it came.
                let roomiest =
                    (0..domains.len()).max_by_key(|&d| (totals[d].clone(), std::cmp::Reverse(d))).unwrap_or(0);
                vec![domains[roomiest].clone()]
            } else {
                viable
            }
        } else {
            domains
        };
        let min = gang.min_cardinality as usize;
        let best = if domains.len() == 1 {
            0
        } else {
            let mut best: Option<(usize, Trial)> = None;
            for (d, dom) in domains.iter().enumerate() {
                let mark = self.begin();
                let trial = self.place_members(&members, &targets, dom);
                self.rollback(mark);
                let better = match &best {
                    None => true,
                    Some((_, b)) => {
                        (std::cmp::Reverse(trial.placed), trial.max_level, trial.leftover)
                            < (std::cmp::Reverse(b.placed), b.max_level, b.leftover)
                    }
                };
                if better {
                    best = Some((d, trial));
                }
            }
            best.map(|(d, _)| d).unwrap_or(0)
        };
        let mark = self.begin();
        let trial = self.place_members(&members, &targets, &domains[best]);
        if trial.placed < min || trial.placed == 0 {
            self.rollback(mark);
            let detail = trial.first_failure;
            let reason = Reason::Gang {
                gang: gang.id.clone(),
                fit: trial.placed as u32,
                cardinality: gang.cardinality,
                minimum: gang.min_cardinality,
                detail,
            };
            if let Some(k) = cache_key {
                self.gang_unschedulable.insert(k, Arc::new(reason.clone()));
            }
            fail_all(self, reason);
            return 0;
        }
        self.commit(mark);
        // Members beyond what fit fail for good.
        let reason = Arc::new(Reason::Gang {
            gang: gang.id.clone(),
            fit: trial.placed as u32,
            cardinality: gang.cardinality,
            minimum: gang.min_cardinality,
            detail: None,
        });
        for &m in &members {
            if self.jobs[m as usize].status == Status::Waiting {
                self.set_status(m, Status::Failed, None);
                self.failed.push(m);
                self.jobs[m as usize].reason = Some(reason.clone());
            }
        }
        trial.placed
    }

    /// Places as many members as fit in the domain (node types `dom`).
    fn place_members(&mut self, members: &[u32], targets: &[(ResVec, Vec<u32>)], dom: &[u32]) -> Trial {
        let mut trial = Trial { placed: 0, max_level: 0, leftover: [0; 4], first_failure: None };
        for (i, &m) in members.iter().enumerate() {
            let (req, types) = &targets[i];
            let types: Vec<u32> = types.iter().copied().filter(|t| dom.contains(t)).collect();
            match self.try_place(m, &types, req) {
                Some(level) => {
                    trial.placed += 1;
                    trial.max_level = trial.max_level.max(level);
                }
                None => {
                    if trial.first_failure.is_none() {
                        let prio = self.jobs[m as usize].prio_idx;
                        trial.first_failure = Some(Arc::new(self.no_capacity_reason(&types, req, prio)));
                    }
                }
            }
        }
        // Tightest fit: least free left in the domain, indexed resources in order.
        for &t in dom {
            let free = self.db.type_free(0, t);
            for (k, r) in self.cfg.indexed_resources.iter().enumerate().take(4) {
                if let Some(s) = self.layout.slot(r.as_str()) {
                    trial.leftover[k] += free[s];
                }
            }
        }
        trial
    }
}
