//! The agent's loop: report nodes and runs, long-poll for leases and kill orders, start and stop
//! runs, and forward run events to the server through an in-memory outbox that retries until
//! each event is acknowledged.
//!
//! Two tasks share a table of held runs: the poller (leases and kills) and the pump (events).
//! A run stays in the table, and so in every poll's `runs`, until the server acknowledged its
//! final event; the poll's `runs` is what acknowledges a lease.

use super::AgentError;
use super::client::{Backoff, ClientError, ExecutorClient};
use super::runtime::{EventReceiver, EventSink, Runtime, RuntimeError, is_final, run_event, state_after};
use crate::model::api::{
    EventsRequest, HeldRun, KillOrder, LeaseOrder, LeaseRequest, LeaseResponse, OutputReport, OutputWanted,
    RunEventKind, RunEventReport,
};
use crate::model::{ExecutorName, JobId, NodeFault, RunId, RunState};
use futures::StreamExt;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

/// Runs started at the same time.
const START_CONCURRENCY: usize = 16;
/// How long acknowledged runs are remembered, so a repeated lease does not start them again.
const DONE_TTL: Duration = Duration::from_secs(15 * 60);
/// At most this many acknowledged runs are remembered.
const DONE_MAX: usize = 500_000;
/// Pause after the first event of a burst, so the burst goes out in one request.
const BATCH_DELAY: Duration = Duration::from_millis(20);
/// Time allowed to deliver the outbox at shutdown.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);
/// Shortest time between two polls that brought nothing new (guards against a server that
/// answers at once).
const MIN_IDLE_POLL: Duration = Duration::from_millis(500);
/// Extra time past a kill's grace period before the same kill order is passed on again.
const KILL_REPEAT_SLACK: Duration = Duration::from_secs(10);

/// Settings of the loop, from the agent config.
#[derive(Debug, Clone)]
pub(crate) struct LoopSettings {
    pub executor: ExecutorName,
    pub poll_wait: Duration,
    pub max_leases: u32,
    pub event_batch: usize,
    pub max_backoff: Duration,
}

/// A run the agent holds.
#[derive(Debug)]
struct Held {
    job_id: JobId,
    state: RunState,
    kill_sent: Option<(Instant, Duration)>,
}

/// Runs held, and runs recently finished and acknowledged.
#[derive(Debug, Default)]
struct RunTable {
    runs: HashMap<RunId, Held>,
    done: HashSet<RunId>,
    done_order: VecDeque<(Instant, RunId)>,
}

impl RunTable {
    fn held(&self) -> Vec<HeldRun> {
        self.runs.iter().map(|(id, h)| HeldRun { run_id: *id, job_id: h.job_id, state: h.state }).collect()
    }

    /// Records a new lease; false if the run is known already.
    fn begin(&mut self, run_id: RunId, job_id: JobId) -> bool {
        if self.runs.contains_key(&run_id) || self.done.contains(&run_id) {
            return false;
        }
        self.runs.insert(run_id, Held { job_id, state: RunState::Leased, kill_sent: None });
        true
    }

    fn apply(&mut self, ev: &RunEventReport) {
        if self.done.contains(&ev.run_id) {
            return;
        }
        let held =
            self.runs.entry(ev.run_id).or_insert(Held { job_id: ev.job_id, state: RunState::Leased, kill_sent: None });
        // A final state never goes back (a late `running` after `failed` changes nothing).
        if !held.state.is_terminal() {
            held.state = state_after(ev.kind);
        }
    }

    fn finish(&mut self, run_id: RunId, now: Instant) {
        self.runs.remove(&run_id);
        if self.done.insert(run_id) {
            self.done_order.push_back((now, run_id));
        }
        while let Some((at, id)) = self.done_order.front().copied() {
            if now.duration_since(at) < DONE_TTL && self.done_order.len() <= DONE_MAX {
                break;
            }
            self.done_order.pop_front();
            self.done.remove(&id);
        }
    }
}

struct Shared<R> {
    settings: LoopSettings,
    client: Arc<ExecutorClient>,
    runtime: Arc<R>,
    sink: EventSink,
    table: Mutex<RunTable>,
}

impl<R> Shared<R> {
    fn table(&self) -> std::sync::MutexGuard<'_, RunTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs the agent until `shutdown` completes: recovery, then polling and event delivery.
pub(crate) async fn run_loop<R: Runtime>(
    settings: LoopSettings,
    client: Arc<ExecutorClient>,
    runtime: Arc<R>,
    sink: EventSink,
    events: EventReceiver,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let executor = settings.executor.clone();
    let recovered =
        runtime.recover().await.map_err(|source| AgentError::Runtime { runtime: runtime.name(), source })?;
    tracing::info!(%executor, runtime = runtime.name(), recovered = recovered.len(), server = client.current_server(), "agent started");
    let shared = Arc::new(Shared { settings, client, runtime, sink, table: Mutex::new(RunTable::default()) });
    {
        let mut t = shared.table();
        for r in recovered {
            t.runs.insert(r.run_id, Held { job_id: r.job_id, state: r.state, kill_sent: None });
        }
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let pump = tokio::spawn(pump(shared.clone(), events, stop_rx).in_current_span());
    let mut shutdown = std::pin::pin!(shutdown);
    tokio::select! {
        _ = poll_forever(&shared) => {}
        _ = &mut shutdown => {}
    }
    tracing::info!(%executor, "stopping: delivering pending events");
    let _ = stop_tx.send(true);
    if let Err(e) = pump.await {
        tracing::error!(%executor, error = %e, "event delivery task failed");
    }
    tracing::info!(%executor, "agent stopped");
    Ok(())
}

/// Polls for leases and kill orders until cancelled.
async fn poll_forever<R: Runtime>(shared: &Arc<Shared<R>>) {
    let s = &shared.settings;
    let mut backoff = Backoff::new(Duration::from_millis(250), s.max_backoff);
    loop {
        let began = Instant::now();
        let nodes = match shared.runtime.nodes().await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(executor = %s.executor, error = %e, "cannot list the nodes");
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        let runs = shared.table().held();
        let req =
            LeaseRequest { nodes, runs, wait_seconds: Some(s.poll_wait.as_secs_f64()), max_leases: Some(s.max_leases) };
        match shared.client.lease(&req).await {
            Ok(resp) => {
                backoff.reset();
                let acted = handle_response(shared, resp).await;
                let idle = began.elapsed();
                if !acted && idle < MIN_IDLE_POLL {
                    tokio::time::sleep(MIN_IDLE_POLL - idle).await;
                }
            }
            Err(e) => {
                let delay = backoff.next_delay();
                log_client_error(&s.executor, "lease poll", &e, delay);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

fn log_client_error(executor: &ExecutorName, what: &str, e: &ClientError, retry_in: Duration) {
    let retry_in_ms = retry_in.as_millis() as u64;
    if e.is_unauthorized() || e.is_rejection() || matches!(e, ClientError::WrongAddress { .. }) {
        tracing::error!(%executor, error = %e, retry_in_ms, "{what} failed");
    } else {
        tracing::warn!(%executor, error = %e, retry_in_ms, "{what} failed");
    }
}

/// Starts new leases and passes kill orders on. True if anything new was done.
async fn handle_response<R: Runtime>(shared: &Arc<Shared<R>>, resp: LeaseResponse) -> bool {
    let fresh: Vec<LeaseOrder> = {
        let mut t = shared.table();
        resp.leases.into_iter().filter(|l| t.begin(l.run_id, l.job_id)).collect()
    };
    let mut acted = !fresh.is_empty();
    futures::stream::iter(fresh).for_each_concurrent(START_CONCURRENCY, |lease| start_one(shared, lease)).await;
    if !resp.output.is_empty() {
        // After the starts: the same answer may ask for the output of a run it leases, which
        // the runtime only knows once started (asked before, it would say the run is gone).
        // Beside the poll: output someone follows must not hold up kills.
        tokio::spawn(send_output(shared.clone(), resp.output).in_current_span());
    }
    for k in resp.kills {
        acted |= kill_one(shared, k).await;
    }
    acted
}

/// Reads the output the server asked for and sends it; a lost report is not retried (the
/// server asks again while someone follows).
async fn send_output<R: Runtime>(shared: Arc<Shared<R>>, wanted: Vec<OutputWanted>) {
    let chunks = futures::stream::iter(wanted).then(|w| shared.runtime.output(w)).collect::<Vec<_>>().await;
    if let Err(e) = shared.client.output(&OutputReport { chunks }).await {
        tracing::debug!(executor = %shared.settings.executor, error = %e, "sending followed output failed");
    }
}

async fn start_one<R: Runtime>(shared: &Arc<Shared<R>>, lease: LeaseOrder) {
    let (run_id, job_id, executor) = (lease.run_id, lease.job_id, &shared.settings.executor);
    tracing::debug!(%executor, %run_id, %job_id, node = %lease.node, queue = %lease.queue, "lease received");
    let failure = match shared.runtime.start(lease).await {
        Ok(_) => return,
        Err(RuntimeError::InvalidJob(msg)) => {
            tracing::warn!(%executor, %run_id, %job_id, error = %msg, "job cannot run");
            let mut ev = run_event(run_id, job_id, RunEventKind::Failed);
            ev.reason = Some("invalid job".into());
            ev.message = Some(msg);
            ev
        }
        Err(e) => {
            tracing::warn!(%executor, %run_id, %job_id, error = %e, "start failed; returning the run");
            let mut ev = run_event(run_id, job_id, RunEventKind::Returned);
            ev.reason = Some(match &e {
                RuntimeError::NodeUnavailable(_) => "node unavailable".into(),
                // The server keeps a returned run's reason, not its message: name the directory.
                RuntimeError::DiskFull { dir, .. } => format!("{}: {dir}", super::runtime::REASON_DISK_FULL),
                _ => "start failed".into(),
            });
            ev.message = Some(e.to_string());
            ev.node_fault = Some(NodeFault::NotStarted);
            ev
        }
    };
    shared.sink.send(failure);
}

/// Passes a kill order to the runtime unless the run is over or the same order is in progress.
async fn kill_one<R: Runtime>(shared: &Arc<Shared<R>>, k: KillOrder) -> bool {
    let executor = &shared.settings.executor;
    let grace = Duration::try_from_secs_f64(k.grace_period_seconds)
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(86_400));
    let now = Instant::now();
    // Whether this agent was ever given the run (leased in this life or found at recovery).
    let known = {
        let mut t = shared.table();
        let t = &mut *t;
        match t.runs.get_mut(&k.run_id) {
            Some(h) if h.state.is_terminal() => return false,
            Some(h) => {
                if h.kill_sent.is_some_and(|(at, g)| now.duration_since(at) < g + KILL_REPEAT_SLACK) {
                    return false;
                }
                h.kill_sent = Some((now, grace));
                true
            }
            None if t.done.contains(&k.run_id) => return false,
            None => false,
        }
    };
    let run_id = k.run_id;
    match shared.runtime.kill(run_id, grace, &k.reason).await {
        Ok(true) => {
            tracing::info!(%executor, %run_id, job_id = ?k.job_id, reason = %k.reason, grace_seconds = grace.as_secs_f64(), "kill order");
            true
        }
        Ok(false) => match k.job_id.filter(|_| !known) {
            // A run stopped before its lease reached this agent (cancelled while the agent was
            // away, or between the lease and the poll that would have carried it): it never
            // started here, and the server keeps it, and its resources, until told it is over.
            Some(job_id) => {
                tracing::info!(%executor, %run_id, %job_id, reason = %k.reason, "kill order for a run that never started here; reporting it stopped");
                let mut ev = run_event(run_id, job_id, RunEventKind::Failed);
                ev.reason = Some("killed".into());
                ev.message = Some(format!("stopped before it started: {}", k.reason));
                // Over at once in the table, so a repeated order does not report it twice.
                shared.table().apply(&ev);
                shared.sink.send(ev);
                true
            }
            None => {
                tracing::debug!(%executor, %run_id, "kill order for a run this agent does not have");
                false
            }
        },
        Err(e) => {
            tracing::error!(%executor, %run_id, error = %e, "kill failed; will retry when ordered again");
            if let Some(h) = shared.table().runs.get_mut(&run_id) {
                h.kill_sent = None;
            }
            false
        }
    }
}

/// Delivers run events: batches, retries with backoff until acknowledged, and at shutdown tries
/// to deliver what is left for a short while.
async fn pump<R: Runtime>(shared: Arc<Shared<R>>, mut rx: EventReceiver, mut stop: watch::Receiver<bool>) {
    let s = &shared.settings;
    let mut outbox: VecDeque<RunEventReport> = VecDeque::new();
    let mut backoff = Backoff::new(Duration::from_millis(200), s.max_backoff);
    let mut retry_at: Option<Instant> = None;
    // After a batch was rejected: send this many events one by one to find the bad one.
    let mut singles = 0usize;
    let mut stop_by: Option<Instant> = None;
    let push = |outbox: &mut VecDeque<RunEventReport>, ev: RunEventReport| {
        shared.table().apply(&ev);
        outbox.push_back(ev);
    };
    loop {
        if stop_by.is_none() {
            if outbox.is_empty() {
                tokio::select! {
                    ev = rx.recv() => match ev {
                        Some(ev) => {
                            push(&mut outbox, ev);
                            tokio::time::sleep(BATCH_DELAY).await;
                        }
                        None => stop_by = Some(Instant::now() + SHUTDOWN_FLUSH),
                    },
                    _ = stop.changed() => stop_by = Some(Instant::now() + SHUTDOWN_FLUSH),
                }
            } else if let Some(at) = retry_at {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => retry_at = None,
                    ev = rx.recv() => {
                        if let Some(ev) = ev {
                            push(&mut outbox, ev);
                        }
                        continue;
                    }
                    _ = stop.changed() => stop_by = Some(Instant::now() + SHUTDOWN_FLUSH),
                }
            }
        }
        while let Ok(ev) = rx.try_recv() {
            push(&mut outbox, ev);
        }
        if outbox.is_empty() {
            if stop_by.is_some() {
                return;
            }
            continue;
        }
        let n = if singles > 0 { 1 } else { s.event_batch.min(outbox.len()) };
        let req = EventsRequest { events: outbox.iter().take(n).cloned().collect() };
        let result = match stop_by {
            Some(by) => match tokio::time::timeout_at(by, shared.client.events(&req)).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(executor = %s.executor, unsent = outbox.len(), "stopped before every event was delivered; a restarted agent reports the runs' states again");
                    return;
                }
            },
            None => shared.client.events(&req).await,
        };
        match result {
            Ok(resp) => {
                backoff.reset();
                retry_at = None;
                singles = singles.saturating_sub(1);
                if (resp.accepted as usize) < n {
                    tracing::debug!(executor = %s.executor, sent = n, accepted = resp.accepted, "the server ignored some events");
                }
                acknowledge(&shared, outbox.drain(..n));
            }
            Err(e) if e.is_rejection() => {
                if n > 1 {
                    tracing::warn!(executor = %s.executor, error = %e, events = n, "event batch rejected; sending its events one by one");
                    singles = n;
                } else {
                    if let Some(ev) = outbox.pop_front() {
                        tracing::error!(executor = %s.executor, run_id = %ev.run_id, job_id = %ev.job_id, kind = ?ev.kind, error = %e, "event rejected by the server; dropped");
                        if is_final(ev.kind) {
                            acknowledge(&shared, std::iter::once(ev));
                        }
                    }
                    singles = singles.saturating_sub(1);
                }
            }
            Err(e) => {
                if stop_by.is_some_and(|by| Instant::now() >= by) {
                    tracing::warn!(executor = %s.executor, unsent = outbox.len(), error = %e, "stopped before every event was delivered; a restarted agent reports the runs' states again");
                    return;
                }
                let delay = backoff.next_delay();
                log_client_error(&s.executor, "event delivery", &e, delay);
                if stop_by.is_some() {
                    tokio::time::sleep(delay.min(Duration::from_millis(500))).await;
                } else {
                    retry_at = Some(Instant::now() + delay);
                }
            }
        }
    }
}

/// The server has these events: finished runs leave the table and the runtime may let go of them.
fn acknowledge<R: Runtime>(shared: &Arc<Shared<R>>, events: impl Iterator<Item = RunEventReport>) {
    let now = Instant::now();
    let mut finished = Vec::new();
    {
        let mut t = shared.table();
        for ev in events {
            if is_final(ev.kind) {
                t.finish(ev.run_id, now);
                finished.push(ev.run_id);
            }
        }
    }
    if finished.is_empty() {
        return;
    }
    let runtime = shared.runtime.clone();
    let executor = shared.settings.executor.clone();
    tokio::spawn(async move {
        for run_id in finished {
            if let Err(e) = runtime.forget(run_id).await {
                tracing::warn!(%executor, %run_id, error = %e, "cannot release a finished run");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_finished_runs_until_acknowledged() {
        let mut t = RunTable::default();
        let (r, j) = (RunId::from_parts(1, 1), JobId::from_parts(1, 2));
        assert!(t.begin(r, j));
        assert!(!t.begin(r, j), "a repeated lease is not started twice");
        let mut ev = run_event(r, j, RunEventKind::Succeeded);
        t.apply(&ev);
        assert_eq!(t.held()[0].state, RunState::Succeeded);
        ev.kind = RunEventKind::Running;
        t.apply(&ev);
        assert_eq!(t.held()[0].state, RunState::Succeeded, "a final state stays final");
        t.finish(r, Instant::now());
        assert!(t.held().is_empty());
        assert!(!t.begin(r, j), "an acknowledged run is not started again");
    }
}
