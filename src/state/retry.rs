//! Retry policies: a run that failed in a way its job's policy names goes back to the queue with
//! the same job id (a new run next time), after its back-off, until the policy's attempts or
//! `max_attempted_runs` are spent. Only failed runs count as attempts (Armada's rule: a run lost
//! or returned before it ran, or preempted, is not the job's failure).
//!
//! A job without a policy of its own takes its queue's, or the nearest ancestor's up the queue
//! tree ([`crate::model::queue_retry_policy`]), as the queues are when the failure is applied.

use super::command::RunReport;
use super::machine::{Applied, State};
use super::transition::{move_job, move_run};
use crate::model::{
    EventKind, Job, JobId, JobState, QueueName, RetryPolicy, RunFailure, RunState, is_oom_reason, queue_retry_policy,
};
use std::borrow::Cow;

/// The retry policy that applies to a job, and the queue it comes from when it is not the job's
/// own.
pub(super) type AppliedRetryPolicy<'a> = (Cow<'a, RetryPolicy>, Option<QueueName>);

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
    /// The queue whose policy it is, when it is not the job's own.
    from_queue: Option<QueueName>,
}

impl Retry {
    /// "retry 2 of 3 after exit code 75", with "(queue physics's retry policy)" for a queue's.
    fn message(&self) -> String {
        let mut m = format!("retry {} of {} after {}", self.attempt, self.max_attempts, self.failure.cause());
        if let Some(q) = &self.from_queue {
            m.push_str(&format!(" (queue {q}'s retry policy)"));
        }
        if let Some(t) = self.not_before_ms {
            m.push_str(&format!(", not before {}", crate::model::retry_time(t)));
        }
        m
    }
}

impl State {
    /// Whether the failure of `job`'s active run, reported as `ev`, is retried under the policy
    /// that applies to it ([`State::retry_policy_of`]).
    pub(super) fn retry_of(
        &self,
        job: &Job,
        ev: &RunReport,
        killing: bool,
        node_failure: bool,
        at_ms: i64,
        max_attempted_runs: u32,
    ) -> Option<Retry> {
        retry_under(job, self.retry_policy_of(job), ev, killing, node_failure, at_ms, max_attempted_runs)
    }
}

/// Whether the failure of `job`'s active run, reported as `ev`, is retried under `policy`;
/// `None` also when there is none, the run was being stopped (`killing`), or the job has had
/// `max_attempted_runs` runs.
fn retry_under(
    job: &Job,
    policy: Option<AppliedRetryPolicy<'_>>,
    ev: &RunReport,
    killing: bool,
    node_failure: bool,
    at_ms: i64,
    max_attempted_runs: u32,
) -> Option<Retry> {
    let (policy, from_queue) = policy?;
    if killing || job.state.is_terminal() || job.attempts() >= max_attempted_runs as usize {
        return None;
    }
    let failure = RunFailure { exit_code: ev.exit_code, oom: is_oom_reason(ev.reason.as_deref()), node_failure };
    // The run failing now is not counted as failed in the record yet.
    let attempt = policy.next_attempt(&failure, job.failed_runs() + 1)?;
    let backoff = policy.backoff_before(attempt);
    let not_before_ms = (backoff > 0).then(|| at_ms.saturating_add(i64::try_from(backoff).unwrap_or(i64::MAX)));
    Some(Retry { attempt, max_attempts: policy.max_attempts, failure, not_before_ms, from_queue })
}

impl State {
    /// The retry policy that applies to `job` now: its own, whole, if it has one; else its
    /// queue's or the nearest ancestor's (none for a gang member, which is placed and retried
    /// whole or not at all).
    pub(super) fn retry_policy_of<'j>(&self, job: &'j Job) -> Option<AppliedRetryPolicy<'j>> {
        if let Some(own) = job.policies.as_ref().and_then(|p| p.retry.as_ref()) {
            return Some((Cow::Borrowed(own), None));
        }
        if job.gang.is_some() {
            return None;
        }
        let leaf = &self.queues.get(&job.queue)?.queue;
        let (from, policy) = queue_retry_policy(leaf, |name| self.queues.get(name).map(|q| &q.queue))?;
        Some((Cow::Owned(policy), Some(from.clone())))
    }

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
            // A job retried by its queue's policy may have no policies of its own: it gets a
            // record for its back-off only when there is one.
            if r.policies.is_some() || retry.not_before_ms.is_some() {
                r.policies.get_or_insert_default().not_before_ms = retry.not_before_ms;
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
