//! The event stream of a job set as server-sent events, resumable from a sequence number
//! (`?from=N` or `Last-Event-ID`) and staying open for new events (`curl -N` works).

use super::auth::Principal;
use super::problem::{ApiError, request_id};
use crate::control::Control;
use crate::model::api::Problem;
use crate::model::{Event, JobSetName, QueueName};
use crate::service::events::{JobSetCursor, ReadFailed, follow};
use crate::service::jobs::event_view;
use crate::service::queues::queue_name;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Query of the event stream.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct StreamParams {
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

/// A job set's events as server-sent events
///
/// Each event has `id` = its sequence number, `event` = its kind, and `data` = the `EventView`
/// as JSON. Resumable with `?from=N` or `Last-Event-ID`; stays open for new events unless
/// `follow=false` (keep-alive comments every 15 s).
///
/// If the stored events cannot be read, the stream does not end as if complete: its last event
/// is `event: error` with a problem (JSON, status 500) as `data` and no `id`, so that
/// `Last-Event-ID` still names the last event received and a reconnect resumes after it.
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
        (status = 200, description = "The stream: `id: <seq>`, `event: <kind>`, `data: <EventView JSON>` per event. If reading the stored events fails, it ends with `event: error` and a problem as `data` (no `id`)", body = String, content_type = "text/event-stream"),
        (status = 400, description = "A name, `Last-Event-ID` or the query is invalid (problem; plain text if the query does not parse at all)", content(
            (Problem = "application/problem+json"),
            (String = "text/plain"),
        )),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The queue does not exist", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn stream(
    State(app): State<Arc<Control>>,
    _p: Principal,
    Path((queue, job_set)): Path<(String, String)>,
    Query(params): Query<StreamParams>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let queue = queue_name(&queue)?;
    let job_set = JobSetName::new(&job_set).map_err(|e| ApiError::bad_request("job_set", e.to_string()))?;
    if app.state().queue(&queue).is_none() {
        // A stream that waits for ever for a misspelt queue looks like a hang.
        return Err(ApiError::field(StatusCode::NOT_FOUND, "queue", format!("queue {queue} does not exist")));
    }
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
    let store = app.store.clone();
    let fetch = move |q: QueueName, s: JobSetName, next: u64| {
        let store = store.clone();
        async move {
            match tokio::task::spawn_blocking(move || store.events(&q, &s, next, 1000)).await {
                Ok(Ok(batch)) => Ok(batch.into_iter().map(|e| (e.seq, e)).collect()),
                Ok(Err(e)) => Err(format!("storage error: {e}")),
                Err(e) => Err(format!("the read task failed: {e}")),
            }
        }
    };
    let cursor = JobSetCursor::new(&app, queue, job_set, from, params.follow);
    let events =
        sse_events((cursor.queue.clone(), cursor.job_set.clone()), request_id(&headers), follow(cursor, fetch));
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The SSE event that ends a stream whose events could not be read.
fn error_event(
    queue: &QueueName,
    job_set: &JobSetName,
    request_id: &Option<String>,
    next: u64,
    error: &str,
) -> SseEvent {
    let detail = format!(
        "reading the events of job set {job_set} in queue {queue} from sequence number {next} failed ({error}); \
         reconnect with Last-Event-ID to resume"
    );
    let mut problem = ApiError::internal(detail).problem();
    problem.request_id = request_id.clone();
    // Without an id: Last-Event-ID must keep naming the last event delivered.
    SseEvent::default().event("error").data(serde_json::to_string(&problem).unwrap_or_default())
}

/// The followed events as SSE events; a failed read ends the stream with an error event (and a
/// log), so that a client not following does not take the stream as complete and a client
/// following reconnects and resumes.
fn sse_events(
    (queue, job_set): (QueueName, JobSetName),
    request_id: Option<String>,
    events: impl Stream<Item = Result<Event, ReadFailed<String>>>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    events.map(move |item| {
        Ok(match item {
            Ok(e) => {
                let view = event_view(&e);
                let data = serde_json::to_string(&view).unwrap_or_default();
                let kind = serde_json::to_value(view.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                SseEvent::default().id(e.seq.to_string()).event(kind).data(data)
            }
            Err(ReadFailed { next, error }) => {
                tracing::error!(
                    queue = %queue,
                    job_set = %job_set,
                    from = next,
                    request_id = request_id.as_deref().unwrap_or(""),
                    error = %error,
                    "reading stored events for an event stream failed; ending it with an error event"
                );
                error_event(&queue, &job_set, &request_id, next, &error)
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, JobId};
    use std::sync::{Arc, Mutex};
    use tokio::sync::{broadcast, watch};

    fn event(seq: u64) -> Event {
        Event { seq, job_id: JobId::from_u128(7), at_ms: 0, kind: EventKind::Queued, run_id: None, message: None }
    }

    /// A store holding events 1 and 2 whose read from sequence 3 on fails.
    async fn failing_store(_: QueueName, _: JobSetName, next: u64) -> Result<Vec<Event>, String> {
        if next >= 3 { Err("database: disk on fire".into()) } else { Ok((next..=2).map(event).collect()) }
    }

    /// The whole SSE text of a stream over `failing_store`, or None if it does not end.
    async fn body(follow: bool) -> Option<String> {
        let (_tx, rx) = broadcast::channel(16);
        let (_stop_tx, stopping) = watch::channel(false);
        let cursor = JobSetCursor {
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new("s").unwrap(),
            next: 1,
            follow,
            news: rx,
            stopping,
        };
        let fetch = |q, s, next| async move {
            failing_store(q, s, next).await.map(|b| b.into_iter().map(|e| (e.seq, e)).collect::<Vec<_>>())
        };
        let events = sse_events(
            (cursor.queue.clone(), cursor.job_set.clone()),
            Some("req-1".into()),
            super::follow(cursor, fetch),
        );
        let resp = Sse::new(events).into_response();
        let bytes = tokio::time::timeout(Duration::from_secs(10), axum::body::to_bytes(resp.into_body(), usize::MAX));
        Some(String::from_utf8(bytes.await.ok()?.unwrap().to_vec()).unwrap())
    }

    /// (id, event, data) of each SSE block.
    fn blocks(text: &str) -> Vec<(Option<String>, String, String)> {
        text.split("\n\n")
            .filter(|b| !b.trim().is_empty())
            .map(|b| {
                let field = |name: &str| b.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
                (field("id:"), field("event:").unwrap_or_default(), field("data:").unwrap_or_default())
            })
            .collect()
    }

    /// Captures what is logged while the returned guard lives (on this thread).
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_storage_error_ends_the_stream_with_an_error_event_and_a_log() {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        for follow in [false, true] {
            let text = body(follow).await.unwrap_or_else(|| panic!("follow={follow}: the stream did not end"));
            let got = blocks(&text);
            assert_eq!(got.len(), 3, "follow={follow}: {text}");
            assert_eq!((got[0].0.as_deref(), got[1].0.as_deref()), (Some("1"), Some("2")), "{text}");
            let (id, kind, data) = &got[2];
            assert_eq!((id, kind.as_str()), (&None, "error"), "follow={follow}: {text}");
            let p: crate::model::api::Problem = serde_json::from_str(data).unwrap();
            assert_eq!(p.status, 500);
            assert_eq!(p.request_id.as_deref(), Some("req-1"));
            assert!(p.detail.contains("from sequence number 3") && p.detail.contains("disk on fire"), "{}", p.detail);
        }
        let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        assert_eq!(logged.matches("ERROR").count(), 2, "{logged}");
        for needle in ["queue=A", "job_set=s", "from=3", "disk on fire", "request_id=\"req-1\""] {
            assert!(logged.contains(needle), "{needle} not logged: {logged}");
        }
    }

    #[tokio::test]
    async fn a_clean_end_has_no_error_event() {
        let (_tx, rx) = broadcast::channel(16);
        let (_stop_tx, stopping) = watch::channel(false);
        let cursor = JobSetCursor {
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new("s").unwrap(),
            next: 1,
            follow: false,
            news: rx,
            stopping,
        };
        let fetch = |_, _, next: u64| async move { Ok::<_, String>((next..=2).map(|n| (n, event(n))).collect()) };
        let resp = Sse::new(sse_events((cursor.queue.clone(), cursor.job_set.clone()), None, follow(cursor, fetch)))
            .into_response();
        let text =
            String::from_utf8(axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap();
        let kinds: Vec<String> = blocks(&text).into_iter().map(|b| b.1).collect();
        assert_eq!(kinds, vec!["queued", "queued"], "{text}");
    }
}
