//! Adding and removing servers: a new server joins as a learner (it receives the log, or a
//! snapshot, without voting) and becomes a voter once it has caught up, so that a slow newcomer
//! never counts towards the majority before it can answer; a removed server leaves the voters and
//! stops receiving the log.

use super::types::{Node, NodeId};
use super::{RaftNode, RequestError};
use openraft::ChangeMembers;
use std::collections::BTreeSet;
use std::time::Duration;

/// Why a membership change was refused or did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MembershipError {
    /// The change makes no sense for this cluster (the detail says why).
    #[error("{0}")]
    Invalid(String),
    /// No such member.
    #[error("node {0} is not a member of the cluster")]
    NotFound(NodeId),
    /// Raft could not carry it out (not the leader, no quorum, stopped).
    #[error(transparent)]
    Raft(#[from] RequestError),
}

/// How far a member addition got within the time allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Addition {
    /// It votes.
    Voter,
    /// It is a learner still catching up; the leader promotes it once it has.
    CatchingUp,
}

impl RaftNode {
    /// Adds node `id` at `addr`: as a learner first, promoted to voter once it has caught up with
    /// the log. Waits up to `wait` for the promotion; the change goes on in the background after
    /// that. Adding a member that is already a voter at the same address changes nothing.
    pub(crate) async fn add_member(
        &self,
        id: NodeId,
        addr: String,
        wait: Duration,
    ) -> Result<Addition, MembershipError> {
        let m = self.metrics().borrow().membership_config.clone();
        if let Some(known) = m.membership().get_node(&id) {
            if known.addr != addr {
                return Err(MembershipError::Invalid(format!(
                    "node {id} is a member already, at {}; remove it first to give it another address",
                    known.addr
                )));
            }
            if m.membership().voter_ids().any(|v| v == id) {
                return Ok(Addition::Voter);
            }
        }
        if let Some((other, _)) = m.membership().nodes().find(|(n, node)| **n != id && node.addr == addr) {
            return Err(MembershipError::Invalid(format!("{addr} is the address of node {other} already")));
        }
        let raft = self.raft.clone();
        // Its own task: a client that gives up waiting must not stop the change half-way.
        let change = tokio::spawn(async move {
            let added = raft.add_learner(id, Node { addr: addr.clone() }, false).await.map_err(RequestError::from)?;
            tracing::info!(node_id = id, %addr, "new member added as a learner; waiting for it to catch up");
            caught_up(&raft, id, added.log_id.index).await?;
            tracing::info!(node_id = id, %addr, "new member caught up; promoting it to voter");
            raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await
                .map_err(RequestError::from)?;
            tracing::info!(node_id = id, "new member votes");
            Ok::<(), RequestError>(())
        });
        match tokio::time::timeout(wait, change).await {
            Ok(Ok(Ok(()))) => Ok(Addition::Voter),
            Ok(Ok(Err(e))) => Err(e.into()),
            Ok(Err(join)) => Err(MembershipError::Invalid(format!("the membership change failed: {join}"))),
            Err(_) => Ok(Addition::CatchingUp),
        }
    }

    /// Removes node `id` from the cluster (voter or learner). Refuses to remove the last voter.
    pub(crate) async fn remove_member(&self, id: NodeId) -> Result<(), MembershipError> {
        let m = self.metrics().borrow().membership_config.clone();
        if m.membership().get_node(&id).is_none() {
            return Err(MembershipError::NotFound(id));
        }
        let voters: BTreeSet<NodeId> = m.membership().voter_ids().collect();
        let change = if voters.contains(&id) {
            if voters.len() == 1 {
                return Err(MembershipError::Invalid(format!("node {id} is the only voter; a cluster needs one")));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.raft.change_membership(change, false).await.map_err(RequestError::from)?;
        self.network.forget_acknowledged(id);
        tracing::info!(node_id = id, "member removed");
        Ok(())
    }
}

/// How far behind the leader's log a learner may be to count as caught up. openraft's own test
/// (5,000 entries by default) passes at once for any young cluster, before the learner holds a
/// single entry.
const CAUGHT_UP_LAG: u64 = 64;

/// Waits until the leader has replicated to `id` at least the entry that added it, and its lag is
/// at most [`CAUGHT_UP_LAG`]. Fails if this node stops leading or `id` is removed meanwhile.
async fn caught_up(raft: &super::types::Raft, id: NodeId, added_at: u64) -> Result<(), RequestError> {
    let mut metrics = raft.metrics();
    loop {
        {
            let m = metrics.borrow_and_update();
            let Some(progress) = m.replication.as_ref() else { return Err(RequestError::NoLeader) };
            if m.membership_config.membership().get_node(&id).is_none() {
                return Err(RequestError::Remote(format!("node {id} was removed while it caught up")));
            }
            let matched = progress.get(&id).copied().flatten().map_or(0, |l| l.index);
            let last = m.last_log_index.unwrap_or(0);
            if matched >= added_at && last.saturating_sub(matched) <= CAUGHT_UP_LAG {
                return Ok(());
            }
        }
        if metrics.changed().await.is_err() {
            return Err(RequestError::NoLeader);
        }
    }
}
