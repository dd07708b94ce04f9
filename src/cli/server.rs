//! `convoy server`: one control-plane server until SIGTERM or Ctrl-C. SIGHUP reloads the TLS
//! certificate and key (and does nothing else: without `[tls]` it is logged and ignored).

use super::logging::init_logging;
use super::runtime::{runtime, shutdown_signal};
use convoy::config::Config;
use convoy::server::ServerTls;
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
    if config.server.plain_http {
        tracing::warn!(listen = %config.server.listen, "server.plain_http: serving plain HTTP beyond this machine; tokens and the cluster secret cross the network in clear text");
    }
    runtime()?.block_on(async move {
        // From the start: a SIGHUP must never kill the server (its default action).
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let running = convoy::server::start(config).await?;
        tokio::spawn(reload_on_hangup(hangup, running.tls()));
        println!("convoy server listening on {}", running.url);
        let _ = std::io::stdout().flush();
        let failure = tokio::select! {
            () = shutdown_signal() => None,
            reason = running.failed() => Some(reason),
        };
        tracing::info!("shutting down");
        let stopped = running.stop().await;
        if let Some(reason) = failure {
            // Non-zero, so that systemd (Restart=on-failure) starts it again.
            anyhow::bail!("{reason}; the server stopped so that it is started again");
        }
        stopped?;
        anyhow::Ok(())
    })
}

/// Reloads the TLS certificate and key at each SIGHUP. A failed reload is logged (naming the
/// file) and the previous pair stays.
async fn reload_on_hangup(mut hangup: tokio::signal::unix::Signal, tls: Option<ServerTls>) {
    while hangup.recv().await.is_some() {
        let Some(tls) = tls.clone() else {
            tracing::info!("SIGHUP received: nothing to reload without [tls]");
            continue;
        };
        tracing::info!("SIGHUP received: reloading the TLS certificate and key");
        // Reading the files blocks; a failure was logged by `reload`.
        if let Err(e) = tokio::task::spawn_blocking(move || tls.reload()).await {
            tracing::error!(error = %e, "TLS reload task failed");
        }
    }
}
