//! The pool as one cycle sees it: the config, the pool's nodes and resource layout, its priority
//! levels and classes, node types, the jobs' interned requirements, the cost model, the totals
//! and the earmarks. [`super::build`] sets it up; every later step only reads it, so a step may
//! hold it while it changes what the cycle has done ([`super::context::PoolCycle`]).

use super::config::SchedulerConfig;
use super::earmark::Earmarks;
use super::fairness::CostModel;
use super::job::{Class, Constraint, CycleJob};
use super::node_types::NodeTypes;
use super::nodedb::Levels;
use super::resvec::{Layout, ResVec};
use crate::model::{Node, PoolName};

/// Per-priority-class facts for the cycle.
#[derive(Debug, Clone)]
pub(super) struct PriorityClassInfo {
    /// The class's name.
    pub name: crate::model::PriorityClassName,
    /// Its priority (higher: more urgent).
    pub priority: i32,
    /// Whether its jobs may be evicted or preempted.
    pub preemptible: bool,
    /// The node db's level for its priority.
    pub priority_level: u8,
}

/// The pool as one cycle sees it.
pub(super) struct PoolView<'a> {
    /// The scheduler's settings.
    pub cfg: &'a SchedulerConfig,
    /// The pool this cycle schedules.
    pub pool: PoolName,
    /// The pool's nodes, in (executor, name) order; a node's index is its number in the cycle.
    pub nodes: Vec<&'a Node>,
    /// Which slot of a dense resource vector holds which resource.
    pub layout: Layout,
    /// The node db's priority levels (and the eviction and guest levels).
    pub levels: Levels,
    /// The configured priority classes, in the config's order.
    pub priority_classes: Vec<PriorityClassInfo>,
    /// Index of the default priority class in `priority_classes`.
    pub default_priority_class: u16,
    /// Nodes grouped by the labels, taints and executor the cycle's jobs look at.
    pub types: NodeTypes,
    /// Interned requirements: jobs with equal requirements share a class.
    pub classes: Vec<Class<'a>>,
    /// Interned constraints (selector, tolerations, affinity).
    pub constraints: Vec<Constraint<'a>>,
    /// How an allocation becomes a share of the pool.
    pub cost: CostModel,
    /// What the pool's nodes offer in all.
    pub total: ResVec,
    /// Nodes earmarked for some queues.
    pub earmarks: Earmarks,
    /// The pool's floating resources: (slot, amount in the pool); empty when it has none.
    pub floating: Vec<(usize, i64)>,
    /// Nodes reserved for jobs that waited too long for room, in a reservation's second pass
    /// ([`super::reservation`]).
    pub reservations: Option<Box<super::reservation_plan::PoolReservations<'a>>>,
}

impl<'a> PoolView<'a> {
    /// Sets the node types (while the cycle is built), and the earmarks' view of them.
    pub(super) fn set_node_types(&mut self, types: NodeTypes) {
        self.types = types;
        self.earmarks.set_types(&self.types);
        if let Some(r) = self.reservations.as_mut() {
            r.set_types(&self.types);
        }
    }

    /// Adds an interned constraint (while the cycle is built) and returns its number.
    pub(super) fn add_constraint(&mut self, constraint: Constraint<'a>) -> u32 {
        self.constraints.push(constraint);
        (self.constraints.len() - 1) as u32
    }

    /// Adds an interned requirements class (while the cycle is built) and returns its number.
    pub(super) fn add_class(&mut self, class: Class<'a>) -> u32 {
        self.classes.push(class);
        (self.classes.len() - 1) as u32
    }

    /// Dense requests of a job (running jobs with resources the pool no longer knows keep the
    /// known part).
    #[inline]
    pub(super) fn job_req(&self, job: &CycleJob<'_>) -> ResVec {
        match &self.classes[job.class as usize].dense {
            // A slice copy: `clone` copies a `SmallVec` element by element through `Extend`.
            Ok(v) => ResVec::from_slice(v),
            Err(_) => self.layout.dense_lossy(&job.info.requirements.requests),
        }
    }

    /// The level at which `job` is freed on node `n`: a guest's at the guest level, whatever its
    /// class; a running non-preemptible job's never (as in Armada, no more urgent job may take
    /// its room); anyone else's as its priority (and eviction) says.
    #[inline]
    pub(super) fn freed_at(&self, job: &CycleJob<'_>, n: u32, evicted: bool) -> u8 {
        if let Some(g) = self.levels.guest_level()
            && self.earmarks.is_guest(n, job.queue)
        {
            return g;
        }
        if evicted {
            self.levels.evicted_freed_at(job.priority_level as usize)
        } else if !self.priority_classes[job.priority_class as usize].preemptible {
            self.levels.never_freed()
        } else {
            self.levels.running_freed_at(job.priority_level as usize)
        }
    }

    /// Priority of the pool's default priority class (0 if it has none).
    pub(super) fn default_priority(&self) -> i32 {
        self.priority_classes.get(self.default_priority_class as usize).map_or(0, |p| p.priority)
    }
}
