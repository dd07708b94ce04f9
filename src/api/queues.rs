//! Queue endpoints: CRUD and the fair-share report.

use super::auth::{AdminRole, Authorized, Principal};
use super::problem::{ApiError, ApiJson, json};
use crate::config::Role;
use crate::control::Control;
use crate::model::api::{Problem, QueueReport};
use crate::model::{Queue, QueueName};
use crate::service::queues::{self, queue_name};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;

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
pub(super) async fn create(
    State(app): State<Arc<Control>>,
    admin: Authorized<AdminRole>,
    ApiJson(queue): ApiJson<Queue>,
) -> Result<Response, ApiError> {
    queues::create(&app, &admin.principal, queue.clone()).await?;
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
pub(super) async fn list(State(app): State<Arc<Control>>, _p: Principal) -> Response {
    json(queues::list(&app))
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
pub(super) async fn get(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(json(queues::get(&app, &queue_name(&name)?)?))
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
pub(super) async fn update(
    State(app): State<Arc<Control>>,
    admin: Authorized<AdminRole>,
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
    queues::update(&app, &admin.principal, queue.clone()).await?;
    Ok(json(queue))
}

/// Query of `DELETE /v1/queues/{queue}`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DeleteParams {
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
pub(super) async fn delete(
    State(app): State<Arc<Control>>,
    p: Principal,
    Path(name): Path<String>,
    Query(params): Query<DeleteParams>,
) -> Result<Response, ApiError> {
    p.require(Role::Admin)?;
    queues::delete(&app, &p, queue_name(&name)?, params.force).await?;
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
pub(super) async fn report(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(json(queues::report(&app, queue_name(&name)?)?))
}
