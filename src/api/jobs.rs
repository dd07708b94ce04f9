//! Job endpoints: submit, cancel, reprioritize, preempt, get, list, logs.

use super::auth::Principal;
use super::problem::{ApiError, ApiJson, json};
use super::queues::queue_name;
use super::validate::{SubmitContext, check_submission};
use crate::model::api::{CancelRequest, EventView, JobIdsResponse, JobList, JobView, PreemptRequest, ReprioritizeRequest, RunView, SubmitRequest, SubmitResponse};
use crate::model::{Event, JobId, JobRecord, JobSetName, JobState, Queue, QueueName, Resources};
use crate::server::app::{App, now_ms, rfc3339};
use crate::server::ids;
use crate::state::{Command, NewJob, Response};
use crate::store::JobFilter;
use axum::extract::{Path, Query, State};
use axum::response::Response as HttpResponse;
use serde::Deserialize;
use std::sync::Arc;

/// The queue, for an owner check; 404 if it does not exist.
fn queue_of(app: &App, name: &QueueName) -> Result<Queue, ApiError> {
    app.state().queues.get(name).map(|q| q.queue.clone()).ok_or_else(|| ApiError::field(axum::http::StatusCode::NOT_FOUND, "queue", format!("queue {name} does not exist")))
}

fn ids_of(r: Response) -> Result<Vec<JobId>, ApiError> {
    match r {
        Response::JobIds(ids) => Ok(ids),
        other => Err(ApiError::internal(format!("unexpected response {other:?}"))),
    }
}

pub async fn submit(State(app): State<Arc<App>>, p: Principal, ApiJson(req): ApiJson<SubmitRequest>) -> Result<HttpResponse, ApiError> {
    let queue = queue_of(&app, &req.queue)?;
    p.require_queue(&queue)?;
    if queue.cordoned {
        return Err(ApiError::field(axum::http::StatusCode::CONFLICT, "queue", format!("queue {} is cordoned and accepts no new jobs", queue.name)));
    }
    let largest = if app.config.server.reject_jobs_larger_than_any_node { largest_node(&app) } else { Resources::new() };
    let ctx = SubmitContext { server: &app.config.server, scheduler: &app.config.scheduler, largest_node: &largest };
    let checked = check_submission(&req, &ctx)?;
    let jobs = checked
        .into_iter()
        .map(|c| NewJob {
            id: ids::job_id(),
            client_id: c.client_id,
            priority: c.priority,
            priority_class: c.priority_class,
            requirements: c.requirements,
            gang: c.gang,
            annotations: c.annotations,
            labels: c.labels,
            termination_grace_period_ms: c.termination_grace_period_ms,
            active_deadline_seconds: c.active_deadline_seconds,
            payload: c.payload,
        })
        .collect();
    let r = app.write(Command::Submit { queue: req.queue, job_set: req.job_set, at_ms: now_ms(), jobs }).await?;
    Ok(json(SubmitResponse { job_ids: ids_of(r)? }))
}

/// Largest amount of each resource on any known node.
fn largest_node(app: &App) -> Resources {
    let st = app.state();
    let mut out = Resources::new();
    for e in st.executors.values() {
        for n in &e.nodes {
            let mut cap = n.allocatable.clone();
            cap.sub(&n.unallocatable);
            out.max_with(&cap);
        }
    }
    out
}

pub async fn cancel(State(app): State<Arc<App>>, p: Principal, ApiJson(req): ApiJson<CancelRequest>) -> Result<HttpResponse, ApiError> {
    p.require_queue(&queue_of(&app, &req.queue)?)?;
    if let Some(states) = &req.states {
        if let Some((i, s)) = states.iter().enumerate().find(|(_, s)| s.is_terminal()) {
            return Err(ApiError::bad_request(format!("states[{i}]"), format!("{s} jobs are already over and cannot be cancelled")));
        }
    }
    let reason = req.reason.clone().unwrap_or_else(|| format!("cancelled by {}", p.name));
    let r = app.write(Command::Cancel { queue: req.queue, job_set: req.job_set, job_ids: req.job_ids, states: req.states, reason, at_ms: now_ms() }).await?;
    Ok(json(JobIdsResponse { job_ids: ids_of(r)? }))
}

pub async fn reprioritize(State(app): State<Arc<App>>, p: Principal, ApiJson(req): ApiJson<ReprioritizeRequest>) -> Result<HttpResponse, ApiError> {
    p.require_queue(&queue_of(&app, &req.queue)?)?;
    let r = app.write(Command::Reprioritize { queue: req.queue, job_set: req.job_set, job_ids: req.job_ids, priority: req.priority, at_ms: now_ms() }).await?;
    Ok(json(JobIdsResponse { job_ids: ids_of(r)? }))
}

pub async fn preempt(State(app): State<Arc<App>>, p: Principal, ApiJson(req): ApiJson<PreemptRequest>) -> Result<HttpResponse, ApiError> {
    p.require_queue(&queue_of(&app, &req.queue)?)?;
    if req.job_ids.is_empty() {
        return Err(ApiError::bad_request("job_ids", "name at least one job to preempt"));
    }
    let reason = req.reason.clone().unwrap_or_else(|| format!("preempted by {}", p.name));
    let r = app.write(Command::Preempt { queue: req.queue, job_set: req.job_set, job_ids: req.job_ids, reason, at_ms: now_ms() }).await?;
    Ok(json(JobIdsResponse { job_ids: ids_of(r)? }))
}

pub(super) fn event_view(e: &Event) -> EventView {
    EventView { seq: e.seq, job_id: e.job_id, at: rfc3339(e.at_ms), kind: e.kind, run_id: e.run_id, message: e.message.clone() }
}

/// A job for the API; `reason` is the scheduler's latest for queued jobs, the end reason else.
fn job_view(app: &App, r: &JobRecord) -> JobView {
    let reason = if r.state == JobState::Queued {
        let sched = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
        sched
            .reasons
            .get(&r.id)
            .or_else(|| sched.queue_notes.get(&r.queue))
            .map(|x| x.to_string())
            .or_else(|| r.runs.last().and_then(|run| run.reason.clone()).map(|x| format!("requeued: {x}")))
    } else {
        r.state_reason.clone()
    };
    JobView {
        id: r.id,
        queue: r.queue.clone(),
        job_set: r.job_set.clone(),
        state: r.state,
        priority: r.priority,
        priority_class: r.priority_class.clone(),
        submitted_at: rfc3339(r.submitted_at_ms),
        requests: r.requirements.requests.clone(),
        annotations: r.annotations.clone(),
        labels: r.labels.clone(),
        client_id: r.client_id.clone(),
        reason,
        runs: r
            .runs
            .iter()
            .map(|run| RunView {
                run_id: run.run_id,
                executor: run.executor.to_string(),
                node: run.node.clone(),
                pool: run.pool.clone(),
                state: run.state,
                leased_at: rfc3339(run.leased_at_ms),
                pending_at: run.pending_at_ms.map(rfc3339),
                running_at: run.running_at_ms.map(rfc3339),
                finished_at: run.finished_at_ms.map(rfc3339),
                exit_code: run.exit_code,
                reason: run.reason.clone(),
                message: run.message.clone(),
            })
            .collect(),
        events: None,
        pod_spec: None,
    }
}

fn job_id(s: &str) -> Result<JobId, ApiError> {
    s.parse().map_err(|e: crate::model::NameError| ApiError::bad_request("id", e.to_string()))
}

pub async fn get(State(app): State<Arc<App>>, _p: Principal, Path(id): Path<String>) -> Result<HttpResponse, ApiError> {
    let id = job_id(&id)?;
    let store = app.store.clone();
    let found = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
        let Some(r) = store.job(id)? else { return Ok(None) };
        let events = store.job_events(&r)?;
        let payload = store.payload(id)?;
        Ok(Some((r, events, payload)))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    let Some((r, events, payload)) = found else { return Err(ApiError::not_found(format!("job {id} does not exist"))) };
    let mut v = job_view(&app, &r);
    v.events = Some(events.iter().map(event_view).collect());
    v.pod_spec = payload.and_then(|p| serde_json::from_str(&p.pod_spec).ok());
    Ok(json(v))
}

#[derive(Deserialize)]
pub struct ListParams {
    queue: Option<String>,
    job_set: Option<String>,
    /// Comma-separated states.
    state: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

pub async fn list(State(app): State<Arc<App>>, _p: Principal, Query(q): Query<ListParams>) -> Result<HttpResponse, ApiError> {
    let queue = q.queue.as_deref().map(queue_name).transpose()?;
    let job_set = q.job_set.as_deref().map(|s| JobSetName::new(s).map_err(|e| ApiError::bad_request("job_set", e.to_string()))).transpose()?;
    if job_set.is_some() && queue.is_none() {
        return Err(ApiError::bad_request("job_set", "filtering by job set needs the queue too"));
    }
    let mut states = Vec::new();
    for s in q.state.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        states.push(JobState::parse(s).ok_or_else(|| ApiError::bad_request("state", format!("{s:?} is not a job state (queued, leased, pending, running, succeeded, failed, cancelled, preempted)")))?);
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit", "must be between 1 and 1000"));
    }
    let after = q.after.as_deref().map(job_id).transpose().map_err(|e| ApiError::bad_request("after", e.detail))?;
    let filter = JobFilter { queue, job_set, states, after, limit };
    let store = app.store.clone();
    let (records, more) = tokio::task::spawn_blocking(move || store.list_jobs(&filter)).await.map_err(|e| ApiError::internal(e.to_string()))??;
    let next = if more { records.last().map(|r| r.id) } else { None };
    Ok(json(JobList { jobs: records.iter().map(|r| job_view(&app, r)).collect(), next }))
}

pub async fn logs(State(app): State<Arc<App>>, _p: Principal, Path(id): Path<String>) -> Result<HttpResponse, ApiError> {
    let id = job_id(&id)?;
    let r = app.store.job(id)?.ok_or_else(|| ApiError::not_found(format!("job {id} does not exist")))?;
    let tail = r.runs.iter().rev().find_map(|run| run.log_tail.clone());
    match tail {
        Some(t) => Ok(axum::response::IntoResponse::into_response(([(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], t))),
        None => Err(ApiError::not_found(format!("job {id} has no output yet (output is shipped when a run ends)"))),
    }
}
