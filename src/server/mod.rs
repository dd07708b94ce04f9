//! The `convoy server` process: storage, Raft, the HTTP API, the scheduling loop, executor
//! liveness and retention, wired together.

mod cluster;
mod cycle_pace;
mod disk;
mod http;
mod liveness;
pub(crate) mod machine;
mod replay_retention;
mod reservation_events;
mod retention;
mod scheduling;
mod tls;

pub use crate::service::DataDirError;
/// Replay of recorded scheduling cycles from a data directory (`convoy replay`).
pub use crate::service::replay::{
    CycleReport, CycleSelector, JobFate, ReplayError, ReplayReport, ReplayRequest, Verdict as ReplayVerdict, replay,
};
/// A server's data directory, read from a copy, as a `convoy simulate` scenario (the CLI's
/// `simulate --from-data-dir`).
pub use crate::service::scenario::from_data_dir as scenario_from_data_dir;
pub use retention::PURGE_BATCH;
pub use tls::ServerTls;

use crate::config::Config;
use crate::control::{Control, Liveness, Notifier, SchedulingView, Writer};
use crate::raft::{Bootstrap, Node, RaftNode, RaftSettings};
use crate::state::StateSettings;
use crate::store::Store;
use cluster::{RaftReplicate, RaftView};
use machine::ServerMachine;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The Raft log's database could not be opened.
    #[error("cannot open the raft log at {path}")]
    LogDatabase {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: redb::DatabaseError,
    },
    /// Raft could not start or stop.
    #[error(transparent)]
    Raft(#[from] crate::raft::RaftError),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The configured address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file of `[tls]` could not be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The HTTP server failed.
    #[error("the http server failed")]
    Http(#[source] std::io::Error),
    /// A task of the server panicked or was cancelled.
    #[error("the server's {task} task failed")]
    Task {
        /// Which task.
        task: &'static str,
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
    /// Raft did not stop within the shutdown timeout; the state is still safe (the log is
    /// durable), but the last applies may be replayed at the next start.
    #[error("raft did not stop within {0:?}")]
    RaftShutdownTimeout(Duration),
}

/// The database file inside the data directory.
fn database_path(config: &Config) -> PathBuf {
    config.server.data_dir.join("convoy.redb")
}

/// The Raft log's own database file, beside the state's.
fn log_database_path(config: &Config) -> PathBuf {
    config.server.data_dir.join("raft.redb")
}

/// The directory of Raft snapshot files, beside the databases.
fn snapshot_dir(config: &Config) -> PathBuf {
    config.server.data_dir.join("snapshots")
}

fn open_log_db(config: &Config) -> Result<Arc<redb::Database>, ServerError> {
    let path = log_database_path(config);
    let db = redb::Database::builder()
        .set_cache_size(16 << 20)
        .create(&path)
        .map_err(|source| ServerError::LogDatabase { path: path.clone(), source })?;
    Ok(Arc::new(db))
}

/// Raft's settings from the configuration: a cluster of one without peers, else the peers; the
/// timings, and log compaction (a snapshot every `snapshot_every_entries`, the log purged up to
/// `log_entries_kept` entries behind it).
fn raft_settings(config: &Config) -> RaftSettings {
    let c = &config.cluster;
    let bootstrap = if c.peers.is_empty() {
        Bootstrap::Single
    } else {
        Bootstrap::Peers(
            c.peers.iter().map(|p| (p.id, Node { addr: p.addr.trim_end_matches('/').to_string() })).collect(),
        )
    };
    RaftSettings {
        cluster_secret: config.auth.cluster_secret.clone(),
        tls_ca: config.tls.as_ref().and_then(|t| t.ca.clone()),
        bootstrap,
        heartbeat_interval: c.heartbeat_interval,
        election_timeout_min: c.election_timeout,
        election_timeout_max: c.election_timeout_max(),
        snapshot_every_logs: c.snapshot_every_entries,
        max_in_snapshot_log_to_keep: c.log_entries_kept,
        install_snapshot_timeout: c.snapshot_install_timeout,
        // What the disk guard keeps for writes under way when it refuses every other.
        keep_free: config.server.disk_reserve / 4,
        keep_replay_bases: c.replay_retention.is_some(),
        ..RaftSettings::default()
    }
}

/// How long a stopping server waits for Raft to stop.
const RAFT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// A started server: its address and the means to stop it.
pub struct Running {
    /// Base URL it serves on.
    pub url: String,
    started: Arc<std::sync::atomic::AtomicBool>,
    failed: tokio::sync::watch::Receiver<Option<String>>,
    tls: Option<tls::ServerTls>,
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Running {
    /// The listener's certificate and key, to reload them (on SIGHUP); `None` without `[tls]`.
    pub fn tls(&self) -> Option<tls::ServerTls> {
        self.tls.clone()
    }

    /// Lets `/readyz` answer 200 (once Raft is ready too) after a start with
    /// [`StartOptions::hold_ready`].
    pub fn mark_ready(&self) {
        self.started.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Resolves if the server stops by itself: Raft stopped on a fatal error (a storage failure
    /// such as a full disk). The server then answers nothing as if it were alive; the caller
    /// should [`stop`](Self::stop) it and exit with an error, so that the service manager starts
    /// it again (from what is durable on disk: nothing acknowledged is lost).
    pub async fn failed(&self) -> String {
        let mut rx = self.failed.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(self) -> Result<(), ServerError> {
        let _ = self.stop.send(true);
        self.done.await.map_err(|source| ServerError::Task { task: "http", source })?
    }
}

/// How a server starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartOptions {
    /// `/readyz` answers 503 until [`Running::mark_ready`]: the caller sets things up first.
    pub hold_ready: bool,
}

/// Starts the server and returns once it listens.
pub async fn start(config: Config) -> Result<Running, ServerError> {
    start_with(config, StartOptions::default()).await
}

/// [`start`] with options.
pub async fn start_with(config: Config, options: StartOptions) -> Result<Running, ServerError> {
    let t0 = Instant::now();
    // Before the state loads (which may take seconds): a certificate that does not load fails fast.
    let tls = config.tls.as_ref().map(tls::ServerTls::load).transpose()?;
    let store = Store::open_with_cache(&database_path(&config), config.server.db_cache_mb << 20)?;
    let settings = StateSettings::from_config(&config.scheduler);
    let state = {
        let store = store.clone();
        let settings = settings.clone();
        tokio::task::spawn_blocking(move || store.load_state(settings))
            .await
            .map_err(|source| ServerError::Task { task: "state loading", source })??
    };
    tracing::info!(
        live_jobs = state.live_jobs(),
        queues = state.queues().len(),
        load_ms = t0.elapsed().as_millis() as u64,
        "state loaded"
    );
    if let Some(max) = state.max_job_id() {
        crate::control::ids::observe(max);
    }
    let state = Arc::new(RwLock::new(state));
    let notify = Arc::new(Notifier::default());
    let machine = ServerMachine::new(store.clone(), state.clone(), notify.clone(), settings);
    let applied = machine.applied_counter();

    let scheme = if tls.is_some() { "https" } else { "http" };
    let listen = config.server.listen.to_string();
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .map_err(|source| ServerError::Listen { addr: listen.clone(), source })?;
    let local = listener.local_addr().map_err(|source| ServerError::Listen { addr: listen.clone(), source })?;
    let advertise = match &config.server.advertise {
        Some(a) => a.trim_end_matches('/').to_string(),
        None => format!("{scheme}://{local}"),
    };

    let raft_settings = raft_settings(&config);
    let log_db = open_log_db(&config)?;
    let raft = RaftNode::start(
        config.server.node_id,
        advertise.clone(),
        log_db,
        snapshot_dir(&config),
        machine,
        raft_settings,
    )
    .await?;
    let writer = Writer::start(Arc::new(RaftReplicate(raft.clone())), config.server.write_timeout);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let control = Arc::new(Control {
        config: config.clone(),
        store,
        state,
        writer,
        cluster: Arc::new(RaftView { node: raft.clone(), applied }),
        notify,
        liveness: Liveness::default(),
        scheduling: RwLock::new(SchedulingView::default()),
        output: Default::default(),
        shutdown: stop_rx.clone(),
        started: Arc::new(std::sync::atomic::AtomicBool::new(!options.hold_ready)),
        disk: crate::control::disk::DiskGuard::new(&config.server.data_dir, config.server.disk_reserve),
    });
    let started = control.started.clone();
    let router = http::router(control.clone()).merge(raft.router());
    #[cfg(feature = "grpc")]
    let router = router.merge(crate::grpc::router(control.clone()));
    let url = format!("{scheme}://{local}");
    tracing::info!(%url, node_id = config.server.node_id, startup_ms = t0.elapsed().as_millis() as u64, "convoy server listening");

    let sched = tokio::spawn(scheduling::run(control.clone(), stop_rx.clone()));
    let live = tokio::spawn(liveness::run(control.clone(), stop_rx.clone()));
    let purge = tokio::spawn(retention::run(control.clone(), stop_rx.clone()));
    let space = tokio::spawn(disk::run(control.clone(), raft.clone(), stop_rx.clone()));
    if let Some(window) = config.cluster.replay_retention {
        let bases = snapshot_dir(&config).join(crate::raft::REPLAY_BASES);
        tokio::spawn(replay_retention::run(control.clone(), raft.clone(), window, bases, stop_rx.clone()));
    }
    let (failed_tx, failed) = tokio::sync::watch::channel(None);
    tokio::spawn(watch_fatal(raft.clone(), stop_rx.clone(), failed_tx));
    let mut serve_stop = stop_rx.clone();
    let serve_tls = tls.clone();
    let done = tokio::spawn(async move {
        let serve = tls::serve(listener, router, serve_tls, async move {
            let _ = serve_stop.wait_for(|s| *s).await;
        });
        let served = serve.await.map_err(ServerError::Http);
        for (task, handle) in [("scheduling", sched), ("liveness", live), ("retention", purge), ("disk", space)] {
            if let Err(e) = handle.await {
                tracing::error!(task, error = %e, "server task failed");
            }
        }
        // In-flight writes have answered (their connections closed); stop Raft and flush.
        let stopped = match tokio::time::timeout(RAFT_SHUTDOWN_TIMEOUT, raft.shutdown()).await {
            Ok(r) => r.map_err(ServerError::from),
            Err(_) => Err(ServerError::RaftShutdownTimeout(RAFT_SHUTDOWN_TIMEOUT)),
        };
        if let Err(e) = &stopped {
            tracing::warn!(error = %e, "raft shutdown");
        }
        tracing::info!("convoy server stopped");
        served.and(stopped)
    });
    Ok(Running { url, started, failed, tls, stop: stop_tx, done })
}

/// Reports through `failed` if Raft stops while the server is not stopping: after a fatal
/// storage error it answers nothing, and a server that goes on serving HTTP would only look
/// alive.
async fn watch_fatal(
    raft: RaftNode,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    failed: tokio::sync::watch::Sender<Option<String>>,
) {
    let mut leadership = raft.leadership();
    tokio::select! {
        _ = leadership.wait_for(|l| l.stopped) => {}
        _ = stopping.wait_for(|s| *s) => return,
    }
    if *stopping.borrow() {
        return;
    }
    let reason = match &raft.metrics().borrow().running_state {
        Err(fatal) => format!("raft stopped: {fatal}"),
        Ok(()) => "raft stopped".to_string(),
    };
    tracing::error!(%reason, "raft has stopped on this server; it stops too, to be started again");
    let _ = failed.send(Some(reason));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_keys_reach_openraft_s_snapshot_and_purge_policy() {
        let mut config = Config::default();
        config.cluster.snapshot_every_entries = 500;
        config.cluster.log_entries_kept = 50;
        config.cluster.snapshot_install_timeout = Duration::from_secs(7);
        let raft = raft_settings(&config).to_config().expect("valid settings");
        assert_eq!(raft.snapshot_policy, openraft::SnapshotPolicy::LogsSinceLast(500));
        assert_eq!(raft.max_in_snapshot_log_to_keep, 50);
        assert_eq!(raft.install_snapshot_timeout, 7_000);
        // Everything the snapshot covers beyond the kept entries goes at each purge.
        assert_eq!(raft.purge_batch_size, 1);
        assert!(raft.snapshot_max_chunk_size < crate::raft::MAX_RPC_BODY as u64);
    }
}
