//! `convoy up`: the embedded default. A one-node server and a process agent for this machine in
//! one process, data in `./convoy-data`, a queue called `default`. Ctrl-C stops both; running it
//! again keeps the data (and jobs still running are picked up again).

use super::logging::init_logging;
use super::runtime::{runtime, shutdown_signal};
use anyhow::Context;
use convoy::agent::{self, AgentConfig, RuntimeKind};
use convoy::config::Config;
use convoy::model::{Queue, QueueName};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `convoy up`.
#[derive(clap::Args, Debug)]
pub(crate) struct UpArgs {
    /// Address of the API: a loopback address (plain HTTP, authentication off).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the server's database and the agent's runs live.
    #[arg(long, default_value = "./convoy-data")]
    data_dir: PathBuf,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

/// Runs `convoy up` until SIGTERM or Ctrl-C.
pub(crate) fn run(args: UpArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    if !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {}: convoy up serves plain HTTP with authentication off, so it listens on loopback only \
             (127.0.0.1 or ::1); for other addresses run convoy server --config FILE with [tls] and [auth]",
            args.listen
        );
    }
    let mut config = Config::local();
    config.server.listen = args.listen;
    config.server.data_dir = args.data_dir.clone();
    let mut agent_config = AgentConfig::new(Vec::new());
    agent_config.runtime = RuntimeKind::Process;
    agent_config.data_dir = args.data_dir.join("agent");
    runtime()?.block_on(async move {
        // `/readyz` answers 503 until the `default` queue exists: a script that waits for it
        // and submits at once must find the queue.
        let options = convoy::server::StartOptions { hold_ready: true };
        let running = convoy::server::start_with(config, options).await.context("starting the server")?;
        let url = running.url.clone();
        agent_config.servers = vec![url.clone()];
        agent_config.validate()?;
        wait_leading(&url).await?;
        ensure_default_queue(&url).await?;
        running.mark_ready();
        println!("convoy server listening on {url}");
        println!("convoy is up: API on {url}, a process agent for this machine, queue \"default\"; Ctrl-C stops");
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let agent_task = tokio::spawn(agent::run(agent_config, async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        }));
        let failure = tokio::select! {
            () = shutdown_signal() => None,
            reason = running.failed() => Some(reason),
        };
        let _ = stop_tx.send(true);
        match tokio::time::timeout(Duration::from_secs(15), agent_task).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "agent stopped with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "agent task failed"),
            Err(_) => tracing::warn!("agent did not stop in time"),
            Ok(Ok(Ok(()))) => {}
        }
        let stopped = running.stop().await;
        if let Some(reason) = failure {
            anyhow::bail!("{reason}; convoy up stopped (start it again: nothing acknowledged is lost)");
        }
        stopped?;
        anyhow::Ok(())
    })
}

/// Waits until the server leads (its cluster of one elected it and applied its log).
async fn wait_leading(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = http.get(format!("{url}/v1/cluster")).send().await
            && r.status().is_success()
            && let Ok(status) = r.json::<convoy::model::api::ClusterStatus>().await
            && status.serving
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the server at {url} did not become ready")
}

async fn ensure_default_queue(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let queue = Queue::new(QueueName::new("default")?, 1.0);
    let r = http.post(format!("{url}/v1/queues")).json(&queue).send().await?;
    // 409: it exists from an earlier run.
    if r.status().is_success() || r.status().as_u16() == 409 {
        return Ok(());
    }
    anyhow::bail!("creating queue default: {} {}", r.status(), r.text().await.unwrap_or_default())
}
