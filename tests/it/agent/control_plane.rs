//! A fake Convoy control plane: the two executor endpoints, a scripted queue of leases and kills,
//! and a record of everything the agent sent. Each instance serves from its own thread and Tokio
//! runtime, so `stop` is a crash (listener and open connections vanish at once) and the state
//! survives into a `restart` on the same port.

use crate::common::wait::wait_for;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use convoy::model::api::{
    EventsRequest, EventsResponse, KillOrder, LeaseOrder, LeaseRequest, LeaseResponse, Problem, RunEventKind,
    RunEventReport,
};
use convoy::model::{JobId, RunId};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Longest a poll is held here, whatever the agent asks (keeps tests quick).
const MAX_HOLD: Duration = Duration::from_secs(2);

#[derive(Default)]
pub(super) struct Script {
    /// Leases to hand out, in order.
    pub queued: VecDeque<LeaseOrder>,
    /// Leases handed out and not yet acknowledged by a poll's `runs`: handed out again.
    pub unacked: Vec<LeaseOrder>,
    /// Kill orders, repeated until the run's final event arrives.
    pub kills: Vec<KillOrder>,
    /// Every poll body received (only the last 50 are kept).
    pub polls: VecDeque<LeaseRequest>,
    pub poll_count: usize,
    /// Every event received, in order.
    pub events: Vec<RunEventReport>,
    /// `/events` requests answered with 200.
    pub event_requests: usize,
    /// Answer this many further `/events` requests with 503.
    pub fail_events: usize,
    /// Requests refused for a wrong token.
    pub unauthorized: usize,
    /// Executor names seen in paths.
    pub executors: Vec<String>,
    /// Requests received by path kind ("lease"/"events").
    pub hits: HashMap<&'static str, usize>,
}

pub(super) struct Shared {
    pub script: Mutex<Script>,
    wake: Notify,
    token: Option<String>,
}

pub(super) struct ControlPlane {
    pub shared: Arc<Shared>,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlPlane {
    /// Starts on a free port of 127.0.0.1.
    pub(super) fn start(token: Option<&str>) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::default()),
            wake: Notify::new(),
            token: token.map(str::to_string),
        });
        Self::serve(shared, 0)
    }

    fn serve(shared: Arc<Shared>, port: u16) -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind 127.0.0.1");
                addr_tx.send(listener.local_addr().expect("addr")).expect("report addr");
                let app = axum::Router::new()
                    .route("/v1/executors/{executor}/lease", axum::routing::post(lease))
                    .route("/v1/executors/{executor}/events", axum::routing::post(events))
                    .with_state(state);
                tokio::select! {
                    r = axum::serve(listener, app) => r.expect("serve"),
                    _ = stop_rx => {}
                }
            });
            // Dropping the runtime here drops every connection task: a crash, not a shutdown.
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        let addr = addr_rx.recv().expect("server address");
        Self { shared, addr, stop: Some(stop_tx), thread: Some(thread) }
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Crashes the server: no more answers, open requests cut.
    pub(super) fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Serves again on the same port with the same state.
    pub(super) fn restart(&mut self) {
        self.stop();
        let next = Self::serve(self.shared.clone(), self.addr.port());
        *self = next;
    }

    pub(super) fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.shared.script.lock().expect("script lock")
    }

    pub(super) fn push_lease(&self, lease: LeaseOrder) {
        self.script().queued.push_back(lease);
        self.shared.wake.notify_waiters();
    }

    /// Hands out the same lease again (as a server that lost the acknowledgement would).
    pub(super) fn repeat_lease(&self, lease: LeaseOrder) {
        self.script().unacked.push(lease);
        self.shared.wake.notify_waiters();
    }

    pub(super) fn push_kill(&self, run_id: RunId, job_id: JobId, grace_seconds: f64, reason: &str) {
        self.script().kills.push(KillOrder {
            run_id,
            job_id: Some(job_id),
            grace_period_seconds: grace_seconds,
            reason: reason.into(),
        });
        self.shared.wake.notify_waiters();
    }

    pub(super) fn events_of(&self, run_id: RunId) -> Vec<RunEventReport> {
        self.script().events.iter().filter(|e| e.run_id == run_id).cloned().collect()
    }

    pub(super) fn final_event(&self, run_id: RunId) -> Option<RunEventReport> {
        self.events_of(run_id).into_iter().find(|e| is_final(e.kind))
    }

    /// Waits for the run's final event.
    pub(super) async fn wait_final(&self, run_id: RunId, within: Duration) -> RunEventReport {
        self.wait_event(run_id, &format!("final event of {run_id}"), within, is_final).await
    }

    /// Waits for an event of `kind` for the run.
    pub(super) async fn wait_kind(&self, run_id: RunId, kind: RunEventKind, within: Duration) -> RunEventReport {
        self.wait_event(run_id, &format!("{kind:?} event of {run_id}"), within, move |k| k == kind).await
    }

    /// Waits for an event of the run whose kind passes `pick`.
    async fn wait_event(
        &self,
        run_id: RunId,
        what: &str,
        within: Duration,
        pick: impl Fn(RunEventKind) -> bool,
    ) -> RunEventReport {
        let shared = self.shared.clone();
        wait_for(within, what, || {
            shared.script.lock().expect("lock").events.iter().find(|e| e.run_id == run_id && pick(e.kind)).cloned()
        })
        .await
    }

    /// The `runs` of the latest poll.
    pub(super) fn last_poll(&self) -> Option<LeaseRequest> {
        self.script().polls.back().cloned()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(super) fn is_final(kind: RunEventKind) -> bool {
    matches!(kind, RunEventKind::Succeeded | RunEventKind::Failed | RunEventKind::Returned)
}

fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = Problem {
        kind: "about:blank".into(),
        title: title.into(),
        status: status.as_u16(),
        detail: detail.into(),
        field: None,
        request_id: None,
    };
    (status, [("content-type", "application/problem+json")], serde_json::to_string(&body).expect("json"))
        .into_response()
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(token) = &shared.token else { return true };
    let got = headers.get("authorization").and_then(|v| v.to_str().ok());
    got == Some(format!("Bearer {token}").as_str())
}

async fn lease(
    State(shared): State<Arc<Shared>>,
    Path(executor): Path<String>,
    headers: HeaderMap,
    Json(req): Json<LeaseRequest>,
) -> Response {
    if !authorized(&shared, &headers) {
        shared.script.lock().expect("lock").unauthorized += 1;
        return problem(StatusCode::UNAUTHORIZED, "Unauthorized", "unknown executor token");
    }
    let wait = Duration::from_secs_f64(req.wait_seconds.unwrap_or(30.0)).min(MAX_HOLD);
    let deadline = tokio::time::Instant::now() + wait;
    let max = req.max_leases.unwrap_or(u32::MAX) as usize;
    {
        let mut s = shared.script.lock().expect("lock");
        s.poll_count += 1;
        *s.hits.entry("lease").or_default() += 1;
        if !s.executors.contains(&executor) {
            s.executors.push(executor.clone());
        }
        s.polls.push_back(req.clone());
        if s.polls.len() > 50 {
            s.polls.pop_front();
        }
    }
    loop {
        let notified = shared.wake.notified();
        {
            let mut s = shared.script.lock().expect("lock");
            let held: std::collections::HashSet<RunId> = req.runs.iter().map(|r| r.run_id).collect();
            s.unacked.retain(|l| !held.contains(&l.run_id));
            let finished: std::collections::HashSet<RunId> =
                s.events.iter().filter(|e| is_final(e.kind)).map(|e| e.run_id).collect();
            let mut leases: Vec<LeaseOrder> = s.unacked.iter().take(max).cloned().collect();
            while leases.len() < max {
                let Some(l) = s.queued.pop_front() else { break };
                s.unacked.push(l.clone());
                leases.push(l);
            }
            let kills: Vec<KillOrder> = s.kills.iter().filter(|k| !finished.contains(&k.run_id)).cloned().collect();
            if !leases.is_empty() || !kills.is_empty() {
                return Json(LeaseResponse { leases, kills, output: Vec::new() }).into_response();
            }
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(deadline) => return Json(LeaseResponse::default()).into_response(),
        }
    }
}

async fn events(
    State(shared): State<Arc<Shared>>,
    Path(_executor): Path<String>,
    headers: HeaderMap,
    Json(req): Json<EventsRequest>,
) -> Response {
    if !authorized(&shared, &headers) {
        shared.script.lock().expect("lock").unauthorized += 1;
        return problem(StatusCode::UNAUTHORIZED, "Unauthorized", "unknown executor token");
    }
    let mut s = shared.script.lock().expect("lock");
    *s.hits.entry("events").or_default() += 1;
    if s.fail_events > 0 {
        s.fail_events -= 1;
        return problem(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", "try again");
    }
    let n = req.events.len();
    s.events.extend(req.events);
    s.event_requests += 1;
    drop(s);
    shared.wake.notify_waiters();
    Json(EventsResponse { accepted: n as u32 }).into_response()
}
