//! The executor API: the lease long-poll, run events and followed output, over
//! [`crate::service::executors`].

use super::auth::{Authorized, ExecutorRole};
use super::problem::{ApiError, ApiJson, json};
use crate::control::Control;
use crate::model::ExecutorName;
use crate::model::api::{EventsRequest, EventsResponse, LeaseRequest, LeaseResponse, OutputReport, Problem};
use crate::service::executors::{self, executor_name};
use axum::extract::{Path, State};
use axum::response::Response as HttpResponse;
use std::sync::Arc;

/// Poll for work (long poll)
///
/// Reports the agent's nodes and the runs it holds; answers as soon as there are new runs to start
/// or runs to kill for this executor, or after `wait_seconds`. Only the leader decides: a
/// follower relays the poll to the leader and answers with its answer.
#[utoipa::path(
    post,
    path = "/v1/executors/{executor}/lease",
    operation_id = "lease",
    tag = "executors",
    security(("bearer" = [])),
    params(("executor" = ExecutorName, Path, description = "Executor name")),
    request_body = LeaseRequest,
    responses(
        (status = 200, description = "Runs to start and runs to kill (both may be empty)", body = LeaseResponse),
        (status = 400, description = "The body is invalid, e.g. a node is listed twice", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks the executor role", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Storage error", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader to relay to (an election is under way), or the write could not be committed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn lease(
    State(app): State<Arc<Control>>,
    // Before the body: a caller without the role gets 403 whatever it sent.
    _caller: Authorized<ExecutorRole>,
    Path(executor): Path<String>,
    ApiJson(req): ApiJson<LeaseRequest>,
) -> Result<HttpResponse, ApiError> {
    let executor = executor_name(&executor)?;
    Ok(json(executors::lease(&app, executor, req).await?))
}

/// Send followed output
///
/// What the agent has of the output the lease poll asked for (`output` in its answer). Kept on
/// the leader for those following it, not stored: a follower relays the report to the leader.
#[utoipa::path(
    post,
    path = "/v1/executors/{executor}/output",
    operation_id = "reportRunOutput",
    tag = "executors",
    security(("bearer" = [])),
    params(("executor" = ExecutorName, Path, description = "Executor name")),
    request_body = OutputReport,
    responses(
        (status = 200, description = "How many pieces were taken (others belong to runs nobody follows now)", body = EventsResponse),
        (status = 400, description = "The body is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks the executor role", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "This server does not lead, and there is no leader to relay to", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn output(
    State(app): State<Arc<Control>>,
    _caller: Authorized<ExecutorRole>,
    Path(executor): Path<String>,
    ApiJson(req): ApiJson<OutputReport>,
) -> Result<HttpResponse, ApiError> {
    let executor = executor_name(&executor)?;
    Ok(json(executors::report_output(&app, executor, req)?))
}

/// Report run events
///
/// Run state changes as the agent saw them: pending, running, succeeded, failed, returned.
/// Only the leader applies them: a follower relays the report to the leader.
#[utoipa::path(
    post,
    path = "/v1/executors/{executor}/events",
    operation_id = "reportRunEvents",
    tag = "executors",
    security(("bearer" = [])),
    params(("executor" = ExecutorName, Path, description = "Executor name")),
    request_body = EventsRequest,
    responses(
        (status = 200, description = "How many events were applied", body = EventsResponse),
        (status = 400, description = "The body is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks the executor role", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader to relay to (an election is under way), or the write could not be committed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn events(
    State(app): State<Arc<Control>>,
    // Before the body: a caller without the role gets 403 whatever it sent.
    _caller: Authorized<ExecutorRole>,
    Path(executor): Path<String>,
    ApiJson(req): ApiJson<EventsRequest>,
) -> Result<HttpResponse, ApiError> {
    let executor = executor_name(&executor)?;
    Ok(json(executors::report_events(&app, executor, req).await?))
}
