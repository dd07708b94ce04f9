//! Relaying to the leader what only the leader may serve, whatever the transport: the request
//! is sent on over HTTP (REST and gRPC alike), following the leadership through a failover for a
//! bounded time ([`follow_leader`]), and the answer is held until this server has applied what
//! the leader had ([`catch_up`]). The REST API decides what needs the leader and when resending
//! is safe (`api::forward`); gRPC does the same for its methods (`grpc::relay`).
//!
//! It takes one hop: a relayed request carries [`FORWARDED_HEADER`], and a server that receives
//! one while not leading answers 503 instead of relaying again. The leader answers with the index
//! it had applied ([`APPLIED_HEADER`]).

use super::{ClusterView, Control, RelayError, leader_heard_again, leadership_moved_on};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use bytes::Bytes;
use std::time::Duration;

/// Set on a request relayed to the leader: the id of the server that relayed it.
pub(crate) static FORWARDED_HEADER: HeaderName = HeaderName::from_static("x-convoy-forwarded-by");
/// Set by the leader on the answer to a write: the log index it had applied.
pub(crate) static APPLIED_HEADER: HeaderName = HeaderName::from_static("x-convoy-applied-index");

/// How often a leader that has not yet heard from a majority looks again, and how long it waits
/// in all before answering 503 (a newly elected leader needs one heartbeat round).
const SERVING_POLL: Duration = Duration::from_millis(20);

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

/// The request's head and its body read whole (at most `max_request_bytes`).
pub(crate) async fn read_whole(app: &Control, req: Request) -> Result<(http::request::Parts, Bytes), Unrelayable> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, app.config.server.max_request_bytes).await.map_err(|e| {
        Unrelayable::TooLarge(format!("reading the request body: {e} (the limit is max_request_bytes)"))
    })?;
    Ok((parts, bytes))
}

/// The request as it is relayed to the leader: its headers, path and query kept, marked with
/// [`FORWARDED_HEADER`].
pub(crate) fn outgoing(
    app: &Control,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Result<http::Request<Bytes>, Unrelayable> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut outgoing = http::Request::builder().method(parts.method.clone()).uri(path);
    for (name, value) in &parts.headers {
        outgoing = outgoing.header(name, value);
    }
    if let Ok(v) = HeaderValue::from_str(&app.config.server.node_id.to_string()) {
        outgoing = outgoing.header(FORWARDED_HEADER.clone(), v);
    }
    outgoing.body(body.clone()).map_err(|e| Unrelayable::Invalid(format!("relaying to the leader: {e}")))
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

/// Where a request that needs the leader ended, on a server that did not lead when it came.
pub(crate) enum Relayed<B> {
    /// The leader's answer (the caller waits until this server applied what the leader had).
    Answer(http::Response<B>),
    /// This server leads now: the caller serves the request here.
    Here,
    /// No answer within the bound: why, and whether the request may have been applied.
    Failed(String),
}

/// The end of a problem text: whether the request may have reached a leader that applied it.
fn outcome(maybe_delivered: bool) -> &'static str {
    if maybe_delivered {
        "the request may have reached the leader, so the outcome is unknown. Retry it; a submission is safe to retry \
         only with the same client_id for each job"
    } else {
        "nothing was applied; retry"
    }
}

/// Sends `request` to the leader with `send` (address, request, time left) and returns its
/// answer, following the leadership for at most `bound`:
/// - with no leader known, it waits up to two election timeouts for one;
/// - when the leader is replaced or falls silent while the request is out, it sends the request
///   to the next leader if `resend_safe`, and otherwise gives up saying it may have been applied;
/// - when the leader cannot be reached (nothing was sent), it waits for the next one;
/// - when the leader answers 503 to a request that is `resend_safe`, it tries the next leader if
///   one is elected within two election timeouts, and otherwise passes the 503 on;
/// - when this server becomes the leader, it says so ([`Relayed::Here`]).
pub(crate) async fn follow_leader<B, F, Fut>(
    app: &Control,
    request: http::Request<Bytes>,
    resend_safe: &(dyn Fn() -> bool + Sync),
    bound: Duration,
    send: F,
) -> Relayed<B>
where
    F: Fn(String, http::Request<Bytes>, Duration) -> Fut,
    Fut: std::future::Future<Output = Result<http::Response<B>, RelayError>>,
{
    follow(app.cluster.as_ref(), app.config.cluster.heartbeat_interval, request, resend_safe, bound, send).await
}

/// [`follow_leader`] over `cluster`, whose heartbeats come every `heartbeat`.
async fn follow<B, F, Fut>(
    cluster: &dyn ClusterView,
    heartbeat: Duration,
    request: http::Request<Bytes>,
    resend_safe: &(dyn Fn() -> bool + Sync),
    bound: Duration,
    send: F,
) -> Relayed<B>
where
    F: Fn(String, http::Request<Bytes>, Duration) -> Fut,
    Fut: std::future::Future<Output = Result<http::Response<B>, RelayError>>,
{
    let deadline = tokio::time::Instant::now() + bound;
    let leader_wait = cluster.leader_wait();
    let mut watch = cluster.leadership();
    // Set once a copy may have reached a leader that did not answer.
    let mut maybe_delivered = false;
    loop {
        let seen = *watch.borrow_and_update();
        if seen.stopped {
            return Relayed::Failed(format!(
                "this server's Raft has stopped (it is stopping, to be started again): retry on another server; {}",
                outcome(maybe_delivered)
            ));
        }
        if cluster.is_leader() {
            return Relayed::Here;
        }
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if remaining.is_zero() {
            return Relayed::Failed(format!(
                "no leader answered within {} (server.relay_timeout): {}",
                humantime::format_duration(bound),
                outcome(maybe_delivered)
            ));
        }
        let wait = remaining.min(leader_wait);
        let Some(addr) = cluster.leader_addr() else {
            if leadership_moved_on(&mut watch, &seen, wait).await {
                continue;
            }
            return Relayed::Failed(format!(
                "no leader was elected within {}: {}",
                humantime::format_duration(wait),
                outcome(maybe_delivered)
            ));
        };
        // This server may itself have been stopped a while: a few heartbeats tell.
        let heartbeats = heartbeat * 3;
        if seen.leader_silent && leader_heard_again(&mut watch, &seen, heartbeats.min(remaining)).await {
            continue;
        }
        if seen.leader_silent {
            return Relayed::Failed(format!(
                "this server has not heard from the leader at {addr} lately: it may be cut off from it (retry on \
                 another server); {}",
                outcome(maybe_delivered)
            ));
        }
        let copy = request.clone();
        let answer = tokio::select! {
            r = send(addr.clone(), copy, remaining) => Some(r),
            // No timer here: the request carries the time left as its own timeout.
            moved = watch.wait_for(|now| now.moved_on_from(&seen)) => {
                if moved.is_err() {
                    // This server's view of the leadership went away (Raft stopped).
                    return Relayed::Failed(format!(
                        "this server's Raft has stopped while the leader at {addr} had the request: {}",
                        outcome(true)
                    ));
                }
                None
            }
        };
        match answer {
            Some(Ok(a)) if a.status() == axum::http::StatusCode::SERVICE_UNAVAILABLE && resend_safe() => {
                // The leader could not take it (it may be losing its leadership or majority).
                if !leadership_moved_on(&mut watch, &seen, wait).await {
                    return Relayed::Answer(a);
                }
            }
            Some(Ok(a)) => return Relayed::Answer(a),
            Some(Err(e @ RelayError::NotSent { .. })) => {
                if !leadership_moved_on(&mut watch, &seen, wait).await {
                    tracing::warn!(error = %e, "could not relay a request to the leader");
                    return Relayed::Failed(format!(
                        "this server relays writes to the leader, and {e}, and no other leader was elected within {}: \
                         {}",
                        humantime::format_duration(wait),
                        outcome(maybe_delivered)
                    ));
                }
            }
            Some(Err(e @ RelayError::Lost { .. })) => {
                maybe_delivered = true;
                if !resend_safe() || !leadership_moved_on(&mut watch, &seen, wait).await {
                    tracing::warn!(error = %e, "a request relayed to the leader got no answer");
                    return Relayed::Failed(format!(
                        "the request was relayed to the leader and {e}: {}",
                        outcome(true)
                    ));
                }
            }
            None => {
                maybe_delivered = true;
                if !resend_safe() {
                    return Relayed::Failed(format!(
                        "the leader was replaced (or fell silent) while the request was relayed to it: {}",
                        outcome(true)
                    ));
                }
                tracing::info!(leader = %addr, "the leader changed while a request was relayed to it; sending it to the next");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A follower's view of the leadership that the test moves by hand.
    struct Follower {
        leadership: tokio::sync::watch::Sender<crate::control::Leadership>,
        leader_addr: std::sync::Mutex<Option<String>>,
        /// The view's publisher is gone (Raft's metrics ended): receivers see it closed.
        closed: bool,
    }

    impl Follower {
        fn new(leader: u64) -> Self {
            let view = crate::control::Leadership { leader: Some(leader), term: 2, ..Default::default() };
            Follower {
                leadership: tokio::sync::watch::Sender::new(view),
                leader_addr: std::sync::Mutex::new(Some(format!("http://leader-{leader}"))),
                closed: false,
            }
        }

        fn elect(&self, leader: u64) {
            *self.leader_addr.lock().unwrap() = Some(format!("http://leader-{leader}"));
            self.leadership.send_modify(|l| {
                l.leader = Some(leader);
                l.term += 1;
            });
        }
    }

    impl ClusterView for Follower {
        fn is_leader(&self) -> bool {
            false
        }
        fn serving(&self) -> bool {
            false
        }
        fn applied_index(&self) -> u64 {
            0
        }
        fn wait_applied(&self, _index: u64, _timeout: Duration) -> futures::future::BoxFuture<'static, bool> {
            Box::pin(async { true })
        }
        fn linearize(&self, _timeout: Duration) -> futures::future::BoxFuture<'static, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }
        fn term(&self) -> u64 {
            self.leadership.borrow().term
        }
        fn leader_addr(&self) -> Option<String> {
            self.leader_addr.lock().unwrap().clone()
        }
        fn ready(&self) -> bool {
            true
        }
        fn leadership(&self) -> tokio::sync::watch::Receiver<crate::control::Leadership> {
            if self.closed {
                return tokio::sync::watch::channel(*self.leadership.borrow()).1;
            }
            self.leadership.subscribe()
        }
        fn leadership_now(&self) -> crate::control::Leadership {
            *self.leadership.borrow()
        }
        fn leader_wait(&self) -> Duration {
            Duration::from_millis(300)
        }
        fn status(&self) -> crate::model::api::ClusterStatus {
            crate::model::api::ClusterStatus {
                id: 2,
                state: "Follower".into(),
                serving: false,
                term: self.term(),
                leader: self.leadership.borrow().leader,
                leader_addr: self.leader_addr(),
                last_log_index: None,
                last_applied: None,
                snapshot_index: None,
                purged_index: None,
                millis_since_quorum_ack: None,
                leader_changes: 0,
                snapshots_installed: 0,
                members: vec![],
            }
        }
        fn peer_rpcs(&self) -> crate::control::PeerRpcFigures {
            crate::control::PeerRpcFigures::default()
        }
        fn add_member(
            &self,
            id: u64,
            _addr: String,
            _wait: Duration,
        ) -> futures::future::BoxFuture<'static, Result<crate::control::Addition, crate::control::MembershipError>>
        {
            Box::pin(async move { Err(crate::control::MembershipError::NotFound(id)) })
        }
        fn remove_member(
            &self,
            id: u64,
        ) -> futures::future::BoxFuture<'static, Result<(), crate::control::MembershipError>> {
            Box::pin(async move { Err(crate::control::MembershipError::NotFound(id)) })
        }
        fn relay(
            &self,
            addr: &str,
            _request: http::Request<Bytes>,
            _timeout: Duration,
        ) -> futures::future::BoxFuture<'static, Result<http::Response<Bytes>, RelayError>> {
            let addr = addr.to_string();
            Box::pin(async move { Err(RelayError::NotSent { addr, message: "not in this test".into() }) })
        }
        fn relay_h2(
            &self,
            addr: &str,
            _request: http::Request<Bytes>,
            _timeout: Duration,
        ) -> futures::future::BoxFuture<'static, Result<http::Response<axum::body::Body>, RelayError>> {
            let addr = addr.to_string();
            Box::pin(async move { Err(RelayError::NotSent { addr, message: "not in this test".into() }) })
        }
    }

    fn request() -> http::Request<Bytes> {
        http::Request::builder().method("POST").uri("/v1/jobs").body(Bytes::new()).unwrap()
    }

    /// A leader that never answers: the request times out as the relay client's would. Records
    /// the addresses it was asked at, in order.
    async fn silent_leader(
        asked: &std::sync::Mutex<Vec<String>>,
        addr: String,
        timeout: Duration,
    ) -> Result<http::Response<Bytes>, RelayError> {
        asked.lock().unwrap().push(addr.clone());
        tokio::time::sleep(timeout).await;
        Err(RelayError::Lost { addr, message: "operation timed out".into() })
    }

    #[tokio::test]
    async fn a_request_safe_to_send_again_follows_the_new_leader_and_one_that_is_not_gives_up_saying_so() {
        let f = Follower::new(1);
        let asked = std::sync::Mutex::new(Vec::new());
        let hb = Duration::from_millis(10);
        let (done, elected) = tokio::join!(
            follow(&f, hb, request(), &|| true, Duration::from_secs(5), |addr, _r, t| {
                let asked = &asked;
                async move {
                    if addr.ends_with("-3") {
                        asked.lock().unwrap().push(addr);
                        return Ok(http::Response::new(Bytes::from_static(b"done")));
                    }
                    silent_leader(asked, addr, t).await
                }
            }),
            async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                f.elect(3);
            }
        );
        let () = elected;
        match done {
            Relayed::Answer(a) => assert_eq!(a.body().as_ref(), b"done"),
            _ => panic!("the request did not follow the new leader"),
        }
        assert_eq!(*asked.lock().unwrap(), ["http://leader-1", "http://leader-3"]);

        let f = Follower::new(1);
        let asked = std::sync::Mutex::new(Vec::new());
        let (done, ()) = tokio::join!(
            follow(&f, hb, request(), &|| false, Duration::from_secs(5), |addr, _r, t| silent_leader(&asked, addr, t)),
            async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                f.elect(3);
            }
        );
        match done {
            Relayed::Failed(detail) => assert!(detail.contains("may have reached the leader"), "{detail}"),
            _ => panic!("a request not safe to send again was sent again, or waited"),
        }
        assert_eq!(*asked.lock().unwrap(), ["http://leader-1"]);
    }

    #[tokio::test]
    async fn a_relay_ends_when_raft_stops_or_the_bound_runs_out_instead_of_spinning() {
        let hb = Duration::from_millis(10);
        // Raft stops on this server while the leader does not answer: the relay ends at once.
        let f = Follower::new(1);
        let asked = std::sync::Mutex::new(Vec::new());
        let started = tokio::time::Instant::now();
        let (done, ()) = tokio::join!(
            follow(&f, hb, request(), &|| true, Duration::from_secs(30), |addr, _r, t| silent_leader(&asked, addr, t)),
            async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                f.leadership.send_modify(|l| l.stopped = true);
            }
        );
        match done {
            Relayed::Failed(detail) => assert!(detail.contains("Raft has stopped"), "{detail}"),
            _ => panic!("the relay went on after Raft stopped"),
        }
        assert!(started.elapsed() < Duration::from_secs(30), "it waited out the bound");
        let once = asked.lock().unwrap().clone();
        assert_eq!(once.len(), 1, "asked again and again: {once:?}");
        // No answer and no change within the bound: it ends then, having asked once.
        let f = Follower::new(1);
        let asked = std::sync::Mutex::new(Vec::new());
        let done = follow(&f, hb, request(), &|| true, Duration::from_millis(300), |addr, _r, t| {
            silent_leader(&asked, addr, t)
        });
        match done.await {
            Relayed::Failed(detail) => assert!(detail.contains("no answer from"), "{detail}"),
            _ => panic!("no answer within the bound should fail"),
        }
        let once = asked.lock().unwrap().clone();
        assert_eq!(once.len(), 1, "asked again and again: {once:?}");
        // The view's publisher is gone: the relay ends, it does not spin on a closed watch.
        let f = Follower { closed: true, ..Follower::new(1) };
        let asked = std::sync::Mutex::new(Vec::new());
        let done =
            follow(&f, hb, request(), &|| true, Duration::from_secs(30), |addr, _r, t| silent_leader(&asked, addr, t));
        match tokio::time::timeout(Duration::from_secs(10), done).await {
            Ok(Relayed::Failed(_)) => {}
            Ok(_) => panic!("an answer from a leader that never answers"),
            Err(_) => panic!("the relay went on with its view gone"),
        }
        let asked = asked.lock().unwrap().clone();
        assert!(asked.len() <= 1, "asked again and again: {asked:?}");
    }
}
