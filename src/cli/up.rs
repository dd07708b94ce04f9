//! `convoy up`: the embedded default. A one-node server and a process agent for this machine in
//! one process, data in `./convoy-data`, a queue called `default`. Ctrl-C (or SIGTERM) cancels
//! the jobs that run, each with its grace period, then stops both; a second Ctrl-C stops at once.
//! Running it again keeps the data: queued jobs wait for it.

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
    let max_grace = config.server.max_termination_grace_period;
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
        let executor = agent_config.executor.clone();
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let agent_task = tokio::spawn(agent::run(agent_config, async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        }));
        // Ready once this machine's node is known: a job submitted at once is checked against
        // it (its resources, its runtime) and can run.
        if let Err(e) = wait_node_known(&url, executor.as_str()).await {
            tracing::warn!(error = %e, "the agent has not reported its node yet");
        }
        running.mark_ready();
        println!("convoy server listening on {url}");
        eprintln!("convoy is up: API on {url}, a process agent for this machine, queue \"default\"");
        eprintln!(
            "Ctrl-C stops it: running jobs are cancelled, each with its grace period (a second Ctrl-C stops at \
             once); queued jobs wait for the next convoy up"
        );
        let failure = tokio::select! {
            () = shutdown_signal() => None,
            reason = running.failed() => Some(reason),
        };
        if failure.is_none() {
            let grace = max_grace + STOP_MARGIN;
            tokio::select! {
                r = stop_running_jobs(&url, grace) => {
                    if let Err(e) = r {
                        eprintln!("convoy up: could not stop the running jobs: {e:#}");
                    }
                }
                () = shutdown_signal() => eprintln!("convoy up: stopping at once; jobs being stopped end by themselves"),
            }
        }
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

/// Time beyond the longest grace period for stopped jobs to be reported.
const STOP_MARGIN: Duration = Duration::from_secs(10);
/// What a job cancelled by stopping `convoy up` says.
const STOP_REASON: &str = "convoy up was stopped";

/// Cancels the jobs that run (leased, pending or running) and waits, at most `bound`, until they
/// have ended: each gets its grace period (SIGTERM, then SIGKILL), as a cancel gives.
async fn stop_running_jobs(url: &str, bound: Duration) -> anyhow::Result<()> {
    use convoy::model::JobId;
    use convoy::model::api::{CancelRequest, JobList, JobView};
    use std::collections::BTreeMap;
    let http = reqwest::Client::new();
    let running = |http: reqwest::Client| async move {
        let list: JobList = http
            .get(format!("{url}/v1/jobs?state=leased,pending,running&limit=1000"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        anyhow::Ok(list.jobs)
    };
    let jobs = running(http.clone()).await?;
    if jobs.is_empty() {
        return Ok(());
    }
    eprintln!(
        "convoy up: stopping {} running job(s), each with its grace period (Ctrl-C again to stop at once)",
        jobs.len()
    );
    let mut sets: BTreeMap<_, Vec<_>> = BTreeMap::new();
    let mut stopping: Vec<JobId> = Vec::new();
    for j in jobs {
        stopping.push(j.id);
        sets.entry((j.queue, j.job_set)).or_default().push(j.id);
    }
    for ((queue, job_set), ids) in sets {
        let body = CancelRequest { queue, job_set, job_ids: Some(ids), states: None, reason: Some(STOP_REASON.into()) };
        http.post(format!("{url}/v1/jobs/cancel")).json(&body).send().await?.error_for_status()?;
    }
    // A cancelled job's state changes at once; its run ends when the agent reports it.
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline {
        let mut left = Vec::new();
        for id in stopping {
            let j: JobView = http.get(format!("{url}/v1/jobs/{id}")).send().await?.error_for_status()?.json().await?;
            if j.runs.last().is_some_and(|r| !r.state.is_terminal()) {
                left.push(id);
            }
        }
        stopping = left;
        if stopping.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("jobs were still stopping after {}", humantime::format_duration(bound))
}

/// Waits until the agent `executor` has reported its nodes.
async fn wait_node_known(url: &str, executor: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if let Ok(r) = http.get(format!("{url}/v1/cluster/nodes")).send().await
            && let Ok(v) = r.json::<serde_json::Value>().await
            && v["nodes"].as_array().is_some_and(|n| n.iter().any(|n| n["executor"] == executor))
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("no node of executor {executor} after 10s")
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
