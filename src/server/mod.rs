//! The `convoy server` process: storage, Raft, the HTTP API, the scheduling loop and executor
//! liveness, wired together.

pub mod app;
pub mod ids;
pub mod liveness;
pub mod machine;
pub mod replicated;
pub mod scheduling;
pub mod writer;

use crate::config::Config;
use crate::raft::{RaftNode, RaftSettings};
use crate::state::StateSettings;
use crate::store::Store;
use app::{App, Liveness, Notifier, SchedulingView};
use machine::ServerMachine;
use replicated::{RaftReplicate, RaftView, Replicated};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use writer::Writer;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Raft(#[from] crate::raft::RaftError),
    #[error("cannot listen on {addr}: {error}")]
    Listen { addr: String, error: std::io::Error },
    #[error("http server: {0}")]
    Http(std::io::Error),
}

/// The database file inside the data directory.
pub fn database_path(config: &Config) -> std::path::PathBuf {
    config.server.data_dir.join("convoy.redb")
}

/// The Raft log's own database file, beside the state's.
pub fn log_database_path(config: &Config) -> std::path::PathBuf {
    config.server.data_dir.join("raft.redb")
}

fn open_log_db(config: &Config) -> Result<Arc<redb::Database>, ServerError> {
    let path = log_database_path(config);
    let db = redb::Database::builder()
        .set_cache_size(16 << 20)
        .create(&path)
        .map_err(|e| crate::store::StoreError::Database(format!("opening {}: {e}", path.display())))?;
    Ok(Arc::new(db))
}

/// A started server: its address and the means to stop it.
pub struct Running {
    /// Base URL it serves on.
    pub url: String,
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Running {
    /// Stops the server gracefully and waits for it.
    pub async fn stop(self) -> Result<(), ServerError> {
        let _ = self.stop.send(true);
        self.done.await.map_err(|e| ServerError::Http(std::io::Error::other(e.to_string())))?
    }

    /// Waits until the server stops by itself (it does not, unless it fails).
    pub async fn wait(self) -> Result<(), ServerError> {
        self.done.await.map_err(|e| ServerError::Http(std::io::Error::other(e.to_string())))?
    }
}

/// Runs the server until `shutdown` completes: stops accepting, finishes in-flight writes,
/// makes the state durable.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
    let running = start(config).await?;
    shutdown.await;
    running.stop().await
}

/// Starts the server and returns once it listens.
pub async fn start(config: Config) -> Result<Running, ServerError> {
    let t0 = Instant::now();
    let store = Store::open_with_cache(&database_path(&config), config.server.db_cache_mb << 20)?;
    let settings = StateSettings::from_config(&config.scheduler);
    let state = {
        let store = store.clone();
        let settings = settings.clone();
        tokio::task::spawn_blocking(move || store.load_state(settings))
            .await
            .map_err(|e| crate::store::StoreError::Database(e.to_string()))??
    };
    tracing::info!(
        live_jobs = state.live_jobs(),
        queues = state.queues.len(),
        load_ms = t0.elapsed().as_millis() as u64,
        "state loaded"
    );
    let state = Arc::new(RwLock::new(state));
    let notify = Arc::new(Notifier::default());
    let machine = ServerMachine::new(store.clone(), state.clone(), notify.clone(), settings);

    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .map_err(|error| ServerError::Listen { addr: config.server.listen.to_string(), error })?;
    let local =
        listener.local_addr().map_err(|error| ServerError::Listen { addr: config.server.listen.to_string(), error })?;
    let advertise = config.server.advertise.clone().unwrap_or_else(|| format!("http://{local}"));

    let raft_settings = RaftSettings {
        cluster_secret: config.auth.cluster_secret.clone(),
        initialize_single: true,
        ..RaftSettings::default()
    };
    let log_db = open_log_db(&config)?;
    let raft =
        RaftNode::start(config.server.node_id, advertise.clone(), log_db, Replicated::new(machine), raft_settings)
            .await?;
    let writer = Writer::start(Arc::new(RaftReplicate(raft.clone())), config.server.write_timeout);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        config: config.clone(),
        store,
        state,
        writer,
        cluster: Arc::new(RaftView(raft.clone())),
        notify,
        liveness: Liveness::default(),
        scheduling: RwLock::new(SchedulingView::default()),
        started: Instant::now(),
        shutdown: stop_rx.clone(),
    });
    let router = crate::api::router(app.clone()).merge(raft.router());
    let url = format!("http://{local}");
    tracing::info!(%url, node_id = config.server.node_id, startup_ms = t0.elapsed().as_millis() as u64, "convoy server listening");

    let sched = tokio::spawn(scheduling::run(app.clone(), stop_rx.clone()));
    let live = tokio::spawn(liveness::run(app.clone(), stop_rx.clone()));
    let mut serve_stop = stop_rx.clone();
    let done = tokio::spawn(async move {
        // No Nagle: small answers (long-poll leases, SSE events) must not wait for a delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "TCP_NODELAY");
            }
        });
        let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
            let _ = serve_stop.wait_for(|s| *s).await;
        });
        let result = serve.await.map_err(ServerError::Http);
        let _ = sched.await;
        let _ = live.await;
        // In-flight writes have answered (their connections closed); stop Raft and flush.
        if let Err(e) = tokio::time::timeout(Duration::from_secs(10), raft.shutdown()).await.unwrap_or(Ok(())) {
            tracing::warn!(error = %e, "raft shutdown");
        }
        tracing::info!("convoy server stopped");
        result
    });
    Ok(Running { url, stop: stop_tx, done })
}
