//! Which live jobs of a queue a queue-wide cancel or preempt reaches (Armada's `CancelOnQueue`
//! and `PreemptOnQueue`). The leader reads this from its state and commits the jobs found
//! through the ordinary per-job-set `Cancel` and `Preempt` commands, so applying stays the
//! existing deterministic code.

use super::machine::State;
use crate::model::{JobId, JobSetName, JobState, PoolName, PriorityClassName, QueueName};
use std::collections::BTreeMap;

/// What a queue-wide operation reaches; an empty list means "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueJobFilter {
    /// Only jobs in these states (live states only: finished jobs are never reached).
    pub states: Vec<JobState>,
    /// Only jobs of these priority classes.
    pub priority_classes: Vec<PriorityClassName>,
    /// Only jobs in these pools: the pool of a job's run, or for a queued job a pool it may run
    /// in (a job without pools may run in any).
    pub pools: Vec<PoolName>,
}

impl QueueJobFilter {
    fn matches_pool(&self, pools: &[PoolName], run_pool: Option<&PoolName>) -> bool {
        if self.pools.is_empty() {
            return true;
        }
        match run_pool {
            Some(p) => self.pools.contains(p),
            None => pools.is_empty() || pools.iter().any(|p| self.pools.contains(p)),
        }
    }
}

impl State {
    /// The live jobs of `queue` that `filter` reaches, by job set (in name order, ids ascending).
    pub fn queue_jobs(&self, queue: &QueueName, filter: &QueueJobFilter) -> BTreeMap<JobSetName, Vec<JobId>> {
        let mut out: BTreeMap<JobSetName, Vec<JobId>> = BTreeMap::new();
        for ((q, set), ids) in &self.job_sets {
            if q != queue {
                continue;
            }
            for id in ids {
                let Some(job) = self.jobs.get(id) else { continue };
                let r = &job.record;
                let state_ok =
                    if filter.states.is_empty() { !r.state.is_terminal() } else { filter.states.contains(&r.state) };
                if state_ok
                    && (filter.priority_classes.is_empty() || filter.priority_classes.contains(&r.priority_class))
                    && filter.matches_pool(&job.info.pools, r.active_run().map(|run| &run.pool))
                {
                    out.entry(set.clone()).or_default().push(*id);
                }
            }
        }
        for ids in out.values_mut() {
            ids.sort_unstable();
        }
        out
    }
}
