//! Why a job waits, and when and by what it would start: `GET /v1/jobs/{id}/why`, `convoy why`
//! and the job's page in the web UI.
//!
//! The job's place in its queue comes from the state; what would start it, and when, from the
//! scheduler run on the state as it is now ([`crate::scheduler::why`]), with the leader's rate
//! buckets as the last cycle left them and the running jobs' expected ends: their deadlines, or
//! the typical runtime of their job sets' finished jobs.

use super::ServiceError;
use super::jobs::{job_reason, no_such_job};
use crate::control::{Control, now_ms, rfc3339};
use crate::model::{JobId, JobSetName, JobState, QueueName};
use crate::scheduler::why::{Condition, EndBasis, RunEnd, WhyQuestion, explain};
use crate::store::JobFilter;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// One question at a time: each runs the scheduler several times.
static QUESTIONS: Semaphore = Semaphore::const_new(1);

/// Finished jobs of a job set read for its typical runtime.
const RUNTIME_SAMPLES: usize = 50;
/// Fewest finished jobs that make a typical runtime.
const MIN_RUNTIME_SAMPLES: usize = 3;
/// Most job sets whose runtimes one question reads.
const MAX_JOB_SETS: usize = 32;

/// Why a job waits and what would start it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct WhyView {
    /// The job.
    #[schema(value_type = String)]
    pub job_id: JobId,
    /// Its queue.
    #[schema(value_type = String)]
    pub queue: QueueName,
    /// Its state.
    pub state: JobState,
    /// Why it waits (the latest cycle's reason) or why it ended.
    pub reason: Option<String>,
    /// 1-based place among its queue's queued jobs, in the order the scheduler tries them.
    pub queue_position: Option<u64>,
    /// Queued jobs of its queue before it that may run in a pool it may run in.
    pub jobs_ahead: Option<u64>,
    /// Conditions under which the scheduler places it, each checked by running the scheduler
    /// with the condition met.
    pub would_start_if: Vec<Condition>,
    /// When it may start, where the running jobs' deadlines or recorded runtimes allow an
    /// estimate.
    pub estimated_start: Option<EstimateView>,
    /// Scheduler runs behind the answer.
    pub scheduler_runs: usize,
}

/// An estimated start.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct EstimateView {
    /// When (RFC 3339).
    pub at: String,
    /// How the estimate was made.
    pub method: String,
}

/// A running job as the estimate needs it.
struct Running {
    job: JobId,
    queue: QueueName,
    job_set: JobSetName,
    started_ms: i64,
    deadline_ms: Option<i64>,
}

/// Answers why job `id` waits.
pub(crate) async fn why(app: &Arc<Control>, id: JobId) -> Result<WhyView, ServiceError> {
    let cfg = app.config.scheduler.clone();
    let rate = app.scheduling.read().unwrap_or_else(|p| p.into_inner()).rate_limits.clone();
    let gathered = {
        let st = app.state();
        match st.job(id).filter(|j| j.record.state == JobState::Queued) {
            None => None,
            // A job waiting for another is not the scheduler's yet: its dependency is the answer.
            Some(job) if job.record.waiting_on().is_some() => return Ok(without_place(app, &job.record)),
            Some(job) => {
                let record = job.record.clone();
                let running: Vec<Running> = st
                    .jobs_with_active_runs()
                    .filter_map(|j| {
                        let run = j.record.active_run()?;
                        let started_ms = run.running_at_ms.or(run.pending_at_ms).unwrap_or(run.leased_at_ms);
                        let secs = i64::try_from(j.record.active_deadline_seconds).unwrap_or(i64::MAX / 1000);
                        Some(Running {
                            job: j.record.id,
                            queue: j.record.queue.clone(),
                            job_set: j.record.job_set.clone(),
                            started_ms,
                            deadline_ms: (secs > 0).then(|| started_ms.saturating_add(secs.saturating_mul(1000))),
                        })
                    })
                    .collect();
                let mut snapshot = st.scheduling_snapshot(0, rate);
                st.add_job_times(&mut snapshot, &cfg);
                Some((record, snapshot, st.queue_place(id), running))
            }
        }
    };
    let Some((record, snapshot, place, running)) = gathered else { return not_queued(app, id).await };
    let now = now_ms();
    let runtimes = typical_runtimes(app, &running).await?;
    let ends = expected_ends(&running, &runtimes, now);
    let _permit = QUESTIONS.acquire().await.map_err(|e| ServiceError::internal(e.to_string()))?;
    let answer = tokio::task::spawn_blocking(move || {
        explain(&WhyQuestion { snapshot: &snapshot, cfg: &cfg, seed: 0, now_ms: now, job: id, ends: &ends })
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))?;
    Ok(WhyView {
        job_id: id,
        reason: job_reason(app, &record).or_else(|| answer.reason.as_ref().map(|r| r.to_string())),
        queue: record.queue,
        state: record.state,
        queue_position: place.map(|p| p.position),
        jobs_ahead: place.map(|p| p.ahead_in_its_pools),
        would_start_if: answer.would_start_if,
        estimated_start: answer.estimated_start.map(|e| EstimateView { at: rfc3339(e.at_ms), method: e.method }),
        scheduler_runs: answer.runs,
    })
}

/// A job the scheduler does not offer (it waits for another job, or is not queued): its state
/// and reason, nothing to start.
fn without_place(app: &Control, record: &crate::model::Job) -> WhyView {
    WhyView {
        job_id: record.id,
        reason: job_reason(app, record),
        queue: record.queue.clone(),
        state: record.state,
        queue_position: None,
        jobs_ahead: None,
        would_start_if: Vec::new(),
        estimated_start: None,
        scheduler_runs: 0,
    }
}

/// A job that is not queued: its state and reason, nothing to start.
async fn not_queued(app: &Arc<Control>, id: JobId) -> Result<WhyView, ServiceError> {
    let store = app.store.clone();
    let found = tokio::task::spawn_blocking(move || store.job(id))
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))??;
    let Some(record) = found else { return Err(no_such_job(app, id)) };
    Ok(without_place(app, &record))
}

/// The median runtime (ms) of each running job's job set's recently succeeded jobs, where there
/// are enough of them.
async fn typical_runtimes(
    app: &Arc<Control>,
    running: &[Running],
) -> Result<BTreeMap<(QueueName, JobSetName), i64>, ServiceError> {
    let sets: BTreeSet<(QueueName, JobSetName)> =
        running.iter().map(|r| (r.queue.clone(), r.job_set.clone())).take(MAX_JOB_SETS).collect();
    let store = app.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = BTreeMap::new();
        for (queue, job_set) in sets {
            let filter = JobFilter {
                queue: Some(queue.clone()),
                job_set: Some(job_set.clone()),
                states: vec![JobState::Succeeded],
                limit: RUNTIME_SAMPLES,
                newest_first: true,
                ..Default::default()
            };
            let (jobs, _) = store.list_jobs(&filter)?;
            let mut took: Vec<i64> = jobs
                .iter()
                .filter_map(|j| j.runs.last())
                .filter_map(|r| Some(r.finished_at_ms? - r.running_at_ms?))
                .filter(|ms| *ms >= 0)
                .collect();
            if took.len() >= MIN_RUNTIME_SAMPLES {
                took.sort_unstable();
                out.insert((queue, job_set), took[took.len() / 2]);
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))?
}

/// Each running job's expected end: the sooner of its deadline and its job set's typical
/// runtime (a runtime it has already outlived says nothing).
fn expected_ends(running: &[Running], runtimes: &BTreeMap<(QueueName, JobSetName), i64>, now: i64) -> Vec<RunEnd> {
    running
        .iter()
        .filter_map(|r| {
            let typical = runtimes
                .get(&(r.queue.clone(), r.job_set.clone()))
                .map(|ms| r.started_ms.saturating_add(*ms))
                .filter(|end| *end > now);
            match (r.deadline_ms, typical) {
                (Some(d), Some(t)) if t < d => Some(RunEnd { job: r.job, at_ms: t, basis: EndBasis::Runtime }),
                (Some(d), _) => Some(RunEnd { job: r.job, at_ms: d, basis: EndBasis::Deadline }),
                (None, Some(t)) => Some(RunEnd { job: r.job, at_ms: t, basis: EndBasis::Runtime }),
                (None, None) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: u128, set: &str, started_ms: i64, deadline_ms: Option<i64>) -> Running {
        Running {
            job: JobId::from_u128(job),
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new(set).unwrap(),
            started_ms,
            deadline_ms,
        }
    }

    #[test]
    fn the_sooner_of_deadline_and_typical_runtime_counts_and_an_outlived_runtime_does_not() {
        let runtimes: BTreeMap<_, _> =
            [((QueueName::new("A").unwrap(), JobSetName::new("short").unwrap()), 1_000)].into_iter().collect();
        let running = [
            run(1, "short", 0, Some(60_000)), // typical end 1 s, before its deadline
            run(2, "short", 0, None),         // typical end 1 s, but now is 500 ms: still ahead
            run(3, "other", 0, Some(60_000)), // no runtime known: its deadline
            run(4, "other", 0, None),         // nothing known
            run(5, "short", -10_000, None),   // outlived its set's typical runtime
        ];
        let ends = expected_ends(&running, &runtimes, 500);
        let got: Vec<(u128, i64, EndBasis)> = ends.iter().map(|e| (e.job.as_u128(), e.at_ms, e.basis)).collect();
        assert_eq!(
            got,
            vec![(1, 1_000, EndBasis::Runtime), (2, 1_000, EndBasis::Runtime), (3, 60_000, EndBasis::Deadline)]
        );
    }
}
