//! Queue-wide endpoints: cordon and uncordon a queue, cancel or preempt its jobs across every
//! job set, over [`crate::service::queues`].

use super::auth::Principal;
use super::problem::{ApiError, ApiJson, json};
use crate::control::Control;
use crate::model::api::{JobIdsResponse, Problem, QueueCancelRequest, QueuePreemptRequest};
use crate::model::{Queue, QueueName};
use crate::service::queues::{cancel_on_queue, preempt_on_queue, queue_name, set_cordon};
use axum::extract::{Path, State};
use axum::response::Response as HttpResponse;
use std::sync::Arc;

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
pub(super) async fn cordon(
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
pub(super) async fn uncordon(
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
pub(super) async fn cancel(
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
pub(super) async fn preempt(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<QueuePreemptRequest>,
) -> Result<HttpResponse, ApiError> {
    let job_ids = preempt_on_queue(&app, &p, &queue_name(&name)?, req).await?;
    Ok(json(JobIdsResponse { job_ids }))
}
