//! Forming a cluster: who initializes Raft, and when.
//!
//! Every member of a new cluster is configured with the same peer list. Were each to initialize
//! itself, they would form as many clusters; were each to initialize with the list as soon as it
//! starts, a member whose data dir was wiped would form a second cluster beside the first. So a
//! member with a peer list asks every peer whether it already belongs to a cluster: if any does,
//! it never forms one (it waits to be added, or to be reached by the leader it already belongs
//! to); once every peer answers and none does, the member with the lowest id gives the others a
//! new cluster id and initializes Raft with the whole list.

use super::identity::{Identity, new_cluster_id};
use super::network::NetworkFactory;
use super::types::{Node, NodeId, Raft};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How a member that has never been part of a cluster gets into one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Bootstrap {
    /// It never forms a cluster itself: it waits to be added to one.
    #[default]
    Join,
    /// It forms a cluster of itself alone.
    Single,
    /// It forms a cluster of these members (itself included) with them, once all are reachable
    /// and none is part of a cluster yet.
    Peers(BTreeMap<NodeId, Node>),
}

/// How often a forming member asks its peers again.
const ASK_EVERY: Duration = Duration::from_millis(300);
/// How often it says whom it is still waiting for.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Asks the peers until the cluster is formed (by this member if it has the lowest id, else by
/// the one that has), or until it turns out they already form one. Returns once this member is
/// initialized or will never initialize by itself.
pub(super) async fn form_with_peers(
    raft: Raft,
    identity: Identity,
    network: NetworkFactory,
    members: BTreeMap<NodeId, Node>,
) {
    let me = identity.node_id();
    let founder = members.keys().next().copied() == Some(me);
    let mut last_report = Instant::now();
    loop {
        match raft.is_initialized().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "raft stopped while forming the cluster");
                return;
            }
        }
        let mut waiting_for = Vec::new();
        for (&id, node) in members.iter().filter(|(id, _)| **id != me) {
            match network.peer_status(id, &node.addr).await {
                Ok(status) if status.initialized => {
                    tracing::info!(
                        peer = id,
                        cluster_id = ?status.cluster_id,
                        "a peer already belongs to a cluster: this server will not form one and waits to be added \
                         (`convoy cluster add {me} ADDR` on that cluster)"
                    );
                    return;
                }
                Ok(_) => {}
                Err(e) => waiting_for.push(format!("{id} at {} ({e})", node.addr)),
            }
        }
        if waiting_for.is_empty() {
            if !founder {
                // The founder forms it; this member is reached by its first heartbeat.
                if last_report.elapsed() >= REPORT_EVERY {
                    tracing::info!(node_id = me, "every peer is up; waiting for the lowest id to form the cluster");
                    last_report = Instant::now();
                }
            } else if let Err(e) = found(&raft, &identity, &network, &members).await {
                tracing::warn!(error = %e, "could not form the cluster yet; retrying");
            } else {
                return;
            }
        } else if last_report.elapsed() >= REPORT_EVERY {
            tracing::info!(node_id = me, waiting_for = %waiting_for.join(", "), "forming the cluster: waiting for every peer");
            last_report = Instant::now();
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// Gives every peer the new cluster's id, then initializes Raft with all members.
async fn found(
    raft: &Raft,
    identity: &Identity,
    network: &NetworkFactory,
    members: &BTreeMap<NodeId, Node>,
) -> Result<(), String> {
    let cluster_id = match identity.cluster_id() {
        Some(c) => c,
        None => {
            let c = new_cluster_id();
            identity.adopt(&c).map_err(|e| e.to_string())?;
            c
        }
    };
    for (&id, node) in members.iter().filter(|(id, _)| **id != identity.node_id()) {
        network.give_cluster_id(id, &node.addr, &cluster_id).await.map_err(|e| format!("peer {id}: {e}"))?;
    }
    match raft.initialize(members.clone()).await {
        Ok(()) => {
            tracing::info!(%cluster_id, members = ?members.keys().collect::<Vec<_>>(), "cluster formed");
            Ok(())
        }
        Err(openraft::error::RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
