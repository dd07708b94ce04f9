//! Queue endpoints: CRUD and the fair-share report.

use super::auth::{AdminRole, Authorized, Principal};
use super::problem::{ApiError, ApiJson, json};
use crate::config::Role;
use crate::control::{Control, now_ms};
use crate::model::api::{Problem, QueuePoolReport, QueueReport};
use crate::model::{PoolName, Queue, QueueName};
use crate::state::Command;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) fn queue_name(s: &str) -> Result<QueueName, ApiError> {
    QueueName::new(s).map_err(|e| ApiError::bad_request("queue", e.to_string()))
}

/// Create a queue
///
/// Admins only. Answers the queue as stored.
#[utoipa::path(
    post,
    path = "/v1/queues",
    operation_id = "createQueue",
    tag = "queues",
    security(("bearer" = [])),
    request_body = Queue,
    responses(
        (status = 201, description = "The queue was created", body = Queue),
        (status = 400, description = "The body is not a valid queue; `field` names the offending field", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A queue of that name exists", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    State(app): State<Arc<Control>>,
    // Before the body: a non-admin gets 403 whatever it sent.
    _admin: Authorized<AdminRole>,
    ApiJson(queue): ApiJson<Queue>,
) -> Result<Response, ApiError> {
    queue.validate()?;
    app.write(Command::create_queue(queue.clone())).await?;
    Ok((StatusCode::CREATED, axum::Json(queue)).into_response())
}

/// List queues
#[utoipa::path(
    get,
    path = "/v1/queues",
    operation_id = "listQueues",
    tag = "queues",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every queue", body = Vec<Queue>),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(State(app): State<Arc<Control>>, _p: Principal) -> Response {
    let queues: Vec<Queue> = app.state().queues.values().map(|q| q.queue.clone()).collect();
    json(queues)
}

/// Get a queue
#[utoipa::path(
    get,
    path = "/v1/queues/{queue}",
    operation_id = "getQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The queue", body = Queue),
        (status = 400, description = "The queue name is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let name = queue_name(&name)?;
    let q = app.state().queues.get(&name).map(|q| q.queue.clone());
    q.map(json).ok_or_else(|| ApiError::not_found(format!("queue {name} does not exist")))
}

/// Replace a queue's settings
///
/// Admins only. The body's `name` must be the path's.
#[utoipa::path(
    put,
    path = "/v1/queues/{queue}",
    operation_id = "updateQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    request_body = Queue,
    responses(
        (status = 200, description = "The queue as stored", body = Queue),
        (status = 400, description = "The body is not a valid queue, or names another queue; `field` names the offending field", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn update(
    State(app): State<Arc<Control>>,
    _admin: Authorized<AdminRole>,
    Path(name): Path<String>,
    ApiJson(queue): ApiJson<Queue>,
) -> Result<Response, ApiError> {
    let name = queue_name(&name)?;
    if queue.name != name {
        return Err(ApiError::bad_request(
            "name",
            format!("the body names queue {} but the path names {name}", queue.name),
        ));
    }
    queue.validate()?;
    app.write(Command::update_queue(queue.clone())).await?;
    Ok(json(queue))
}

/// Query of `DELETE /v1/queues/{queue}`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteParams {
    /// Delete even if the queue has jobs that are not finished.
    #[serde(default)]
    #[param(default = false)]
    force: bool,
}

/// Delete a queue
///
/// Admins only. A queue with jobs that are not finished is only deleted with `force=true`.
#[utoipa::path(
    delete,
    path = "/v1/queues/{queue}",
    operation_id = "deleteQueue",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name"), DeleteParams),
    responses(
        (status = 204, description = "The queue is gone"),
        (status = 400, description = "The queue name is invalid (problem), or the query is (plain text)", content(
            (Problem = "application/problem+json"),
            (String = "text/plain"),
        )),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The queue has jobs that are not finished and `force` is not set", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
    Query(params): Query<DeleteParams>,
) -> Result<Response, ApiError> {
    p.require(Role::Admin)?;
    let name = queue_name(&name)?;
    app.write(Command::DeleteQueue { name, force: params.force, at_ms: now_ms() }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A queue's fair-share report
///
/// Per pool: fair share, adjusted fair share, actual share, allocation (with what is held on
/// earmarked nodes, at home and as a guest), demand and usage, from the leader's latest scheduling
/// cycle; the queue's jobs per state; and, with `queue_usage_halftime`, its decayed usage per pool
/// as of now, from the replicated state.
#[utoipa::path(
    get,
    path = "/v1/queues/{queue}/report",
    operation_id = "queueReport",
    tag = "queues",
    security(("bearer" = [])),
    params(("queue" = QueueName, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The report", body = QueueReport),
        (status = 400, description = "The queue name is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn report(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let name = queue_name(&name)?;
    let halftime = app.config.scheduler.queue_usage_halftime;
    let (queue, jobs, usage) = {
        let st = app.state();
        let q = st.queues.get(&name).ok_or_else(|| ApiError::not_found(format!("queue {name} does not exist")))?;
        let now = now_ms();
        let usage: BTreeMap<PoolName, f64> = if halftime.is_zero() {
            BTreeMap::new()
        } else {
            let recorded = &st.queue_usage;
            recorded.pools.keys().filter_map(|p| Some((p.clone(), recorded.at(p, &name, now, halftime)?))).collect()
        };
        (q.queue.clone(), q.counts.clone(), usage)
    };
    let sched = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
    let pools = sched
        .pools
        .iter()
        .filter_map(|p| {
            let q = p.queues.iter().find(|q| q.queue == name)?;
            Some(QueuePoolReport {
                pool: p.pool.clone(),
                fair_share: q.fair_share,
                adjusted_fair_share: q.adjusted_fair_share,
                actual_share: q.share_after,
                protected: q.protected,
                allocated: q.allocated.clone(),
                demand: q.demand.clone(),
                pool_total: p.total.clone(),
                home_allocated: q.home_allocated.clone(),
                guest_allocated: q.guest_allocated.clone(),
                usage: q.usage,
                parent: q.parent.clone(),
                is_parent: q.is_parent,
                policy: p.policy,
                proportional_target: q.proportional_target.clone(),
            })
        })
        .collect();
    Ok(json(QueueReport { queue: name, weight: queue.weight(), pools, jobs, usage }))
}
