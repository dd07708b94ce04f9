//! `convoy simulate`: runs the real scheduler over a scenario of nodes, queues and rounds of
//! submissions, with no server, agent or disk (the format: docs/simulate.md).

pub mod engine;
mod job;
pub mod output;
mod policies;
pub mod scenario;

pub use engine::Simulation;
pub use output::{JobOutput, Output, RoundOutput};
pub use scenario::{Scenario, ScenarioError};

/// Parses and runs a scenario.
pub fn run_text(text: &str) -> Result<Output, ScenarioError> {
    let scenario = Scenario::parse(text)?;
    Ok(Simulation::new(scenario).run())
}
