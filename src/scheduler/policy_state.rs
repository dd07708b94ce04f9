//! The per-cycle state of a pool scheduled by a policy other than `fair_share` (`priority`,
//! `proportional`): data only, held by the cycle; the steps that fill it are in [`super::policy`].

use super::decisions::PreemptionReason;
use super::resvec::ResVec;
use crate::model::{JobId, PoolPolicy};
use rustc_hash::FxHashMap as HashMap;

/// Per-cycle state of a pool scheduled by a policy other than `fair_share`.
#[derive(Debug)]
pub(crate) struct PolicyState {
    pub policy: PoolPolicy,
    pub preemption: bool,
    /// When each running job of the pool was leased (ms): victims go latest started first.
    pub started: HashMap<JobId, i64>,
    /// Per requirements class: true if its jobs request a GPU (the GPU line), false for
    /// zero-slot jobs.
    pub gpu_class: Vec<bool>,
    /// What each node offers in all (allocatable minus unallocatable): a job too big for every
    /// node it may use never runs, so it blocks nobody.
    pub capacity: Vec<ResVec>,
    /// `proportional`: the jobs preempted for their queue's target (with their gangs), and why.
    pub preempted: HashMap<u32, PreemptionReason>,
    /// `proportional`: the resource divided and each queue's target (by queue index), in stored
    /// units.
    pub targets: Option<(usize, Vec<i64>)>,
}
