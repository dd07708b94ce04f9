//! Preemption fences (YuniKorn's `preemption.policy: fence`): a job inside the subtree of a
//! `preemption_policy = fence` queue displaces by urgency no job outside it, neither a running
//! job nor one placed earlier in the same cycle. Evicted jobs stay fair game (fair-share eviction
//! between subtrees is unchanged), and inside the fence urgency works as everywhere.
//!
//! A placement step of the cycle (`impl PoolCycle`): the usual choice of node at each level
//! ([`PoolCycle::level_choice`]) is kept when its victims are all allowed; otherwise the level's
//! nodes are searched again counting only allowed victims as free. Only jobs inside a fence take
//! this path, so a pool without fences places as before.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::resvec::ResVec;

impl PoolCycle<'_> {
    /// The innermost preemption fence around job `j`'s queue, if any.
    #[inline]
    pub(super) fn fence_for(&self, j: u32) -> Option<u32> {
        self.fences.as_ref()?.fence_of(self.jobs[j as usize].queue)
    }

    /// True if a job inside fence `fence` may displace job `v`: `v` was evicted for fair share,
    /// or is inside the fence too.
    fn may_displace(&self, fence: u32, v: u32) -> bool {
        let evicted = self.ledger.status(v) == super::job::Status::Evicted;
        evicted || self.fences.as_ref().is_some_and(|f| f.within(fence, self.jobs[v as usize].queue))
    }

    /// True if every one of `victims` may be displaced by a job inside `fence`.
    pub(super) fn fence_allows(&self, fence: u32, victims: &[u32]) -> bool {
        victims.iter().all(|&v| self.may_displace(fence, v))
    }

    /// [`PoolCycle::try_place`] for job `j` inside preemption fence `fence`. Notes the fence in
    /// `fence_stop` when some level had room only by displacing jobs outside it.
    pub(super) fn try_place_fenced(&mut self, j: u32, fence: u32, types: &[u32], req: &ResVec) -> Option<u8> {
        self.fence_stop = None;
        let job = &self.jobs[j as usize];
        let (q, max) = (job.queue, self.view().levels.max_search_level(job.priority_level as usize));
        for l in 0..=max {
            if self.db.level_is_redundant(l) {
                continue;
            }
            let Some((n, victims)) = self.level_choice(l, types, q, req) else { continue };
            let found = if self.fence_allows(fence, &victims) {
                Some((n, victims))
            } else {
                self.fenced_node(fence, l, types, q, req)
            };
            match found {
                Some((n, victims)) => {
                    self.place_displacing(j, n, req, victims);
                    self.fence_stop = None;
                    return Some(l);
                }
                None => self.fence_stop = Some(fence),
            }
        }
        None
    }

    /// The first node (in tier and best-fit order) where `req` fits at `level` counting as free
    /// only evicted jobs and jobs inside `fence`, with the victims to displace there.
    fn fenced_node(&mut self, fence: u32, level: u8, types: &[u32], q: u32, req: &ResVec) -> Option<(u32, Vec<u32>)> {
        let all = self.db.nodes.len();
        let cands = self.db.find_candidates(level, types, q, req, all);
        let fences = self.fences.as_deref()?;
        let queues = &self.queues;
        let overshare = |q: u32| queues[q as usize].overshare;
        cands.into_iter().find_map(|n| {
            let victims =
                self.db.victims_within(n, level, req, overshare, |o| o.evicted || fences.within(fence, o.queue))?;
            Some((n, victims))
        })
    }

    /// Why a job waits when fence `fence` stopped its placement.
    pub(super) fn fence_reason(&self, fence: u32) -> Reason {
        Reason::PreemptionFence { pool: self.view().pool.clone(), fence: self.queues[fence as usize].name.clone() }
    }
}
