//! `convoy agent` and the hidden `convoy agent-supervise`: flags, logging, signals.

use crate::shell::{init_logging, runtime, shutdown_signal};
use convoy::agent::{self, AgentConfig, RuntimeKind};
use convoy::model::ExecutorName;
use std::path::PathBuf;

/// Flags of `convoy agent`. Flags override the config file.
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
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

/// Flags of `convoy agent-supervise` (started by the process runtime, not by people).
#[derive(clap::Args, Debug)]
pub struct SuperviseArgs {
    /// The run directory.
    #[arg(long)]
    run_dir: PathBuf,
    /// Seconds between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 1.0)]
    grace_seconds: f64,
    /// Stop the job after this many seconds.
    #[arg(long)]
    deadline_seconds: Option<u64>,
    /// Working directory of the job.
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Runs `convoy agent` until SIGTERM or Ctrl-C.
pub fn run_agent(args: AgentArgs) -> anyhow::Result<()> {
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

/// Runs one job under supervision (see `convoy::agent::supervise`).
pub fn run_supervise(args: SuperviseArgs) -> anyhow::Result<()> {
    agent::supervise::supervise(agent::supervise::SuperviseArgs {
        run_dir: args.run_dir,
        grace_seconds: args.grace_seconds,
        deadline_seconds: args.deadline_seconds,
        workdir: args.workdir,
        command: args.command,
    })?;
    Ok(())
}
