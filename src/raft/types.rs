//! The openraft type configuration of Convoy and short aliases for the openraft types used across
//! the `raft` module and by the server.

openraft::declare_raft_types!(
    /// Convoy's Raft types: the log carries [`crate::state::Command`]s, applying one yields a
    /// [`crate::state::Response`], nodes are `u64` ids addressed by their base URL
    /// ([`openraft::BasicNode::addr`], e.g. `http://127.0.0.1:8080`), and snapshots are files
    /// ([`SnapshotFile`](crate::raft::SnapshotFile)), streamed to peers in chunks.
    pub(crate) TypeConfig:
        D = crate::state::Command,
        R = crate::state::Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = crate::raft::snapshot_data::SnapshotFile,
);

/// A node's id in the Raft group.
pub type NodeId = u64;
/// A peer's address: `addr` is its base URL.
pub type Node = openraft::BasicNode;
/// A running Raft node.
pub(crate) type Raft = openraft::Raft<TypeConfig>;
/// Identifies a log entry (term, leader, index).
pub type LogId = openraft::LogId<NodeId>;
/// A log entry.
pub(super) type Entry = openraft::Entry<TypeConfig>;
/// What a log entry carries.
pub(crate) type EntryPayload = openraft::EntryPayload<TypeConfig>;
/// A Raft vote (term, candidate, committed flag).
pub(super) type Vote = openraft::Vote<NodeId>;
/// A cluster membership (voters and learners with their addresses).
pub(super) type Membership = openraft::Membership<NodeId, Node>;
/// A membership with the id of the log entry that introduced it.
pub(crate) type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Describes a snapshot: the last log id and membership it covers, and its id.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
/// A snapshot with its data.
pub(super) type Snapshot = openraft::storage::Snapshot<TypeConfig>;
/// The storage error openraft expects from storage implementations.
pub(super) type StorageError = openraft::StorageError<NodeId>;
/// Raft metrics, as published on [`Raft::metrics`].
pub(crate) type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;
