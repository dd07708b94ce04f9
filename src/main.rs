//! The `convoy` binary: dispatches to the server, agent, embedded default and client verbs.

mod agent_cmd;
mod bench;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "convoy", version, about = "Batch-job scheduler with Armada's fair-share model, in one binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
}

fn main() -> std::process::ExitCode {
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
        Command::Simulate { scenario, compact } => {
            let text = if scenario.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the scenario from standard input")?
            } else {
                std::fs::read_to_string(&scenario).with_context(|| format!("reading scenario {}", scenario.display()))?
            };
            let output = convoy::simulate::run_text(&text).with_context(|| format!("scenario {}", scenario.display()))?;
            let json = if compact { serde_json::to_string(&output)? } else { serde_json::to_string_pretty(&output)? };
            println!("{json}");
            Ok(())
        }
        Command::Bench { which } => bench::run(which),
        Command::Agent(args) => agent_cmd::run_agent(args),
        Command::AgentSupervise(args) => agent_cmd::run_supervise(args),
    }
}
