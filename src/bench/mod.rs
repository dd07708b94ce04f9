//! `convoy bench …`: benchmarks that print one JSON line of figures. Targets are checked by
//! reading these figures, never by timed tests.

mod schedule;

use clap::Subcommand;

/// Which benchmark to run.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// One scheduling cycle over a synthetic cluster and workload.
    Schedule(schedule::ScheduleArgs),
}

/// Runs a benchmark.
pub fn run(which: BenchCommand) -> anyhow::Result<()> {
    match which {
        BenchCommand::Schedule(args) => schedule::run(args),
    }
}

/// Peak resident set size of this process in MiB (Linux; 0 elsewhere).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
