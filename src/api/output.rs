//! Following a job's output while it runs: `GET /v1/jobs/{id}/output` long-polls for what the
//! run's agent sends (see [`crate::control::output`]). Only the leader hears from agents, so a
//! follower relays the request there.

use super::auth::Principal;
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::JobId;
use crate::model::api::{OutputPage, Problem};
use crate::service::output::{OutputParams, job_output};
use axum::extract::{Path, Query, State};
use axum::response::Response as HttpResponse;
use std::sync::Arc;

/// Follow a job's output
///
/// A piece of the output of the job's latest run, from `from` (or its last lines), waiting up to
/// `wait` seconds for some (a job not started yet is waited for too); ask again from `next`
/// until `done`. While the run is going, its agent sends the output on request (followed output
/// is not stored). Once it is over (`run_over`), the output is read from the start: the whole of
/// it while the agent keeps the run, else the end the server kept (`finished_output_tail`), of
/// the stream asked for alone; `note` says which.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/output",
    operation_id = "jobOutput",
    tag = "jobs",
    security(("bearer" = [])),
    params(("id" = JobId, Path, description = "Job id"), OutputParams),
    responses(
        (status = 200, description = "A piece of the output", body = OutputPage),
        (status = 400, description = "The id, stream, from or wait is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "This server does not lead, and there is no leader to relay to", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn job_output_handler(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(id): Path<String>,
    Query(q): Query<OutputParams>,
) -> Result<HttpResponse, ApiError> {
    let id = id.parse::<JobId>().map_err(|e| ApiError::bad_request("id", e.to_string()))?;
    Ok(json(job_output(&app, id, &q).await?))
}
