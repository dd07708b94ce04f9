//! Convoy: a batch-job scheduler with Armada's fair-share scheduling model, in one binary.

pub mod agent;
pub mod model;
pub mod scheduler;
pub mod simulate;
pub mod state;
