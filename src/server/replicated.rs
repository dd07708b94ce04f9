//! Glue between the Raft layer and the server's state machine: the `ReplicatedState` the Raft
//! adapter drives, the `Replicate` the writer proposes through, and the `ClusterView` the API
//! reads leadership from.

use super::app::ClusterView;
use super::machine::{Entry, ServerMachine};
use super::writer::{Replicate, WriteError};
use crate::raft::{
    ApplyItem, ApplyPayload, ExportJob, LogId, RaftNode, ReplicatedState, SnapshotExport, SnapshotMeta,
    StoredMembership,
};
use crate::state::{Command, Response};
use futures::future::BoxFuture;
use std::io;

/// Meta keys of the Raft bookkeeping stored with the state.
const APPLIED: &str = "raft_applied";
const MEMBERSHIP: &str = "raft_membership";

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    crate::store::codec::encode(v).map_err(io_err)
}

fn decode<T: serde::de::DeserializeOwned>(b: &[u8], what: &str) -> io::Result<T> {
    crate::store::codec::decode(b, what).map_err(io_err)
}

fn decode_applied(stored: Option<Vec<u8>>) -> io::Result<Option<LogId>> {
    stored.map_or(Ok(None), |b| decode(&b, "raft applied log id"))
}

fn decode_membership(stored: Option<Vec<u8>>) -> io::Result<StoredMembership> {
    stored.map_or_else(|| Ok(StoredMembership::default()), |b| decode(&b, "raft membership"))
}

/// The server's state machine as the Raft adapter sees it.
pub struct Replicated {
    machine: ServerMachine,
}

impl Replicated {
    pub fn new(machine: ServerMachine) -> Self {
        Replicated { machine }
    }

    fn membership(&self) -> io::Result<StoredMembership> {
        decode_membership(self.machine.raft_meta(MEMBERSHIP).map_err(io_err)?)
    }

    fn applied(&self) -> io::Result<Option<LogId>> {
        decode_applied(self.machine.raft_meta(APPLIED).map_err(io_err)?)
    }
}

impl ReplicatedState for Replicated {
    fn apply(&mut self, items: Vec<ApplyItem>) -> io::Result<Vec<Response>> {
        let mut entries = Vec::with_capacity(items.len());
        let mut last = None;
        let mut membership = None;
        for item in items {
            last = Some(item.log_id);
            let command = match item.payload {
                ApplyPayload::Blank => None,
                ApplyPayload::Command(c) => Some(c),
                ApplyPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(item.log_id), m));
                    None
                }
            };
            entries.push(Entry { term: item.log_id.leader_id.term, command });
        }
        let mut meta = vec![(APPLIED, encode(&last)?)];
        if let Some(m) = &membership {
            meta.push((MEMBERSHIP, encode(m)?));
        }
        self.machine.apply(entries, &meta).map_err(io_err)
    }

    fn applied_state(&self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Ok((self.applied()?, self.membership()?))
    }

    fn make_durable(&mut self) -> io::Result<()> {
        self.machine.make_durable().map_err(io_err)
    }

    fn export(&mut self) -> io::Result<ExportJob> {
        let view = self.machine.pin_export().map_err(io_err)?;
        Ok(Box::new(move || {
            Ok(SnapshotExport {
                last_applied: decode_applied(view.raft_meta(APPLIED).map_err(io_err)?)?,
                membership: decode_membership(view.raft_meta(MEMBERSHIP).map_err(io_err)?)?,
                data: view.export().map_err(io_err)?,
            })
        }))
    }

    fn import(&mut self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let raft_meta = [(APPLIED, encode(&meta.last_log_id)?), (MEMBERSHIP, encode(&meta.last_membership)?)];
        self.machine.import(data, &raft_meta).map_err(io_err)
    }
}

/// Proposing through the Raft node.
pub struct RaftReplicate(pub RaftNode);

impl Replicate for RaftReplicate {
    fn replicate(&self, cmd: Command) -> BoxFuture<'static, Result<Response, WriteError>> {
        let node = self.0.clone();
        Box::pin(async move {
            node.write(cmd).await.map_err(|e| match e {
                crate::raft::WriteError::ForwardToLeader { addr, .. } => WriteError::NotLeader { leader: Some(addr) },
                crate::raft::WriteError::NoLeader => WriteError::NotLeader { leader: None },
                other => WriteError::Unavailable(other.to_string()),
            })
        })
    }

    fn log_flushed(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.0.log_flushed())
    }
}

/// Leadership as the API sees it.
pub struct RaftView(pub RaftNode);

impl ClusterView for RaftView {
    fn is_leader(&self) -> bool {
        self.0.is_leader()
    }

    fn term(&self) -> u64 {
        self.0.current_term()
    }

    fn leader_addr(&self) -> Option<String> {
        self.0.leader().map(|(_, n)| n.addr)
    }

    fn ready(&self) -> bool {
        let m = self.0.metrics().borrow().clone();
        let applied = m.last_applied.map(|l| l.index);
        m.current_leader.is_some() && applied >= m.last_log_index.filter(|_| m.current_leader == Some(m.id)).or(applied)
    }

    fn status(&self) -> serde_json::Value {
        let m = self.0.metrics().borrow().clone();
        let members: Vec<serde_json::Value> = m
            .membership_config
            .nodes()
            .map(|(id, n)| serde_json::json!({"id": id, "addr": n.addr, "voter": m.membership_config.membership().get_joint_config().iter().any(|c| c.contains(id))}))
            .collect();
        serde_json::json!({
            "id": m.id,
            "state": format!("{:?}", m.state),
            "term": m.current_term,
            "leader": m.current_leader,
            "leader_addr": self.leader_addr(),
            "last_log_index": m.last_log_index,
            "last_applied": m.last_applied.map(|l| l.index),
            "members": members,
        })
    }
}
