//! Job endpoints: submit, cancel, reprioritize, preempt, get, list, logs, over
//! [`crate::service::jobs`]; why a job waits, over [`crate::service::why`].

use super::auth::Principal;
use super::problem::{ApiError, ApiJson, json};
use crate::control::Control;
use crate::model::JobId;
use crate::model::api::{
    CancelRequest, JobIdsResponse, PreemptRequest, Problem, ReprioritizeRequest, SubmitRequest, SubmitResponse,
};
use crate::model::api::{JobList, JobView};
use crate::service::jobs::{
    ListParams, cancel_jobs, job_details, job_id, list_jobs, no_such_job, preempt_jobs, reprioritize_jobs, submit_jobs,
};
use crate::service::why::{WhyView, why};
use axum::extract::{Path, Query, State};
use axum::response::Response as HttpResponse;
use std::sync::Arc;

/// Submit jobs
///
/// All or nothing: every job is checked before any is stored. A cordoned queue takes jobs too;
/// they stay queued until it is uncordoned. Jobs with a `client_id` already
/// used in the queue answer the existing job's id, while that job is kept (`job_retention` after
/// it finished, the `client_id` is free again).
#[utoipa::path(
    post,
    path = "/v1/jobs",
    operation_id = "submitJobs",
    tag = "jobs",
    security(("bearer" = [])),
    request_body = SubmitRequest,
    responses(
        (status = 200, description = "One job id per submitted job, in order", body = SubmitResponse),
        (status = 400, description = "A job is invalid; `field` names it, e.g. `jobs[3].pod_spec.containers[0].resources`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not submit to or cancel in this queue (not an owner nor in one of its groups)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The queue is a parent queue (jobs go to leaf queues)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn submit(
    State(app): State<Arc<Control>>,
    p: Principal,
    ApiJson(req): ApiJson<SubmitRequest>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(SubmitResponse { job_ids: submit_jobs(&app, &p, req).await? }))
}

/// Cancel jobs
///
/// The whole job set, or only `job_ids`, or only jobs in `states`; answers the jobs cancelled.
#[utoipa::path(
    post,
    path = "/v1/jobs/cancel",
    operation_id = "cancelJobs",
    tag = "jobs",
    security(("bearer" = [])),
    request_body = CancelRequest,
    responses(
        (status = 200, description = "The jobs cancelled", body = JobIdsResponse),
        (status = 400, description = "The body is invalid, e.g. names a terminal state", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not submit to or cancel in this queue (not an owner nor in one of its groups)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue, or a job is not in the job set", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn cancel(
    State(app): State<Arc<Control>>,
    p: Principal,
    ApiJson(req): ApiJson<CancelRequest>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(JobIdsResponse { job_ids: cancel_jobs(&app, &p, req).await? }))
}

/// Change jobs' priority
///
/// The whole job set, or only `job_ids`; answers the jobs changed.
#[utoipa::path(
    post,
    path = "/v1/jobs/reprioritize",
    operation_id = "reprioritizeJobs",
    tag = "jobs",
    security(("bearer" = [])),
    request_body = ReprioritizeRequest,
    responses(
        (status = 200, description = "The jobs reprioritized", body = JobIdsResponse),
        (status = 400, description = "The body is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not submit to or cancel in this queue (not an owner nor in one of its groups)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue, or a job is not in the job set", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn reprioritize(
    State(app): State<Arc<Control>>,
    p: Principal,
    ApiJson(req): ApiJson<ReprioritizeRequest>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(JobIdsResponse { job_ids: reprioritize_jobs(&app, &p, req).await? }))
}

/// Preempt running jobs
///
/// The jobs' runs are stopped and the jobs end as preempted; answers the jobs preempted.
#[utoipa::path(
    post,
    path = "/v1/jobs/preempt",
    operation_id = "preemptJobs",
    tag = "jobs",
    security(("bearer" = [])),
    request_body = PreemptRequest,
    responses(
        (status = 200, description = "The jobs preempted", body = JobIdsResponse),
        (status = 400, description = "The body is invalid, or names no job", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not submit to or cancel in this queue (not an owner nor in one of its groups)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such queue, or a job is not in the job set", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than `max_request_bytes`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not `application/json`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn preempt(
    State(app): State<Arc<Control>>,
    p: Principal,
    ApiJson(req): ApiJson<PreemptRequest>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(JobIdsResponse { job_ids: preempt_jobs(&app, &p, req).await? }))
}

/// Get a job
///
/// With its runs, its events, its pod spec, and the reason it waits if it is queued.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    operation_id = "getJob",
    tag = "jobs",
    security(("bearer" = [])),
    params(("id" = JobId, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job, with `events` and `pod_spec`", body = JobView),
        (status = 400, description = "The id is not a ULID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job: never submitted, or finished longer than `job_retention` ago and deleted", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Storage error", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn get(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(id): Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = job_id(&id)?;
    Ok(json(job_details(&app, id).await?))
}

/// List jobs
///
/// In id (submission) order, or newest first, a page at a time; `next` is the `after` of the next
/// page.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    operation_id = "listJobs",
    tag = "jobs",
    security(("bearer" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "A page of jobs (without `events` and `pod_spec`)", body = JobList),
        (status = 400, description = "A query parameter is invalid (problem naming it; plain text if it does not parse at all)", content(
            (Problem = "application/problem+json"),
            (String = "text/plain"),
        )),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The queue does not exist", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Storage error", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn list(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Query(q): Query<ListParams>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(list_jobs(&app, &q).await?))
}

/// Why a job waits, and what would start it
///
/// For a queued job: its place in its queue, conditions under which the scheduler places it (each
/// checked by running the scheduler on the current state with the condition met), and an
/// estimated start where the running jobs' deadlines or recorded runtimes allow one. For any
/// other job: its state and reason.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/why",
    operation_id = "whyJob",
    tag = "jobs",
    security(("bearer" = [])),
    params(("id" = JobId, Path, description = "Job id")),
    responses(
        (status = 200, description = "Why it waits", body = WhyView),
        (status = 400, description = "The id is not a ULID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Storage error", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn why_handler(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(id): Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = job_id(&id)?;
    let answer: WhyView = why(&app, id).await?;
    Ok(json(answer))
}

/// A job's output
///
/// The last lines of output of the job's latest run that shipped any (at most 64 KiB, shipped when
/// a run ends).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/logs",
    operation_id = "jobLogs",
    tag = "jobs",
    security(("bearer" = [])),
    params(("id" = JobId, Path, description = "Job id")),
    responses(
        (status = 200, description = "The output", body = String, content_type = "text/plain"),
        (status = 400, description = "The id is not a ULID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job, or no output yet", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Storage error", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn logs(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(id): Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = job_id(&id)?;
    let r = app.store.job(id)?.ok_or_else(|| no_such_job(&app, id))?;
    let tail = r.runs.iter().rev().find_map(|run| run.log_tail.clone());
    match tail {
        Some(t) => Ok(axum::response::IntoResponse::into_response((
            [(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            t,
        ))),
        None => Err(ApiError::not_found(format!("job {id} has no output yet (output is shipped when a run ends)"))),
    }
}
