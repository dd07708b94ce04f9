//! Dependencies and retries in a simulation, by the rules the state machine applies
//! (`model::job_policy`): a job waiting for another is not offered to the scheduler; when the
//! job it waits for ends, it is released, failed naming it, or cancelled with it; a failed run
//! its retry policy names is queued again.

use super::job::{SimJob, SimState};
use crate::model::{
    DependencyCondition, DependencyVerdict, JobState, Queue, QueueName, RetryPolicy, RunFailure, queue_retry_policy,
};
use std::sync::Arc;

fn end_state(s: SimState) -> Option<JobState> {
    match s {
        SimState::Succeeded => Some(JobState::Succeeded),
        SimState::Failed => Some(JobState::Failed),
        SimState::Cancelled => Some(JobState::Cancelled),
        SimState::Preempted => Some(JobState::Preempted),
        SimState::Queued | SimState::Running => None,
    }
}

/// Judges every waiting job's dependencies on jobs that ended, until nothing changes (a failed
/// dependent may fail its own dependents).
pub(super) fn judge_dependencies(jobs: &mut [SimJob]) {
    loop {
        let mut changed = false;
        for j in 0..jobs.len() {
            if jobs[j].state != SimState::Queued {
                continue;
            }
            let Some(p) = jobs[j].policies.as_ref() else { continue };
            for k in 0..p.deps.len() {
                let (parent, on, met) = jobs[j].policies.as_ref().map(|p| p.deps[k]).unwrap_or((0, on_any(), true));
                let Some(end) = end_state(jobs[parent].state).filter(|_| !met) else { continue };
                let name = jobs[parent].name.clone();
                changed = true;
                match on.verdict(end) {
                    DependencyVerdict::Met => {
                        if let Some(p) = jobs[j].policies.as_mut() {
                            p.deps[k].2 = true;
                        }
                    }
                    DependencyVerdict::Cancelled => {
                        jobs[j].state = SimState::Cancelled;
                        jobs[j].reason = Some(format!("dependency {name} was cancelled"));
                        break;
                    }
                    DependencyVerdict::Never => {
                        jobs[j].state = SimState::Failed;
                        jobs[j].reason = Some(format!("dependency {name} ended {end}; it had {}", on.wait_phrase()));
                        break;
                    }
                }
            }
        }
        if !changed {
            return;
        }
    }
}

fn on_any() -> DependencyCondition {
    DependencyCondition::Ended
}

/// "waiting for a to succeed", for a job that waits.
pub(super) fn waiting_reason(jobs: &[SimJob], j: usize) -> Option<String> {
    let p = jobs[j].policies.as_ref()?;
    let (parent, on, _) = p.deps.iter().find(|d| !d.2)?;
    Some(format!("waiting for {} {}", jobs[*parent].name, on.wait_phrase()))
}

/// The retry policy a job without its own takes from its queue, or the nearest ancestor up the
/// tree that has one, with that queue's name, as the state machine judges it; none for a gang
/// member.
pub(super) fn queue_retry(queues: &[Queue], job: &SimJob) -> Option<(QueueName, RetryPolicy)> {
    if job.policies.as_ref().is_some_and(|p| p.retry.is_some()) || job.info.gang.is_some() {
        return None;
    }
    let leaf = queues.iter().find(|q| q.name == job.info.queue)?;
    let (from, policy) = queue_retry_policy(leaf, |name| queues.iter().find(|q| &q.name == name))?;
    Some((from.clone(), policy))
}

/// A running job's run failed: queued again if its policy, or else its queue's (`queue`,
/// [`queue_retry`]), retries the failure (with the reason "retry 2 of 3 after exit code 75",
/// and "(queue A's retry policy)" for a queue's), else failed.
pub(super) fn fail_run(
    job: &mut SimJob,
    queue: Option<(QueueName, RetryPolicy)>,
    exit_code: Option<i32>,
    node_failure: bool,
    oom: bool,
    now_ms: i64,
) {
    let failure = RunFailure { exit_code, oom, node_failure };
    if queue.is_some() {
        // Its failed runs are counted from now on, as for a job with a policy of its own.
        job.policies.get_or_insert_default();
    }
    let retry = job.policies.as_mut().and_then(|p| {
        p.failed += 1;
        let (policy, from) = match (&p.retry, &queue) {
            (Some(own), _) => (own, String::new()),
            (None, Some((q, policy))) => (policy, format!(" (queue {q}'s retry policy)")),
            (None, None) => return None,
        };
        let next = policy.next_attempt(&failure, p.failed)?;
        let wait = i64::try_from(policy.backoff_before(next)).unwrap_or(i64::MAX);
        Some((format!("retry {next} of {} after {}{from}", policy.max_attempts, failure.cause()), wait))
    });
    match retry {
        Some((reason, wait)) => {
            job.state = SimState::Queued;
            job.reason = Some(reason);
            // As on a server: queued again from now, and held back until its back-off ends.
            job.queued_at_ms = now_ms;
            if wait > 0 {
                let mut info = (*job.info).clone();
                info.not_before_ms = Some(now_ms.saturating_add(wait));
                job.info = Arc::new(info);
            }
        }
        None => {
            job.state = SimState::Failed;
            let cause = exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
            let base = if node_failure { "failed: its node's fault" } else { "failed" };
            job.reason = Some(format!("{base}{cause}"));
        }
    }
}
