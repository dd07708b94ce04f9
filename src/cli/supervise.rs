//! The hidden `convoy agent-supervise`: runs one job of the process runtime (started by the
//! agent, not by people; see `convoy::agent::supervise`).

use convoy::agent;
use std::path::PathBuf;

/// Flags of `convoy agent-supervise`.
#[derive(clap::Args, Debug)]
pub(crate) struct SuperviseArgs {
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

/// Runs one job under supervision until it ends.
pub(crate) fn run(args: SuperviseArgs) -> anyhow::Result<()> {
    agent::supervise::supervise(agent::supervise::SuperviseArgs {
        run_dir: args.run_dir,
        grace_seconds: args.grace_seconds,
        deadline_seconds: args.deadline_seconds,
        workdir: args.workdir,
        command: args.command,
    })?;
    Ok(())
}
