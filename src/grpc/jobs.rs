//! `api.Jobs`: job states, details and errors as Armada's, read from the store as the REST
//! API's `GET /v1/jobs/{id}` reads them. A job the store does not hold (never submitted, or
//! deleted after `job_retention`) is UNKNOWN, not an error, as Armada answers.

use super::events::timestamp;
use super::fields::{job_set_name, queue_name};
use super::pb::{self, jobs_server::Jobs};
use super::submit::EXTERNAL_JOB_URI_ANNOTATION;
use super::{k8s, principal, required};
use crate::control::Control;
use crate::model::{Event, EventKind, Job, JobId, JobPayload, JobState, RunId, RunState};
use crate::store::{JobFilter, Store, StoreError};
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The `api.Jobs` service.
pub(super) struct JobsService(pub Arc<Control>);

/// Most job ids one GetJobStatus may ask about.
const MAX_IDS: usize = 10_000;

/// Armada's state of a Convoy job state.
pub(super) fn armada_state(s: JobState) -> pb::JobState {
    match s {
        JobState::Queued => pb::JobState::Queued,
        JobState::Leased => pb::JobState::Leased,
        JobState::Pending => pb::JobState::Pending,
        JobState::Running => pb::JobState::Running,
        JobState::Succeeded => pb::JobState::Succeeded,
        JobState::Failed => pb::JobState::Failed,
        JobState::Cancelled => pb::JobState::Cancelled,
        JobState::Preempted => pb::JobState::Preempted,
    }
}

/// Armada's run state of a Convoy run state; a lost run went back to the queue (lease returned).
pub(super) fn armada_run_state(s: RunState) -> pb::JobRunState {
    match s {
        RunState::Leased => pb::JobRunState::RunStateLeased,
        RunState::Pending => pb::JobRunState::RunStatePending,
        RunState::Running => pb::JobRunState::RunStateRunning,
        RunState::Succeeded => pb::JobRunState::RunStateSucceeded,
        RunState::Failed => pb::JobRunState::RunStateFailed,
        RunState::Cancelled => pb::JobRunState::RunStateCancelled,
        RunState::Preempted => pb::JobRunState::RunStatePreempted,
        RunState::Lost => pb::JobRunState::RunsStateLeaseReturned,
    }
}

/// Runs a store read off the async threads.
async fn read<T: Send + 'static>(
    app: &Control,
    f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, Status> {
    let store = app.store.clone();
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| Status::internal(format!("the read task failed: {e}")))?
        .map_err(|e| Status::internal(format!("reading jobs failed: {e}")))
}

fn check_count(ids: &[String]) -> Result<(), Status> {
    if ids.len() > MAX_IDS {
        return Err(Status::invalid_argument(format!("job_ids: at most {MAX_IDS} ids per request")));
    }
    Ok(())
}

/// A job's details as Armada's: cancellation time and reason from its events, the last event's
/// time as the last transition, its runs and its spec when asked.
fn details(
    job: &Job,
    events: &[Event],
    payload: Option<&JobPayload>,
    spec: bool,
    runs: bool,
) -> Result<pb::JobDetails, Status> {
    let cancel = events.iter().rev().find(|e| e.kind == EventKind::Cancelled);
    let job_spec = match (spec, payload) {
        (true, Some(p)) => {
            let json: serde_json::Value = serde_json::from_str(&p.pod_spec)
                .map_err(|e| Status::internal(format!("job {}: the stored pod spec is not JSON: {e}", job.id)))?;
            let pod_spec = k8s::from_json(&json).map_err(|e| {
                Status::internal(format!("job {}: the stored pod spec at {}: {}", job.id, e.field, e.message))
            })?;
            Some(pb::Job {
                id: job.id.to_string(),
                job_set_id: job.job_set.to_string(),
                queue: job.queue.to_string(),
                priority: f64::from(job.priority),
                created: Some(timestamp(job.submitted_at_ms)),
                namespace: namespace_of(job),
                labels: job.labels.clone().into_iter().collect(),
                annotations: job.annotations.clone().into_iter().collect(),
                pod_specs: vec![pod_spec],
                client_id: job.client_id.clone().unwrap_or_default(),
            })
        }
        _ => None,
    };
    Ok(pb::JobDetails {
        job_id: job.id.to_string(),
        queue: job.queue.to_string(),
        jobset: job.job_set.to_string(),
        namespace: namespace_of(job),
        state: armada_state(job.state) as i32,
        submitted_ts: Some(timestamp(job.submitted_at_ms)),
        cancel_ts: cancel.map(|e| timestamp(e.at_ms)),
        cancel_reason: if job.state == JobState::Cancelled {
            job.state_reason.clone().unwrap_or_default()
        } else {
            String::new()
        },
        last_transition_ts: events.last().map(|e| timestamp(e.at_ms)),
        latest_run_id: job.runs.last().map(|r| r.run_id.to_string()).unwrap_or_default(),
        job_spec,
        job_runs: if runs { job.runs.iter().map(|r| run_details(job.id, r)).collect() } else { vec![] },
    })
}

/// The namespace a job asked for; "" for one that named none (it runs in its agent's).
fn namespace_of(job: &Job) -> String {
    job.namespace.as_ref().map(|n| n.to_string()).unwrap_or_default()
}

fn run_details(job: JobId, r: &crate::model::Run) -> pb::JobRunDetails {
    pb::JobRunDetails {
        run_id: r.run_id.to_string(),
        job_id: job.to_string(),
        state: armada_run_state(r.state) as i32,
        cluster: r.executor.to_string(),
        node: r.node.to_string(),
        leased_ts: Some(timestamp(r.leased_at_ms)),
        pending_ts: r.pending_at_ms.map(timestamp),
        started_ts: r.running_at_ms.map(timestamp),
        finished_ts: r.finished_at_ms.map(timestamp),
    }
}

/// Why a failed job failed: its reason and its last run's message; "" for any other job.
fn error_of(job: &Job) -> String {
    if job.state != JobState::Failed {
        return String::new();
    }
    let message = job.runs.last().and_then(|r| r.message.as_deref()).filter(|m| !m.is_empty());
    match (job.state_reason.as_deref(), message) {
        (Some(reason), Some(m)) if reason != m => format!("{reason}: {m}"),
        (Some(reason), _) => reason.to_string(),
        (None, Some(m)) => m.to_string(),
        (None, None) => "failed".to_string(),
    }
}

#[tonic::async_trait]
impl Jobs for JobsService {
    async fn get_job_details(
        &self,
        request: Request<pb::JobDetailsRequest>,
    ) -> Result<Response<pb::JobDetailsResponse>, Status> {
        principal(&self.0, &request)?;
        let req = request.into_inner();
        check_count(&req.job_ids)?;
        let (spec, runs) = (req.expand_job_spec, req.expand_job_run);
        let found = read(&self.0, move |store| {
            let mut found = Vec::new();
            // Ids naming no job held are left out, as Armada leaves out jobs it does not know.
            for id in req.job_ids.iter().filter_map(|id| id.parse::<JobId>().ok()) {
                let Some(job) = store.job(id)? else { continue };
                let events = store.job_events(&job)?;
                let payload = if spec { store.payload(id)? } else { None };
                found.push((job, events, payload));
            }
            Ok(found)
        })
        .await?;
        let mut out = HashMap::new();
        for (job, events, payload) in &found {
            out.insert(job.id.to_string(), details(job, events, payload.as_ref(), spec, runs)?);
        }
        Ok(Response::new(pb::JobDetailsResponse { job_details: out }))
    }

    async fn get_job_run_details(
        &self,
        request: Request<pb::JobRunDetailsRequest>,
    ) -> Result<Response<pb::JobRunDetailsResponse>, Status> {
        principal(&self.0, &request)?;
        let ids = request.into_inner().run_ids;
        if ids.len() > MAX_IDS {
            return Err(Status::invalid_argument(format!("run_ids: at most {MAX_IDS} ids per request")));
        }
        // Ids that are no run ids name no run: left out, as the runs the store does not hold.
        let runs: Vec<RunId> = ids.iter().filter_map(|id| id.parse().ok()).collect();
        let jobs = read(&self.0, {
            let runs = runs.clone();
            move |store| store.jobs_of_runs(&runs)
        })
        .await?;
        let mut out = HashMap::new();
        for (run_id, job) in runs.iter().zip(jobs) {
            let Some(job) = job else { continue };
            if let Some(run) = job.runs.iter().find(|r| r.run_id == *run_id) {
                out.insert(run_id.to_string(), run_details(job.id, run));
            }
        }
        Ok(Response::new(pb::JobRunDetailsResponse { job_run_details: out }))
    }

    async fn get_job_errors(
        &self,
        request: Request<pb::JobErrorsRequest>,
    ) -> Result<Response<pb::JobErrorsResponse>, Status> {
        principal(&self.0, &request)?;
        let ids = request.into_inner().job_ids;
        check_count(&ids)?;
        let errors = read(&self.0, move |store| {
            let mut errors = HashMap::new();
            for id in ids {
                let job = match id.parse::<JobId>() {
                    Ok(job) => store.job(job)?,
                    Err(_) => None,
                };
                errors.insert(id, job.as_ref().map(error_of).unwrap_or_default());
            }
            Ok(errors)
        })
        .await?;
        Ok(Response::new(pb::JobErrorsResponse { job_errors: errors }))
    }

    async fn get_job_status_using_external_job_uri(
        &self,
        request: Request<pb::JobStatusUsingExternalJobUriRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        principal(&self.0, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("jobset", &req.jobset)?;
        let uri = required("external_job_uri", &req.external_job_uri)?.to_string();
        // The job set's jobs through its index, a page at a time.
        let states = read(&self.0, move |store| {
            let mut states = HashMap::new();
            let mut filter =
                JobFilter { queue: Some(queue), job_set: Some(job_set), limit: 1000, ..JobFilter::default() };
            loop {
                let (jobs, more) = store.list_jobs(&filter)?;
                for job in &jobs {
                    if job.annotations.get(EXTERNAL_JOB_URI_ANNOTATION) == Some(&uri) {
                        states.insert(job.id.to_string(), armada_state(job.state) as i32);
                    }
                }
                match jobs.last() {
                    Some(last) if more => filter.after = Some(last.id),
                    _ => return Ok(states),
                }
            }
        })
        .await?;
        Ok(Response::new(pb::JobStatusResponse { job_states: states }))
    }

    async fn get_job_status(
        &self,
        request: Request<pb::JobStatusRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        principal(&self.0, &request)?;
        let ids = request.into_inner().job_ids;
        if ids.len() > MAX_IDS {
            return Err(Status::invalid_argument(format!("job_ids: at most {MAX_IDS} ids per request")));
        }
        let store = self.0.store.clone();
        let states = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
            let mut states = std::collections::HashMap::new();
            for id in ids {
                // An id that is not a job id names no job: UNKNOWN too.
                let state = match id.parse::<JobId>() {
                    Ok(job) => store.job(job)?.map_or(pb::JobState::Unknown, |j| armada_state(j.state)),
                    Err(_) => pb::JobState::Unknown,
                };
                states.insert(id, state as i32);
            }
            Ok(states)
        })
        .await
        .map_err(|e| Status::internal(format!("the read task failed: {e}")))?
        .map_err(|e| Status::internal(format!("reading jobs failed: {e}")))?;
        Ok(Response::new(pb::JobStatusResponse { job_states: states }))
    }

    async fn get_active_queues(
        &self,
        request: Request<pb::GetActiveQueuesRequest>,
    ) -> Result<Response<pb::GetActiveQueuesResponse>, Status> {
        principal(&self.0, &request)?;
        Ok(Response::new(super::active_queues::active_queues(&self.0.state())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Run;

    fn run(state: RunState, message: Option<&str>) -> Run {
        Run {
            run_id: crate::model::RunId::from_parts(1, 1),
            executor: "fake".parse().unwrap(),
            node: "fake-0".parse().unwrap(),
            pool: "default".parse().unwrap(),
            state,
            leased_at_ms: 1_000,
            pending_at_ms: None,
            running_at_ms: Some(2_000),
            finished_at_ms: None,
            exit_code: None,
            reason: None,
            message: message.map(str::to_string),
            kill: None,
            log_tail: None,
            pod: None,
        }
    }

    #[test]
    fn lost_runs_are_lease_returned_and_the_rest_map_one_to_one() {
        assert_eq!(armada_run_state(RunState::Lost), pb::JobRunState::RunsStateLeaseReturned);
        assert_eq!(armada_run_state(RunState::Preempted), pb::JobRunState::RunStatePreempted);
        assert_eq!(armada_run_state(RunState::Leased), pb::JobRunState::RunStateLeased);
        let d = run_details(JobId::from_parts(5, 5), &run(RunState::Running, None));
        assert_eq!((d.cluster.as_str(), d.node.as_str()), ("fake", "fake-0"));
        assert_eq!(
            (d.leased_ts.map(|t| t.seconds), d.pending_ts, d.started_ts.map(|t| t.seconds)),
            (Some(1), None, Some(2))
        );
    }
}
