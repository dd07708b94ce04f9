//! `convoy server`: one control-plane server until SIGTERM or Ctrl-C. With `[tls]`, SIGHUP reloads
//! the certificate and key.

use super::logging::init_logging;
use super::runtime::{runtime, shutdown_signal};
use convoy::config::Config;
use convoy::server::tls::ServerTls;
use std::io::Write;
use std::path::PathBuf;

/// Flags of `convoy server`.
#[derive(clap::Args, Debug)]
pub(crate) struct ServerArgs {
    /// Configuration file (TOML); without one, local defaults with auth off on 127.0.0.1.
    #[arg(long, env = "CONVOY_CONFIG")]
    config: Option<PathBuf>,
    /// Log JSON lines.
    #[arg(long)]
    log_json: bool,
}

/// Runs `convoy server`. The "listening on" line on stdout is what scripts (and the tests) wait
/// for.
pub(crate) fn run(args: ServerArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref())?;
    init_logging(args.log_json || config.server.log_json);
    if !config.auth.enabled {
        tracing::warn!(listen = %config.server.listen, "authentication is off: anyone who can reach this address can use the API");
    }
    if config.tls.is_none() && !config.server.listen.ip().is_loopback() {
        tracing::warn!(listen = %config.server.listen, "serving plain HTTP beyond this machine: tokens and the cluster secret cross the network in clear; configure [tls]");
    }
    runtime()?.block_on(async move {
        let running = convoy::server::start(config).await?;
        // Before the "listening" line: from then on a SIGHUP must reload, not kill, the server.
        if let Some(tls) = running.tls() {
            reload_on_hangup(tls)?;
        }
        println!("convoy server listening on {}", running.url);
        let _ = std::io::stdout().flush();
        shutdown_signal().await;
        tracing::info!("shutting down");
        running.stop().await?;
        anyhow::Ok(())
    })
}

/// Reloads the TLS certificate and key at each SIGHUP, in a task of the runtime. A failed reload
/// is logged (naming the file) and the previous pair stays.
fn reload_on_hangup(tls: ServerTls) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the TLS certificate and key");
            let tls = tls.clone();
            // Reading the files blocks; the error was logged by `reload`.
            if let Err(e) = tokio::task::spawn_blocking(move || tls.reload()).await {
                tracing::error!(error = %e, "TLS reload task failed");
            }
        }
    });
    Ok(())
}
