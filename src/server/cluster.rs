//! The Raft node as the control plane uses it: proposing through it (`Replicate`, for the
//! writer) and reading leadership and membership from it (`ClusterView`, for the API).

use crate::control::{ClusterView, Replicate, WriteError};
use crate::raft::{RaftNode, RequestError};
use crate::state::{Command, Response};
use futures::future::BoxFuture;
use std::time::Duration;

/// Proposing through the Raft node.
pub struct RaftReplicate(pub RaftNode);

impl Replicate for RaftReplicate {
    fn replicate(&self, cmd: Command) -> BoxFuture<'static, Result<Response, WriteError>> {
        let node = self.0.clone();
        Box::pin(async move {
            node.write(cmd).await.map_err(|e| match e {
                RequestError::ForwardToLeader { addr, .. } => WriteError::NotLeader { leader: Some(addr) },
                RequestError::NoLeader => WriteError::NotLeader { leader: None },
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

    fn serving(&self) -> bool {
        self.0.serving()
    }

    fn applied_index(&self) -> u64 {
        self.0.applied_index()
    }

    fn wait_applied(&self, index: u64, timeout: Duration) -> BoxFuture<'static, bool> {
        let node = self.0.clone();
        Box::pin(async move { node.wait_applied(index, timeout).await })
    }

    fn linearize(&self, timeout: Duration) -> BoxFuture<'static, Result<(), String>> {
        let node = self.0.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, node.linearize(timeout)).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no confirmation from the leader within {timeout:?}")),
            }
        })
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
