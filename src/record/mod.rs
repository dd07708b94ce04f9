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
//!   records, and the names and ids of [`crate::model::names`], whose encodings are fixed (a name
//!   is its text, validated again when read; an id is its 128-bit value).
//! - No serde attributes that change what is written (`skip_serializing_if`, `flatten`,
//!   `untagged`, renames of variants do not matter to the positional encoding, but keep them out
//!   anyway): the encoding is positional ([`codec`]), so field and variant order is the format.
//! - A record is never changed in place. A change of format bumps [`STATE_SCHEMA_VERSION`] (rows,
//!   snapshots) or [`LOG_FORMAT_VERSION`] (log entries, commands, votes), adds a migration that
//!   reads the old bytes with its own frozen copy of the old types, and adds fixtures under
//!   `tests/fixtures/formats/` beside the old ones, which stay. The golden tests in `tests.rs`
//!   decode every fixture and encode it back byte for byte.
//! - An addition that leaves every old record byte-identical (a variant at the end of an enum, a
//!   new table) bumps the version all the same, because an older binary cannot read what the
//!   newer one writes: with the bump it refuses the file by its version, naming it, instead of
//!   failing on the first record it cannot decode. Such a step converts nothing (today's types
//!   read the old bytes, as the golden tests of the old fixtures keep checking); only the version
//!   mark is raised. A format names the version that introduced it and holds in later versions
//!   unless a later one says otherwise.

pub mod codec;
pub mod command;
pub mod event;
pub mod executor;
pub mod job;
pub mod placement;
pub mod queue;
pub mod raft;
pub mod snapshot;

pub use codec::{CodecError, decode, encode};
pub use command::{Command, JobVerdict, NewJob, NewLease, PurgeTarget, RunReport, RunReportKind};
pub use event::{EventKindRecord, EventRecord};
pub use executor::{ExecutorRecord, NodeRecord};
pub use job::{JobRecord, JobStateRecord, PayloadRecord, RequirementsRecord, RunRecord};
pub use placement::TaintRecord;
pub use queue::QueueRecord;
pub use snapshot::SnapshotRecord;

/// Version of the state database (`convoy.redb`): its tables, key encodings and row records, and
/// the snapshots made of it.
///
/// 3 adds the `finished` index (finish time and id of every job that left memory, for
/// `job_retention`) and the `purges` and `max_job_id` meta rows; snapshots carry the index.
/// Version 2's rows are unchanged. Migration 3 builds the index for the finished jobs of a
/// version 2 database.
pub const STATE_SCHEMA_VERSION: u32 = 3;

/// Version of the Raft log's format (`raft.redb`): log entries with their commands, the vote and
/// the log ids kept beside them.
///
/// 2 adds [`Command::PurgeFinished`] at the end of the commands, so every format 1 entry is a
/// valid format 2 entry, byte for byte: a format 1 log is read as it is, and its version mark is
/// raised to 2 when a newer binary opens it. The bump is still needed: a binary of format 1 cannot
/// decode a purge, so it must refuse a format 2 log by its version (naming it) rather than fail
/// on the first purge entry, and servers of the two formats must not exchange entries (the peer
/// protocol version changes with it).
pub const LOG_FORMAT_VERSION: u32 = 2;

#[cfg(test)]
mod tests;
