//! Preemption fences (YuniKorn's `preemption.policy: fence`): a job inside the subtree of a
//! `preemption_policy = fence` queue displaces by urgency no job outside it, neither a running
//! job nor one placed earlier in the same cycle. Evicted jobs stay fair game (fair-share eviction
//! between subtrees is unchanged), and inside the fence urgency works as everywhere.
//!
//! The rule holds on every path where a job may displace another by urgency: `fair_share`
//! placement ([`PoolCycle::try_place_fenced`]), placement in a pool with earmarked nodes
//! (`earmark_placement.rs`), the `priority` pool policy's preemption (`policy/mod.rs`), gangs
//! (whose members go through the same placement) and the return of evicted jobs
//! (`placement.rs`). Two displacements are not by urgency and stay as they are: a guest on an
//! earmarked node gives way to the jobs at home there whatever their priorities (the earmark's
//! rule), and the `proportional` policy preempts queues above their targets (its fair share).
//!
//! A placement step of the cycle (`impl PoolCycle`): the usual choice of node at each level is
//! kept when its victims are all allowed; otherwise the level's nodes are searched again
//! counting only allowed victims as free. Only jobs inside a fence take this path, so a pool
//! without fences places as before.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::resvec::ResVec;

impl PoolCycle<'_> {
    /// The innermost preemption fence around job `j`'s queue, if any.
    #[inline]
    pub(super) fn fence_for(&self, j: u32) -> Option<u32> {
        self.fences.as_ref()?.fence_of(self.jobs[j as usize].queue)
    }

    /// The preemption fence around job `j`, if the pool has fences (free otherwise).
    #[inline]
    pub(super) fn fence_if_any(&self, j: u32) -> Option<u32> {
        if self.fences.is_some() { self.fence_for(j) } else { None }
    }

    /// True if a job inside fence `fence` may displace job `v`: `v` was evicted for fair share,
    /// is inside the fence too, or is a guest on an earmarked node (guests give way to the jobs
    /// at home whatever their urgency, and only those search the guests' room).
    pub(super) fn may_displace(&self, fence: u32, v: u32) -> bool {
        if self.ledger.status(v) == super::job::Status::Evicted {
            return true;
        }
        let q = self.jobs[v as usize].queue;
        if self.fences.as_ref().is_some_and(|f| f.within(fence, q)) {
            return true;
        }
        self.view().earmarks.active() && self.ledger.held_node(v).is_some_and(|n| self.view().earmarks.is_guest(n, q))
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
            let Some(choice) = self.level_choice(l, types, q, req) else { continue };
            if let Some((n, victims)) = self.within_fence(fence, l, types, q, req, choice) {
                self.place_displacing(j, n, req, victims);
                return Some(l);
            }
        }
        None
    }

    /// `choice`, a level's usual node and victims for a job of queue `q` inside `fence`, if the
    /// fence allows its victims; else the first node of `types` where `req` fits at `level`
    /// displacing only jobs the fence allows. When neither, notes the fence in `fence_stop` (a
    /// later success clears it).
    pub(super) fn within_fence(
        &mut self,
        fence: u32,
        level: u8,
        types: &[u32],
        q: u32,
        req: &ResVec,
        choice: (u32, Vec<u32>),
    ) -> Option<(u32, Vec<u32>)> {
        let found = if self.fence_allows(fence, &choice.1) {
            Some(choice)
        } else {
            self.fenced_node(fence, level, types, q, req)
        };
        self.fence_stop = if found.is_some() { None } else { Some(fence) };
        found
    }

    /// The first node (in tier and best-fit order) where `req` fits at `level` counting as free
    /// only evicted jobs, guests and jobs inside `fence`, with the victims to displace there.
    fn fenced_node(&mut self, fence: u32, level: u8, types: &[u32], q: u32, req: &ResVec) -> Option<(u32, Vec<u32>)> {
        let all = self.db.nodes.len();
        let cands = self.db.find_candidates(level, types, q, req, all);
        let fences = self.fences.as_deref()?;
        let queues = &self.queues;
        let overshare = |q: u32| queues[q as usize].overshare;
        // Guests, and only they, are freed at the guest level.
        let guest = self.view().levels.guest_level();
        let allowed =
            |o: &super::nodedb::Occupant| o.evicted || Some(o.freed_at) == guest || fences.within(fence, o.queue);
        cands.into_iter().find_map(|n| {
            let victims = self.db.victims_within(n, level, req, overshare, allowed)?;
            Some((n, victims))
        })
    }

    /// Why a job waits when fence `fence` stopped its placement.
    pub(super) fn fence_reason(&self, fence: u32) -> Reason {
        Reason::PreemptionFence { pool: self.view().pool.clone(), fence: self.queues[fence as usize].name.clone() }
    }
}
