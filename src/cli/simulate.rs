//! `convoy simulate`: the scheduler over a scenario file, printing each round's decisions.

use anyhow::Context;
use std::path::PathBuf;

/// Flags of `convoy simulate`.
#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
    /// Scenario file; `-` reads standard input.
    scenario: PathBuf,
    /// Print one line of JSON instead of indented JSON.
    #[arg(long)]
    compact: bool,
}

/// Runs `convoy simulate`.
pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let SimulateArgs { scenario, compact } = args;
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
