//! Fair share: the cost of a queue's allocation (dominant resource share, or the older weighted
//! sum), plain fair shares, and demand-capped (water-filled) adjusted fair shares.

use super::config::{FairnessModel, SchedulerConfig};
use super::resvec::{Layout, ResVec};
use crate::model::quantity::Unit;

/// Turns an allocation into a share of the pool.
#[derive(Debug, Clone)]
pub(crate) struct CostModel {
    model: FairnessModel,
    /// DRF: (slot, total). Weighted sum: (slot, coefficient per unit amount).
    terms: Vec<(usize, f64)>,
    /// Weighted sum: the pool's total cost.
    total_cost: f64,
}

impl CostModel {
    pub(crate) fn new(cfg: &SchedulerConfig, layout: &Layout, total: &[i64]) -> Self {
        match cfg.fairness_model {
            FairnessModel::DominantResource => {
                let terms = cfg
                    .dominant_resource_fairness_resources
                    .iter()
                    .filter_map(|r| layout.slot(r.as_str()))
                    .filter(|&s| total[s] > 0)
                    .map(|s| (s, total[s] as f64))
                    .collect();
                CostModel { model: FairnessModel::DominantResource, terms, total_cost: 1.0 }
            }
            FairnessModel::WeightedSum => {
                let terms: Vec<(usize, f64)> = cfg
                    .resource_cost_weights
                    .iter()
                    .filter(|(_, w)| **w > 0.0)
                    .filter_map(|(r, w)| {
                        let slot = layout.slot(r.as_str())?;
                        // Natural units: cores, GiB, devices.
                        let per_unit = match Unit::for_resource(r.as_str()) {
                            Unit::Milli => 1000.0,
                            Unit::Whole => (1u64 << 30) as f64,
                        };
                        Some((slot, w / per_unit))
                    })
                    .collect();
                let total_cost = terms.iter().map(|(s, c)| total[*s] as f64 * c).sum::<f64>();
                CostModel { model: FairnessModel::WeightedSum, terms, total_cost }
            }
        }
    }

    /// The share of the pool `alloc` represents (unweighted).
    #[inline]
    pub(crate) fn share(&self, alloc: &[i64]) -> f64 {
        match self.model {
            FairnessModel::DominantResource => self.terms.iter().map(|&(s, t)| alloc[s] as f64 / t).fold(0.0, f64::max),
            FairnessModel::WeightedSum => {
                if self.total_cost <= 0.0 {
                    return 0.0;
                }
                self.terms.iter().map(|&(s, c)| alloc[s] as f64 * c).sum::<f64>() / self.total_cost
            }
        }
    }

    /// `share(alloc + extra)` without allocating.
    #[inline]
    pub(crate) fn share_with(&self, alloc: &[i64], extra: &[i64]) -> f64 {
        match self.model {
            FairnessModel::DominantResource => {
                self.terms.iter().map(|&(s, t)| (alloc[s] + extra[s]) as f64 / t).fold(0.0, f64::max)
            }
            FairnessModel::WeightedSum => {
                let v: ResVec = alloc.iter().zip(extra).map(|(a, b)| a + b).collect();
                self.share(&v)
            }
        }
    }
}

/// Plain fair shares: `w_i / Σ w` (over the queues given, which should be the active ones).
pub fn fair_shares(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| if total > 0.0 { w / total } else { 0.0 }).collect()
}

/// Demand-capped fair shares by water filling: every queue gets its weighted part of what is
/// left, but never more than it demands; what a capped queue does not need is shared among the
/// others, until nothing is left or every queue is capped. `demands` are shares of the pool.
pub fn adjusted_fair_shares(weights: &[f64], demands: &[f64]) -> Vec<f64> {
    water_fill(1.0, weights, demands)
}

/// Demand-capped shares of `total` by water filling: every child gets its weighted part of what
/// is left, never more than it demands; what a capped child does not need goes to the others.
/// A queue tree divides each parent's share among its children this way.
pub(crate) fn water_fill(total: f64, weights: &[f64], demands: &[f64]) -> Vec<f64> {
    let n = weights.len();
    let mut adjusted = vec![0.0; n];
    let mut capped: Vec<bool> = demands.iter().map(|d| *d <= 0.0).collect();
    let mut unallocated = total;
    for _ in 0..=n {
        let total_w: f64 = (0..n).filter(|&i| !capped[i]).map(|i| weights[i]).sum();
        if total_w <= 0.0 || unallocated <= 1e-12 {
            break;
        }
        let mut newly_capped = false;
        for i in 0..n {
            if capped[i] {
                continue;
            }
            let give = unallocated * weights[i] / total_w;
            let demand = demands[i].min(total);
            if adjusted[i] + give >= demand {
                adjusted[i] = demand;
                capped[i] = true;
                newly_capped = true;
            } else {
                adjusted[i] += give;
            }
        }
        unallocated = total - adjusted.iter().sum::<f64>();
        if !newly_capped {
            break;
        }
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ResourceName;

    #[test]
    fn plain_shares_follow_weights() {
        let s = fair_shares(&[1.0, 0.5]);
        assert!((s[0] - 2.0 / 3.0).abs() < 1e-12 && (s[1] - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn water_filling_gives_surplus_to_others() {
        // A demands 10%, B and C want everything: B and C split the remaining 90%.
        let s = adjusted_fair_shares(&[1.0, 1.0, 1.0], &[0.1, 5.0, 5.0]);
        assert!((s[0] - 0.1).abs() < 1e-12, "{s:?}");
        assert!((s[1] - 0.45).abs() < 1e-12 && (s[2] - 0.45).abs() < 1e-12, "{s:?}");
        // Everyone satisfied: shares equal demands.
        let s = adjusted_fair_shares(&[1.0, 1.0], &[0.2, 0.3]);
        assert!((s[0] - 0.2).abs() < 1e-12 && (s[1] - 0.3).abs() < 1e-12);
        // Weighted: 2:1 when both demand everything.
        let s = adjusted_fair_shares(&[1.0, 0.5], &[1.0, 1.0]);
        assert!((s[0] - 2.0 / 3.0).abs() < 1e-9 && (s[1] - 1.0 / 3.0).abs() < 1e-9, "{s:?}");
        // Cascading caps.
        let s = adjusted_fair_shares(&[1.0, 1.0, 1.0, 1.0], &[0.05, 0.2, 0.3, 1.0]);
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{s:?}");
        assert!((s[0] - 0.05).abs() < 1e-12 && (s[1] - 0.2).abs() < 1e-12 && (s[2] - 0.3).abs() < 1e-12, "{s:?}");
    }

    #[test]
    fn drf_and_weighted_sum_costs() {
        let layout = Layout::new([ResourceName::cpu(), ResourceName::memory(), ResourceName::gpu()]);
        let total = [9000, 18 << 30, 0];
        let drf = CostModel::new(&SchedulerConfig::default(), &layout, &total);
        assert!((drf.share(&[1000, 4 << 30, 0]) - 4.0 / 18.0).abs() < 1e-12);
        assert!((drf.share_with(&[1000, 4 << 30, 0], &[3000, 1 << 30, 0]) - 4.0 / 9.0).abs() < 1e-12);
        let cfg = SchedulerConfig {
            fairness_model: FairnessModel::WeightedSum,
            resource_cost_weights: [(ResourceName::cpu(), 1.0), (ResourceName::memory(), 0.5)].into_iter().collect(),
            ..Default::default()
        };
        let ws = CostModel::new(&cfg, &layout, &total);
        // total cost = 9 + 0.5 * 18 = 18; alloc = 1 + 0.5 * 4 = 3.
        assert!((ws.share(&[1000, 4 << 30, 0]) - 3.0 / 18.0).abs() < 1e-12);
    }
}
