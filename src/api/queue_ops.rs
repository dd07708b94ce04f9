//! Queue-wide operations: cordon and uncordon a queue, cancel or preempt its jobs across every
//! job set (Armada's `CordonQueue`, `UncordonQueue`, `CancelOnQueue`, `PreemptOnQueue`). The
//! gRPC services call the same functions.
//!
//! A cordon is a queue update (admins only, as every queue change). A queue-wide cancel or
//! preempt is allowed to whoever may cancel in the queue; the leader picks the jobs from its
//! state ([`State::queue_jobs`](crate::state::State::queue_jobs)) and commits them through the
//! existing per-job-set `Cancel` and `Preempt` commands, at most [`MAX_IDS_PER_COMMAND`] ids
//! each, so a queue of 100,000 jobs never makes one giant log entry and applying stays the
//! existing deterministic code. The commands carry the state filter too, so a job that changed
//! state between the pick and the commit is only cancelled if it still matches.

use super::auth::Principal;
use super::problem::{ApiError, ApiJson, json};
use super::queues::queue_name;
use crate::config::Role;
use crate::control::{Control, now_ms};
use crate::model::api::{JobIdsResponse, Problem, QueueCancelRequest, QueuePreemptRequest};
use crate::model::{JobId, JobState, PriorityClassName, Queue, QueueName};
use crate::state::{Command, QueueJobFilter, Response};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response as HttpResponse;
use std::sync::Arc;

/// Most job ids one `Cancel` or `Preempt` command of a queue-wide operation carries.
pub const MAX_IDS_PER_COMMAND: usize = 1000;

fn stored_queue(app: &Control, name: &QueueName) -> Result<Queue, ApiError> {
    app.state()
        .queues
        .get(name)
        .map(|q| q.queue.clone())
        .ok_or_else(|| ApiError::field(StatusCode::NOT_FOUND, "queue", format!("queue {name} does not exist")))
}

/// Cordons (`true`) or uncordons a queue; answers the queue as stored. Admins only. Setting the
/// state it already has changes nothing and is not an error.
pub async fn set_cordon(app: &Control, p: &Principal, name: &QueueName, cordoned: bool) -> Result<Queue, ApiError> {
    p.require(Role::Admin)?;
    let mut queue = stored_queue(app, name)?;
    if queue.cordoned == cordoned {
        return Ok(queue);
    }
    queue.cordoned = cordoned;
    app.write(Command::update_queue(queue.clone())).await?;
    Ok(queue)
}

/// Checks a filter's priority classes against the configured ones.
fn check_classes(app: &Control, classes: &[PriorityClassName]) -> Result<(), ApiError> {
    for (i, c) in classes.iter().enumerate() {
        if app.config.scheduler.priority_class(c.as_str()).is_none() {
            let known: Vec<&str> = app.config.scheduler.priority_classes.iter().map(|p| p.name.as_str()).collect();
            return Err(ApiError::bad_request(
                format!("priority_classes[{i}]"),
                format!("unknown priority class {:?} (known: {})", c.as_str(), known.join(", ")),
            ));
        }
    }
    Ok(())
}

fn ids_of(r: Response) -> Result<Vec<JobId>, ApiError> {
    match r {
        Response::JobIds(ids) => Ok(ids),
        other => Err(ApiError::internal(format!("unexpected response {other:?}"))),
    }
}

/// Cancels the queue's live jobs the request's filters reach, in every job set; answers the
/// jobs cancelled (in job set order).
pub async fn cancel_on_queue(
    app: &Control,
    p: &Principal,
    name: &QueueName,
    req: QueueCancelRequest,
) -> Result<Vec<JobId>, ApiError> {
    p.require_queue(&stored_queue(app, name)?)?;
    if let Some((i, s)) = req.states.iter().enumerate().find(|(_, s)| s.is_terminal()) {
        return Err(ApiError::bad_request(
            format!("states[{i}]"),
            format!("{s} jobs are already over and cannot be cancelled"),
        ));
    }
    check_classes(app, &req.priority_classes)?;
    let states: Option<Vec<JobState>> = (!req.states.is_empty()).then(|| req.states.clone());
    let filter = QueueJobFilter { states: req.states, priority_classes: req.priority_classes, pools: req.pools };
    let reason = req.reason.unwrap_or_else(|| format!("cancelled by {}", p.name));
    let sets = app.state().queue_jobs(name, &filter);
    let mut cancelled = Vec::new();
    for (job_set, ids) in sets {
        for chunk in ids.chunks(MAX_IDS_PER_COMMAND) {
            let r = app
                .write(Command::Cancel {
                    queue: name.clone(),
                    job_set: job_set.clone(),
                    job_ids: Some(chunk.to_vec()),
                    states: states.as_ref().map(|s| s.iter().copied().map(Into::into).collect()),
                    reason: reason.clone(),
                    at_ms: now_ms(),
                })
                .await?;
            cancelled.extend(ids_of(r)?);
        }
    }
    Ok(cancelled)
}

/// Preempts the queue's jobs that hold a node (leased, pending or running) and that the
/// request's filters reach, in every job set; answers the jobs preempted.
pub async fn preempt_on_queue(
    app: &Control,
    p: &Principal,
    name: &QueueName,
    req: QueuePreemptRequest,
) -> Result<Vec<JobId>, ApiError> {
    p.require_queue(&stored_queue(app, name)?)?;
    check_classes(app, &req.priority_classes)?;
    let filter = QueueJobFilter {
        states: vec![JobState::Leased, JobState::Pending, JobState::Running],
        priority_classes: req.priority_classes,
        pools: req.pools,
    };
    let reason = req.reason.unwrap_or_else(|| format!("preempted by {}", p.name));
    let sets = app.state().queue_jobs(name, &filter);
    let mut preempted = Vec::new();
    for (job_set, ids) in sets {
        for chunk in ids.chunks(MAX_IDS_PER_COMMAND) {
            let r = app
                .write(Command::Preempt {
                    queue: name.clone(),
                    job_set: job_set.clone(),
                    job_ids: chunk.to_vec(),
                    reason: reason.clone(),
                    at_ms: now_ms(),
                })
                .await?;
            preempted.extend(ids_of(r)?);
        }
    }
    Ok(preempted)
}

/// Cordon a queue
///
/// Admins only. A cordoned queue still takes jobs, but the scheduler places none of its queued
/// jobs; its running jobs keep running. Answers the queue as stored.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/cordon",
    operation_id = "cordonQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The queue as stored", body = Queue),
        (status = 400, description = "The queue name is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cordon(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(set_cordon(&app, &p, &queue_name(&name)?, true).await?))
}

/// Uncordon a queue
///
/// Admins only. Its queued jobs are scheduled again. Answers the queue as stored.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/uncordon",
    operation_id = "uncordonQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The queue as stored", body = Queue),
        (status = 400, description = "The queue name is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn uncordon(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(set_cordon(&app, &p, &queue_name(&name)?, false).await?))
}

/// Cancel a queue's jobs
///
/// Every live job of the queue, in every job set, or only those in `states`, of
/// `priority_classes`, in `pools`; answers the jobs cancelled. Allowed to whoever may cancel in
/// the queue. Large queues are cancelled in several log entries of at most 1,000 jobs.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/cancel",
    operation_id = "cancelOnQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    request_body = QueueCancelRequest,
    responses(
        (status = 200, description = "The jobs cancelled", body = JobIdsResponse),
        (status = 400, description = "The body is invalid, e.g. names a finished state or an unknown priority class", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not submit to or cancel in this queue (not an owner nor in one of its groups)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or a write could not be committed; retry (jobs already cancelled stay cancelled)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<QueueCancelRequest>,
) -> Result<HttpResponse, ApiError> {
    let job_ids = cancel_on_queue(&app, &p, &queue_name(&name)?, req).await?;
    Ok(json(JobIdsResponse { job_ids }))
}

/// Preempt a queue's jobs
///
/// Every job of the queue that holds a node (leased, pending or running), in every job set, or
/// only those of `priority_classes` whose run is in `pools`; answers the jobs preempted. Allowed
/// to whoever may cancel in the queue.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/preempt",
    operation_id = "preemptOnQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    request_body = QueuePreemptRequest,
    responses(
        (status = 200, description = "The jobs preempted", body = JobIdsResponse),
        (status = 400, description = "The body is invalid, e.g. names an unknown priority class", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not submit to or cancel in this queue (not an owner nor in one of its groups)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or a write could not be committed; retry (jobs already preempted stay preempted)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn preempt(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<QueuePreemptRequest>,
) -> Result<HttpResponse, ApiError> {
    let job_ids = preempt_on_queue(&app, &p, &queue_name(&name)?, req).await?;
    Ok(json(JobIdsResponse { job_ids }))
}
