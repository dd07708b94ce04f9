//! The `convoy` binary: dispatches to the server, agent, embedded default and client verbs.

mod agent_cmd;
mod bench;
mod cli;
mod shell;
mod up;

use shell::{init_logging, runtime, shutdown_signal};

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// mimalloc rather than glibc's malloc: on the submit path the server allocates and frees many
/// small buffers across threads, and glibc's allocator took about a fifth of its CPU there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "convoy", version, about = "Batch-job scheduler with Armada's fair-share model, in one binary")]
struct Cli {
    #[command(flatten)]
    client: cli::ClientArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a control-plane server (a Raft member holding queues and jobs, the API and the
    /// scheduler).
    Server {
        /// Configuration file (TOML); without one, local defaults with auth off on 127.0.0.1.
        #[arg(long, env = "CONVOY_CONFIG")]
        config: Option<PathBuf>,
        /// Log JSON lines.
        #[arg(long)]
        log_json: bool,
    },
    /// Run the scheduler over a scenario file (YAML or JSON) and print each round's decisions.
    Simulate {
        /// Scenario file; `-` reads standard input.
        scenario: PathBuf,
        /// Print one line of JSON instead of indented JSON.
        #[arg(long)]
        compact: bool,
    },
    /// Benchmarks that print one JSON line of figures.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
    /// Run an executor: poll the servers for leases and run them (processes, pods or fake nodes).
    Agent(agent_cmd::AgentArgs),
    /// Supervise one job of the process runtime (started by the agent).
    #[command(hide = true)]
    AgentSupervise(agent_cmd::SuperviseArgs),
    /// Run everything on this machine: a one-node server on 127.0.0.1:8080 and a process agent
    /// for this machine, with data in ./convoy-data and a queue called `default`.
    Up(up::UpArgs),
    #[command(flatten)]
    Client(cli::ClientCommand),
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
        Command::Server { config, log_json } => {
            let config = convoy::config::Config::load(config.as_deref())?;
            init_logging(log_json || config.server.log_json);
            if !config.auth.enabled {
                tracing::warn!(listen = %config.server.listen, "authentication is off: anyone who can reach this address can use the API");
            }
            runtime()?.block_on(async move {
                let running = convoy::server::start(config).await?;
                println!("convoy server listening on {}", running.url);
                use std::io::Write;
                let _ = std::io::stdout().flush();
                shutdown_signal().await;
                tracing::info!("shutting down");
                running.stop().await?;
                anyhow::Ok(())
            })
        }
        Command::Simulate { scenario, compact } => {
            let text = if scenario.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the scenario from standard input")?
            } else {
                std::fs::read_to_string(&scenario)
                    .with_context(|| format!("reading scenario {}", scenario.display()))?
            };
            let output =
                convoy::simulate::run_text(&text).with_context(|| format!("scenario {}", scenario.display()))?;
            let json = if compact { serde_json::to_string(&output)? } else { serde_json::to_string_pretty(&output)? };
            println!("{json}");
            Ok(())
        }
        Command::Bench { which } => bench::run(which),
        Command::Agent(args) => agent_cmd::run_agent(args),
        Command::AgentSupervise(args) => agent_cmd::run_supervise(args),
        Command::Up(args) => up::run(args),
        Command::Client(cmd) => runtime()?.block_on(cli::run(cli.client, cmd)),
    }
}
