//! The event stream of a job set as server-sent events, resumable from a sequence number
//! (`?from=N` or `Last-Event-ID`) and staying open for new events (`curl -N` works).

use super::auth::Principal;
use super::jobs::event_view;
use super::problem::ApiError;
use super::queues::queue_name;
use crate::control::Control;
use crate::model::api::Problem;
use crate::model::{Event, JobSetName, QueueName};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::stream::{self, Stream};
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// Query of the event stream.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// First sequence number to send (default 1, or one past `Last-Event-ID`); wins over `Last-Event-ID`.
    #[param(minimum = 0)]
    from: Option<u64>,
    /// `false`: stop after the events stored so far instead of waiting for new ones.
    #[serde(default = "yes")]
    #[param(default = true)]
    follow: bool,
}

fn yes() -> bool {
    true
}

struct Cursor {
    app: Arc<Control>,
    queue: QueueName,
    job_set: JobSetName,
    next: u64,
    follow: bool,
    buffer: VecDeque<Event>,
    rx: broadcast::Receiver<(QueueName, JobSetName)>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// A job set's events as server-sent events
///
/// Each event has `id` = its sequence number, `event` = its kind, and `data` = the `EventView`
/// as JSON. Resumable with `?from=N` or `Last-Event-ID`; stays open for new events unless
/// `follow=false` (keep-alive comments every 15 s).
#[utoipa::path(
    get,
    path = "/v1/queues/{queue}/job-sets/{job_set}/events",
    operation_id = "streamEvents",
    tag = "events",
    security(("bearer" = [])),
    params(
        ("queue" = QueueName, Path, description = "Queue name"),
        ("job_set" = JobSetName, Path, description = "Job set name"),
        StreamParams,
        ("Last-Event-ID" = Option<u64>, Header, description = "Sequence number of the last event received; the stream resumes after it"),
    ),
    responses(
        (status = 200, description = "The stream: `id: <seq>`, `event: <kind>`, `data: <EventView JSON>` per event", body = String, content_type = "text/event-stream"),
        (status = 400, description = "A name, `Last-Event-ID` or the query is invalid (problem; plain text if the query does not parse at all)", content(
            (Problem = "application/problem+json"),
            (String = "text/plain"),
        )),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn stream(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path((queue, job_set)): Path<(String, String)>,
    Query(params): Query<StreamParams>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue_name(&queue)?;
    let job_set = JobSetName::new(&job_set).map_err(|e| ApiError::bad_request("job_set", e.to_string()))?;
    let last_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(|v| {
        v.trim()
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("Last-Event-ID", format!("{v:?} is not an event sequence number")))
    });
    let from = match (params.from, last_id) {
        (Some(f), _) => f.max(1),
        (None, Some(id)) => id? + 1,
        (None, None) => 1,
    };
    let rx = app.notify.subscribe_job_sets();
    let stopping = app.shutdown.clone();
    let cursor =
        Cursor { stopping, app, queue, job_set, next: from, follow: params.follow, buffer: VecDeque::new(), rx };
    Ok(Sse::new(events(cursor)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

fn events(cursor: Cursor) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(e) = c.buffer.pop_front() {
                let view = event_view(&e);
                let data = serde_json::to_string(&view).unwrap_or_default();
                let kind = serde_json::to_value(view.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                return Some((Ok(SseEvent::default().id(e.seq.to_string()).event(kind).data(data)), c));
            }
            // Fetch what is stored; drain notifications first so none is missed in between.
            while c.rx.try_recv().is_ok() {}
            let (store, q, s, next) = (c.app.store.clone(), c.queue.clone(), c.job_set.clone(), c.next);
            let batch = tokio::task::spawn_blocking(move || store.events(&q, &s, next, 1000))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            if let Some(last) = batch.last() {
                c.next = last.seq + 1;
                c.buffer.extend(batch);
                continue;
            }
            if !c.follow || *c.stopping.borrow() {
                return None;
            }
            // Wait for news of this job set (or a periodic recheck), unless the server stops.
            loop {
                let news = tokio::select! {
                    n = tokio::time::timeout(Duration::from_secs(5), c.rx.recv()) => n,
                    _ = c.stopping.changed() => return None,
                };
                match news {
                    Ok(Ok((q, s))) if q == c.queue && s == c.job_set => break,
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) | Err(_) => break,
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                }
            }
        }
    })
}
