//! What Convoy stores and replicates, as frozen byte formats: the commands of the Raft log, the
//! rows of the state database, snapshots, and Raft's own records.
//!
//! These types are apart from the domain types (`model`) and the HTTP types (`model::api`) so
//! that neither can change a stored format by accident: adding a field to an API body or a domain
//! struct changes nothing here, and the conversions between the two sides (written out field by
//! field, so a new domain field is a compile error here) are where a format change is decided.
//!
//! Rules for this module:
//! - Records hold only integers, `bool`, `f64`, `String`, `Vec`, `Option`, `BTreeMap`, other
//!   records, and the names and ids of [`crate::model::names`] and [`crate::model::Namespace`],
//!   whose encodings are fixed (a name is its text, validated again when read; an id is its
//!   128-bit value).
//! - No serde attributes that change what is written (`skip_serializing_if`, `flatten`,
//!   `untagged`, renames of variants do not matter to the positional encoding, but keep them out
//!   anyway): the encoding is positional ([`codec`]), so field and variant order is the format.
//! - A record is never changed in place. A change of format bumps [`STATE_SCHEMA_VERSION`] (rows,
//!   snapshots) or [`LOG_FORMAT_VERSION`] (log entries, commands, votes), adds a migration that
//!   reads the old bytes with its own frozen copy of the old types, and adds fixtures under
//!   `tests/fixtures/formats/` beside the old ones, which stay. The golden tests in `tests.rs`
//!   decode every fixture and encode it back byte for byte.
//! - An addition that leaves every old record byte-identical (a variant at the end of an enum, a
//!   new table) bumps the version that governs it all the same: an older binary cannot read what the
//!   newer one writes, and with the bump it refuses it by its version, naming it, instead of
//!   failing on the first record it cannot decode. Such a step converts nothing (today's types
//!   read the old bytes, as the golden tests of the old fixtures keep checking); only the version
//!   mark is raised. A format names the version that introduced it and holds in later versions
//!   unless a later one says otherwise.
//! - The log's commands have two faces ([`command`]): [`CommandRecord`] holds every form any log
//!   format held, in its position, and is what the golden tests decode and encode back;
//!   [`Command`] is the current meaning of each, read through [`CommandRecord`] (a superseded
//!   form converted in one place) and written as the newest form of its meaning. A new form of a
//!   command is a variant at the end of [`CommandRecord`]; [`Command`] takes its shape, and the
//!   form before it is converted on reading.

pub(crate) mod codec;
pub(crate) mod command;
mod event;
mod executor;
mod frames;
pub(crate) mod job;
mod job_policy;
mod placement;
pub(crate) mod queue;
pub mod raft;
mod reservation;
mod schedule;
mod snapshot;
mod usage;

pub use codec::{CodecError, decode, encode};
pub use command::{
    Command, CommandRecord, FaultedRunReport, JobVerdict, NamespacedJob, NewJob, NewLease, PodRunReport, PolicyJob,
    PurgeTarget, QuarantinePolicyRecord, RunReport, RunReportKind, RunUsageRecord, UsageRunReport,
};
pub use event::{EventKindRecord, EventRecord};
pub use executor::{
    ExecutorRecord, NodeFailureRecord, NodeFaultRecord, NodeHealthRecord, NodeRecord, QuarantineRecord,
};
pub use frames::{FrameSink, FrameSource, MemoryFrames};
pub use job::{JobRecord, JobStateRecord, PayloadRecord, PodRecord, RequirementsRecord, RunRecord};
pub use job_policy::{
    DependencyConditionRecord, DependencyRecord, JobPoliciesRecord, RetryRecord, SubmitDependencyRecord,
    SubmitPoliciesRecord,
};
pub use placement::TaintRecord;
pub use queue::{
    PreemptionPolicyRecord, PriorityPolicyRecord, QueuePoliciesByQueueRecord, QueuePoliciesRecord,
    QueuePoliciesWithRetryByQueueRecord, QueuePoliciesWithRetryRecord, QueueRecord, QueueTreeRecord, QueueTreesRecord,
    SortPriorityRecord,
};
pub use reservation::{ReservationRecord, ReservedNodeRecord};
pub use schedule::{
    ConfigRecordError, RateLimiterRecord, ScheduleInputsRecord, SchedulerConfigRecord, TokenBucketRecord, config_hash,
    short_hex,
};
pub use snapshot::{SnapshotRecord, SnapshotRowRecord, SnapshotRowRef};
pub use usage::{QueueUsageRecord, UsageSampleRecord};

/// Version of the state database (`convoy.redb`): its tables, key encodings and row records, and
/// the snapshots made of it.
///
/// 3 adds the `finished` index (finish time and id of every job that left memory, for
/// `job_retention`) and the `purges` and `max_job_id` meta rows; snapshots carry the index
/// ([`SnapshotRowRecord::Finished`]). Version 2's rows are unchanged. Migration 3 builds the index
/// for the finished jobs of a version 2 database, and an inline snapshot of schema 2 is converted
/// to schema 3 the same way when its log is upgraded.
///
/// 4 adds the `node_health` table (failures counted against each node and its quarantine,
/// [`NodeHealthRecord`]); snapshots carry it ([`SnapshotRowRecord::NodeHealth`]). Every older row
/// is unchanged: migration 4 only creates the table.
///
/// 5 adds the `queue_usage` meta row (a [`QueueUsageRecord`]: the queues' decayed usage), which
/// snapshots carry as they carry every meta row. Every older row is unchanged, so migration 5
/// converts nothing; the bump makes an older binary refuse a database or snapshot that may hold
/// the row instead of dropping the usage without a word.
///
/// 6 adds the `queue_tree` meta row (a [`QueueTreesRecord`]: the parent, priority offset and
/// priority policies of every queue that has any), which snapshots carry as a meta row. The
/// `queues` rows are unchanged (a queue absent from the row is a top-level queue with default
/// settings, as every queue of an older database is), so migration 6 converts nothing; the bump
/// makes an older binary refuse a database or snapshot that may hold the tree.
///
/// 7 adds the Kubernetes namespace of every job (a field at the end of [`JobRecord`]) and the pod
/// of every run (a field at the end of [`RunRecord`]), and the `run_jobs` table (run id → job id,
/// the index behind reads by run id); snapshots carry it ([`SnapshotRowRecord::RunJob`]).
/// Migration 7 rewrites every `jobs` row (no namespace, no pods) and indexes every run of it.
///
/// 8 adds the `job_owners` table (job id → the principal that submitted it), kept beside the
/// jobs (deleted with a job's purge) so that no `jobs` row changes; snapshots carry it
/// ([`SnapshotRowRecord::JobOwner`]). Migration 8 makes the table, empty: jobs submitted before
/// have no recorded owner.
///
/// 9 adds the `run_usage` table (run id → what the run used, a [`RunUsageRecord`]), kept beside
/// the jobs (deleted with a job's purge) so that no `jobs` row changes; snapshots carry it
/// ([`SnapshotRowRecord::RunUsage`]). Migration 9 makes the table, empty: runs that ended before
/// have no recorded usage.
///
/// 10 adds the `scheduler_config` meta row (a [`SchedulerConfigRecord`]: the configuration the
/// last recorded cycles ran with) and the `schedule_cycles` meta row (the last recorded cycle's
/// number, u64 BE), which snapshots carry as meta rows, so a replay from a snapshot knows both.
/// Every older row is unchanged; migration 10 converts nothing.
///
/// 11 adds the `job_policies` table (job id → a [`JobPoliciesRecord`]: the job's dependencies
/// with whether each is met, its retry policy and its retry back-off), written for the jobs that
/// have any, beside the jobs (deleted with a job's purge) so that no `jobs` row changes;
/// snapshots carry it ([`SnapshotRowRecord::JobPolicies`]). Migration 11 makes the table, empty:
/// jobs submitted before have neither.
///
/// 12 adds the `queue_policies` meta row (a [`QueuePoliciesByQueueRecord`]: the guarantee and
/// preemption policy of every queue that has either), which snapshots carry as a meta row. The
/// `queues` rows and the `queue_tree` row are unchanged (a queue absent from the new row has no
/// guarantee and no fence, as every queue of an older database), so migration 12 converts
/// nothing; the bump makes an older binary refuse a database or snapshot that may hold the row.
///
/// 13 gives the `queue_policies` meta row each queue's retry policy: the row is now a
/// [`QueuePoliciesWithRetryByQueueRecord`]. Migration 13 rewrites a schema 12 row in the new
/// record, every queue without a retry policy; snapshots carry the row as a meta row, as before.
pub const STATE_SCHEMA_VERSION: u32 = 13;

/// Version of the Raft log's format (`raft.redb`): log entries with their commands, the vote and
/// the log ids kept beside them, and the `raft_snapshot` table.
///
/// - 1: the latest snapshot's bytes inline in `raft_snapshot` (a [`SnapshotRecord`]).
/// - 2: the latest snapshot is a file in the data directory's `snapshots/`; `raft_snapshot` holds
///   its meta and a [`raft::SnapshotFileRecord`] naming the file. Log entries are unchanged. A
///   format 1 log is upgraded when opened: its inline snapshot is converted into a file.
/// - 3: [`CommandRecord::PurgeFinished`], added at the end of the commands, so every older entry is a
///   format 3 entry byte for byte and a format 2 log is only marked 3 when opened. The bump is
///   still needed: a binary of format 2 cannot decode a purge, so it must refuse a format 3 log
///   by its version (naming it) rather than fail on the first purge entry, and servers of the two
///   formats must not exchange entries (peer protocol 3).
/// - 4: [`CommandRecord::RunEventsWithFaults`] (run events saying which failures are their node's, with
///   the quarantine policy) and [`CommandRecord::LiftQuarantine`], added at the end of the commands:
///   older entries are format 4 entries byte for byte, the mark is raised when opened (peer
///   protocol 4).
/// - 5: [`CommandRecord::RecordUsage`], added at the end of the commands in the same way (peer
///   protocol 5).
/// - 6: [`CommandRecord::CreateQueueInTree`] and [`CommandRecord::UpdateQueueInTree`] (queues with their
///   place in the queue tree), added at the end of the commands in the same way (peer protocol 6).
/// - 7: [`CommandRecord::SubmitInNamespaces`] (jobs with their namespace) and
///   [`CommandRecord::RunEventsWithPods`] (run events with the pod the run became), added at the end of
///   the commands: older entries are format 7 entries byte for byte, the mark is raised when
///   opened (peer protocol 7).
/// - 8: [`CommandRecord::SubmitByOwner`] (jobs with the principal that submitted them), added at the
///   end of the commands in the same way (peer protocol 8).
/// - 9: [`CommandRecord::RunEventsWithUsage`] (run events with what a run used), added at the end of
///   the commands in the same way (peer protocol 9).
/// - 10: [`CommandRecord::ScheduleWithInputs`] (a cycle's decisions with what it ran on beyond the
///   state: seed, applied index, configuration hash, rate-limit buckets, [`ScheduleInputsRecord`])
///   and [`CommandRecord::RecordSchedulerConfig`] (the configuration itself), added at the end of
///   the commands in the same way (peer protocol 10). Older `Schedule` entries read as cycles
///   without inputs, which replay lists but cannot run again.
/// - 11: [`CommandRecord::SubmitWithPolicies`] (jobs with their dependencies and retry policies),
///   added at the end of the commands in the same way (peer protocol 11). The leader proposes it
///   only for a submission that has a dependency or a retry policy.
/// - 12: [`CommandRecord::CreateQueueWithPolicies`] and [`CommandRecord::UpdateQueueWithPolicies`]
///   (queues with their guarantee and preemption policy, [`QueuePoliciesRecord`]), added at the
///   end of the commands in the same way (peer protocol 12). Older queue commands read as queues
///   without a guarantee or fence.
/// - 13: [`CommandRecord::CreateQueueWithRetry`] and [`CommandRecord::UpdateQueueWithRetry`]
///   (queues with a retry policy for their jobs; the leader proposes them only for a queue that
///   has one, older queue commands read as queues without) and
///   [`CommandRecord::RecordReservations`] (a cycle's changes of node reservations, which become
///   job events), added at the end of the commands in the same way (peer protocol 13).
pub const LOG_FORMAT_VERSION: u32 = 13;

/// Version of the snapshot file format (`snapshots/*.snap`, and the bytes Raft sends to a member
/// that must catch up by snapshot): header, frames of [`SnapshotRowRecord`]s, trailer. See
/// `raft::snapshot_file` for the layout.
///
/// Which rows a stream holds follows the state schema, whose version is the stream's first frame:
/// schema 3 added [`SnapshotRowRecord::Finished`] at the end of the row kinds, schema 4
/// [`SnapshotRowRecord::NodeHealth`] after it, schema 7 [`SnapshotRowRecord::RunJob`] after that,
/// schema 8 [`SnapshotRowRecord::JobOwner`] after that, schema 9 [`SnapshotRowRecord::RunUsage`]
/// after that, schema 11 [`SnapshotRowRecord::JobPolicies`] after that. The file format
/// itself (framing, header, trailer) did not change, and an older binary refuses a schema 3
/// stream by that first frame, naming the schema, before it meets a row it cannot decode.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 1;

#[cfg(test)]
mod tests;
