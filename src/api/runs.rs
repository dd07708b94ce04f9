//! Reads by run id: `GET /v1/runs/{run_id}`, through the `run_jobs` index.

use super::auth::Principal;
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::RunId;
use crate::model::api::{Problem, RunDetails, RunView};
use crate::model::duration::format_duration;
use crate::service::jobs::run_view;
use axum::extract::{Path, State};
use axum::response::Response as HttpResponse;
use std::sync::Arc;

/// Get a run
///
/// A run by its id, with its job's id, queue, job set and namespace.
#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}",
    operation_id = "getRun",
    tag = "jobs",
    security(("bearer" = [])),
    params(("run_id" = RunId, Path, description = "Run id")),
    responses(
        (status = 200, description = "The run and its job", body = RunDetails),
        (status = 400, description = "The id is not a ULID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run: never leased, or its job finished longer than `job_retention` ago and was deleted", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Storage error", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn get(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(run_id): Path<String>,
) -> Result<HttpResponse, ApiError> {
    let run_id: RunId =
        run_id.parse().map_err(|e: crate::model::NameError| ApiError::bad_request("run_id", e.to_string()))?;
    let store = app.store.clone();
    let (job, usage) = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
        Ok((store.jobs_of_runs(&[run_id])?.pop().flatten(), store.run_usage(&[run_id])?.pop().flatten()))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    let found = job.as_ref().and_then(|j| j.runs.iter().position(|r| r.run_id == run_id).map(|i| (j, i)));
    let Some((job, index)) = found else {
        return Err(ApiError::not_found(format!(
            "run {run_id} does not exist (the runs of finished jobs are deleted with them after \
             server.job_retention = {})",
            format_duration(app.config.server.job_retention)
        )));
    };
    Ok(json(RunDetails {
        job_id: job.id,
        queue: job.queue.clone(),
        job_set: job.job_set.clone(),
        namespace: job.namespace.clone(),
        run: RunView { usage: usage.map(Into::into), attempt: index as u32 + 1, ..run_view(&job.runs[index]) },
    }))
}
