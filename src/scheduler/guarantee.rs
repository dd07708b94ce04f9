//! Guaranteed resources (YuniKorn's `guaranteed`, Kueue's nominal quota) in fair shares.
//!
//! A queue's guarantee is a floor, resource by resource: its share is at least what it takes to
//! hold, of every resource, the smaller of its guarantee and its demand ([`guaranteed_part`] of
//! its demand, as a share), and what the floors leave is divided by fair share as without them. Water filling with floors gives every queue
//! `clamp(w·λ, floor, demand)` for the one level `λ` at which the shares add up to the pool (or
//! its parent's share); with no floor this is plain water filling.
//!
//! Guarantees nest with the queue tree, resource by resource: a parent without a guarantee of
//! its own guarantees what its children do, and a parent's guarantee is divided among its
//! children. Where the guarantees of siblings of a resource add up to more than what they divide
//! (the pool's amount at the top, their parent's guarantee below), they are scaled down in
//! proportion, and the queue report says so.
//!
//! A queue still below its floor goes before every queue above its own in progressive filling
//! ([`below_floor_cost`]): the one furthest below its guarantee first.

/// Demand-capped shares of `total` by water filling with floors: each gets `clamp(w·λ, floor,
/// demand)` for the `λ` at which they add up to `total`, or its whole demand if the demands fit.
/// Floors above demand are lowered to it, and floors that add up to more than `total` are scaled
/// down in proportion. `demands` may be infinite (plain fair shares above the floors).
pub(crate) fn water_fill_floored(total: f64, weights: &[f64], demands: &[f64], floors: &[f64]) -> Vec<f64> {
    let d: Vec<f64> = demands.iter().map(|d| d.max(0.0).min(total)).collect();
    let mut f: Vec<f64> = floors.iter().zip(&d).map(|(f, d)| f.max(0.0).min(*d)).collect();
    let sum_f: f64 = f.iter().sum();
    if sum_f > total && sum_f > 0.0 {
        f.iter_mut().for_each(|x| *x *= total / sum_f);
    }
    if d.iter().sum::<f64>() <= total {
        return d;
    }
    let at = |lambda: f64| -> Vec<f64> {
        (0..d.len()).map(|i| if weights[i] > 0.0 { (weights[i] * lambda).clamp(f[i], d[i]) } else { f[i] }).collect()
    };
    let sum_at = |lambda: f64| at(lambda).iter().sum::<f64>();
    let mut breaks: Vec<f64> = (0..d.len())
        .filter(|&i| weights[i] > 0.0)
        .flat_map(|i| [f[i] / weights[i], d[i] / weights[i]])
        .filter(|b| b.is_finite())
        .collect();
    breaks.sort_by(f64::total_cmp);
    breaks.dedup();
    let (mut lo, mut s_lo) = (0.0, sum_at(0.0));
    for b in breaks {
        let s_b = sum_at(b);
        if s_b >= total {
            // The sum is linear between two breakpoints.
            let lambda = if s_b > s_lo { lo + (total - s_lo) * (b - lo) / (s_b - s_lo) } else { b };
            return at(lambda);
        }
        (lo, s_lo) = (b, s_b);
    }
    d
}

/// The cost that orders a queue (or subtree) in progressive filling when its share after the
/// candidate, `share_after`, is still within its guarantee floor `floor`: below every cost of a
/// queue without that excuse (costs are shares, never negative), the least served first.
#[inline]
pub(crate) fn below_floor_cost(share_after: f64, floor: f64) -> Option<f64> {
    (floor > 0.0 && share_after <= floor + 1e-9).then(|| share_after / floor - 2.0)
}

/// Each queue's guarantee of one resource after nesting and scaling, as a fraction of the pool's
/// amount of it, and whether it was scaled down. `own` is each queue's configured guarantee of
/// the resource as such a fraction (0: none), `has_own` whether the queue has a guarantee of any
/// resource; the tree is given by `roots`, `children` and `post` (children before parents).
pub(crate) fn effective_guarantees(
    own: &[f64],
    has_own: &[bool],
    roots: &[u32],
    children: &[Vec<u32>],
    post: &[u32],
) -> (Vec<f64>, Vec<bool>) {
    let n = own.len();
    // A parent without a guarantee of its own guarantees what its children do.
    let mut configured = own.to_vec();
    for &v in post {
        let v = v as usize;
        if !has_own[v] && !children[v].is_empty() {
            configured[v] = children[v].iter().map(|&c| configured[c as usize]).sum();
        }
    }
    let mut eff = vec![0.0; n];
    let mut scaled = vec![false; n];
    let divide = |kids: &[u32], avail: f64, parent_scaled: bool, eff: &mut [f64], scaled: &mut [bool]| {
        let sum: f64 = kids.iter().map(|&c| configured[c as usize]).sum();
        let factor = if sum > avail + 1e-12 && sum > 0.0 { avail / sum } else { 1.0 };
        for &c in kids {
            let c = c as usize;
            eff[c] = configured[c] * factor;
            scaled[c] = configured[c] > 0.0 && (factor < 1.0 || parent_scaled);
        }
    };
    divide(roots, 1.0, false, &mut eff, &mut scaled);
    for &v in post.iter().rev() {
        let kids = &children[v as usize];
        if !kids.is_empty() {
            let (avail, s) = (eff[v as usize], scaled[v as usize]);
            divide(kids, avail, s, &mut eff, &mut scaled);
        }
    }
    (eff, scaled)
}

/// The part of its demand a queue is guaranteed: the smallest `t` in `[0, 1]` such that `t` times
/// its demand holds, of every resource, the smaller of its guarantee and its demand. `guaranteed`
/// and `demand` are amounts per resource slot; resources it does not demand do not count. The
/// queue's guarantee floor is then `t` times its demand's share (shares are proportional).
pub(crate) fn guaranteed_part(guaranteed: &[f64], demand: &[i64]) -> f64 {
    guaranteed
        .iter()
        .zip(demand)
        .filter(|&(g, d)| *g > 0.0 && *d > 0)
        .map(|(g, &d)| (g / d as f64).min(1.0))
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fairness::water_fill;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn a_floor_comes_first_and_the_rest_is_fair_share() {
        // 8 cpu; A guaranteed 6 (0.75), B of equal weight; both want the whole pool.
        let s = water_fill_floored(1.0, &[1.0, 1.0], &[1.0, 1.0], &[0.75, 0.0]);
        assert!(close(&s, &[0.75, 0.25]), "{s:?}");
        // A wants 2 cpu: its floor is its demand, B gets the rest.
        let s = water_fill_floored(1.0, &[1.0, 1.0], &[0.25, 1.0], &[0.75, 0.0]);
        assert!(close(&s, &[0.25, 0.75]), "{s:?}");
        // A floor below the fair share changes nothing.
        let s = water_fill_floored(1.0, &[1.0, 1.0], &[1.0, 1.0], &[0.25, 0.0]);
        assert!(close(&s, &[0.5, 0.5]), "{s:?}");
        // Three queues: the floor, then equal parts of the rest.
        let s = water_fill_floored(1.0, &[1.0; 3], &[1.0; 3], &[0.6, 0.0, 0.0]);
        assert!(close(&s, &[0.6, 0.2, 0.2]), "{s:?}");
        // Plain shares above the floors (infinite demand).
        let s = water_fill_floored(1.0, &[1.0, 1.0], &[f64::INFINITY; 2], &[0.75, 0.0]);
        assert!(close(&s, &[0.75, 0.25]), "{s:?}");
        // Floors adding up to more than the total are scaled in proportion.
        let s = water_fill_floored(1.0, &[1.0, 1.0], &[1.0, 1.0], &[0.9, 0.6]);
        assert!(close(&s, &[0.6, 0.4]), "{s:?}");
    }

    #[test]
    fn without_floors_it_is_water_filling() {
        let (w, d) = ([1.0, 1.0, 1.0, 1.0], [0.05, 0.2, 0.3, 1.0]);
        assert!(close(&water_fill_floored(1.0, &w, &d, &[0.0; 4]), &water_fill(1.0, &w, &d)));
        let (w, d) = ([1.0, 0.5], [1.0, 1.0]);
        assert!(close(&water_fill_floored(0.5, &w, &d, &[0.0; 2]), &water_fill(0.5, &w, &d)));
    }

    #[test]
    fn guarantees_nest_and_scale() {
        // Roots 0 (parent of 2, 3) and 1. Queue 0 has none of its own: it guarantees what its
        // children do (0.5 + 0.4); with queue 1's 0.3 that is 1.2 of the pool, scaled by 1/1.2.
        let children = vec![vec![2, 3], vec![], vec![], vec![]];
        let own = [false, true, true, true];
        let (eff, scaled) = effective_guarantees(&[0.0, 0.3, 0.5, 0.4], &own, &[0, 1], &children, &[2, 3, 0, 1]);
        assert!(close(&eff, &[0.75, 0.25, 0.5 / 1.2, 0.4 / 1.2]), "{eff:?}");
        assert_eq!(scaled, vec![true, true, true, true]);
        // A parent's guarantee is divided among its children: 0.4 for children asking 0.3 + 0.3.
        let own = [true, false, true, true];
        let (eff, scaled) = effective_guarantees(&[0.4, 0.0, 0.3, 0.3], &own, &[0, 1], &children, &[2, 3, 0, 1]);
        assert!(close(&eff, &[0.4, 0.0, 0.2, 0.2]), "{eff:?}");
        assert_eq!(scaled, vec![false, false, true, true]);
    }

    #[test]
    fn the_guaranteed_part_covers_every_resource_up_to_demand() {
        // Guaranteed 2 cpu; demand 3 cpu and 48Gi (three jobs of 1 cpu, 16Gi): two thirds.
        let gi = 1i64 << 30;
        assert!((guaranteed_part(&[2000.0, 0.0], &[3000, 48 * gi]) - 2.0 / 3.0).abs() < 1e-12);
        // Guaranteed 6 cpu and 8Gi; demand 8 cpu and 48Gi: cpu decides, three quarters.
        let t = guaranteed_part(&[6000.0, 8.0 * gi as f64], &[8000, 48 * gi]);
        assert!((t - 0.75).abs() < 1e-12, "{t}");
        // More guaranteed than demanded: all of it; nothing guaranteed, or nothing demanded: 0.
        assert_eq!(guaranteed_part(&[6000.0, 0.0], &[2000, gi]), 1.0);
        assert_eq!(guaranteed_part(&[0.0, 0.0], &[2000, gi]), 0.0);
        assert_eq!(guaranteed_part(&[0.0, 8.0 * gi as f64], &[2000, 0]), 0.0);
    }

    #[test]
    fn below_floor_goes_first() {
        assert_eq!(below_floor_cost(0.5, 0.0), None);
        assert_eq!(below_floor_cost(0.8, 0.75), None);
        let (a, b) = (below_floor_cost(0.25, 0.75).unwrap(), below_floor_cost(0.75, 0.75).unwrap());
        assert!(a < b && b < 0.0);
    }
}
