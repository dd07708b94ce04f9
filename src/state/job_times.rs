//! The job times the scheduler's reservations read ([`crate::scheduler::reservation`]): when each
//! queued job of a snapshot was last queued, when each running job's run started, and their
//! deadlines. All of it is replicated state, so replay recomputes the same times.

use super::machine::State;
use crate::model::JobId;
use crate::scheduler::{JobTimes, SchedulerConfig, Snapshot};

impl State {
    /// Fills `snapshot.job_times` for its queued and running jobs when `cfg` has reservations on
    /// (`gang_reservation_after`); leaves it empty otherwise, at no cost.
    pub fn add_job_times(&self, snapshot: &mut Snapshot, cfg: &SchedulerConfig) {
        if !crate::scheduler::reservation::enabled(cfg) {
            return;
        }
        let queued = snapshot.queues.iter().flat_map(|q| q.queued.iter().map(|j| j.id));
        let running = snapshot.running.iter().map(|r| r.job.id);
        for id in queued.chain(running) {
            if let Some(times) = self.job_times(id) {
                snapshot.job_times.insert(id, times);
            }
        }
    }

    /// Job `id`'s times as reservations read them: a running job since its run began running
    /// (or was pending, or leased), a queued one since it was last queued; `None` for a job not
    /// in memory.
    pub fn job_times(&self, id: JobId) -> Option<JobTimes> {
        let record = &self.jobs.get(&id)?.record;
        let secs = i64::try_from(record.active_deadline_seconds).unwrap_or(i64::MAX / 1000);
        let deadline_ms = (secs > 0).then(|| secs.saturating_mul(1000));
        let since_ms = match record.active_run() {
            Some(run) => run.running_at_ms.or(run.pending_at_ms).unwrap_or(run.leased_at_ms),
            // Queued since it was submitted, or since its last run ended (requeued).
            None => record
                .runs
                .iter()
                .filter_map(|r| r.finished_at_ms.or(Some(r.leased_at_ms)))
                .fold(record.submitted_at_ms, i64::max),
        };
        Some(JobTimes { since_ms, deadline_ms })
    }
}
