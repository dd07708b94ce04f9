//! Where a gang may go: its domains (an executor's node types, split by the node-uniformity
//! label's value), the shape under which gangs of identical members share a verdict, the domains
//! with room in total for the minimum cardinality, and how tightly a trial filled a domain.
//! [`GangDomains`] only reads the pool, the jobs and the node db; the trial that places the
//! members is the cycle's ([`super::gang`]).

use super::job::{CycleJobs, GangShape};
use super::nodedb::NodeDb;
use super::resvec::{ResVec, add_to, fits};
use super::view::PoolView;
use crate::model::GangSpec;
use std::collections::BTreeMap;

/// The pool as a gang's placement reads it, to choose and rank domains.
pub(super) struct GangDomains<'c, 'a> {
    /// The pool.
    pub view: &'c PoolView<'a>,
    /// The jobs taking part.
    pub jobs: &'c CycleJobs<'a>,
    /// The node db, for what each node type has free.
    pub db: &'c NodeDb,
}

impl GangDomains<'_, '_> {
    /// The domains a gang may take (node types grouped by executor, plus the uniformity label's
    /// value if there is one), in (executor, value) order.
    pub(super) fn of(&self, targets: &[(ResVec, Vec<u32>)], label: Option<&str>) -> Vec<Vec<u32>> {
        let mut domains: BTreeMap<(u32, Option<&str>), Vec<u32>> = BTreeMap::new();
        let mut all_types: Vec<u32> = targets.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        all_types.sort_unstable();
        all_types.dedup();
        for t in all_types {
            let exec = self.view.types.types[t as usize].executor;
            let value = match label {
                Some(l) => match self.view.types.label(&self.view.nodes, t, l) {
                    Some(v) => Some(v),
                    None => continue,
                },
                None => None,
            };
            domains.entry((exec, value)).or_default().push(t);
        }
        domains.into_values().collect()
    }

    /// The shape of a gang of identical members like `first`, its verdict's cache key.
    pub(super) fn shape(&self, first: u32, present: u32, gang: &GangSpec) -> GangShape {
        let first = &self.jobs[first as usize];
        GangShape {
            class: first.class,
            priority_level: first.priority_level,
            members: present,
            min_cardinality: gang.min_cardinality,
            uniformity_label: gang.node_uniformity_label.clone(),
            profile: if self.view.earmarks.active() {
                self.view
                    .earmarks
                    .profile(first.queue, self.view.priority_classes[first.priority_class as usize].preemptible)
            } else {
                0
            },
        }
    }

    /// For identical members requesting `req` each: the domains with room in total for the
    /// minimum cardinality at `max_level`; if none, the roomiest alone, whose one trial says how
    /// close the gang came.
    pub(super) fn viable(
        &self,
        domains: Vec<Vec<u32>>,
        req: &ResVec,
        min_cardinality: u32,
        max_level: u8,
    ) -> Vec<Vec<u32>> {
        let mut need = req.clone();
        for v in need.iter_mut() {
            *v *= i64::from(min_cardinality);
        }
        let totals: Vec<ResVec> = domains
            .iter()
            .map(|dom| {
                let mut total = self.view.layout.zero();
                for &t in dom {
                    add_to(&mut total, self.db.type_free(max_level, t));
                }
                total
            })
            .collect();
        let viable: Vec<Vec<u32>> =
            domains.iter().zip(&totals).filter(|(_, total)| fits(&need, total)).map(|(d, _)| d.clone()).collect();
        if viable.is_empty() {
            let roomiest = (0..domains.len()).max_by_key(|&d| (totals[d].clone(), std::cmp::Reverse(d))).unwrap_or(0);
            vec![domains[roomiest].clone()]
        } else {
            viable
        }
    }

    /// How tightly a trial filled domain `dom`: what its node types have free now, per indexed
    /// resource in order (less is tighter).
    pub(super) fn leftover(&self, dom: &[u32]) -> [i64; 4] {
        let mut leftover = [0; 4];
        for &t in dom {
            let free = self.indexed(self.db.type_free(0, t));
            for k in 0..4 {
                leftover[k] += free[k];
            }
        }
        leftover
    }

    /// The amounts of `v` in the indexed resources, in order (as [`Self::leftover`] counts them).
    pub(super) fn indexed(&self, v: &[i64]) -> [i64; 4] {
        let mut out = [0; 4];
        for (k, r) in self.view.cfg.indexed_resources.iter().enumerate().take(4) {
            if let Some(s) = self.view.layout.slot(r.as_str()) {
                out[k] = v[s];
            }
        }
        out
    }
}
