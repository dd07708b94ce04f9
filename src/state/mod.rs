//! The replicated state machine: commands, their deterministic application, and the in-memory
//! indexes the scheduler and the API read.
//!
//! Its face, for the layers above (service, API, UI, gRPC, server, raft, store):
//! - **Writing** is applying a [`Command`] with [`State::apply`], which answers a [`Response`]
//!   and the [`Change`]s the store must write, in order. The same commands in the same order
//!   give the same state and the same changes on every replica.
//! - **Reading** is by query methods named for the question (`queries.rs`): a queue, a job, the
//!   job of a run, an executor's unacknowledged leases and runs to stop, the nodes' health, the
//!   facts submissions are checked against, the queues' recorded usage; and
//!   [`State::scheduling_snapshot`], the scheduler's view of one cycle. Iterators borrow the
//!   state, so the lease poll and the scheduler's snapshot allocate no more than they need.
//! - **Rebuilding** from storage (start-up, snapshot install) is the narrow `restore_*` API
//!   (`restore.rs`) the store's loader calls, then [`State::refresh_largest_node`].
//!
//! The indexes themselves (live jobs, runs per executor, job sets, gangs, client ids, event
//! counters, executors and node health) are private to this module, so they change only as
//! commands are applied, and stay in step with each other through `State::update_job`. A job's
//! (and its run's) state changes only through `transition.rs`, which holds the one table of
//! legal moves.

mod changes;
mod command;
mod dependencies;
mod job_times;
mod jobs;
mod live_jobs;
mod log_tail;
mod machine;
mod quarantine;
mod queries;
mod queue_select;
mod queues;
mod reindex;
mod reservations;
mod restore;
mod retention;
mod retry;
mod runs;
mod snapshot;
mod transition;

pub use changes::{Change, Effects};
pub use command::{
    Command, FaultedRunReport, JobVerdict, NamespacedJob, NewJob, NewLease, PodRunReport, PolicyJob, PurgeTarget,
    QuarantinePolicyRecord, RejectKind, Rejection, Response, RunReport, RunReportKind, UNBOUNDED_WEIGHT,
    UsageRunReport,
};
pub use log_tail::{MAX_LOG_TAIL, last_bytes};
pub use machine::{Applied, ApplyContext, Executor, LiveJob, PolicyCounts, QueueState, State, StateSettings};
pub use queries::QueuePlace;
pub use queue_select::QueueJobFilter;

#[cfg(test)]
mod tests;
