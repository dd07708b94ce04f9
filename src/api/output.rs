//! Following a job's output while it runs: `GET /v1/jobs/{id}/output` long-polls for what the
//! run's agent sends (see [`crate::control::output`]). Only the leader hears from agents, so a
//! follower relays the request there.

use super::auth::Principal;
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::JobId;
use crate::model::api::{OutputPage, OutputStream, Problem};
use axum::extract::{Path, Query, State};
use axum::response::Response as HttpResponse;
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Query of `GET /v1/jobs/{id}/output`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutputParams {
    /// `stdout` (default; a pod's log) or `stderr`.
    pub stream: Option<String>,
    /// Byte offset to read from (the `next` of the previous answer); absent: the last lines.
    pub from: Option<u64>,
    /// Longest to wait for output, in seconds, when there is none yet (default 0; at most the
    /// server's `max_lease_wait`).
    pub wait: Option<f64>,
}

/// Follow a job's output
///
/// A piece of the output of the job's latest run, from `from` (or its last lines), waiting up to
/// `wait` seconds for some; ask again from `next` until `done`. While the run is going, its
/// agent sends the output on request (followed output is not stored); once it is over, the
/// answer is the last lines the run shipped when it ended.
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
pub async fn job_output_handler(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path(id): Path<String>,
    Query(q): Query<OutputParams>,
) -> Result<HttpResponse, ApiError> {
    let id = id.parse::<JobId>().map_err(|e| ApiError::bad_request("id", e.to_string()))?;
    Ok(json(job_output(&app, id, &q).await?))
}

/// The output page for job `id`, as the API and the web UI answer it.
pub(crate) async fn job_output(app: &Control, id: JobId, q: &OutputParams) -> Result<OutputPage, ApiError> {
    let stream = match q.stream.as_deref().map(str::trim) {
        None | Some("") | Some("stdout") => OutputStream::Stdout,
        Some("stderr") => OutputStream::Stderr,
        Some(other) => return Err(ApiError::bad_request("stream", format!("{other:?} is not stdout or stderr"))),
    };
    let wait = match q.wait {
        None => Duration::ZERO,
        Some(w) if w.is_finite() && w >= 0.0 => Duration::from_secs_f64(w).min(app.config.server.max_lease_wait),
        Some(_) => return Err(ApiError::bad_request("wait", "must be a number of seconds >= 0")),
    };
    let job = app.store.job(id)?.ok_or_else(|| ApiError::not_found(format!("job {id} does not exist")))?;
    let empty = |note: &str, done: bool| OutputPage {
        run_id: None,
        stream,
        from: q.from.unwrap_or(0),
        next: q.from,
        data: String::new(),
        done,
        note: Some(note.to_string()),
    };
    let Some(run) = job.runs.last() else {
        let done = job.state.is_terminal();
        return Ok(empty(if done { "the job ended without running" } else { "the job has not started yet" }, done));
    };
    let page = |p: crate::control::output::Piece| OutputPage {
        run_id: Some(run.run_id),
        stream,
        from: p.from,
        next: Some(p.to),
        data: p.data,
        done: p.done,
        note: p.unavailable,
    };
    if run.state.is_terminal() {
        if let Some(p) = app.output.peek(run.run_id, stream, q.from)
            && p.done
        {
            return Ok(page(p));
        }
        let mut out = empty("the run is over: this is the last of its output that it shipped when it ended", true);
        out.run_id = Some(run.run_id);
        if q.from.is_none_or(|f| f == 0) {
            out.data = run.log_tail.clone().unwrap_or_default();
        } else {
            out.note = Some("the run is over; GET /v1/jobs/{id}/logs has the last lines it shipped".into());
        }
        return Ok(out);
    }
    if !app.cluster.is_leader() {
        return Err(ApiError::unavailable("only the leader hears from agents, and this server no longer leads; retry"));
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match app.output.want(run.run_id, stream, &run.executor, q.from, Instant::now()) {
            Ok(p) => return Ok(page(p)),
            Err(arrived) => {
                let arrived = arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                // The executor's open poll returns now with the ask.
                app.notify.executor(&run.executor).notify_waiters();
                if tokio::time::Instant::now() >= deadline {
                    let mut out = empty("no output yet", false);
                    out.run_id = Some(run.run_id);
                    out.note = None;
                    return Ok(out);
                }
                tokio::select! {
                    _ = arrived => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
            }
        }
    }
}
