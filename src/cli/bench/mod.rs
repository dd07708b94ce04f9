//! `convoy bench …`: benchmarks that print one JSON line of figures. Targets are checked by
//! reading these figures, never by timed tests.

mod chaos;
mod cluster;
mod e2e;
mod groups;
mod harness;
mod processes;
mod recovery;
mod schedule;
mod snapshot;
mod submit;
#[cfg(feature = "grpc")]
mod submit_grpc;

use clap::Subcommand;

/// Which benchmark to run.
#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// One scheduling cycle over a synthetic cluster and workload.
    Schedule(schedule::ScheduleArgs),
    /// Submission throughput and latency against a server it starts.
    Submit(submit::SubmitArgs),
    /// Restart time and memory of a server holding many jobs.
    Recovery(recovery::RecoveryArgs),
    /// Lease latency and end-to-end throughput with a server and a fake agent.
    E2e(e2e::E2eArgs),
    /// Building and installing a Raft snapshot of many jobs: time, size, peak memory.
    Snapshot(snapshot::SnapshotArgs),
    /// Three servers as one cluster: throughput through all of them, and failover times.
    Cluster(cluster::ClusterArgs),
    /// One group per pool, as docs/scaling.md proposes, simulated with the scheduler: cycle times,
    /// placements and queue shares against one group holding every pool.
    Groups(groups::GroupsArgs),
    /// Real `sh -c` jobs through a server and a process agent: jobs/s and CPU per job.
    Processes(processes::ProcessesArgs),
    /// Servers and agents under injected faults (kills, pauses, partitions, full disks,
    /// membership changes), with a checker of every client operation's history.
    Chaos(chaos::ChaosArgs),
}

/// Runs a benchmark.
pub(crate) fn run(which: BenchCommand) -> anyhow::Result<()> {
    match which {
        BenchCommand::Schedule(args) => schedule::run(args),
        BenchCommand::Submit(args) => submit::run(args),
        BenchCommand::Recovery(args) => recovery::run(args),
        BenchCommand::E2e(args) => e2e::run(args),
        BenchCommand::Snapshot(args) => snapshot::run(args),
        BenchCommand::Cluster(args) => cluster::run(args),
        BenchCommand::Groups(args) => groups::run(args),
        BenchCommand::Processes(args) => processes::run(args),
        BenchCommand::Chaos(args) => chaos::run(args),
    }
}

/// Peak resident set size of this process in MiB (Linux; 0 elsewhere).
pub(crate) fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Nanoseconds of the wall clock, for unique scratch names.
pub(crate) fn nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}
