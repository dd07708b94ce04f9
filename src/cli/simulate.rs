//! `convoy simulate`: the scheduler over a scenario file, printing each round's decisions; or,
//! with `--from-server` or `--from-data-dir`, a server's state written as a scenario.

use super::client::ClientArgs;
use anyhow::Context;
use convoy::server::scenario_from_data_dir;
use convoy::simulate::Scenario;
use std::path::{Path, PathBuf};

/// Flags of `convoy simulate`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("export").args(["from_server", "from_data_dir"])))]
pub(crate) struct SimulateArgs {
    /// Scenario file; `-` reads standard input.
    #[arg(required_unless_present = "export")]
    scenario: Option<PathBuf>,
    /// Print one line of JSON instead of indented JSON.
    #[arg(long)]
    compact: bool,
    /// Write the state of the server at URL as a scenario (YAML) instead of running one: nodes,
    /// queues, running and queued jobs. Needs an admin token (--token); --ca as for the other
    /// verbs.
    #[arg(long, value_name = "URL", conflicts_with = "scenario")]
    from_server: Option<String>,
    /// Write the state in a server's data directory as a scenario (YAML). The database is copied
    /// first, so the server may be running.
    #[arg(long, value_name = "DIR", conflicts_with = "scenario")]
    from_data_dir: Option<PathBuf>,
    /// With --from-data-dir: the server's configuration file, whose [scheduler] section becomes
    /// the scenario's config (default: the defaults).
    #[arg(long, value_name = "FILE", requires = "from_data_dir")]
    config: Option<PathBuf>,
    /// With --from-server or --from-data-dir: write the scenario to FILE (default: standard
    /// output).
    #[arg(long, value_name = "FILE", requires = "export")]
    out: Option<PathBuf>,
}

/// Runs `convoy simulate`; `client` holds the global --token and --ca for --from-server.
pub(crate) fn run(args: SimulateArgs, client: ClientArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.from_server {
        let client = ClientArgs { server: url.clone(), ..client };
        let value = super::runtime::client_runtime()?.block_on(super::client::scenario::fetch(&client))?;
        let text = serde_json::to_string(&value)?;
        let scenario = Scenario::parse(&text).with_context(|| format!("the scenario {url} answered is not valid"))?;
        return write_scenario(&scenario, &format!("the convoy server at {url}"), args.out.as_deref());
    }
    if let Some(dir) = &args.from_data_dir {
        let scheduler = match &args.config {
            Some(path) => convoy::config::Config::load(Some(path))?.scheduler,
            None => Default::default(),
        };
        let scenario = scenario_from_data_dir(dir, &scheduler, now_ms())
            .with_context(|| format!("reading the data directory {}", dir.display()))?;
        return write_scenario(&scenario, &format!("the data directory {}", dir.display()), args.out.as_deref());
    }
    let Some(scenario) = args.scenario else { anyhow::bail!("give a scenario file, --from-server or --from-data-dir") };
    let text = if scenario.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the scenario from standard input")?
    } else {
        std::fs::read_to_string(&scenario).with_context(|| format!("reading scenario {}", scenario.display()))?
    };
    let output = convoy::simulate::run_text(&text).with_context(|| format!("scenario {}", scenario.display()))?;
    let json = if args.compact { serde_json::to_string(&output)? } else { serde_json::to_string_pretty(&output)? };
    println!("{json}");
    Ok(())
}

/// Now, in ms since the epoch.
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Writes `scenario` as YAML to `out` (standard output if none), headed by where it came from.
fn write_scenario(scenario: &Scenario, source: &str, out: Option<&Path>) -> anyhow::Result<()> {
    let counts = scenario.counts();
    let yaml = scenario.to_export_yaml(source, std::time::SystemTime::now()).context("writing the scenario as YAML")?;
    match out {
        None => print!("{yaml}"),
        Some(path) => {
            std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote the state of {source} to {} ({counts})", path.display());
        }
    }
    Ok(())
}
