//! Who a Raft member is, and which cluster it belongs to: every peer RPC names its target's node
//! id and the sender's cluster id, and a member refuses RPCs meant for another node or coming from
//! another cluster (a peer list pointing at the wrong machine, two clusters formed by mistake).
//!
//! The cluster id is chosen once, by the member that forms the cluster, and kept in the log's
//! database (`raft_meta.cluster_id`). The other founding members are given it before the cluster
//! is formed; a member added later, or one whose data dir was wiped, takes it from the first RPC
//! that reaches it.

use super::io::io_err;
use super::log_store::META;
use super::types::NodeId;
use redb::{Database, ReadableDatabase};
use std::io;
use std::sync::{Arc, RwLock};

/// Header naming the node a peer RPC is meant for.
pub(super) const TARGET_HEADER: &str = "x-convoy-target-node";
/// Header carrying the sender's cluster id.
pub(super) const CLUSTER_HEADER: &str = "x-convoy-cluster-id";

const KEY_CLUSTER_ID: &str = "cluster_id";

/// This member's node id and cluster id. Cheap to clone; clones share the cluster id.
#[derive(Clone)]
pub(crate) struct Identity {
    node_id: NodeId,
    cluster_id: Arc<RwLock<Option<String>>>,
    db: Arc<Database>,
}

/// A peer RPC refused for whom it is meant or where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IdentityMismatch {
    /// The request names another node: the sender's peer list points at the wrong server.
    #[error("this server is node {this}, not node {wanted}: check the sender's cluster.peers")]
    WrongNode {
        /// This member's id.
        this: NodeId,
        /// The id the sender meant.
        wanted: NodeId,
    },
    /// The request comes from another cluster.
    #[error("this server belongs to cluster {this}, the request comes from cluster {theirs}")]
    OtherCluster {
        /// This member's cluster id.
        this: String,
        /// The sender's.
        theirs: String,
    },
}

impl Identity {
    /// The identity of member `node_id`, with the cluster id stored in `db` (the log's database),
    /// if any.
    pub(crate) fn load(node_id: NodeId, db: Arc<Database>) -> io::Result<Self> {
        let tx = db.begin_read().map_err(io_err)?;
        let stored = match tx.open_table(META) {
            Ok(t) => t.get(KEY_CLUSTER_ID).map_err(io_err)?.map(|v| String::from_utf8_lossy(v.value()).into_owned()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(io_err(e)),
        };
        Ok(Identity { node_id, cluster_id: Arc::new(RwLock::new(stored)), db })
    }

    /// This member's node id.
    pub(crate) fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The cluster this member belongs to, once it knows.
    pub(crate) fn cluster_id(&self) -> Option<String> {
        self.cluster_id.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `id` as this member's cluster, durably. Refuses to change a known one.
    pub(crate) fn adopt(&self, id: &str) -> Result<(), AdoptError> {
        let mut current = self.cluster_id.write().unwrap_or_else(|p| p.into_inner());
        match current.as_deref() {
            Some(c) if c == id => return Ok(()),
            Some(c) => {
                return Err(AdoptError::Mismatch(IdentityMismatch::OtherCluster { this: c.into(), theirs: id.into() }));
            }
            None => {}
        }
        let tx = self.db.begin_write().map_err(|e| AdoptError::Storage(io_err(e)))?;
        {
            let mut meta = tx.open_table(META).map_err(|e| AdoptError::Storage(io_err(e)))?;
            meta.insert(KEY_CLUSTER_ID, id.as_bytes()).map_err(|e| AdoptError::Storage(io_err(e)))?;
        }
        tx.commit().map_err(|e| AdoptError::Storage(io_err(e)))?;
        tracing::info!(node_id = self.node_id, cluster_id = id, "cluster id recorded");
        *current = Some(id.to_string());
        Ok(())
    }

    /// Checks an incoming peer RPC's headers: it must be meant for this node, and come from this
    /// node's cluster (a member that does not know its cluster yet takes the sender's).
    pub(crate) fn check(&self, target: Option<NodeId>, cluster: Option<&str>) -> Result<(), AdoptError> {
        if let Some(wanted) = target
            && wanted != self.node_id
        {
            return Err(AdoptError::Mismatch(IdentityMismatch::WrongNode { this: self.node_id, wanted }));
        }
        match cluster {
            Some(id) => self.adopt(id),
            None => Ok(()),
        }
    }
}

/// Why a cluster id could not be recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdoptError {
    /// This member belongs elsewhere.
    #[error(transparent)]
    Mismatch(IdentityMismatch),
    /// The log's database failed.
    #[error("cannot record the cluster id")]
    Storage(#[source] io::Error),
}

/// A new cluster id: a ULID, unique across clusters formed anywhere.
pub(super) fn new_cluster_id() -> String {
    ulid::Ulid::generate().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_takes_one_cluster_id_and_keeps_it() {
        let dir = tempfile::TempDir::new().unwrap();
        let db = Arc::new(Database::create(dir.path().join("raft.redb")).unwrap());
        let id = Identity::load(2, db.clone()).unwrap();
        assert_eq!(id.cluster_id(), None);
        id.check(Some(2), None).unwrap();
        let wrong = id.check(Some(3), Some("A")).unwrap_err().to_string();
        assert_eq!(wrong, "this server is node 2, not node 3: check the sender's cluster.peers");
        assert_eq!(id.cluster_id(), None, "a refused request teaches nothing");
        id.check(Some(2), Some("A")).unwrap();
        assert_eq!(id.cluster_id().as_deref(), Some("A"));
        let other = id.check(None, Some("B")).unwrap_err().to_string();
        assert_eq!(other, "this server belongs to cluster A, the request comes from cluster B");
        // Durable: a restart knows it.
        drop(id);
        assert_eq!(Identity::load(2, db).unwrap().cluster_id().as_deref(), Some("A"));
    }
}
