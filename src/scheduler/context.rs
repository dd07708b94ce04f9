//! The per-cycle context: one pool's cycle (`PoolCycle`). It holds the pool as the cycle sees it
//! ([`super::view::PoolView`], private to this file and read-only once built), what has happened
//! so far (the jobs taking part, [`super::job`]; the queues, [`super::queue`]; the node db; the
//! queue tree, the policy's state) and the ledger of what the cycle changed ([`super::ledger`]).
//!
//! Steps that use only some of it are objects below it, which borrow just those parts: the cycle
//! lends them by split borrows ([`PoolCycle::eviction`], [`PoolCycle::outcome`],
//! [`PoolCycle::gang_domains`]). The steps that place jobs, and so touch nearly all of it, sit
//! above it as `impl PoolCycle` blocks ([`super::build`], [`super::fill`],
//! [`super::placement`], [`super::gang`], ...), so each step can be read on its own.

use super::decisions::Reason;
use super::eviction::{Eviction, EvictionRounds};
use super::gang_domains::GangDomains;
use super::hierarchy::{Fences, Hierarchy};
use super::job::{CycleJob, CycleJobs, Fate, GangIndex, JobFacts, Origin};
use super::ledger::Ledger;
use super::min_runtime::MinRuntime;
use super::node_types::NodeTypes;
use super::nodedb::NodeDb;
use super::outcome::Outcome;
use super::policy_state::PolicyState;
use super::queue::CycleQueue;
use super::queue_order::CycleOrderKey;
use super::queue_order::QueueOrderKey;
use super::resvec::ResVec;
use super::return_walk::ReturnWalk;
use super::snapshot::JobInfo;
use super::view::PoolView;
use std::sync::Arc;

/// One pool's cycle: the pool as the cycle sees it ([`PoolView`], set by [`super::build`] and
/// read-only afterwards) and what the cycle has done so far.
pub(super) struct PoolCycle<'a> {
    /// The pool: config, nodes, layout, levels, priority classes, node types, interned
    /// requirements, cost model, totals, earmarks. Private to this file: steps read it through
    /// [`Self::view`]; only [`super::build`] changes it, before [`Self::view_is_built`].
    view: PoolView<'a>,
    /// Set once [`super::build`] is done with the view.
    view_built: bool,
    /// Node types each constraint may use, computed the first time it is asked for.
    matching_types: Vec<Option<Vec<u32>>>,
    /// Who occupies each node at which priority level, and what is free there.
    pub db: NodeDb,
    /// The jobs taking part: the running ones first, then queued ones as they are offered.
    pub jobs: CycleJobs<'a>,
    /// The pool's queues, in name order.
    pub queues: Vec<CycleQueue<'a>>,
    /// What the cycle changed: each job's fate, the undo log, the allocation log, cached
    /// verdicts, the round's tallies.
    pub ledger: Ledger,
    /// The gangs' members, running and offered in this cycle.
    gangs: GangIndex<'a>,
    /// What fair-share eviction keeps from one round to the next.
    eviction: EvictionRounds,
    /// The evicted jobs, last to return first ([`super::return_order`], [`super::return_walk`]).
    returns: ReturnWalk,
    /// The queue tree, when some queue of the snapshot uses one (none: flat queues, Armada's
    /// path).
    pub tree: Option<Box<Hierarchy>>,
    /// Set in pools scheduled by a policy other than `fair_share` ([`super::policy`]).
    pub policy: Option<Box<PolicyState>>,
    /// How long each running job is spared preemption, and whom eviction spared.
    pub min_runtime: MinRuntime,
    /// The queue tree's preemption fences, if any queue has one ([`super::fence`]).
    pub fences: Option<Box<Fences>>,
    /// The preemption fence (its queue) that stopped the last placement tried, if one did
    /// ([`super::fence`]): the job's reason names it.
    pub fence_stop: Option<u32>,
}

/// What every step of the cycle needs: adding jobs, their requests, their gangs, their reasons.
impl<'a> PoolCycle<'a> {
    /// A cycle over `view` and its queues, before any job joins ([`super::build`] fills it).
    pub(super) fn empty(view: PoolView<'a>, queues: Vec<CycleQueue<'a>>) -> Self {
        PoolCycle {
            view,
            view_built: false,
            matching_types: vec![],
            db: NodeDb::new(vec![], &[], 0, &[], 1),
            jobs: CycleJobs::default(),
            queues,
            ledger: Ledger::default(),
            gangs: GangIndex::default(),
            eviction: EvictionRounds::default(),
            returns: ReturnWalk::default(),
            tree: None,
            policy: None,
            min_runtime: MinRuntime::default(),
            fences: None,
            fence_stop: None,
        }
    }

    /// The pool as the cycle sees it.
    #[inline]
    pub(super) fn view(&self) -> &PoolView<'a> {
        &self.view
    }

    /// The view beside the cycle's queues, to set the queues from what the view says.
    pub(super) fn view_and_queues(&mut self) -> (&PoolView<'a>, &mut [CycleQueue<'a>]) {
        (&self.view, &mut self.queues)
    }

    /// The view beside the cache of node types per constraint, to fill the cache from it.
    pub(super) fn view_and_type_cache(&mut self) -> (&PoolView<'a>, &mut [Option<Vec<u32>>]) {
        (&self.view, &mut self.matching_types)
    }

    /// The pool's view, to finish while the cycle is built (node types, interned requirements).
    pub(super) fn view_while_building(&mut self) -> &mut PoolView<'a> {
        debug_assert!(!self.view_built, "the pool's view is read-only once the cycle is built");
        &mut self.view
    }

    /// Sets the pool's node types (while the cycle is built); no constraint's matching types are
    /// known yet.
    pub(super) fn set_node_types(&mut self, types: NodeTypes) {
        self.matching_types = vec![None; self.view.constraints.len()];
        self.view_while_building().set_node_types(types);
    }

    /// Marks the view as built: from here on the steps only read it.
    pub(super) fn view_is_built(&mut self) {
        self.view_built = true;
    }

    /// The finished cycle, read by the outcome step.
    pub(super) fn outcome(&self) -> Outcome<'_, 'a> {
        Outcome {
            view: &self.view,
            jobs: &self.jobs,
            ledger: &self.ledger,
            queues: &self.queues,
            gangs: &self.gangs,
            tree: self.tree.as_deref(),
            policy: self.policy.as_deref(),
            spared: self.min_runtime.spared_count(),
        }
    }

    /// The cycle lent to fair-share eviction: it reads the pool, the jobs, their gangs and the
    /// queue tree, and changes the queues, the node db, the return order and the ledger.
    pub(super) fn eviction(&mut self) -> Eviction<'_, 'a> {
        Eviction {
            view: &self.view,
            jobs: &self.jobs,
            gangs: &self.gangs,
            tree: self.tree.as_deref(),
            queues: &mut self.queues,
            db: &mut self.db,
            returns: &mut self.returns,
            ledger: &mut self.ledger,
            rounds: &mut self.eviction,
            min_runtime: &mut self.min_runtime,
        }
    }

    /// The pool as a gang's placement reads it, to choose and rank domains.
    #[inline]
    pub(super) fn gang_domains(&self) -> GangDomains<'_, 'a> {
        GangDomains { view: &self.view, jobs: &self.jobs, db: &self.db }
    }

    /// The node where a job needing `req` on nodes of `types` takes the places of the evicted
    /// jobs freed at eviction level `level` that would return last
    /// ([`super::return_walk::ReturnWalk::fair_share_node`]).
    pub(super) fn fair_share_node(&mut self, level: u8, types: &[u32], req: &ResVec) -> Option<u32> {
        debug_assert!(self.view.levels.is_eviction_level(level));
        self.returns.fair_share_node(&self.db, self.ledger.fates(), self.ledger.recording(), level, types, req)
    }

    /// Adds a job to the cycle and returns its index.
    // Inlined into its callers, where it runs once per job a cycle tries.
    #[inline]
    pub(super) fn new_job(&mut self, src: &JobFacts, info: &'a Arc<JobInfo>, queue: u32, origin: Origin) -> u32 {
        let p = &self.view().priority_classes[src.priority_class as usize];
        let j = self.jobs.push(CycleJob::new(info, src, queue, p.priority_level, p.priority, origin));
        self.ledger.add_job(Fate::at_start(origin));
        j
    }

    /// Room for `n` more jobs and their fates.
    pub(super) fn reserve_jobs(&mut self, n: usize) {
        self.jobs.reserve(n);
        self.ledger.reserve(n);
    }

    /// Place of a queued job in its queue's order.
    pub(super) fn queued_key(&self, src: &JobFacts) -> QueueOrderKey {
        QueueOrderKey::new(self.view().priority_classes[src.priority_class as usize].priority, src.priority, src.seq)
    }

    /// Dense requests of a job (running jobs with resources the pool no longer knows keep the
    /// known part).
    #[inline]
    pub(super) fn req(&self, j: u32) -> ResVec {
        self.view.job_req(&self.jobs[j as usize])
    }

    /// Records running job `j` as a member of gang `id` of queue `q`.
    pub(super) fn add_running_member(&mut self, q: u32, id: &'a str, j: u32) {
        self.gangs.add_running(q, id, j);
    }

    /// Records the members of queued gang `id` of queue `q` offered in this cycle.
    pub(super) fn set_offered_gang(&mut self, q: u32, id: &'a str, members: Vec<u32>) {
        self.gangs.set_offered(q, id, members);
    }

    /// Every member (running or offered this cycle) of a gang.
    pub(super) fn gang_members(&self, q: u32, id: &str) -> Vec<u32> {
        self.gangs.members(q, id)
    }

    /// Marks `j` as tried and not scheduled.
    pub(super) fn set_reason(&mut self, j: u32, reason: Arc<Reason>) {
        self.ledger.change(j, |f| f.reason = Some(reason));
    }

    /// Job `j`'s place in its queue's order, evicted jobs first.
    pub(super) fn order_key(&self, j: u32) -> CycleOrderKey {
        self.jobs[j as usize].order_key(self.ledger.fate(j))
    }
}
