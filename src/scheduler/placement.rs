//! Placing one candidate: limits and rate checks, node selection across priority levels,
//! displacement of victims, putting evicted jobs back, and the undo log that makes gang
//! placement all-or-nothing.
//!
//! A step of the whole cycle (`impl PoolCycle`) rather than an object with a narrow borrow: one
//! placement may displace running and evicted jobs, break their gangs and give their room away,
//! so it reads and changes the queues, the node db, the ledger, the jobs, the gangs, the return
//! order, the type cache and the pool policy's state, which is nearly all the cycle holds.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::job::{Status, Undo};
use super::nodedb::Occupant;
use super::queue::Candidate;
use super::rate_limit::RateLimits;
use super::resvec::{ResVec, add_to, fits, sub_from};
use crate::model::quantity::{Unit, format_quantity};
use smallvec::SmallVec;
use std::sync::Arc;

/// How a single job's placement ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Single {
    Placed,
    /// Not placed, for the verdict cached for its class (or just found and cached): its reason.
    OnVerdict,
    /// Not placed, for a reason of its own (a fence, reserved nodes).
    Failed,
}

/// Nodes compared when a placement must displace someone: enough to find a better victim in
/// practice, few enough that preemption-heavy cycles stay fast.
const DISPLACE_CANDIDATES: usize = 8;

impl PoolCycle<'_> {
    /// Tries the queue's candidate. Returns the job if the candidate was a single queued job
    /// that failed on its class's verdict (cached or just found): the jobs alike that follow it
    /// fail on the same one (`PoolCycle::advance_past`).
    pub(super) fn attempt(&mut self, q: u32, cand: Candidate, rate: &mut RateLimits) -> Option<u32> {
        self.ledger.count_tried(cand.jobs.len());
        if cand.evicted {
            let back =
                if cand.jobs.len() == 1 { self.return_evicted(cand.jobs[0]) } else { self.return_evicted_gang(&cand) };
            // Jobs leased earlier in this cycle are not tied to a node: if their place is gone
            // they may go anywhere (their tokens are already taken).
            let new = cand.jobs.iter().all(|&j| self.jobs[j as usize].was_queued());
            if !back && new {
                // The whole gang goes back to waiting (members that failed for lack of room
                // included) and is tried again as a whole.
                let members: SmallVec<[u32; 1]> = match &cand.gang {
                    Some(g) => self
                        .gang_members(q, g.id.as_str())
                        .into_iter()
                        .filter(|&m| {
                            matches!(self.ledger.status(m), Status::Evicted | Status::Failed | Status::Waiting)
                        })
                        .collect(),
                    None => cand.jobs.clone(),
                };
                let mut req = self.view().layout.zero();
                for &j in &members {
                    if self.ledger.status(j) == Status::Evicted
                        && let Some(node) = self.ledger.held_node(j)
                    {
                        self.db.remove(node, j);
                    }
                    self.set_status(j, Status::Waiting, None);
                    add_to(&mut req, &self.req(j));
                }
                let again = Candidate { jobs: members, evicted: false, gang: cand.gang.clone(), req };
                if self.refused_floating(&again.req, &again.jobs) {
                    return None;
                }
                if self.is_gang(&again) {
                    self.place_gang(q, &again);
                } else {
                    self.place_single(again.jobs[0]);
                }
            }
            return None;
        }
        if self.refused_floating(&cand.req, &cand.jobs) {
            return None;
        }
        if let Some(reason) = self.limit_violation(q, &cand) {
            let reason = Arc::new(reason);
            for &j in &cand.jobs {
                self.set_reason(j, reason.clone());
            }
            return None;
        }
        let size = cand.jobs.len() as u64;
        if let Err(scope) = rate.check(&self.queues[q as usize].name, size) {
            let reason = match rate.burst_below(size) {
                Some((scope, burst)) => Reason::GangBeyondBurst { size, scope, burst },
                None => Reason::RateLimited { scope },
            };
            let reason = Arc::new(reason);
            for &j in &cand.jobs {
                self.set_reason(j, reason.clone());
            }
            // As in Armada, only fewer than one token left ends the queue's turn (or, for the
            // global bucket, the round): a gang that needs more than remain is skipped, and
            // smaller candidates go on.
            if let Err(scope) = rate.check(&self.queues[q as usize].name, 1) {
                let reason = Arc::new(Reason::RateLimited { scope });
                let qc = &mut self.queues[q as usize];
                qc.queued_stopped = true;
                qc.note = Some(reason.clone());
                if scope == super::rate_limit::RateScope::Global {
                    self.ledger.stop_for_rate(reason);
                }
            }
            return None;
        }
        let placed = if self.is_gang(&cand) {
            self.place_gang(q, &cand)
        } else {
            match self.place_single(cand.jobs[0]) {
                Single::Placed => 1,
                Single::OnVerdict => return Some(cand.jobs[0]),
                Single::Failed => 0,
            }
        };
        if placed > 0 {
            rate.take(&self.queues[q as usize].name, placed as u64);
        }
        None
    }

    /// True if the pool has too little left of a floating resource `req` asks for (`jobs` then
    /// wait with why).
    fn refused_floating(&mut self, req: &ResVec, jobs: &[u32]) -> bool {
        if self.view().floating.is_empty() {
            return false;
        }
        let Some(reason) = self.floating_short(req) else { return false };
        let reason = Arc::new(reason);
        for &j in jobs {
            self.set_reason(j, reason.clone());
        }
        true
    }

    /// True if the candidate goes through gang placement.
    fn is_gang(&self, cand: &Candidate) -> bool {
        cand.gang.as_ref().is_some_and(|g| g.cardinality > 1 || g.node_uniformity_label.is_some())
    }

    /// The queue or priority-class limit the candidate would break.
    fn limit_violation(&self, q: u32, cand: &Candidate) -> Option<Reason> {
        let qc = &self.queues[q as usize];
        if qc.limit.is_none() && qc.priority_class_limits.iter().all(Option::is_none) {
            return None;
        }
        if let Some(limit) = &qc.limit {
            for s in 0..limit.len() {
                if cand.req[s] > 0 && qc.alloc[s] + cand.req[s] > limit[s] {
                    return Some(Reason::QueueLimit {
                        queue: qc.name.clone(),
                        resource: self.view().layout.name(s).clone(),
                    });
                }
            }
        }
        let mut by_pc: Vec<(u16, ResVec)> = Vec::new();
        for &j in &cand.jobs {
            let pc = self.jobs[j as usize].priority_class;
            let req = self.req(j);
            match by_pc.iter_mut().find(|(p, _)| *p == pc) {
                Some((_, v)) => add_to(v, &req),
                None => by_pc.push((pc, req)),
            }
        }
        for (pc, req) in by_pc {
            if let Some(limit) = &qc.priority_class_limits[pc as usize] {
                for s in 0..limit.len() {
                    if req[s] > 0 && qc.alloc_by_priority_class[pc as usize][s] + req[s] > limit[s] {
                        return Some(Reason::PriorityClassLimit {
                            queue: qc.name.clone(),
                            priority_class: self.view().priority_classes[pc as usize].name.clone(),
                            resource: self.view().layout.name(s).clone(),
                        });
                    }
                }
            }
        }
        None
    }

    /// Types of node a constraint class may use (computed once per cycle).
    #[inline]
    pub(super) fn matching_types(&mut self, constraint: u32) -> Vec<u32> {
        let (view, cache) = self.view_and_type_cache();
        let cached = &mut cache[constraint as usize];
        if cached.is_none() {
            let reqs = view.constraints[constraint as usize].reqs;
            *cached = Some(view.types.matching(&view.nodes, reqs));
        }
        cached.clone().unwrap_or_default()
    }

    /// The job's dense requests and the node types it may use, or why it cannot be placed at all.
    pub(super) fn job_targets(&mut self, j: u32) -> Result<(ResVec, Vec<u32>), Reason> {
        let class = self.jobs[j as usize].class as usize;
        let req = match &self.view().classes[class].dense {
            Ok(v) => v.clone(),
            Err(r) => return Err(Reason::UnknownResource { pool: self.view().pool.clone(), resource: r.clone() }),
        };
        let constraint = self.view().classes[class].constraint;
        let types = self.matching_types(constraint);
        if types.is_empty() {
            let detail = self
                .view()
                .types
                .describe_mismatch(&self.view().nodes, self.view().constraints[constraint as usize].reqs);
            return Err(Reason::NoMatchingNode { pool: self.view().pool.clone(), detail });
        }
        let types = self.allowed_types(j, types)?;
        let types = self.unreserved_types(j, types)?;
        Ok((req, types))
    }

    /// Places a single queued job; records why not if it cannot.
    fn place_single(&mut self, j: u32) -> Single {
        let key = self.verdict_key(j);
        // A job that may use reserved nodes is not like the others of its class.
        let cached = !self.bypasses_verdicts(j);
        if let Some(r) = self.ledger.verdict(&key).filter(|_| cached) {
            let r = r.clone();
            self.set_reason(j, r);
            return Single::OnVerdict;
        }
        let (req, types) = match self.job_targets(j) {
            Ok(t) => t,
            Err(reason) => {
                let reason = Arc::new(reason);
                if cached {
                    self.ledger.set_verdict(key, reason.clone());
                }
                self.set_reason(j, reason);
                return if cached { Single::OnVerdict } else { Single::Failed };
            }
        };
        if self.try_place(j, &types, &req).is_some() {
            return Single::Placed;
        }
        if let Some(fence) = self.fence_stop.take() {
            // Not cached: the verdict holds for the jobs inside this fence only.
            let reason = Arc::new(self.fence_reason(fence));
            self.set_reason(j, reason);
            return Single::Failed;
        }
        let reason = match self.earmark_reason(j, &req) {
            Some(r) => Arc::new(r),
            None => Arc::new(self.no_capacity_reason(&types, &req, self.jobs[j as usize].priority_level)),
        };
        if cached {
            self.ledger.set_verdict(key, reason.clone());
        }
        self.set_reason(j, reason);
        if cached { Single::OnVerdict } else { Single::Failed }
    }

    /// The key under which the verdict on job `j` is cached: its class, level and earmark
    /// profile (one word for the last two: the cache is looked up for every job tried).
    fn verdict_key(&self, j: u32) -> (u32, u32) {
        let job = &self.jobs[j as usize];
        let profile = if self.view().earmarks.active() {
            self.view()
                .earmarks
                .profile(job.queue, self.view().priority_classes[job.priority_class as usize].preemptible)
        } else {
            0
        };
        (job.class, u32::from(job.priority_level) | profile << 8)
    }

    /// Finds the best node over the levels the job may use and places it there; returns the
    /// level used.
    pub(super) fn try_place(&mut self, j: u32, types: &[u32], req: &ResVec) -> Option<u8> {
        if self.policy.is_some() {
            return self.try_place_policy(j, types, req);
        }
        if self.view().earmarks.active() {
            return self.try_place_earmarked(j, types, req);
        }
        if self.fences.is_some()
            && let Some(fence) = self.fence_for(j)
        {
            return self.try_place_fenced(j, fence, types, req);
        }
        let job = &self.jobs[j as usize];
        let (q, max) = (job.queue, self.view().levels.max_search_level(job.priority_level as usize));
        for l in 0..=max {
            if self.db.level_is_redundant(l) {
                continue;
            }
            if let Some((n, victims)) = self.level_choice(l, types, q, req) {
                self.place_displacing(j, n, req, victims);
                return Some(l);
            }
        }
        None
    }

    /// The node a job of queue `q` takes at level `l`, with the jobs it displaces there: what
    /// is free at level 0; at an eviction level the places of the evicted jobs that would return
    /// last; else where displacing does the least harm.
    #[inline]
    pub(super) fn level_choice(&mut self, l: u8, types: &[u32], q: u32, req: &ResVec) -> Option<(u32, Vec<u32>)> {
        if l == 0 {
            self.db.find(l, types, q, req).map(|n| (n, Vec::new()))
        } else if self.view().levels.is_eviction_level(l) {
            match self.fair_share_node(l, types, req) {
                Some(n) => {
                    let queues = &self.queues;
                    Some((n, self.db.victims(n, l, req, |q| queues[q as usize].overshare)))
                }
                None => self.least_harmful_node(l, types, q, req),
            }
        } else {
            self.least_harmful_node(l, types, q, req)
        }
    }

    /// Where placing at displacing level `level` does the least harm, among the
    /// [`DISPLACE_CANDIDATES`] nodes the tier and best-fit order ranks first: victims of the
    /// lowest priority class, then the readiest victims of that class ([`Occupant::readiness`],
    /// judged by the least ready: of running jobs those whose queues are furthest above their fair
    /// share, of evicted jobs those that would return last); ties keep the tier/best-fit order.
    pub(super) fn least_harmful_node(
        &mut self,
        level: u8,
        types: &[u32],
        q: u32,
        req: &ResVec,
    ) -> Option<(u32, Vec<u32>)> {
        let cands = self.db.find_candidates(level, types, q, req, DISPLACE_CANDIDATES);
        let queues = &self.queues;
        let overshare = |q: u32| queues[q as usize].overshare;
        // (node, its victims, their highest level, the least readiness of those at that level)
        let mut best: Option<(u32, Vec<u32>, u8, f64)> = None;
        for n in cands {
            if let Some((_, _, h, l)) = best {
                // Cheap bound from the node's eligible occupants: skip nodes that cannot win.
                let (lowest, most) = self.db.eligible_bounds(n, level, overshare);
                if lowest > h || (lowest == h && most <= l) {
                    continue;
                }
            }
            let victims = self.db.victim_occupants(n, level, req, overshare);
            let highest = victims.iter().map(|o| o.freed_at).max().unwrap_or(0);
            let least = victims
                .iter()
                .filter(|o| o.freed_at == highest)
                .map(|o| o.readiness(&overshare))
                .fold(f64::INFINITY, f64::min);
            let better = match best {
                None => true,
                Some((_, _, h, l)) => highest < h || (highest == h && least > l),
            };
            if better {
                best = Some((n, victims.iter().map(|o| o.job).collect(), highest, least));
            }
        }
        best.map(|(n, victims, _, _)| (n, victims))
    }

    /// Puts `j` on node `n`, displacing what level `level` requires.
    pub(super) fn place(&mut self, j: u32, n: u32, level: u8, req: &ResVec) {
        let victims = if level > 0 {
            let queues = &self.queues;
            self.db.victims(n, level, req, |q| queues[q as usize].overshare)
        } else {
            Vec::new()
        };
        self.place_displacing(j, n, req, victims);
    }

    /// Puts `j` on node `n` after displacing `victims` (as the node db chose them).
    pub(super) fn place_displacing(&mut self, j: u32, n: u32, req: &ResVec, victims: Vec<u32>) {
        for v in victims {
            self.displace(v, j, req);
        }
        let job = &self.jobs[j as usize];
        let occ = Occupant {
            job: j,
            queue: job.queue,
            freed_at: self.freed_at(j, n, false),
            evicted: false,
            seq: job.seq,
            return_rank: 0,
            req: req.clone(),
        };
        let status = if self.ledger.status(j) == Status::Evicted { Status::Returned } else { Status::Placed };
        let (q, pc) = (job.queue, job.priority_class);
        self.db.add(n, occ);
        self.ledger.record(|| Undo::Added { node: n, job: j });
        self.ledger.change(j, |f| {
            f.status = status;
            f.node = Some(n);
        });
        self.alloc(q, pc, req, true);
    }

    /// Takes `v` off its node for `by`.
    fn displace(&mut self, v: u32, by: u32, by_req: &ResVec) {
        let Some(node) = self.ledger.held_node(v) else { return };
        let Some(occ) = self.db.remove(node, v) else { return };
        // A victim larger than the job that displaced it frees room a cached verdict did not see.
        if !fits(&occ.req, by_req) {
            self.ledger.forget_verdicts();
            self.ledger.mark_reoffer();
        }
        let victim = &self.jobs[v as usize];
        let (q, pc, status) = (victim.queue, victim.priority_class, self.ledger.status(v));
        let req = occ.req.clone();
        self.ledger.record(|| Undo::Removed { node, occ });
        let new = victim.was_queued();
        match status {
            Status::Evicted => self.set_status(v, Status::Evicted, Some(by)),
            // A lease made earlier in this cycle is simply withdrawn.
            Status::Placed | Status::Returned if new => {
                if self.view().earmarks.is_guest(node, q) {
                    self.ledger.mark_reoffer();
                }
                let reason = Arc::new(Reason::Displaced { by: self.jobs[by as usize].id });
                self.ledger.change(v, |f| {
                    f.status = Status::Waiting;
                    f.set_displaced_by(by);
                    f.reason = Some(reason);
                });
                self.alloc(q, pc, &req, false);
            }
            Status::Placed | Status::Running | Status::Returned => {
                self.set_status(v, Status::Preempted, Some(by));
                self.alloc(q, pc, &req, false);
            }
            Status::Waiting | Status::Preempted | Status::Failed => {}
        }
        // Gang members need each other: the rest of the gang goes too.
        if matches!(status, Status::Placed | Status::Returned | Status::Running)
            && let Some(g) = self.jobs[v as usize].info.gang.clone()
        {
            self.break_gang(q, &g.id, v, by);
        }
    }

    /// Takes the other members of `v`'s gang off their nodes (they were placed this cycle or
    /// were running) and returns failed members to the queue.
    fn break_gang(&mut self, q: u32, gang: &str, v: u32, by: u32) {
        let lost = Arc::new(Reason::GangMemberLost { gang: gang.to_string() });
        for m in self.gang_members(q, gang) {
            if m == v {
                continue;
            }
            let job = &self.jobs[m as usize];
            let (status, new, pc) = (self.ledger.status(m), job.was_queued(), job.priority_class);
            match status {
                Status::Placed | Status::Returned | Status::Running => {
                    let Some(node) = self.ledger.held_node(m) else { continue };
                    let Some(occ) = self.db.remove(node, m) else { continue };
                    let req = occ.req.clone();
                    self.ledger.record(|| Undo::Removed { node, occ });
                    self.ledger.change(m, |f| {
                        f.status = if new { Status::Waiting } else { Status::Preempted };
                        f.set_displaced_by(by);
                        f.reason = Some(lost.clone());
                    });
                    self.alloc(q, pc, &req, false);
                }
                Status::Failed => {
                    self.ledger.change(m, |f| {
                        f.status = Status::Waiting;
                        f.reason = Some(lost.clone());
                    });
                }
                Status::Waiting | Status::Evicted | Status::Preempted => {}
            }
        }
        self.ledger.forget_verdicts();
        self.ledger.mark_reoffer();
    }

    /// Changes a job's status (and who displaced it, when given), recording the old fate.
    pub(super) fn set_status(&mut self, j: u32, status: Status, displaced_by: Option<u32>) {
        self.ledger.change(j, |f| {
            f.status = status;
            if let Some(by) = displaced_by {
                f.set_displaced_by(by);
            }
        });
    }

    pub(super) fn alloc(&mut self, q: u32, pc: u16, req: &ResVec, added: bool) {
        let qc = &mut self.queues[q as usize];
        if added {
            add_to(&mut qc.alloc, req);
            add_to(&mut qc.alloc_by_priority_class[pc as usize], req);
        } else {
            sub_from(&mut qc.alloc, req);
            sub_from(&mut qc.alloc_by_priority_class[pc as usize], req);
        }
        self.ledger.record(|| Undo::Alloc { queue: q, priority_class: pc, req: req.clone(), added });
        self.ledger.note_alloc(q);
    }

    /// Starts recording changes so they can be rolled back.
    pub(super) fn begin(&mut self) -> usize {
        self.ledger.begin()
    }

    /// Keeps the changes since `mark`.
    pub(super) fn commit(&mut self, mark: usize) {
        self.ledger.commit(mark);
    }

    /// Undoes every change since `mark`.
    pub(super) fn rollback(&mut self, mark: usize) {
        while let Some(u) = self.ledger.pop_since(mark) {
            match u {
                Undo::Added { node, job } => {
                    self.db.remove(node, job);
                }
                Undo::Removed { node, occ } => self.db.add(node, occ),
                Undo::Fate { job, fate } => self.ledger.restore(job, fate),
                Undo::Alloc { queue, priority_class: pc, req, added } => {
                    let qc = &mut self.queues[queue as usize];
                    if added {
                        sub_from(&mut qc.alloc, &req);
                        sub_from(&mut qc.alloc_by_priority_class[pc as usize], &req);
                    } else {
                        add_to(&mut qc.alloc, &req);
                        add_to(&mut qc.alloc_by_priority_class[pc as usize], &req);
                    }
                }
            }
        }
        self.ledger.rolled_back(mark);
    }

    /// Puts an evicted job back on its own node if there is room.
    pub(super) fn return_evicted(&mut self, e: u32) -> bool {
        let Some(node) = self.ledger.fate(e).node else { return false };
        let req = self.req(e);
        if self.refused_floating(&req, &[e]) {
            return false;
        }
        let had = self.db.remove(node, e);
        if let Some(occ) = &had {
            self.ledger.record(|| Undo::Removed { node, occ: occ.clone() });
        }
        let max = self.view().levels.max_search_level(self.jobs[e as usize].priority_level as usize);
        // A guest goes back only where nothing has to move (it never displaces a job at home).
        let max = if self.view().earmarks.is_guest(node, self.jobs[e as usize].queue) { 0 } else { max };
        let fence = if self.fences.is_some() { self.fence_for(e) } else { None };
        for l in 0..=max {
            if !self.db.level_is_redundant(l) && self.db.fits_at(node, l, &req) {
                if let Some(f) = fence {
                    let queues = &self.queues;
                    let victims = self.db.victims(node, l, &req, |q| queues[q as usize].overshare);
                    if !self.fence_allows(f, &victims) {
                        continue;
                    }
                }
                self.place(e, node, l, &req);
                return true;
            }
        }
        if let Some(occ) = had {
            self.db.add(node, occ);
            self.ledger.record(|| Undo::Added { node, job: e });
        }
        let reason = Arc::new(Reason::NoRoomOnNode { node: self.view().nodes[node as usize].name.clone() });
        self.set_reason(e, reason);
        false
    }

    /// Puts an evicted gang back whole, or leaves it evicted.
    pub(super) fn return_evicted_gang(&mut self, cand: &Candidate) -> bool {
        let mark = self.begin();
        for &m in &cand.jobs {
            if !self.return_evicted(m) {
                self.rollback(mark);
                let gang = cand.gang.as_ref().map(|g| g.id.clone()).unwrap_or_default();
                let reason = Arc::new(Reason::GangMemberLost { gang });
                for &m in &cand.jobs {
                    self.ledger.change(m, |f| f.reason = Some(reason.clone()));
                }
                return false;
            }
        }
        self.commit(mark);
        true
    }

    /// Why a job fits on no node of `types`, even counting what it may preempt.
    pub(super) fn no_capacity_reason(&mut self, types: &[u32], req: &ResVec, priority_level: u8) -> Reason {
        // Pool policies other than fair_share place at level 0 (what is free now).
        let level =
            if self.policy.is_some() { 0 } else { self.view().levels.max_search_level(priority_level as usize) };
        let max = self.db.max_free(level, types, self.view().layout.len());
        let amount = |s: usize| {
            let name = self.view().layout.name(s);
            format!("{} {}", format_quantity(req[s], Unit::for_resource(name.as_str())), name)
        };
        let floating = |s: usize| self.view().floating.iter().any(|&(f, _)| f == s);
        let requested: Vec<usize> = (0..req.len()).filter(|&s| req[s] > 0 && !floating(s)).collect();
        let short: Vec<usize> = requested.iter().copied().filter(|&s| max[s] < req[s]).collect();
        let missing = if short.is_empty() && requested.len() == 1 {
            amount(requested[0])
        } else if short.is_empty() {
            format!("{} together", requested.iter().map(|&s| amount(s)).collect::<Vec<_>>().join(", "))
        } else {
            short.iter().map(|&s| amount(s)).collect::<Vec<_>>().join(" and ")
        };
        match self.min_runtime.spared() {
            Some((spared, ready_in_seconds)) => {
                Reason::MinRuntime { pool: self.view().pool.clone(), missing, spared, ready_in_seconds }
            }
            None => Reason::NoCapacity { pool: self.view().pool.clone(), missing },
        }
    }
}
