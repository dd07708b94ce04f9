//! The per-cycle context: one pool's view of the snapshot (nodes, queues, the jobs taking part)
//! and what has happened to each job so far.
//!
//! These types are plain data shared by every step of a cycle ([`super::build`],
//! [`super::eviction`], [`super::fill`], [`super::placement`], [`super::gang`],
//! [`super::outcome`]); keeping them apart from the algorithms lets each step be read on its own.

use super::config::SchedulerConfig;
use super::decisions::Reason;
use super::earmark::Earmarks;
use super::fairness::CostModel;
use super::gang::GangShape;
use super::node_types::NodeTypes;
use super::nodedb::{Levels, NodeDb, Occupant};
use super::queue_order::{CycleOrderKey, QueueOrderKey};
use super::resvec::{Layout, ResVec};
use super::snapshot::{JobInfo, QueueSnapshot};
use crate::model::{GangSpec, Node, PoolName, QueueName, ResourceName, SchedulingRequirements};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
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

/// A job taking part in the cycle.
#[derive(Debug, Clone)]
pub(super) struct CJob<'a> {
    pub info: &'a Arc<JobInfo>,
    pub id: crate::model::JobId,
    pub priority: u32,
    pub seq: u64,
    /// Member of a gang.
    pub gang: bool,
    pub queue: u32,
    pub class: u32,
    pub prio_idx: u8,
    pub class_priority: i32,
    pub pc: u16,
    pub origin: Origin,
    pub status: Status,
    pub displaced_by: Option<u32>,
    pub reason: Option<Arc<Reason>>,
    /// The node the job is on (or, evicted, still occupies or came from).
    pub node: Option<u32>,
}

impl CJob<'_> {
    /// The node the job holds resources on, if any.
    pub(super) fn node(&self) -> Option<u32> {
        match self.status {
            Status::Placed | Status::Running | Status::Evicted | Status::Returned => self.node,
            Status::Waiting | Status::Preempted | Status::Failed => None,
        }
    }

    /// True if the job holds a place at the end of the cycle.
    pub(super) fn scheduled(&self) -> bool {
        matches!(self.status, Status::Placed | Status::Returned | Status::Running)
    }

    /// The job's place in its queue's order, evicted jobs first.
    pub(super) fn order_key(&self) -> CycleOrderKey {
        QueueOrderKey::new(self.class_priority, self.priority, self.seq).with_evicted(self.status == Status::Evicted)
    }
}

/// The facts about a queued job the cycle needs, copied out of its `JobInfo` once.
#[derive(Debug, Clone)]
pub(super) struct SrcJob {
    pub id: crate::model::JobId,
    pub seq: u64,
    pub priority: u32,
    pub class: u32,
    pub pc: u16,
    pub gang: bool,
}

impl SrcJob {
    pub(super) fn of(info: &JobInfo, class: u32, pc: u16) -> Self {
        SrcJob { id: info.id, seq: info.submit_seq, priority: info.priority, class, pc, gang: info.gang.is_some() }
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
    pub matching: Option<Vec<u32>>,
}

/// A queue's next gang.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub jobs: SmallVec<[u32; 1]>,
    pub evicted: bool,
    pub gang: Option<Arc<GangSpec>>,
    pub req: ResVec,
}

/// A queue during the cycle.
#[derive(Debug)]
pub(super) struct QCtx<'a> {
    pub snap: &'a QueueSnapshot,
    pub name: QueueName,
    pub priority_factor: f64,
    pub alloc: ResVec,
    pub alloc_by_pc: Vec<ResVec>,
    /// Absolute caps per slot (i64::MAX = none).
    pub limit: Option<ResVec>,
    pub pc_limits: Vec<Option<ResVec>>,
    /// Evicted jobs in queue order (gangs first-member order).
    pub evicted: Vec<u32>,
    pub evicted_pos: usize,
    /// The queue's queued jobs as given.
    pub src: &'a [Arc<JobInfo>],
    /// What the cycle needs of each job of `src`, copied in one pass so later steps need not
    /// read the jobs again (`class == u32::MAX`: not for this pool).
    pub srcs: Vec<SrcJob>,
    /// Positions in `src` in queue order, when `src` is not already in order.
    pub order: Option<Vec<u32>>,
    /// Gang members (positions in `src`, in queue order) by gang id.
    pub gang_src: HashMap<&'a str, Vec<u32>>,
    /// Gangs already offered.
    pub gangs_done: HashSet<&'a str>,
    /// Next position (in queue order) to look at.
    pub queued_pos: usize,
    /// Queued jobs offered so far, against the lookback limit.
    pub taken: usize,
    /// Jobs offered again after a rebalance, in queue order.
    pub retry: Vec<u32>,
    pub retry_pos: usize,
    /// Why the rest of the queue waits (lookback, rate limit).
    pub note: Option<Arc<Reason>>,
    pub queued_stopped: bool,
    pub current: Option<Candidate>,
    pub demand: ResVec,
    pub alloc_start: ResVec,
    pub active: bool,
    pub fair_share: f64,
    pub adjusted_fair_share: f64,
    pub actual_share: f64,
    /// Start share minus adjusted fair share: the victim preference among equals.
    pub overshare: f64,
    /// Usage that orders the queue: its decayed usage, else `actual_share` ([`super::usage`]).
    pub usage: f64,
    /// `usage - actual_share`, added to the queue's share when it is compared (0 without decay).
    pub usage_offset: f64,
    /// Never found above its protected share in this cycle, so fair-share eviction spared it.
    pub protected: bool,
}

/// Undo record for gang transactions.
#[derive(Debug, Clone)]
pub(super) enum Undo {
    Added { node: u32, job: u32 },
    Removed { node: u32, occ: Occupant },
    Status { job: u32, status: Status, displaced_by: Option<u32>, reason: Option<Arc<Reason>>, node: Option<u32> },
    Alloc { queue: u32, pc: u16, req: ResVec, added: bool },
}

/// Per-priority-class facts for the cycle.
#[derive(Debug, Clone)]
pub(super) struct PcInfo {
    pub name: crate::model::PriorityClassName,
    pub priority: i32,
    pub preemptible: bool,
    pub prio_idx: u8,
}

/// One pool's cycle.
pub(super) struct PoolCycle<'a> {
    pub cfg: &'a SchedulerConfig,
    pub pool: PoolName,
    pub nodes: Vec<&'a Node>,
    pub layout: Layout,
    pub levels: Levels,
    pub pcs: Vec<PcInfo>,
    pub default_pc: u16,
    pub types: NodeTypes,
    pub db: NodeDb,
    pub classes: Vec<Class<'a>>,
    pub constraints: Vec<Constraint<'a>>,
    pub jobs: Vec<CJob<'a>>,
    pub queues: Vec<QCtx<'a>>,
    pub cost: CostModel,
    pub total: ResVec,
    pub undo: Vec<Undo>,
    pub recording: bool,
    /// (class, priority level + 256 × earmark profile) → why nothing fits; valid until a
    /// displacement frees more than it takes.
    pub unschedulable: HashMap<(u32, u32), Arc<Reason>>,
    /// Same for gangs of identical members.
    pub gang_unschedulable: HashMap<GangShape, Arc<Reason>>,
    /// Running gang members by (queue, gang id).
    pub running_gangs: HashMap<(u32, &'a str), Vec<u32>>,
    /// Members of queued gangs offered in this cycle, by (queue, gang id).
    pub created_gangs: HashMap<(u32, &'a str), Vec<u32>>,
    /// Nodes drawn for fair-share eviction this cycle.
    pub eviction_nodes: Vec<bool>,
    /// Evict-and-refill rounds after the first fill.
    pub rebalances: usize,
    /// Jobs `0..running_count` are the ones running at the start.
    pub running_count: usize,
    /// Gang members failed in this cycle.
    pub failed: Vec<u32>,
    pub global_rate_stopped: Option<Arc<Reason>>,
    pub evicted_count: usize,
    pub jobs_tried: usize,
    /// Nodes earmarked for some queues.
    pub earmarks: Earmarks,
    /// Evicted jobs, the one that would return last first ([`super::return_order`]); entries
    /// before `return_head` are gone for good, later ones are checked when read.
    pub return_order: Vec<u32>,
    pub return_head: usize,
    /// Lowest return rank given so far: each eviction ranks its jobs below the ones before, so
    /// that jobs still evicted from an earlier round give their places up first.
    pub rank_floor: u32,
    /// Scratch for [`PoolCycle::fair_share_node`]: what each node visited would have free.
    pub walk_free: HashMap<u32, ResVec>,
    /// The queue tree, when some queue of the snapshot uses one (none: flat queues, Armada's
    /// path).
    pub tree: Option<Box<super::hierarchy::Hierarchy>>,
    /// While the tree fills: the queues whose allocation changed since the last pick.
    pub alloc_log: Option<Vec<u32>>,
    /// Set in pools scheduled by a policy other than `fair_share` ([`super::policy`]).
    pub policy: Option<Box<super::policy::PolicyState>>,
}

/// What every step of the cycle needs: adding jobs, their requests, their gangs, their reasons.
impl<'a> PoolCycle<'a> {
    /// Adds a job to the cycle and returns its index.
    pub(super) fn new_job(&mut self, src: &SrcJob, info: &'a Arc<JobInfo>, queue: u32, origin: Origin) -> u32 {
        let (class, pc) = (src.class, src.pc);
        let p = &self.pcs[pc as usize];
        self.jobs.push(CJob {
            info,
            id: src.id,
            priority: src.priority,
            seq: src.seq,
            gang: src.gang,
            queue,
            class,
            prio_idx: p.prio_idx,
            class_priority: p.priority,
            pc,
            origin,
            status: if origin == Origin::Queued { Status::Waiting } else { Status::Running },
            displaced_by: None,
            reason: None,
            node: match origin {
                Origin::Running { node } => Some(node),
                Origin::Queued => None,
            },
        });
        (self.jobs.len() - 1) as u32
    }

    /// Place of a queued job in its queue's order.
    pub(super) fn queued_key(&self, src: &SrcJob) -> QueueOrderKey {
        QueueOrderKey::new(self.pcs[src.pc as usize].priority, src.priority, src.seq)
    }

    /// Dense requests of a job (running jobs with resources the pool no longer knows keep the
    /// known part).
    pub(super) fn req(&self, j: u32) -> ResVec {
        let job = &self.jobs[j as usize];
        match &self.classes[job.class as usize].dense {
            Ok(v) => v.clone(),
            Err(_) => self.layout.dense_lossy(&job.info.requirements.requests),
        }
    }

    /// Every member (running or offered this cycle) of a gang.
    pub(super) fn gang_members(&self, q: u32, id: &str) -> Vec<u32> {
        let mut out: Vec<u32> = self.running_gangs.get(&(q, id)).cloned().unwrap_or_default();
        out.extend(self.created_gangs.get(&(q, id)).into_iter().flatten().copied());
        out
    }

    /// Marks `j` as tried and not scheduled.
    pub(super) fn set_reason(&mut self, j: u32, reason: Arc<Reason>) {
        self.remember_status(j);
        self.jobs[j as usize].reason = Some(reason);
    }

    /// While a trial is being recorded, remembers `j`'s status, reason and node so that undoing
    /// the trial restores them.
    pub(super) fn remember_status(&mut self, j: u32) {
        if self.recording {
            let job = &self.jobs[j as usize];
            self.undo.push(Undo::Status {
                job: j,
                status: job.status,
                displaced_by: job.displaced_by,
                reason: job.reason.clone(),
                node: job.node,
            });
        }
    }
}
