//! The pool check of floating resources ([`super::floating`]): a candidate starts (or an evicted
//! job returns) only if the pool has enough of each floating resource it requests left, after
//! what the pool's leased and running jobs and this cycle's placements hold. Node fit never
//! looks at them.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::resvec::ResVec;
use crate::model::quantity::{Unit, format_quantity};

impl PoolCycle<'_> {
    /// Why the pool cannot give the floating resources in `req` now, if it cannot: the first
    /// one short. Free when the pool has no floating resources.
    #[inline]
    pub(super) fn floating_short(&self, req: &ResVec) -> Option<Reason> {
        self.view().floating.iter().find_map(|&(s, amount)| {
            if req[s] <= 0 {
                return None;
            }
            let held = self.floating_held(s);
            (held + req[s] > amount).then(|| {
                let name = self.view().layout.name(s).clone();
                let q = |v: i64| format_quantity(v.max(0), Unit::for_resource(name.as_str()));
                Reason::FloatingResource {
                    pool: self.view().pool.clone(),
                    left: q(amount - held),
                    capacity: q(amount),
                    requested: q(req[s]),
                    resource: name,
                }
            })
        })
    }

    /// What the pool's jobs hold of the floating resource in slot `s` at this point of the
    /// cycle (the queues' allocations count held and placed jobs, not evicted ones).
    pub(super) fn floating_held(&self, s: usize) -> i64 {
        self.queues.iter().map(|q| q.alloc[s]).sum()
    }
}
