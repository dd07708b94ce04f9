//! What a signed-in principal may do from the pages: cancel a job or its whole job set, change
//! its priority, cordon or uncordon a queue. Each page offers only what the principal is allowed
//! (the checks of the API, which the server makes again here), behind a confirmation step; each
//! goes through the same path as the REST and gRPC APIs, then back to the page with the outcome.

use super::html::{escape, page, status_of};
use super::session::Viewer;
use crate::config::Role;
use crate::control::Control;
use crate::model::api::{CancelRequest, ReprioritizeRequest};
use crate::model::{JobId, JobSetName, QueueName};
use crate::service::ServiceError;
use crate::service::access::Principal;
use crate::service::jobs::{cancel_jobs, reprioritize_jobs};
use crate::service::queues::set_cordon;
use axum::Form;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::sync::Arc;

/// The priority form.
#[derive(serde::Deserialize)]
pub(crate) struct PriorityForm {
    priority: String,
}

/// True if `p` may cancel and reprioritize jobs of `queue` (its owners, their groups, admins).
pub(crate) fn may_act_on(app: &Control, p: &Principal, queue: &QueueName) -> bool {
    app.state().queue(queue).is_some_and(|q| p.require_queue(&q.queue).is_ok())
}

/// True if `p` may cordon queues.
pub(crate) fn may_cordon(p: &Principal) -> bool {
    p.require(Role::Admin).is_ok()
}

/// The queue and job set of job `id`.
fn job_place(app: &Control, id: &str) -> Result<(JobId, QueueName, JobSetName), ServiceError> {
    let id: JobId = id.parse().map_err(|_| ServiceError::invalid("id", format!("{id:?} is not a job id (a ULID)")))?;
    let job = app.store.job(id)?.ok_or_else(|| ServiceError::not_found(format!("job {id} does not exist")))?;
    Ok((id, job.queue, job.job_set))
}

/// Back to `to` with `notice` shown there, or a page saying why it failed.
fn outcome(result: Result<String, ServiceError>, to: &str) -> Response {
    match result {
        Ok(notice) => Redirect::to(&format!("{to}?notice={}", super::html::encode(&notice))).into_response(),
        Err(e) => {
            let field = e.field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default();
            let body = format!(
                "<p class=\"error\" role=\"alert\">{}{}</p><p><a href=\"{}\">Back</a></p>",
                escape(&field),
                escape(&e.detail),
                escape(to)
            );
            (status_of(&e), Html(page("Not done", &body))).into_response()
        }
    }
}

/// `POST /ui/jobs/{id}/cancel`.
pub(crate) async fn cancel_job(State(app): State<Arc<Control>>, Viewer(p): Viewer, Path(id): Path<String>) -> Response {
    let to = format!("/ui/jobs/{}", super::html::encode(&id));
    let result = async {
        let (id, queue, job_set) = job_place(&app, &id)?;
        let req = CancelRequest { queue, job_set, job_ids: Some(vec![id]), states: None, reason: None };
        let done = cancel_jobs(&app, &p, req).await?;
        Ok(if done.is_empty() { "nothing to cancel: the job is over".to_string() } else { "cancelled".to_string() })
    }
    .await;
    outcome(result, &to)
}

/// `POST /ui/jobs/cancel`: the jobs ticked on the jobs page (`job=<id>` fields), each job set's
/// through one cancel; back to the jobs page with how many were cancelled.
pub(crate) async fn cancel_selected(State(app): State<Arc<Control>>, Viewer(p): Viewer, body: String) -> Response {
    let result = async {
        let mut by_set: std::collections::BTreeMap<(QueueName, JobSetName), Vec<JobId>> = Default::default();
        for (key, value) in body.split('&').filter_map(|kv| kv.split_once('=')) {
            if key == "job" {
                let (id, queue, job_set) = job_place(&app, value)?;
                by_set.entry((queue, job_set)).or_default().push(id);
            }
        }
        if by_set.is_empty() {
            return Err(ServiceError::invalid("job", "tick the jobs to cancel"));
        }
        let mut done = 0;
        for ((queue, job_set), ids) in by_set {
            let req = CancelRequest { queue, job_set, job_ids: Some(ids), states: None, reason: None };
            done += cancel_jobs(&app, &p, req).await?.len();
        }
        Ok(format!("{done} jobs cancelled"))
    }
    .await;
    outcome(result, "/ui/jobs")
}

/// `POST /ui/jobs/{id}/cancel-set`: every job of the job's job set.
pub(crate) async fn cancel_set(State(app): State<Arc<Control>>, Viewer(p): Viewer, Path(id): Path<String>) -> Response {
    let to = format!("/ui/jobs/{}", super::html::encode(&id));
    let result = async {
        let (_, queue, job_set) = job_place(&app, &id)?;
        let req = CancelRequest { queue, job_set: job_set.clone(), job_ids: None, states: None, reason: None };
        let done = cancel_jobs(&app, &p, req).await?;
        Ok(format!("{} jobs of job set {job_set} cancelled", done.len()))
    }
    .await;
    outcome(result, &to)
}

/// `POST /ui/jobs/{id}/priority`.
pub(crate) async fn reprioritize(
    State(app): State<Arc<Control>>,
    Viewer(p): Viewer,
    Path(id): Path<String>,
    Form(form): Form<PriorityForm>,
) -> Response {
    let to = format!("/ui/jobs/{}", super::html::encode(&id));
    let result = async {
        let priority: u32 = form
            .priority
            .trim()
            .parse()
            .map_err(|_| ServiceError::invalid("priority", "a whole number from 0 (first) to 4294967295"))?;
        let (id, queue, job_set) = job_place(&app, &id)?;
        let req = ReprioritizeRequest { queue, job_set, job_ids: Some(vec![id]), priority };
        let done = reprioritize_jobs(&app, &p, req).await?;
        Ok(if done.is_empty() { "priority unchanged".to_string() } else { format!("priority set to {priority}") })
    }
    .await;
    outcome(result, &to)
}

/// `POST /ui/queues/{name}/cordon` and `/uncordon`.
pub(crate) async fn cordon(
    State(app): State<Arc<Control>>,
    Viewer(p): Viewer,
    Path((name, verb)): Path<(String, String)>,
) -> Response {
    let result = async {
        let cordoned = match verb.as_str() {
            "cordon" => true,
            "uncordon" => false,
            _ => return Err(ServiceError::not_found("no such action")),
        };
        let queue = QueueName::new(&name).map_err(|e| ServiceError::invalid("queue", e.to_string()))?;
        set_cordon(&app, &p, &queue, cordoned).await?;
        Ok(format!("queue {queue} {}", if cordoned { "cordoned" } else { "uncordoned" }))
    }
    .await;
    outcome(result, "/ui/queues")
}
