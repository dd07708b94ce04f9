//! `convoy agent`: an executor until SIGTERM or Ctrl-C.

use super::logging::init_logging;
use super::runtime::{runtime, shutdown_signal};
use convoy::agent::{self, AgentConfig, RuntimeKind};
use convoy::model::ExecutorName;
use std::path::PathBuf;

/// Flags of `convoy agent`. Flags override the config file.
#[derive(clap::Args, Debug)]
pub(crate) struct AgentArgs {
    /// Agent config (TOML): an agent file, or a combined config with an `[agent]` section.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Server base URL; repeat for several servers (replaces `servers` from the file).
    #[arg(long = "server", value_name = "URL")]
    servers: Vec<String>,
    /// Executor name (default: from the file, else the host name).
    #[arg(long)]
    executor: Option<ExecutorName>,
    /// Runtime: process, fake or kubernetes.
    #[arg(long)]
    runtime: Option<RuntimeKind>,
    /// Directory for the agent's state.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

/// Runs `convoy agent` until SIGTERM or Ctrl-C.
pub(crate) fn run(args: AgentArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    agent::install_crypto_provider();
    let mut config = match &args.config {
        Some(path) => AgentConfig::from_file(path)?,
        None => AgentConfig::new(Vec::new()),
    };
    if !args.servers.is_empty() {
        config.servers = args.servers;
    }
    if let Some(e) = args.executor {
        config.executor = e;
    }
    if let Some(r) = args.runtime {
        config.runtime = r;
    }
    if let Some(d) = args.data_dir {
        config.data_dir = d;
    }
    config.validate()?;
    runtime()?.block_on(agent::run(config, shutdown_signal()))?;
    Ok(())
}
