//! Retry policies: a run that failed in a way its job's policy names goes back to the queue with
//! the same job id (a new run next time), after its back-off, until the policy's attempts or
//! `max_attempted_runs` are spent. Only failed runs count as attempts (Armada's rule: a run lost
//! or returned before it ran, or preempted, is not the job's failure).

use super::command::RunReport;
use super::machine::{Applied, State};
use super::transition::{move_job, move_run};
use crate::model::{EventKind, Job, JobId, JobState, RunFailure, RunState, is_oom_reason};

/// A failed run that its job's policy retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Retry {
    /// The attempt about to start (2 for the first retry).
    attempt: u32,
    /// The policy's attempts.
    max_attempts: u32,
    /// What failed the run.
    failure: RunFailure,
    /// Not scheduled before this time, if the policy backs off.
    not_before_ms: Option<i64>,
}

impl Retry {
    /// "retry 2 of 3 after exit code 75".
    fn message(&self) -> String {
        let mut m = format!("retry {} of {} after {}", self.attempt, self.max_attempts, self.failure.cause());
        if let Some(t) = self.not_before_ms {
            m.push_str(&format!(", not before {}", crate::model::retry_time(t)));
        }
        m
    }
}

/// Whether the failure of `job`'s active run, reported as `ev`, is retried; `None` also when the
/// job has no policy, its run was being stopped (`killing`), or it has had `max_attempted_runs`
/// runs.
pub(super) fn retry_of(
    job: &Job,
    ev: &RunReport,
    killing: bool,
    node_failure: bool,
    at_ms: i64,
    max_attempted_runs: u32,
) -> Option<Retry> {
    let policy = job.policies.as_ref()?.retry.as_ref()?;
    if killing || job.state.is_terminal() || job.attempts() >= max_attempted_runs as usize {
        return None;
    }
    let failure = RunFailure { exit_code: ev.exit_code, oom: is_oom_reason(ev.reason.as_deref()), node_failure };
    // The run failing now is not counted as failed in the record yet.
    let attempt = policy.next_attempt(&failure, job.failed_runs() + 1)?;
    let backoff = policy.backoff_before(attempt);
    let not_before_ms = (backoff > 0).then(|| at_ms.saturating_add(i64::try_from(backoff).unwrap_or(i64::MAX)));
    Some(Retry { attempt, max_attempts: policy.max_attempts, failure, not_before_ms })
}

impl State {
    /// Ends job `id`'s active run as failed and queues the job again for `retry`.
    /// With the run's final event comes what it used (`usage`), recorded as for any run.
    pub(super) fn retry_run(
        &mut self,
        out: &mut Applied,
        id: JobId,
        ev: &RunReport,
        retry: Retry,
        usage: Option<crate::record::RunUsageRecord>,
        at_ms: i64,
    ) {
        let Some(job) = self.jobs.get(&id) else { return };
        let record = job.record.clone();
        let Some(run_id) = record.active_run().map(|r| r.run_id) else { return };
        let message = retry.message();
        self.update_job(out, id, at_ms, |r| {
            if let Some(run) = r.active_run_mut() {
                move_run(run, RunState::Failed);
                run.finished_at_ms = Some(at_ms);
                run.exit_code = ev.exit_code;
                run.reason = ev.reason.clone();
                run.message = ev.message.clone();
                run.log_tail = ev
                    .log_tail
                    .as_deref()
                    .map(|t| super::log_tail::last_bytes(t, super::log_tail::MAX_LOG_TAIL).to_string());
            }
            move_job(r, JobState::Queued);
            r.state_reason = None;
            if let Some(p) = r.policies.as_mut() {
                p.not_before_ms = retry.not_before_ms;
            }
        });
        tracing::debug!(job = %id, attempt = retry.attempt, cause = %retry.failure.cause(), "run retried");
        *self.policy_counts.retries.entry(retry.failure.category()).or_default() += 1;
        self.event(out, &record, at_ms, EventKind::Requeued, Some(run_id), Some(message));
        if let Some(usage) = usage {
            out.changes.push(super::changes::Change::PutRunUsage { run: run_id, usage });
        }
        out.effects.schedule = true;
    }
}
