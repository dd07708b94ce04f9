//! The hidden `convoy agent-supervise`: runs one job of the process runtime, or (with
//! `--spawner`) the agent's spawner that forks a supervisor per job, or (with `--host`) a
//! supervisor host that supervises jobs on threads. Started by the agent, not by people; see
//! `convoy::agent::runtime::process::{supervise, spawner, host}`.

use anyhow::Context;
use convoy::agent::runtime::process::{host, spawner, supervise};
use std::path::PathBuf;

/// Flags of `convoy agent-supervise`.
#[derive(clap::Args, Debug)]
pub(crate) struct SuperviseArgs {
    /// Serve the agent's spawn requests on stdin instead of supervising one job.
    #[arg(long, conflicts_with_all = ["run_dir", "command", "host"])]
    spawner: bool,
    /// Serve the agent's spawn requests on stdin, supervising each job on a thread of this
    /// process.
    #[arg(long, conflicts_with_all = ["run_dir", "command"])]
    host: bool,
    /// The run directory.
    #[arg(long, required_unless_present_any = ["spawner", "host"])]
    run_dir: Option<PathBuf>,
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
    #[arg(last = true, required_unless_present_any = ["spawner", "host"])]
    command: Vec<String>,
}

/// The number of threads of this process, from `/proc/self/status`.
fn threads() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:"))?.trim().parse().ok()
}

/// Runs one job under supervision until it ends, or serves spawn requests until stdin closes.
pub(crate) fn run(args: SuperviseArgs) -> anyhow::Result<()> {
    if args.spawner {
        // Forking is only sound with one thread; nothing before this point starts another.
        anyhow::ensure!(threads() == Some(1), "the spawner must run single-threaded (found {:?} threads)", threads());
        // SAFETY: checked just above: this process has one thread.
        unsafe { spawner::serve() }.context("serving spawn requests")?;
        return Ok(());
    }
    if args.host {
        host::serve().context("serving spawn requests as a supervisor host")?;
        return Ok(());
    }
    let run_dir = args.run_dir.context("--run-dir is required")?;
    supervise::supervise(
        supervise::SuperviseArgs {
            run_dir,
            grace_seconds: args.grace_seconds,
            deadline_seconds: args.deadline_seconds,
            workdir: args.workdir,
            command: args.command,
            env: Vec::new(),
            confine: Default::default(),
            ended_socket: None,
        },
        None,
    )?;
    Ok(())
}
