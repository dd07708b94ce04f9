//! The replicated state machine: commands, their deterministic application, and the in-memory
//! indexes the scheduler and the API read.

pub mod command;

pub use command::{Command, JobVerdict, NewJob, NewLease, Rejection, Response};
