//! The replicated state machine: commands, their deterministic application, and the in-memory
//! indexes the scheduler and the API read.

pub mod changes;
pub mod command;
mod jobs;
pub mod machine;
mod queues;
mod runs;
mod snapshot;

pub use changes::{Change, Effects, ExecutorRecord};
pub use command::{Command, JobVerdict, NewJob, NewLease, Rejection, Response, UNBOUNDED_WEIGHT};
pub use machine::{Applied, ApplyContext, LiveJob, QueueState, State, StateSettings};

#[cfg(test)]
mod tests;
