//! The control plane as the HTTP handlers and the server's background loops hold it:
//! configuration, store, state, the writer, the cluster's view of leadership, and the wake-up
//! signals. It lives below both the `api` (which reads and writes through it) and the `server`
//! (which builds it, mounts the API and runs the loops), and knows nothing of the API's routes.

pub(crate) mod disk;
pub(crate) mod ids;
pub(crate) mod output;
pub(crate) mod relay;
pub(crate) mod writer;

pub(crate) use writer::{Replicate, WriteError, Writer};

use crate::config::Config;
use crate::model::api::ClusterStatus;
use crate::model::{ExecutorName, JobId, JobSetName, QueueName};
pub(crate) use crate::raft::Leadership;
pub(crate) use crate::raft::leadership::{heard_again as leader_heard_again, moved_on as leadership_moved_on};
pub(crate) use crate::raft::membership::{Addition, MembershipError};
use crate::raft::stats::Histogram;
use crate::scheduler::{PoolReport, Reason};
use crate::state::{Command, Effects, Response, State};
use crate::store::Store;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, broadcast};

/// Leadership and cluster status, as the Raft layer sees it.
pub(crate) trait ClusterView: Send + Sync + 'static {
    /// True if this server believes it leads the cluster (it may have lost its majority; see
    /// [`serving`](Self::serving)).
    fn is_leader(&self) -> bool;
    /// True if this server leads and a majority acknowledged it recently: only then may it hand
    /// out leases, take run events, schedule and judge executors.
    fn serving(&self) -> bool;
    /// Index of the last log entry this server applied.
    fn applied_index(&self) -> u64;
    /// Waits until this server applied `index`; false if `timeout` passed first.
    fn wait_applied(&self, index: u64, timeout: Duration) -> BoxFuture<'static, bool>;
    /// Returns once this server's state includes every write committed before the call (read
    /// index through the leader), so that a read after it is linearizable.
    fn linearize(&self, timeout: Duration) -> BoxFuture<'static, Result<(), String>>;
    /// The current term.
    fn term(&self) -> u64;
    /// The leader's address, if one is known.
    fn leader_addr(&self) -> Option<String>;
    /// True once the log is applied and a leader is known.
    fn ready(&self) -> bool;
    /// This server's view of the leadership, kept current: requests waiting on the leader watch
    /// it to stop waiting on one that is gone.
    fn leadership(&self) -> tokio::sync::watch::Receiver<Leadership>;
    /// The same view, computed now.
    fn leadership_now(&self) -> Leadership;
    /// How long a request waits for a leader to be elected before it gives up.
    fn leader_wait(&self) -> Duration;
    /// This server's view of the cluster, for `GET /v1/cluster`.
    fn status(&self) -> ClusterStatus;
    /// Peer RPC latency per peer and kind, and failed RPCs, for the metrics.
    fn peer_rpcs(&self) -> PeerRpcFigures;
    /// Adds server `id` at `addr` (learner, then voter once caught up), waiting up to `wait`.
    fn add_member(
        &self,
        id: u64,
        addr: String,
        wait: Duration,
    ) -> BoxFuture<'static, Result<Addition, MembershipError>>;
    /// Removes server `id`.
    fn remove_member(&self, id: u64) -> BoxFuture<'static, Result<(), MembershipError>>;
    /// Sends `request` (its URI a path and query) to the server at `addr` (a base URL) with the
    /// client the peers use, and returns its whole answer.
    fn relay(
        &self,
        addr: &str,
        request: http::Request<bytes::Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<bytes::Bytes>, RelayError>>;
    /// As [`relay`](Self::relay) over HTTP/2, answering as soon as the answer's head arrives:
    /// its body streams through with its trailers (a gRPC call's status).
    fn relay_h2(
        &self,
        addr: &str,
        request: http::Request<bytes::Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<axum::body::Body>, RelayError>>;
}

/// Peer RPC figures: latency histograms and failure counts per (peer, RPC kind).
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerRpcFigures {
    /// Latency of answered RPCs.
    pub latency: Vec<((u64, &'static str), Histogram)>,
    /// RPCs that got no answer.
    pub failures: Vec<((u64, &'static str), u64)>,
}

/// Why a relayed request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RelayError {
    /// It never reached the other server (no connection): nothing happened there.
    #[error("could not reach {addr}: {message}")]
    NotSent {
        /// The server's address.
        addr: String,
        /// Why.
        message: String,
    },
    /// It was sent, and the answer was lost (connection closed, timeout): it may have been done.
    #[error("no answer from {addr}: {message}")]
    Lost {
        /// The server's address.
        addr: String,
        /// Why.
        message: String,
    },
}

/// Wake-up signals.
pub(crate) struct Notifier {
    executors: Mutex<HashMap<ExecutorName, Arc<Notify>>>,
    job_sets: broadcast::Sender<(QueueName, JobSetName)>,
    /// Something the scheduler cares about changed.
    pub schedule: Notify,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            executors: Mutex::new(HashMap::new()),
            job_sets: broadcast::channel(4096).0,
            schedule: Notify::new(),
        }
    }
}

impl Notifier {
    /// The signal of one executor (created on first use).
    pub(crate) fn executor(&self, e: &ExecutorName) -> Arc<Notify> {
        let mut m = self.executors.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(e.clone()).or_insert_with(|| Arc::new(Notify::new())).clone()
    }

    /// Job-set event notifications.
    pub(crate) fn subscribe_job_sets(&self) -> broadcast::Receiver<(QueueName, JobSetName)> {
        self.job_sets.subscribe()
    }

    /// Wakes whoever the effects concern.
    pub(crate) fn effects(&self, e: &Effects) {
        self.executor_effects(e);
        self.store_effects(e);
    }

    /// Wakes the long polls of the executors with new leases or kill orders: what they answer
    /// is in memory once a command is applied there.
    pub(crate) fn executor_effects(&self, e: &Effects) {
        for ex in &e.executors {
            self.executor(ex).notify_waiters();
        }
    }

    /// Wakes what reads the applied commands' rows from the store (job set watchers) and the
    /// scheduler: once the apply's transaction is committed.
    pub(crate) fn store_effects(&self, e: &Effects) {
        for js in &e.job_sets {
            let _ = self.job_sets.send(js.clone());
        }
        if e.schedule {
            self.schedule.notify_one();
        }
    }
}

/// What the leader's latest scheduling cycle said (not replicated).
#[derive(Default)]
pub(crate) struct SchedulingView {
    /// Why each tried-but-unscheduled job waits.
    pub reasons: HashMap<JobId, Arc<Reason>>,
    /// Why a queue's untried jobs wait.
    pub queue_notes: HashMap<QueueName, Arc<Reason>>,
    /// Per pool: its capacity and the shares of its active queues.
    pub pools: Vec<PoolReport>,
    /// Scheduling cycles this server has run (cycles skipped with nothing queued do not count).
    pub cycles: u64,
    /// How long the latest cycle took to decide, in ms.
    pub last_cycle_ms: f64,
    /// The rate limiter's buckets as the latest cycle left them (what a why question starts
    /// from).
    pub rate_limits: crate::scheduler::RateLimiterState,
    /// The reservations the latest cycle held (`gang_reservation_after`).
    pub reservations: Vec<crate::scheduler::Reservation>,
}

/// When each executor last polled (leader-local).
#[derive(Default)]
pub(crate) struct Liveness {
    seen: Mutex<HashMap<ExecutorName, Instant>>,
}

impl Liveness {
    /// Records that `e` polled or reported just now.
    pub(crate) fn touch(&self, e: &ExecutorName) {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).insert(e.clone(), Instant::now());
    }

    /// When `e` last polled; executors never seen by this server count as seen at `default`.
    pub(crate) fn last_seen(&self, e: &ExecutorName, default: Instant) -> Instant {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()).entry(e.clone()).or_insert(default)
    }

    /// Forgets every executor (on becoming leader everyone gets a fresh timeout).
    pub(crate) fn reset(&self) {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// The control plane's shared handle.
pub(crate) struct Control {
    /// The server's configuration.
    pub config: Config,
    /// The local database, which the API reads jobs, payloads and events from.
    pub store: Store,
    /// The state machine's memory (read it with [`Control::state`]).
    pub state: Arc<RwLock<State>>,
    /// Proposes commands (use [`Control::write`] or [`Control::propose`], which check the disk and the leadership first).
    pub writer: Writer,
    /// Leadership, as the Raft layer sees it.
    pub cluster: Arc<dyn ClusterView>,
    /// Wake-up signals for long polls, event streams and the scheduler.
    pub notify: Arc<Notifier>,
    /// When each executor last polled.
    pub liveness: Liveness,
    /// What this server's latest scheduling cycle said.
    pub scheduling: RwLock<SchedulingView>,
    /// Output of runs someone follows, as agents send it (on the leader).
    pub output: output::LiveOutput,
    /// Turns true when the server stops: long polls and event streams end.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The free space of the data directory, and which writes it lets in.
    pub disk: disk::DiskGuard,
    /// False while whoever started the server still sets it up (`convoy up` creates its
    /// `default` queue): `/readyz` waits for it.
    pub started: Arc<std::sync::atomic::AtomicBool>,
}

impl Control {
    /// Reads the state.
    pub(crate) fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits a command and returns what applying it answered; a refusal by the state machine
    /// is an error too ([`WriteError::Rejected`]).
    pub(crate) async fn write(&self, cmd: Command) -> Result<Response, WriteError> {
        match self.propose(cmd).await? {
            Response::Rejected(r) => Err(WriteError::Rejected(r)),
            r => Ok(r),
        }
    }

    /// Commits a command and returns what applying it answered, a refusal included. Every write
    /// goes through here (or [`write`](Self::write)):
    /// - a write the data directory has no room for is refused before it is proposed;
    /// - only a leader that a majority follows proposes: others answer at once;
    /// - a write under way when this server loses its leadership or its majority ends then, as
    ///   [`WriteError::Interrupted`], instead of waiting out the write timeout.
    pub(crate) async fn propose(&self, cmd: Command) -> Result<Response, WriteError> {
        self.disk.admit(&cmd)?;
        let mut watch = self.cluster.leadership();
        watch.borrow_and_update();
        let now = self.cluster.leadership_now();
        if !now.committing {
            return Err(if now.stopped {
                WriteError::Unavailable("raft has stopped on this server".into())
            } else if self.cluster.is_leader() {
                WriteError::NoMajority
            } else {
                WriteError::NotLeader { leader: self.cluster.leader_addr() }
            });
        }
        // Only changes after the write began count: the published view may lag the one above.
        let lost = async move {
            loop {
                if watch.changed().await.is_err() || !watch.borrow_and_update().committing {
                    return;
                }
            }
        };
        tokio::select! {
            biased;
            r = self.writer.write(cmd) => r,
            () = lost => Err(WriteError::Interrupted),
        }
    }
}

/// Milliseconds since the Unix epoch (the leader's clock chooses timestamps).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// RFC 3339 text for a millisecond timestamp.
pub(crate) fn rfc3339(ms: i64) -> String {
    crate::model::human::rfc3339_millis(ms)
}
