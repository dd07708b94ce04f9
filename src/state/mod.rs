//! The replicated state machine: commands, their deterministic application, and the in-memory
//! indexes the scheduler and the API read.

pub mod changes;
pub mod command;
mod jobs;
pub mod machine;
mod quarantine;
mod queries;
mod queue_select;
mod queues;
mod restore;
mod retention;
mod runs;
mod snapshot;
mod transition;

pub use changes::{Change, Effects};
pub use command::{
    Command, FaultedRunReport, JobVerdict, NamespacedJob, NewJob, NewLease, PodRunReport, PurgeTarget,
    QuarantinePolicyRecord, RejectKind, Rejection, Response, RunReport, RunReportKind, UNBOUNDED_WEIGHT,
    UsageRunReport,
};
pub use machine::{Applied, ApplyContext, Executor, LiveJob, QueueState, State, StateSettings};
pub use queue_select::QueueJobFilter;
pub use runs::{MAX_LOG_TAIL, last_bytes};

#[cfg(test)]
mod tests;
