//! The cycle's steps on earmarked nodes ([`super::earmark`] holds the rules and the pool's
//! earmarks): the level at which a guest is freed, the node types a job may use, placement (home
//! nodes, then open ones, then others' as a guest), the reason a job barred from earmarked nodes
//! waits, and the refill after filling. Who took the room of a job that could not return, and
//! what each queue holds at home and as a guest, are the outcome's ([`super::outcome`]).

use super::context::PoolCycle;
use super::decisions::Reason;
use super::earmark::Access;
use super::job::Status;
use super::rate_limit::RateLimits;
use super::resvec::ResVec;

impl PoolCycle<'_> {
    /// True if job `j` is preemptible.
    fn preemptible(&self, j: u32) -> bool {
        self.view().priority_classes[self.jobs[j as usize].priority_class as usize].preemptible
    }

    /// The level at which job `j` is freed on node `n` ([`super::view::PoolView::freed_at`]).
    #[inline]
    pub(super) fn freed_at(&self, j: u32, n: u32, evicted: bool) -> u8 {
        let level = self.view().freed_at(&self.jobs[j as usize], n, evicted);
        // A running job younger than the urgency minimum is freed at no level a search reaches,
        // like a non-preemptible one (a guest stays a guest).
        if !evicted && self.min_runtime.urgency_spared(j) && Some(level) != self.view().levels.guest_level() {
            return self.view().levels.never_freed();
        }
        level
    }

    /// Node types `j` may use at all: `types` without the earmarked ones it is barred from, or why
    /// it may use none.
    #[inline]
    pub(super) fn allowed_types(&self, j: u32, types: Vec<u32>) -> Result<Vec<u32>, Reason> {
        if !self.view().earmarks.active() {
            return Ok(types);
        }
        let (q, preemptible) = (self.jobs[j as usize].queue, self.preemptible(j));
        let (allowed, barred): (Vec<u32>, Vec<u32>) =
            types.iter().partition(|&&t| self.view().earmarks.access_type(t, q, preemptible) != Access::Barred);
        if allowed.is_empty() && !barred.is_empty() {
            return Err(Reason::ReservedNodes {
                pool: self.view().pool.clone(),
                queues: self.view().earmarks.names_of(&barred),
            });
        }
        Ok(allowed)
    }

    /// [`PoolCycle::try_place`] in a pool with earmarked nodes. Where nothing has to move: home
    /// nodes, then nodes reserved for nobody, then others' earmarked nodes as a guest. Then, at
    /// the guest level, home nodes whose guests make the room; then the usual displacement levels
    /// on home and open nodes. A job inside a preemption fence displaces by urgency only jobs
    /// inside it (guests still give way to it at home, [`super::fence`]).
    pub(super) fn try_place_earmarked(&mut self, j: u32, types: &[u32], req: &ResVec) -> Option<u8> {
        self.fence_stop = None;
        let job = &self.jobs[j as usize];
        let (q, max) = (job.queue, self.view().levels.max_search_level(job.priority_level as usize));
        let preemptible = self.preemptible(j);
        let (mut home, mut open, mut guest) = (Vec::new(), Vec::new(), Vec::new());
        for &t in types {
            match self.view().earmarks.access_type(t, q, preemptible) {
                Access::Home => home.push(t),
                Access::Open => open.push(t),
                Access::Guest => guest.push(t),
                Access::Barred => {}
            }
        }
        for set in [&home, &open, &guest] {
            if !set.is_empty()
                && let Some(n) = self.db.find(0, set, q, req)
            {
                self.place_displacing(j, n, req, Vec::new());
                return Some(0);
            }
        }
        let guest_level = self.view().levels.guest_level();
        let mut displacing = home.clone();
        displacing.extend(open);
        let fence = self.fence_if_any(j);
        for l in 1..=max {
            if self.db.level_is_redundant(l) {
                continue;
            }
            let set = if Some(l) == guest_level { &home } else { &displacing };
            if set.is_empty() {
                continue;
            }
            let Some(choice) = self.least_harmful_node(l, set, q, req) else { continue };
            let found = match fence {
                Some(f) => self.within_fence(f, l, set, q, req, choice),
                None => Some(choice),
            };
            if let Some((n, victims)) = found {
                self.place_displacing(j, n, req, victims);
                return Some(l);
            }
        }
        None
    }

    /// Why `j` (with dense requests `req`) waits if the reason is an earmark: it is barred from
    /// earmarked nodes where it would fit without moving anyone.
    pub(super) fn earmark_reason(&mut self, j: u32, req: &ResVec) -> Option<Reason> {
        if !self.view().earmarks.active() || self.preemptible(j) {
            return None;
        }
        let q = self.jobs[j as usize].queue;
        let constraint = self.view().classes[self.jobs[j as usize].class as usize].constraint;
        let barred: Vec<u32> = self
            .matching_types(constraint)
            .into_iter()
            .filter(|&t| self.view().earmarks.access_type(t, q, false) == Access::Barred)
            .filter(|&t| self.db.type_nodes[t as usize].iter().any(|&n| self.db.fits_at(n, 0, req)))
            .collect();
        if barred.is_empty() {
            return None;
        }
        Some(Reason::ReservedNodes { pool: self.view().pool.clone(), queues: self.view().earmarks.names_of(&barred) })
    }

    /// After filling, in a pool with earmarked nodes: running jobs still evicted could not return
    /// and will be preempted, yet they hold their room until the cycle ends. A guest may not take
    /// the room of an evicted job at home (where anyone else could have displaced it), so without
    /// this it would get that room only in the next cycle. Releases that room and, if jobs wait
    /// for room, fills once more.
    pub(super) fn refill_earmarked(&mut self, rate: &mut RateLimits) {
        if !self.view().earmarks.active() {
            return;
        }
        let lost: Vec<u32> = self
            .jobs
            .running()
            .filter(|&j| self.ledger.status(j) == Status::Evicted && !self.jobs[j as usize].was_queued())
            .collect();
        let mut retry: Vec<Vec<u32>> = vec![Vec::new(); self.queues.len()];
        let mut seen_gangs = rustc_hash::FxHashSet::default();
        for j in self.jobs.queued() {
            let (job, fate) = (&self.jobs[j as usize], self.ledger.fate(j));
            let waits_for_room = fate.status == Status::Waiting
                && matches!(
                    fate.reason.as_deref(),
                    Some(
                        Reason::NoCapacity { .. }
                            | Reason::MinRuntime { .. }
                            | Reason::ReservedNodes { .. }
                            | Reason::Gang { .. }
                            | Reason::PreemptionFence { .. }
                    )
                );
            if !waits_for_room || job.info.gang.as_ref().is_some_and(|g| !seen_gangs.insert((job.queue, g.id.clone())))
            {
                continue;
            }
            retry[job.queue as usize].push(j);
        }
        if lost.is_empty() || retry.iter().all(Vec::is_empty) {
            return;
        }
        for j in lost {
            if let Some(n) = self.ledger.held_node(j) {
                self.db.remove(n, j);
            }
            // Preempted, as it would have been; who displaced it stays recorded for the outcome.
            self.ledger.change(j, |f| f.status = Status::Preempted);
        }
        self.ledger.forget_verdicts();
        for (q, list) in self.queues.iter_mut().zip(retry) {
            q.retry = list;
            q.retry_pos = 0;
        }
        self.fill(rate);
    }
}
