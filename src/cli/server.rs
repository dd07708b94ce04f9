//! `convoy server`: one control-plane server until SIGTERM or Ctrl-C.

use super::logging::init_logging;
use super::runtime::{runtime, shutdown_signal};
use convoy::config::Config;
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
    runtime()?.block_on(async move {
        let running = convoy::server::start(config).await?;
        println!("convoy server listening on {}", running.url);
        let _ = std::io::stdout().flush();
        shutdown_signal().await;
        tracing::info!("shutting down");
        running.stop().await?;
        anyhow::Ok(())
    })
}
