//! The `convoy` binary: dispatches to the server, agent, embedded default and client verbs.

mod cli;

use clap::{Parser, Subcommand};

/// mimalloc for the daemons, the system allocator for client calls (see the module).
#[global_allocator]
static ALLOCATOR: cli::allocator::VerbAllocator = cli::allocator::VerbAllocator;

/// `convoy --version`: the release and the versions of what it stores and speaks, which decide
/// whether two binaries can share a data directory or a cluster (docs/operations.md).
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{}\nstate schema {}, log format {}, snapshot file format {}, peer protocol {}",
        env!("CARGO_PKG_VERSION"),
        convoy::record::STATE_SCHEMA_VERSION,
        convoy::record::LOG_FORMAT_VERSION,
        convoy::record::SNAPSHOT_FORMAT_VERSION,
        convoy::raft::PROTOCOL_VERSION,
    )
});

#[derive(Parser)]
#[command(
    name = "convoy",
    version,
    long_version = LONG_VERSION.as_str(),
    about = "Batch-job scheduler with Armada's fair-share model, in one binary"
)]
struct Cli {
    #[command(flatten)]
    client: cli::client::ClientArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a control-plane server (a Raft member holding queues and jobs, the API and the
    /// scheduler).
    Server(cli::server::ServerArgs),
    /// Run the scheduler over a scenario file (YAML or JSON) and print each round's decisions.
    Simulate(cli::simulate::SimulateArgs),
    /// Run recorded scheduling cycles again from a server's data directory, and say per cycle
    /// whether the scheduler decides the same (exit 0 only if every cycle is identical); with
    /// --job, explain that job's fate.
    Replay(cli::replay::ReplayArgs),
    /// Benchmarks that print one JSON line of figures.
    Bench {
        #[command(subcommand)]
        which: cli::bench::BenchCommand,
    },
    /// Run an executor: poll the servers for leases and run them (processes, pods or fake nodes).
    Agent(cli::agent::AgentArgs),
    /// Supervise one job of the process runtime (started by the agent).
    #[command(hide = true)]
    AgentSupervise(cli::supervise::SuperviseArgs),
    /// Run everything on this machine: a one-node server on 127.0.0.1:8080 and a process agent
    /// for this machine, with data in ./convoy-data and a queue called `default`; Ctrl-C cancels
    /// the running jobs, each with its grace period, then stops it.
    Up(cli::up::UpArgs),
    #[command(flatten)]
    Client(cli::client::ClientCommand),
}

fn main() -> std::process::ExitCode {
    // One TLS crypto provider for every client (reqwest, kube): ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Server(args) => cli::server::run(args),
        Command::Simulate(args) => cli::simulate::run(args, cli.client),
        Command::Replay(args) => cli::replay::run(args),
        Command::Bench { which } => cli::bench::run(which),
        Command::Agent(args) => cli::agent::run(args),
        Command::AgentSupervise(args) => cli::supervise::run(args),
        Command::Up(args) => cli::up::run(args),
        Command::Client(cmd) => cli::runtime::client_runtime()?.block_on(cli::client::run(cli.client, cmd)),
    }
}
