//! Raft's own records: log ids, the vote, memberships and snapshot descriptions, as the log
//! (`raft.redb`) and the state (`convoy.redb`, beside the applied state) store them; and the log
//! entry itself. They mirror openraft's types field by field but do not use openraft's serde, so
//! an openraft upgrade cannot change the files.

use super::command::{Command, CommandRecord};
use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Identifies a log entry. Format: log format 1, state schema 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogIdRecord {
    /// Term of the leader that appended it.
    pub term: u64,
    /// Id of that leader.
    pub node_id: u64,
    /// Position in the log.
    pub index: u64,
}

impl From<LogId<u64>> for LogIdRecord {
    fn from(l: LogId<u64>) -> Self {
        LogIdRecord { term: l.leader_id.term, node_id: l.leader_id.node_id, index: l.index }
    }
}

impl From<LogIdRecord> for LogId<u64> {
    fn from(l: LogIdRecord) -> Self {
        LogId::new(CommittedLeaderId::new(l.term, l.node_id), l.index)
    }
}

/// A Raft vote. Format: log format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoteRecord {
    /// The term voted in.
    pub term: u64,
    /// The candidate voted for.
    pub node_id: u64,
    /// True once a quorum granted it.
    pub committed: bool,
}

impl From<Vote<u64>> for VoteRecord {
    fn from(v: Vote<u64>) -> Self {
        VoteRecord { term: v.leader_id.term, node_id: v.leader_id.node_id, committed: v.committed }
    }
}

impl From<VoteRecord> for Vote<u64> {
    fn from(v: VoteRecord) -> Self {
        if v.committed { Vote::new_committed(v.term, v.node_id) } else { Vote::new(v.term, v.node_id) }
    }
}

/// A cluster membership: voter sets (two during a joint change) and every member's address
/// (members in no voter set are learners). Format: log format 1, state schema 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipRecord {
    /// Voter sets.
    pub configs: Vec<BTreeSet<u64>>,
    /// Base URL of every member.
    pub nodes: BTreeMap<u64, String>,
}

impl From<&Membership<u64, BasicNode>> for MembershipRecord {
    fn from(m: &Membership<u64, BasicNode>) -> Self {
        MembershipRecord {
            configs: m.get_joint_config().clone(),
            nodes: m.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
        }
    }
}

impl From<MembershipRecord> for Membership<u64, BasicNode> {
    fn from(m: MembershipRecord) -> Self {
        let nodes: BTreeMap<u64, BasicNode> = m.nodes.into_iter().map(|(id, addr)| (id, BasicNode { addr })).collect();
        Membership::new(m.configs, nodes)
    }
}

/// A membership with the log entry that introduced it. Format: state schema 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMembershipRecord {
    /// The entry that introduced it (`None`: the initial empty membership).
    pub log_id: Option<LogIdRecord>,
    /// The membership.
    pub membership: MembershipRecord,
}

impl From<&StoredMembership<u64, BasicNode>> for StoredMembershipRecord {
    fn from(m: &StoredMembership<u64, BasicNode>) -> Self {
        StoredMembershipRecord { log_id: m.log_id().map(Into::into), membership: m.membership().into() }
    }
}

impl From<StoredMembershipRecord> for StoredMembership<u64, BasicNode> {
    fn from(m: StoredMembershipRecord) -> Self {
        StoredMembership::new(m.log_id.map(Into::into), m.membership.into())
    }
}

/// Describes a snapshot. Format: state schema 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMetaRecord {
    /// Last log entry the snapshot includes.
    pub last_log_id: Option<LogIdRecord>,
    /// Membership the snapshot includes.
    pub last_membership: StoredMembershipRecord,
    /// Tells snapshots of the same log id apart.
    pub snapshot_id: String,
}

impl From<&SnapshotMeta<u64, BasicNode>> for SnapshotMetaRecord {
    fn from(m: &SnapshotMeta<u64, BasicNode>) -> Self {
        SnapshotMetaRecord {
            last_log_id: m.last_log_id.map(Into::into),
            last_membership: (&m.last_membership).into(),
            snapshot_id: m.snapshot_id.clone(),
        }
    }
}

impl From<SnapshotMetaRecord> for SnapshotMeta<u64, BasicNode> {
    fn from(m: SnapshotMetaRecord) -> Self {
        SnapshotMeta {
            last_log_id: m.last_log_id.map(Into::into),
            last_membership: m.last_membership.into(),
            snapshot_id: m.snapshot_id,
        }
    }
}

/// The first frame of a snapshot file: the snapshot it holds. Format: snapshot file format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeaderRecord {
    /// The snapshot's meta, as the member that built it described it.
    pub meta: SnapshotMetaRecord,
}

/// Where the latest snapshot's bytes are: the `raft_snapshot` row `file`, beside its meta.
/// Format: log format 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFileRecord {
    /// The file's name in the snapshot directory.
    pub name: String,
    /// Its length in bytes (a cheap check that it is whole).
    pub bytes: u64,
}

/// What a log entry carries. Format: log format 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EntryPayloadRecord {
    /// An empty entry a new leader appends at the start of its term.
    Blank,
    /// A state change, in the form it was written (read it as a [`Command`] with `into`).
    Normal(CommandRecord),
    /// A membership change.
    Membership(MembershipRecord),
}

/// One entry of the Raft log (`raft_log` rows), as read back. Format: log format 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntryRecord {
    /// The entry's id.
    pub log_id: LogIdRecord,
    /// What it carries.
    pub payload: EntryPayloadRecord,
}

/// [`EntryPayloadRecord`] borrowing its command, for writing without a copy. It encodes exactly
/// as [`EntryPayloadRecord`] (the golden tests check it); the log store writes a [`Command`], the
/// golden tests a [`CommandRecord`] of any form.
#[derive(Debug, Serialize)]
pub enum EntryPayloadRef<'a, C = Command> {
    /// See [`EntryPayloadRecord::Blank`].
    Blank,
    /// See [`EntryPayloadRecord::Normal`].
    Normal(&'a C),
    /// See [`EntryPayloadRecord::Membership`].
    Membership(MembershipRecord),
}

/// [`LogEntryRecord`] borrowing its command, for writing. Encodes exactly as [`LogEntryRecord`].
#[derive(Debug, Serialize)]
pub struct LogEntryRef<'a, C = Command> {
    /// The entry's id.
    pub log_id: LogIdRecord,
    /// What it carries.
    pub payload: EntryPayloadRef<'a, C>,
}
