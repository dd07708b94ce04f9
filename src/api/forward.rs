//! Any server answers every request: writes reaching a follower are relayed to the leader and
//! answered as if sent there, and reads can be made linearizable with `?consistent=true`.
//!
//! Relaying is a proxy, not a redirect: clients drop `Authorization` when redirected to another
//! host or port. It takes one hop (a relayed request carries [`FORWARDED_HEADER`], and a server
//! that receives one while not leading answers 503 instead of relaying again). The leader
//! answers with the index it had applied ([`APPLIED_HEADER`]), and the follower answers only
//! once it has applied that index too, so a client reads its own writes from the server it
//! wrote through.

use super::problem::ApiError;
use crate::control::{Control, RelayError};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// Set on a request relayed to the leader: the id of the server that relayed it.
pub static FORWARDED_HEADER: HeaderName = HeaderName::from_static("x-convoy-forwarded-by");
/// Set by the leader on the answer to a write: the log index it had applied.
pub static APPLIED_HEADER: HeaderName = HeaderName::from_static("x-convoy-applied-index");

/// How often a leader that has not yet heard from a majority looks again, and how long it waits
/// in all before answering 503 (a newly elected leader needs one heartbeat round).
const SERVING_POLL: Duration = Duration::from_millis(20);

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

/// Whether the query asks for a linearizable read (`consistent=true`).
fn wants_consistent(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|pair| pair == "consistent=true" || pair == "consistent=1"))
}

/// Middleware: relays writes to the leader, serves them on the leader once it may act on them,
/// and makes `consistent=true` reads linearizable.
pub async fn route(State(app): State<Arc<Control>>, req: Request, next: Next) -> Response {
    if !needs_leader(req.method(), req.uri().path()) {
        if req.method() == Method::GET && wants_consistent(req.uri().query()) {
            let timeout = app.config.server.write_timeout;
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
        if await_serving(&app).await {
            let mut resp = next.run(req).await;
            if let Ok(v) = HeaderValue::from_str(&app.cluster.applied_index().to_string()) {
                resp.headers_mut().insert(APPLIED_HEADER.clone(), v);
            }
            return resp;
        }
        if app.cluster.is_leader() {
            return ApiError::unavailable(
                "this server was elected leader but has not heard from a majority of the servers lately, so it \
                 takes no writes; retry (on another server if this one stays cut off)",
            )
            .into_response();
        }
        // It stepped down while waiting: the request goes to the new leader.
    }
    if req.headers().contains_key(&FORWARDED_HEADER) {
        return ApiError::unavailable(
            "this server received a request relayed to the leader, but it no longer leads; retry",
        )
        .into_response();
    }
    let Some(leader) = app.cluster.leader_addr() else {
        return ApiError::unavailable("no leader is elected right now (an election is under way); retry shortly")
            .into_response();
    };
    relay(&app, &leader, req).await
}

/// Waits a little for a leader to be allowed to act: just elected, it needs its first entry
/// applied and one round of acknowledgements.
pub(crate) async fn await_serving(app: &Control) -> bool {
    let patience = app.config.cluster.election_timeout;
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if app.cluster.serving() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline || !app.cluster.is_leader() {
            return false;
        }
        tokio::time::sleep(SERVING_POLL).await;
    }
}

/// Why a request could not be made ready to relay.
pub(crate) enum Unrelayable {
    /// The body is larger than `max_request_bytes` (or could not be read).
    TooLarge(String),
    /// The request could not be rebuilt.
    Invalid(String),
}

/// `req` as it is relayed to the leader: its body read whole (at most `max_request_bytes`), its
/// headers, path and query kept, marked with [`FORWARDED_HEADER`].
pub(crate) async fn relayable(app: &Control, req: Request) -> Result<http::Request<bytes::Bytes>, Unrelayable> {
    let (mut parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, app.config.server.max_request_bytes).await.map_err(|e| {
        Unrelayable::TooLarge(format!("reading the request body: {e} (the limit is max_request_bytes)"))
    })?;
    if let Ok(v) = HeaderValue::from_str(&app.config.server.node_id.to_string()) {
        parts.headers.insert(FORWARDED_HEADER.clone(), v);
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut outgoing = http::Request::builder().method(parts.method.clone()).uri(path);
    for (name, value) in &parts.headers {
        outgoing = outgoing.header(name, value);
    }
    outgoing.body(bytes).map_err(|e| Unrelayable::Invalid(format!("relaying to the leader: {e}")))
}

/// Waits (at most `write_timeout`) until this server has applied the index the leader's answer
/// names in [`APPLIED_HEADER`], so a client reads its own writes from the server it wrote through.
pub(crate) async fn catch_up(app: &Control, answer: &axum::http::HeaderMap) {
    let applied = answer.get(&APPLIED_HEADER).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(index) = applied
        && !app.cluster.wait_applied(index, app.config.server.write_timeout).await
    {
        tracing::warn!(index, "answering a relayed write before this server applied it");
    }
}

/// Relays `req` to the leader at `leader` and answers with its answer, once this server has
/// applied what the leader had.
async fn relay(app: &Control, leader: &str, req: Request) -> Response {
    let outgoing = match relayable(app, req).await {
        Ok(r) => r,
        Err(Unrelayable::TooLarge(m)) => {
            return ApiError::new(axum::http::StatusCode::PAYLOAD_TOO_LARGE, m).into_response();
        }
        Err(Unrelayable::Invalid(m)) => return ApiError::internal(m).into_response(),
    };
    // A lease poll may wait up to max_lease_wait at the leader, a write up to write_timeout.
    let server = &app.config.server;
    let timeout = server.max_lease_wait + server.write_timeout + Duration::from_secs(5);
    let answer = match app.cluster.relay(leader, outgoing, timeout).await {
        Ok(a) => a,
        Err(e @ RelayError::NotSent { .. }) => {
            tracing::warn!(error = %e, "could not relay a request to the leader");
            return ApiError::unavailable(format!("this server relays writes to the leader, and {e}; retry"))
                .into_response();
        }
        Err(e @ RelayError::Lost { .. }) => {
            tracing::warn!(error = %e, "a request relayed to the leader got no answer");
            return ApiError::unavailable(format!(
                "the request was relayed to the leader and {e}: the outcome is unknown. Retry it; a submission is \
                 safe to retry only with the same client_id for each job"
            ))
            .into_response();
        }
    };
    catch_up(app, answer.headers()).await;
    let (parts, body) = answer.into_parts();
    Response::from_parts(parts, Body::from(body))
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
}
