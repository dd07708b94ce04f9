//! Any server answers every request: writes reaching a follower are relayed to the leader and
//! answered as if sent there, and reads can be made linearizable with `?consistent=true`.
//!
//! Relaying is a proxy, not a redirect: clients drop `Authorization` when redirected to another
//! host or port. It takes one hop (a relayed request carries [`FORWARDED_HEADER`], and a server
//! that receives one while not leading answers 503 instead of relaying again). The leader
//! answers with the index it had applied ([`APPLIED_HEADER`]), and the follower answers only
//! once it has applied that index too, so a client reads its own writes from the server it
//! wrote through.
//!
//! A relay never waits on a leader that is gone ([`follow_leader`]): when the cluster elects
//! another leader, or the leader falls silent, while a request is relayed, the request goes to
//! the new leader if sending it again is safe ([`resend_safe`]: reads, agents' polls and
//! reports, cancels, submissions whose jobs all carry a `client_id`), and otherwise ends in a 503
//! that says it may have been applied. Either way it waits at most `server.relay_timeout`.

use super::problem::ApiError;
use crate::control::Control;
use crate::control::relay::{
    APPLIED_HEADER, FORWARDED_HEADER, Relayed, Unrelayable, await_serving, catch_up, follow_leader, outgoing,
    read_whole,
};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// Whether only the leader may answer `method path`: every change under `/v1` (submissions,
/// cancellations, queue changes, lease polls and run events are all POST, PUT, PATCH or DELETE),
/// and the web UI's actions (signing in and out change nothing, so any server does them).
fn needs_leader(method: &Method, path: &str) -> bool {
    let change = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let ui_action = path.starts_with("/ui/") && path != "/ui/login" && path != "/ui/logout";
    // Followed output comes from agents, which only the leader hears from.
    let output = (path.starts_with("/v1/jobs/") || path.starts_with("/ui/jobs/")) && path.ends_with("/output");
    output || (change && (path.starts_with("/v1/") || ui_action))
}

/// Whether a request that needs the leader may be sent to another leader after it may already
/// have reached one that never answered: doing it twice must change nothing more than doing it
/// once. Reads are; so are agents' lease polls, run reports and output (the state machine
/// ignores a report it already has); cancels, priority changes, cordons and queue updates (they
/// set a value); and submissions whose every job carries a `client_id` (a second copy answers
/// with the first's job ids). Creating or deleting a queue, preempting and membership changes
/// are not: a second copy would be refused although the first was done.
pub(crate) fn resend_safe(method: &Method, path: &str, body: &[u8]) -> bool {
    if matches!(*method, Method::GET | Method::HEAD) || path.starts_with("/v1/executors/") {
        return true;
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", ["v1", "jobs"]) => every_job_has_a_client_id(body),
        ("POST", ["v1", "jobs", "cancel" | "reprioritize"]) => true,
        ("POST", ["v1", "queues", _, "cancel" | "cordon" | "uncordon"]) => true,
        ("PUT", ["v1", "queues", _]) => true,
        ("POST", ["ui", "jobs", _, "cancel" | "cancel-set" | "priority"]) => true,
        ("POST", ["ui", "queues", _, "cordon" | "uncordon"]) => true,
        _ => false,
    }
}

/// True if `body` is a submission whose every job has a non-empty `client_id`.
fn every_job_has_a_client_id(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Submission {
        jobs: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        client_id: Option<String>,
    }
    serde_json::from_slice::<Submission>(body).is_ok_and(|s| {
        !s.jobs.is_empty() && s.jobs.iter().all(|j| j.client_id.as_deref().is_some_and(|c| !c.is_empty()))
    })
}

/// Whether the query asks for a linearizable read (`consistent=true`).
fn wants_consistent(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|pair| pair == "consistent=true" || pair == "consistent=1"))
}

/// How long a request for `path` may wait on the leader: `server.relay_timeout`, plus the
/// longest hold of a long poll (lease polls, followed output).
pub(crate) fn relay_bound(app: &Control, path: &str) -> Duration {
    let long_poll = path.ends_with("/lease") || path.ends_with("/output");
    app.config.relay_timeout() + if long_poll { app.config.server.max_lease_wait } else { Duration::ZERO }
}

/// Middleware: relays writes to the leader, serves them on the leader once it may act on them,
/// and makes `consistent=true` reads linearizable.
pub(crate) async fn route(State(app): State<Arc<Control>>, req: Request, next: Next) -> Response {
    if !needs_leader(req.method(), req.uri().path()) {
        if req.method() == Method::GET && wants_consistent(req.uri().query()) {
            let timeout = app.config.relay_timeout();
            if let Err(e) = app.cluster.linearize(timeout).await {
                return ApiError::unavailable(format!(
                    "a consistent read needs the leader's confirmation, which did not come: {e}; retry"
                ))
                .into_response();
            }
        }
        return next.run(req).await;
    }
    if app.cluster.is_leader() {
        return serve_here(&app, req, next).await.unwrap_or_else(|refused| refused);
    }
    if req.headers().contains_key(&FORWARDED_HEADER) {
        return ApiError::unavailable(
            "this server received a request relayed to the leader, but it no longer leads; nothing was applied; retry",
        )
        .into_response();
    }
    let deadline = tokio::time::Instant::now() + relay_bound(&app, req.uri().path());
    let (parts, body) = match read_whole(&app, req).await {
        Ok(r) => r,
        Err(Unrelayable::TooLarge(m)) => {
            return ApiError::new(axum::http::StatusCode::PAYLOAD_TOO_LARGE, m).into_response();
        }
        Err(Unrelayable::Invalid(m)) => return ApiError::internal(m).into_response(),
    };
    let outgoing = match outgoing(&app, &parts, &body) {
        Ok(r) => r,
        Err(Unrelayable::TooLarge(m) | Unrelayable::Invalid(m)) => return ApiError::internal(m).into_response(),
    };
    // Decided only if the relay is cut short: reading a submission's client ids costs a parse.
    let safe = || resend_safe(&parts.method, parts.uri.path(), &body);
    loop {
        let bound = deadline.saturating_duration_since(tokio::time::Instant::now());
        let relayed = follow_leader(&app, outgoing.clone(), &safe, bound, |addr, r, t| app.cluster.relay(&addr, r, t));
        match relayed.await {
            Relayed::Answer(answer) => {
                catch_up(&app, answer.headers()).await;
                let (parts, body) = answer.into_parts();
                return Response::from_parts(parts, Body::from(body));
            }
            Relayed::Here => {
                let here = Request::from_parts(parts.clone(), Body::from(body.clone()));
                match serve_here(&app, here, next.clone()).await {
                    Ok(served) => return served,
                    // Elected and deposed again at once: nothing was applied, follow on.
                    Err(_) if !app.cluster.is_leader() && tokio::time::Instant::now() < deadline => {}
                    Err(refused) => return refused,
                }
            }
            Relayed::Failed(detail) => return ApiError::unavailable(detail).into_response(),
        }
    }
}

/// Serves a request that needs the leader on this server, which leads (or did a moment ago):
/// once it may act on it, with the index it had applied. A 503 (nothing applied) as the error
/// when it does not lead, or leads without a majority.
async fn serve_here(app: &Control, req: Request, next: Next) -> Result<Response, Response> {
    if app.cluster.is_leader() && await_serving(app).await {
        let mut resp = next.run(req).await;
        if let Ok(v) = HeaderValue::from_str(&app.cluster.applied_index().to_string()) {
            resp.headers_mut().insert(APPLIED_HEADER.clone(), v);
        }
        return Ok(resp);
    }
    let detail = if app.cluster.is_leader() {
        "this server was elected leader but has not heard from a majority of the servers lately, so it takes no \
         writes; nothing was applied. Retry (on another server if this one stays cut off)"
    } else {
        "this server stopped leading as the request arrived; nothing was applied; retry"
    };
    Err(ApiError::unavailable(detail).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_under_v1_need_the_leader() {
        assert!(needs_leader(&Method::POST, "/v1/queues/a/jobs"));
        assert!(needs_leader(&Method::DELETE, "/v1/queues/a"));
        assert!(needs_leader(&Method::POST, "/v1/executors/e/lease"));
        assert!(!needs_leader(&Method::GET, "/v1/queues/a/jobs"));
        assert!(!needs_leader(&Method::POST, "/raft/append"));
        assert!(!needs_leader(&Method::GET, "/healthz"));
        assert!(needs_leader(&Method::POST, "/ui/jobs/01J0000000000000000000000A/cancel"));
        assert!(!needs_leader(&Method::POST, "/ui/login"));
        assert!(!needs_leader(&Method::GET, "/ui/jobs"));
        assert!(needs_leader(&Method::GET, "/v1/jobs/01J0000000000000000000000A/output"));
        assert!(needs_leader(&Method::GET, "/ui/jobs/01J0000000000000000000000A/output"));
        assert!(!needs_leader(&Method::GET, "/v1/jobs/01J0000000000000000000000A/logs"));
    }

    #[test]
    fn consistent_reads_are_asked_for_in_the_query() {
        assert!(wants_consistent(Some("consistent=true")));
        assert!(wants_consistent(Some("state=queued&consistent=true")));
        assert!(!wants_consistent(Some("consistent=false")));
        assert!(!wants_consistent(Some("inconsistent=true")));
        assert!(!wants_consistent(None));
    }

    #[test]
    fn only_writes_that_change_nothing_more_the_second_time_are_sent_again() {
        let with_ids = br#"{"queue":"A","job_set":"s","jobs":[{"client_id":"a"},{"client_id":"b"}]}"#;
        let one_without = br#"{"queue":"A","job_set":"s","jobs":[{"client_id":"a"},{"pod_spec":{}}]}"#;
        let empty_id = br#"{"queue":"A","job_set":"s","jobs":[{"client_id":""}]}"#;
        assert!(resend_safe(&Method::POST, "/v1/jobs", with_ids));
        assert!(!resend_safe(&Method::POST, "/v1/jobs", one_without));
        assert!(!resend_safe(&Method::POST, "/v1/jobs", empty_id));
        assert!(!resend_safe(&Method::POST, "/v1/jobs", b"not json"));
        for (m, p) in [
            (Method::POST, "/v1/jobs/cancel"),
            (Method::POST, "/v1/jobs/reprioritize"),
            (Method::POST, "/v1/queues/A/cordon"),
            (Method::POST, "/v1/queues/A/cancel"),
            (Method::PUT, "/v1/queues/A"),
            (Method::POST, "/v1/executors/e/lease"),
            (Method::POST, "/v1/executors/e/events"),
            (Method::GET, "/v1/jobs/01J0000000000000000000000A/output"),
            (Method::POST, "/ui/jobs/01J0000000000000000000000A/cancel"),
            (Method::POST, "/ui/queues/A/uncordon"),
        ] {
            assert!(resend_safe(&m, p, b""), "{m} {p}");
        }
        for (m, p) in [
            (Method::POST, "/v1/queues"),
            (Method::DELETE, "/v1/queues/A"),
            (Method::POST, "/v1/jobs/preempt"),
            (Method::POST, "/v1/queues/A/preempt"),
            (Method::POST, "/v1/cluster/members"),
            (Method::DELETE, "/v1/cluster/members/3"),
        ] {
            assert!(!resend_safe(&m, p, b""), "{m} {p}");
        }
    }
}
