//! `convoy agent`: the executor. It long-polls a server for leases, runs them on its runtime
//! (local processes, Kubernetes pods, or simulated nodes), stops the runs it is told to stop, and
//! reports every run state change.
//!
//! Entry point: [`run`]. What the whole agent uses lives here: the HTTP client ([`client`]), the
//! lease loop, the configuration ([`config`]) and the tasks a runtime owns. The [`Runtime`] trait
//! and each runtime, a room of its own, are under [`runtime`] (`process/`, `kubernetes/`,
//! `fake/`).
//!
//! Of Convoy, the agent imports only four low modules, none of them the server's: [`crate::model`]
//! (the domain types and the HTTP contract, [`crate::model::api`]), [`crate::certs`] (the TLS
//! trust of its HTTPS client), [`crate::disk_space`] (a full disk under the run directories) and
//! [`crate::config_file`] (the error shape and TOML reading its configuration shares with the
//! server's).

pub mod client;
pub mod config;
mod lease_loop;
pub mod runtime;
mod tasks;

pub use config::{AgentConfig, AgentConfigError, RuntimeKind};
pub use runtime::{EventReceiver, EventSink, Runtime, RuntimeError, Started};

use std::sync::Arc;
use tracing::Instrument;

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] AgentConfigError),
    /// The HTTP client could not be set up.
    #[error(transparent)]
    Client(#[from] client::ClientError),
    /// The runtime could not be set up or could not recover its runs.
    #[error("{runtime} runtime: {source}")]
    Runtime {
        /// Which runtime: `process`, `fake` or `kubernetes`.
        runtime: &'static str,
        /// What went wrong.
        source: RuntimeError,
    },
}

/// Makes ring rustls's process-wide crypto provider (reqwest is built without one). Harmless
/// when a provider is installed already.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Runs the agent until `shutdown` completes. Runs keep going on their runtime when the agent
/// stops (process and Kubernetes runtimes); a restarted agent picks them up again.
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    config.validate()?;
    install_crypto_provider();
    let client = Arc::new(client::ExecutorClient::with_ca(
        &config.servers,
        config.executor.clone(),
        config.resolved_token(),
        config.ca.as_deref(),
    )?);
    let settings = lease_loop::LoopSettings {
        executor: config.executor.clone(),
        poll_wait: config.poll_wait,
        max_leases: config.max_leases,
        event_batch: config.event_batch,
        max_backoff: config.max_backoff,
    };
    let span = tracing::info_span!("agent", executor = %config.executor);
    run_with_runtime(config, client, settings, shutdown).instrument(span).await
}

async fn run_with_runtime(
    config: AgentConfig,
    client: Arc<client::ExecutorClient>,
    settings: lease_loop::LoopSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let (sink, events) = EventSink::channel();
    let setup = |runtime: &'static str| move |source| AgentError::Runtime { runtime, source };
    match config.runtime {
        RuntimeKind::Process => {
            let rt = runtime::process::ProcessRuntime::new(&config, sink.clone()).map_err(setup("process"))?;
            lease_loop::run_loop(settings, client, Arc::new(rt), sink, events, shutdown).await
        }
        RuntimeKind::Fake => {
            let rt =
                runtime::fake::FakeRuntime::new(&config.fake, &config.data_dir, sink.clone()).map_err(setup("fake"))?;
            lease_loop::run_loop(settings, client, Arc::new(rt), sink, events, shutdown).await
        }
        RuntimeKind::Kubernetes => {
            let kube_client = runtime::kubernetes::connect(&config.kubernetes).await.map_err(setup("kubernetes"))?;
            let rt = runtime::kubernetes::KubernetesRuntime::new(
                kube_client,
                config.executor.as_str(),
                &config.kubernetes,
                sink.clone(),
            );
            lease_loop::run_loop(settings, client, Arc::new(rt), sink, events, shutdown).await
        }
    }
}
