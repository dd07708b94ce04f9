//! The jobs taking part in one pool's cycle: what each is and where it started (`CycleJob`,
//! fixed once the job joins the cycle), what has happened to it so far (`Fate`, kept by the
//! cycle's [`super::ledger`]), its interned requirements, and the undo records of gang trials.
//! Data only: the steps that change it operate on the cycle ([`super::context`]).

use super::decisions::Reason;
use super::nodedb::Occupant;
use super::queue_order::{CycleOrderKey, QueueOrderKey};
use super::resvec::ResVec;
use super::snapshot::JobInfo;
use crate::model::{ResourceName, SchedulingRequirements};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// Where a job started the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Queued,
    Running { node: u32 },
}

/// What has happened to a job so far in this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// Queued and not placed (yet).
    Waiting,
    /// Queued and placed in this cycle.
    Placed,
    /// Running and untouched.
    Running,
    /// Evicted for fair share (a running job, or one placed earlier in this cycle), not (yet)
    /// back. Occupies its node until displaced.
    Evicted,
    /// Evicted and back on its node.
    Returned,
    /// Running (or returned) and removed for a more urgent job or for fair share.
    Preempted,
    /// Gang member beyond what fit.
    Failed,
}

/// A job taking part in the cycle: what it is, fixed once it joins (what happens to it is its
/// [`Fate`]).
#[derive(Debug, Clone)]
pub(super) struct CycleJob<'a> {
    pub info: &'a Arc<JobInfo>,
    pub id: crate::model::JobId,
    pub priority: u32,
    pub seq: u64,
    /// Member of a gang.
    pub gang: bool,
    pub queue: u32,
    pub class: u32,
    pub priority_level: u8,
    pub class_priority: i32,
    pub priority_class: u16,
    /// The node it was running on at the start ([`Self::origin`]), [`QUEUED`] if it was queued:
    /// a bare index rather than an [`Origin`], which keeps the record to 56 bytes.
    started_on: u32,
}

/// [`CycleJob::origin`] of a job that was queued at the start (no pool has `u32::MAX` nodes).
const QUEUED: u32 = u32::MAX;

/// The jobs taking part in a cycle, by index: those running at the start first, then queued
/// ones as they are offered. Read as a slice; only the cycle adds to it.
#[derive(Debug, Default)]
pub(super) struct CycleJobs<'a> {
    all: Vec<CycleJob<'a>>,
    /// Jobs `0..running` are the ones running at the start.
    running: usize,
}

impl<'a> CycleJobs<'a> {
    /// Room for `n` more jobs.
    pub(super) fn reserve(&mut self, n: usize) {
        self.all.reserve(n);
    }

    /// Adds a job and returns its index.
    pub(super) fn push(&mut self, job: CycleJob<'a>) -> u32 {
        self.all.push(job);
        (self.all.len() - 1) as u32
    }

    /// Marks every job added so far as running at the start (the build adds those first).
    pub(super) fn running_added(&mut self) {
        self.running = self.all.len();
    }

    /// Indexes of the jobs running at the start.
    pub(super) fn running(&self) -> std::ops::Range<u32> {
        0..self.running as u32
    }

    /// Indexes of the jobs that joined queued.
    pub(super) fn queued(&self) -> std::ops::Range<u32> {
        self.running as u32..self.all.len() as u32
    }
}

impl<'a> std::ops::Deref for CycleJobs<'a> {
    type Target = [CycleJob<'a>];

    #[inline]
    fn deref(&self) -> &[CycleJob<'a>] {
        &self.all
    }
}

impl<'a> CycleJob<'a> {
    /// A job joining the cycle from `origin`: its facts, its queue, and its priority class's
    /// level and priority.
    #[inline]
    pub(super) fn new(
        info: &'a Arc<JobInfo>,
        facts: &JobFacts,
        queue: u32,
        priority_level: u8,
        class_priority: i32,
        origin: Origin,
    ) -> Self {
        let started_on = match origin {
            Origin::Queued => QUEUED,
            Origin::Running { node } => node,
        };
        CycleJob {
            info,
            id: facts.id,
            priority: facts.priority,
            seq: facts.seq,
            gang: facts.gang,
            queue,
            class: facts.class,
            priority_level,
            class_priority,
            priority_class: facts.priority_class,
            started_on,
        }
    }

    /// True if the job was queued at the start of the cycle (not running).
    #[inline]
    pub(super) fn was_queued(&self) -> bool {
        self.started_on == QUEUED
    }

    /// Where the job started the cycle.
    #[inline]
    pub(super) fn origin(&self) -> Origin {
        if self.started_on == QUEUED { Origin::Queued } else { Origin::Running { node: self.started_on } }
    }

    /// The job's place in its queue's order, evicted jobs first.
    pub(super) fn order_key(&self, fate: &Fate) -> CycleOrderKey {
        QueueOrderKey::new(self.class_priority, self.priority, self.seq).with_evicted(fate.status == Status::Evicted)
    }
}

/// [`Fate::displaced_by`] of a job nobody displaced. No cycle holds `u32::MAX` jobs: indexes
/// are `u32` positions in a `Vec`, and the cycle's memory would run out long before.
const NOBODY: u32 = u32::MAX;

/// What has happened to a job so far in the cycle. Only the ledger changes it, recording the
/// old fate while a trial is recorded ([`super::ledger::Ledger::change`]).
#[derive(Debug, Clone)]
pub(super) struct Fate {
    pub status: Status,
    /// The job that took its place ([`Self::displaced_by`]), [`NOBODY`] while none did: a bare
    /// index rather than an `Option`, which keeps a fate to 24 bytes (one per job tried).
    displaced: u32,
    /// Why it was not (or not again) scheduled, when it was tried.
    pub reason: Option<Arc<Reason>>,
    /// The node the job is on (or, evicted, still occupies or came from).
    pub node: Option<u32>,
}

impl Fate {
    /// The fate of a job as it joins the cycle.
    #[inline]
    pub(super) fn at_start(origin: Origin) -> Self {
        match origin {
            Origin::Queued => Fate { status: Status::Waiting, displaced: NOBODY, reason: None, node: None },
            Origin::Running { node } => {
                Fate { status: Status::Running, displaced: NOBODY, reason: None, node: Some(node) }
            }
        }
    }

    /// The job that took its place, when one did.
    #[inline]
    pub(super) fn displaced_by(&self) -> Option<u32> {
        (self.displaced != NOBODY).then_some(self.displaced)
    }

    /// Records that job `by` took its place.
    #[inline]
    pub(super) fn set_displaced_by(&mut self, by: u32) {
        debug_assert_ne!(by, NOBODY);
        self.displaced = by;
    }

    /// The node the job holds resources on, if any.
    pub(super) fn held_node(&self) -> Option<u32> {
        match self.status {
            Status::Placed | Status::Running | Status::Evicted | Status::Returned => self.node,
            Status::Waiting | Status::Preempted | Status::Failed => None,
        }
    }

    /// True if the job holds a place at the end of the cycle.
    pub(super) fn scheduled(&self) -> bool {
        matches!(self.status, Status::Placed | Status::Returned | Status::Running)
    }
}

/// The facts about a queued job the cycle needs, copied out of its `JobInfo` once.
#[derive(Debug, Clone)]
pub(super) struct JobFacts {
    pub id: crate::model::JobId,
    pub seq: u64,
    pub priority: u32,
    pub class: u32,
    pub priority_class: u16,
    pub gang: bool,
}

impl JobFacts {
    pub(super) fn of(info: &JobInfo, class: u32, pc: u16) -> Self {
        JobFacts {
            id: info.id,
            seq: info.submit_seq,
            priority: info.priority,
            class,
            priority_class: pc,
            gang: info.gang.is_some(),
        }
    }
}

/// Interned requirements: jobs with equal requirements share a class.
#[derive(Debug)]
pub(super) struct Class<'a> {
    pub reqs: &'a SchedulingRequirements,
    /// Dense requests, or the requested resource no node of the pool has.
    pub dense: Result<ResVec, ResourceName>,
    pub constraint: u32,
}

/// Interned constraints (selector, tolerations, affinity).
#[derive(Debug)]
pub(super) struct Constraint<'a> {
    pub reqs: &'a SchedulingRequirements,
}

/// Undo record for gang transactions.
#[derive(Debug, Clone)]
pub(super) enum Undo {
    Added { node: u32, job: u32 },
    Removed { node: u32, occ: Occupant },
    Fate { job: u32, fate: Fate },
    Alloc { queue: u32, priority_class: u16, req: ResVec, added: bool },
}

/// A gang of identical members as far as placement goes: gangs of one shape get the same
/// verdict, so a shape that does not fit is not tried again until room is freed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct GangShape {
    /// The members' requirements class.
    pub class: u32,
    /// The members' priority level.
    pub priority_level: u8,
    /// Members offered together.
    pub members: u32,
    /// Fewest members that must be placed.
    pub min_cardinality: u32,
    /// Label whose value all the gang's nodes must share.
    pub uniformity_label: Option<String>,
    /// The members' earmark profile ([`super::earmark::Earmarks::profile`]).
    pub profile: u32,
}

/// The cycle's gangs: their members by (queue, gang id), running ones and those offered in this
/// cycle.
#[derive(Debug, Default)]
pub(super) struct GangIndex<'a> {
    /// Running gang members by (queue, gang id).
    running: HashMap<(u32, &'a str), Vec<u32>>,
    /// Members of queued gangs offered in this cycle, by (queue, gang id).
    offered: HashMap<(u32, &'a str), Vec<u32>>,
}

impl<'a> GangIndex<'a> {
    /// Adds running job `j`, a member of gang `id` of queue `q`.
    pub(super) fn add_running(&mut self, q: u32, id: &'a str, j: u32) {
        self.running.entry((q, id)).or_default().push(j);
    }

    /// Records the members of queued gang `id` of queue `q` offered in this cycle.
    pub(super) fn set_offered(&mut self, q: u32, id: &'a str, members: Vec<u32>) {
        self.offered.insert((q, id), members);
    }

    /// Every member (running, then offered in this cycle) of gang `id` of queue `q`.
    pub(super) fn members(&self, q: u32, id: &str) -> Vec<u32> {
        let mut out: Vec<u32> = self.running.get(&(q, id)).cloned().unwrap_or_default();
        out.extend(self.offered.get(&(q, id)).into_iter().flatten().copied());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cycle writes one fate, one set of facts and, if it waits, one `Unscheduled` per job it
    /// tries (a million at a time under load): their sizes are part of the cycle's cost.
    #[test]
    fn per_job_records_stay_small() {
        assert_eq!(std::mem::size_of::<CycleJob<'_>>(), 56);
        assert_eq!(std::mem::size_of::<Fate>(), 24);
        assert_eq!(std::mem::size_of::<JobFacts>(), 40);
        assert_eq!(std::mem::size_of::<super::super::decisions::Unscheduled>(), 24);
    }

    #[test]
    fn a_fate_knows_who_displaced_it() {
        let mut f = Fate::at_start(Origin::Queued);
        assert_eq!(f.displaced_by(), None);
        f.set_displaced_by(0);
        assert_eq!(f.displaced_by(), Some(0));
        f.set_displaced_by(u32::MAX - 1);
        assert_eq!(f.displaced_by(), Some(u32::MAX - 1));
        let running = Fate::at_start(Origin::Running { node: 3 });
        assert_eq!((running.displaced_by(), running.node), (None, Some(3)));
    }

    #[test]
    fn a_cycle_job_knows_where_it_started() {
        let info = Arc::new(JobInfo {
            id: crate::model::JobId::from_u128(7),
            queue: crate::model::QueueName::new("a").unwrap(),
            priority_class: crate::model::PriorityClassName::new("default").unwrap(),
            priority: 0,
            submit_seq: 7,
            requirements: crate::model::Requirements::new(Default::default()),
            gang: None,
            pools: vec![],
            not_before_ms: None,
        });
        let facts = JobFacts::of(&info, 0, 0);
        for origin in [Origin::Queued, Origin::Running { node: 0 }, Origin::Running { node: u32::MAX - 1 }] {
            let job = CycleJob::new(&info, &facts, 0, 0, 0, origin);
            assert_eq!(job.origin(), origin);
            assert_eq!(job.was_queued(), origin == Origin::Queued);
        }
    }
}
