//! Live pages: `GET /ui/live` is an event stream that says when what a page shows may have
//! changed, so the page fetches itself again then (and only then) instead of on a timer.

use super::session::Viewer;
use crate::control::Control;
use crate::model::{JobSetName, QueueName};
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// At most one `changed` event per this long: a burst of submissions is one refresh.
const SETTLE: Duration = Duration::from_secs(1);
/// Even without news, a `changed` event this often: the nodes' reports and the scheduler's
/// shares change without a job event.
const RESHOW: Duration = Duration::from_secs(15);

/// What the page shows: changes of other queues and job sets do not wake it.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct LiveFilter {
    queue: Option<String>,
    job_set: Option<String>,
}

impl LiveFilter {
    fn matches(&self, queue: &QueueName, job_set: &JobSetName) -> bool {
        let want = |f: &Option<String>, v: &str| f.as_deref().is_none_or(|f| f.trim().is_empty() || f == v);
        want(&self.queue, queue.as_str()) && want(&self.job_set, job_set.as_str())
    }
}

/// `GET /ui/live?queue=&job_set=`: `changed` events (data: this server's applied index) when a
/// job of the queue and job set (any, when not given) changes, at most once a second.
pub(crate) async fn stream(
    State(app): State<Arc<Control>>,
    Viewer(_): Viewer,
    Query(filter): Query<LiveFilter>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.notify.subscribe_job_sets();
    let stopping = app.shutdown.clone();
    let events =
        futures::stream::unfold((app, rx, stopping, filter), |(app, mut rx, mut stopping, filter)| async move {
            let deadline = tokio::time::Instant::now() + RESHOW;
            loop {
                tokio::select! {
                    news = rx.recv() => match news {
                        Ok((q, s)) if !filter.matches(&q, &s) => continue,
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return None,
                    },
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = stopping.changed() => return None,
                }
                break;
            }
            // Let the burst settle, then drop what it queued up: one refresh shows it all.
            tokio::select! {
                _ = tokio::time::sleep(SETTLE) => {}
                _ = stopping.changed() => return None,
            }
            while rx.try_recv().is_ok() {}
            let event = Event::default().event("changed").data(app.cluster.applied_index().to_string());
            Some((Ok(event), (app, rx, stopping, filter)))
        });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_woken_by_its_own_queue_and_job_set_only() {
        let (q, s) = (QueueName::new("a").expect("name"), JobSetName::new("s1").expect("name"));
        let other = QueueName::new("b").expect("name");
        let f = |queue: Option<&str>, job_set: Option<&str>| LiveFilter {
            queue: queue.map(str::to_string),
            job_set: job_set.map(str::to_string),
        };
        assert!(f(None, None).matches(&q, &s));
        assert!(f(Some(""), Some(" ")).matches(&q, &s));
        assert!(f(Some("a"), None).matches(&q, &s));
        assert!(!f(Some("a"), None).matches(&other, &s));
        assert!(f(Some("a"), Some("s1")).matches(&q, &s));
        assert!(!f(Some("a"), Some("s2")).matches(&q, &s));
    }
}
