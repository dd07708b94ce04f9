//! Minimum runtime before preemption (Kueue, KAI): a running job is spared fair-share eviction
//! until it has run `min_runtime_before_preemption` (its priority class's override, else the
//! global setting), and urgency preemption until it has run
//! `min_runtime_before_urgency_preemption`. "Run" counts from when the scheduler leased its run
//! (`RunningJob::leased_at_ms`, the time the scheduler's view holds) to the cycle's `now`. This
//! stops the churn of jobs evicted seconds after they start.
//!
//! Plain data: the build fills it for the jobs running at the start of the cycle, eviction reads
//! it and notes whom it spared, and a job that then finds no room says so
//! ([`super::decisions::Reason::MinRuntime`]). Empty when no minimum is set, so the cycle pays
//! nothing for it then.

use super::config::SchedulerConfig;
use crate::model::PriorityClass;

/// The cycle's minimum-runtime facts about its running jobs.
#[derive(Debug, Default)]
pub(super) struct MinRuntime {
    /// By index of a job running at the start: ms until fair-share eviction may take it (0: it
    /// may now). Empty when no minimum is set.
    eviction_wait_ms: Vec<i64>,
    /// By index of a job running at the start: true while urgency preemption must spare it.
    urgency_spared: Vec<bool>,
    /// Jobs fair-share eviction spared in this cycle (each once).
    spared: rustc_hash::FxHashSet<u32>,
    /// The least wait among the spared jobs, in ms.
    first_ready_ms: Option<i64>,
}

impl MinRuntime {
    /// Notes the next running job (its index is the count so far): of class `pc`, leased at
    /// `leased_at_ms`, seen at `now_ms`. Only called when some minimum is set.
    pub(super) fn add_running(
        &mut self,
        cfg: &SchedulerConfig,
        pc: Option<&PriorityClass>,
        leased_at_ms: i64,
        now_ms: i64,
    ) {
        let ran = now_ms.saturating_sub(leased_at_ms);
        let wait =
            |min: std::time::Duration| i64::try_from(min.as_millis()).unwrap_or(i64::MAX).saturating_sub(ran).max(0);
        let min = pc.map_or(cfg.min_runtime_before_preemption, |pc| cfg.min_runtime_for(pc));
        self.eviction_wait_ms.push(wait(min));
        self.urgency_spared.push(wait(cfg.min_runtime_before_urgency_preemption) > 0);
    }

    /// Ms until fair-share eviction may take job `j` (0: now, or not a job running at the start).
    #[inline]
    pub(super) fn eviction_wait(&self, j: u32) -> i64 {
        self.eviction_wait_ms.get(j as usize).copied().unwrap_or(0)
    }

    /// True if urgency preemption must spare job `j`.
    #[inline]
    pub(super) fn urgency_spared(&self, j: u32) -> bool {
        self.urgency_spared.get(j as usize).copied().unwrap_or(false)
    }

    /// Notes that eviction spared job `j`, which may be evicted in `wait_ms`.
    pub(super) fn note_spared(&mut self, j: u32, wait_ms: i64) {
        if self.spared.insert(j) {
            self.first_ready_ms = Some(self.first_ready_ms.map_or(wait_ms, |w| w.min(wait_ms)));
        }
    }

    /// How many jobs eviction spared in this cycle, and the seconds (rounded up) until the first
    /// of them may be evicted; none if it spared none.
    pub(super) fn spared(&self) -> Option<(usize, u64)> {
        let ms = self.first_ready_ms?;
        Some((self.spared.len(), u64::try_from(ms).unwrap_or(0).div_ceil(1000)))
    }

    /// Jobs eviction spared in this cycle.
    pub(super) fn spared_count(&self) -> usize {
        self.spared.len()
    }
}
