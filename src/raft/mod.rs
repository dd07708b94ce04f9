//! Replication: openraft with its log and state machine on redb and its RPC over HTTP.
//!
//! [`RaftNode`] is the façade the server uses: it starts a Raft member over a
//! [`ReplicatedState`] (the server's state machine on redb), proposes [`Command`]s and says who the
//! leader is. [`raft_router`] serves the peer RPC routes; mount it in the server's HTTP router.
//!
//! Storage: the log database (`raft.redb`) holds `raft_log` (entries), `raft_meta` (vote,
//! committed, last purged, format version, cluster id) and `raft_snapshot` (the latest snapshot's
//! meta and file name); the snapshot files are in a directory of their own
//! (`<data_dir>/snapshots/`, see [`snapshot_store`]); the state tables belong to the server.
//!
//! Log compaction: every [`RaftSettings::snapshot_every_logs`] applied entries openraft builds a
//! snapshot (streamed from a pinned read of the state into a file) and then purges the log up to
//! [`RaftSettings::max_in_snapshot_log_to_keep`] entries behind it. A member whose next entry was
//! purged gets the snapshot file in chunks of [`RaftSettings::snapshot_chunk_size`] bytes.

pub(crate) mod acked;
mod bootstrap;
mod failover;
mod identity;
pub(crate) mod io;
pub(crate) mod leadership;
mod log_store;
pub(crate) mod membership;
mod network;
mod pre_vote;
mod snapshot_data;
pub(crate) mod snapshot_file;
mod snapshot_store;
pub(crate) use snapshot_store::REPLAY_BASES;
mod state_machine;
pub(crate) mod stats;
mod types;

#[cfg(test)]
mod tests;

pub use bootstrap::Bootstrap;
pub use network::{PROTOCOL_HEADER, PROTOCOL_VERSION};
pub use snapshot_file::{SnapshotReader, SnapshotWriter};
pub use types::{LogId, Node, NodeId, SnapshotMeta};

pub(crate) use identity::Identity;
pub(crate) use leadership::Leadership;
pub(crate) use log_store::LogStore;
/// The server's unit tests check its chunk size against the peer RPC's body limit.
#[cfg(test)]
pub(crate) use network::MAX_RPC_BODY;
pub(crate) use network::{NetworkFactory, NetworkSetupError, raft_router};
pub(crate) use state_machine::{ApplyItem, ApplyPayload, ReplicatedState, StateExport, StateMachine};
pub(crate) use types::{EntryPayload, Raft, RaftMetrics, StoredMembership};

use crate::state::{Command, Response};
use openraft::error::{
    ChangeMembershipError, CheckIsLeaderError, ClientWriteError, Fatal, ForwardToLeader, InitializeError,
};
use openraft::{BasicNode, Config, ServerState, SnapshotPolicy};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Timing and log-compaction settings of a Raft member.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    /// Name of the cluster (shows in openraft's logs).
    pub cluster_name: String,
    /// How often the leader sends heartbeats. Also openraft's timeout for one append RPC, which
    /// includes the follower's fsync: keep it well above disk latency.
    pub heartbeat_interval: Duration,
    /// A follower that hears no leader for a random time in `[election_timeout_min,
    /// election_timeout_max)` starts an election.
    pub election_timeout_min: Duration,
    /// Upper bound of the election timeout (see `election_timeout_min`).
    pub election_timeout_max: Duration,
    /// Timeout of one snapshot chunk RPC. The last chunk's RPC includes installing the whole
    /// snapshot on the receiver (streaming it into the state and reloading it), so this bounds
    /// the install too: keep it above the install time of the largest expected state (see
    /// `convoy bench snapshot`). A timed-out install is not lost: the receiver finishes it, and
    /// the leader sends the snapshot again, which the receiver then refuses as not newer.
    pub install_snapshot_timeout: Duration,
    /// Build a snapshot once this many entries were applied since the last one.
    pub snapshot_every_logs: u64,
    /// Entries kept in the log behind a snapshot, so slightly lagging followers catch up from the
    /// log rather than by snapshot.
    pub max_in_snapshot_log_to_keep: u64,
    /// Purge the log only once this many entries can go (fewer, larger purges).
    pub purge_batch_size: u64,
    /// Most entries in one append RPC.
    pub max_payload_entries: u64,
    /// Bytes per snapshot chunk RPC (must stay below [`MAX_RPC_BODY`]).
    pub snapshot_chunk_size: u64,
    /// Shared secret of peer RPC (header `x-convoy-cluster-secret`); `None` disables the check.
    pub cluster_secret: Option<String>,
    /// How this node gets into a cluster if it has never been part of one (empty log, no vote).
    pub bootstrap: Bootstrap,
    /// CA certificates (PEM file) that sign the peers' certificates: the only ones the peer RPC
    /// client trusts for `https://` peers. `None`: the operating system's trust store.
    pub tls_ca: Option<PathBuf>,
    /// Bytes a snapshot build must leave free on the disk; with less room it is put off.
    pub keep_free: u64,
    /// Keep each replaced snapshot file as a base for replay (`snapshots/replay/`), and leave the
    /// log's purging to the server's replay retention ([`RaftNode::purge_log`]) rather than to
    /// openraft's policy.
    pub keep_replay_bases: bool,
}

impl Default for RaftSettings {
    fn default() -> Self {
        Self {
            cluster_name: "convoy".to_string(),
            heartbeat_interval: Duration::from_millis(250),
            election_timeout_min: Duration::from_millis(1000),
            election_timeout_max: Duration::from_millis(2000),
            // Installing 1M stored jobs takes ~7 s on 2 cores (`convoy bench snapshot`), 2M ~15 s:
            // openraft's own default (200 ms) and our earlier 30 s leave no room for large states
            // on a loaded machine. A longer wait costs only a slower retry of a lost chunk.
            install_snapshot_timeout: Duration::from_secs(120),
            snapshot_every_logs: 10_000,
            max_in_snapshot_log_to_keep: 1_000,
            purge_batch_size: 1,
            max_payload_entries: 300,
            snapshot_chunk_size: 4 * 1024 * 1024,
            cluster_secret: None,
            bootstrap: Bootstrap::Join,
            tls_ca: None,
            keep_free: 0,
            keep_replay_bases: false,
        }
    }
}

impl RaftSettings {
    /// openraft's configuration for these settings.
    pub(crate) fn to_config(&self) -> Result<Config, RaftError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Config {
            cluster_name: self.cluster_name.clone(),
            heartbeat_interval: ms(self.heartbeat_interval),
            election_timeout_min: ms(self.election_timeout_min),
            election_timeout_max: ms(self.election_timeout_max),
            install_snapshot_timeout: ms(self.install_snapshot_timeout),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every_logs),
            // With replay bases kept, the server purges (`RaftNode::purge_log`), never the policy.
            max_in_snapshot_log_to_keep: if self.keep_replay_bases {
                u64::MAX
            } else {
                self.max_in_snapshot_log_to_keep
            },
            purge_batch_size: self.purge_batch_size,
            max_payload_entries: self.max_payload_entries,
            snapshot_max_chunk_size: self.snapshot_chunk_size,
            // Elections are started by `failover::watch`, after a pre-vote.
            enable_elect: false,
            ..Config::default()
        }
        .validate()
        .map_err(|e| RaftError::Config(Box::new(e)))
    }
}

/// Why a Raft member could not start, initialize or stop.
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// The settings are inconsistent (e.g. election timeout not above the heartbeat).
    #[error("invalid raft settings: {0}")]
    Config(Box<openraft::ConfigError>),
    /// The peer RPC client could not be built.
    #[error(transparent)]
    Network(#[from] NetworkSetupError),
    /// The Raft tables could not be opened.
    #[error("raft storage: {0}")]
    Storage(#[from] std::io::Error),
    /// Raft stopped, or could not start from the stored state.
    #[error("raft stopped: {0}")]
    Fatal(Box<Fatal<NodeId>>),
    /// The initial membership was refused (e.g. it does not include this node).
    #[error("cannot initialize the cluster: {0}")]
    Initialize(String),
    /// The Raft tasks did not stop cleanly.
    #[error("raft did not shut down cleanly: {0}")]
    Shutdown(String),
}

/// Why a write (or a linearizable read check, or a membership change) did not go through.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    /// This node is not the leader; send the request to `addr` (the leader's base URL).
    #[error("not the leader; the leader is node {leader_id} at {addr}")]
    ForwardToLeader {
        /// The leader's Raft node id.
        leader_id: NodeId,
        /// The leader's base URL.
        addr: String,
    },
    /// No leader is known (an election is under way) or the leader lost its quorum: retry later.
    #[error("no leader at the moment")]
    NoLeader,
    /// The membership change was refused (another is in progress, unknown learner, empty set).
    #[error("membership change refused: {0}")]
    Membership(#[from] ChangeMembershipError<NodeId>),
    /// The Raft node stopped (shut down, or a storage failure).
    #[error("raft stopped: {0}")]
    Fatal(Box<Fatal<NodeId>>),
    /// The leader could not be asked, or did not answer in time.
    #[error("the leader could not confirm the read: {0}")]
    Remote(String),
}

impl From<Fatal<NodeId>> for RaftError {
    fn from(f: Fatal<NodeId>) -> Self {
        RaftError::Fatal(Box::new(f))
    }
}

impl From<Fatal<NodeId>> for RequestError {
    fn from(f: Fatal<NodeId>) -> Self {
        RequestError::Fatal(Box::new(f))
    }
}

impl From<ForwardToLeader<NodeId, Node>> for RequestError {
    fn from(f: ForwardToLeader<NodeId, Node>) -> Self {
        match (f.leader_id, f.leader_node) {
            (Some(leader_id), Some(node)) => RequestError::ForwardToLeader { leader_id, addr: node.addr },
            _ => RequestError::NoLeader,
        }
    }
}

impl From<openraft::error::RaftError<NodeId, ClientWriteError<NodeId, Node>>> for RequestError {
    fn from(e: openraft::error::RaftError<NodeId, ClientWriteError<NodeId, Node>>) -> Self {
        match e {
            openraft::error::RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => f.into(),
            openraft::error::RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => c.into(),
            openraft::error::RaftError::Fatal(f) => f.into(),
        }
    }
}

impl From<openraft::error::RaftError<NodeId, CheckIsLeaderError<NodeId, Node>>> for RequestError {
    fn from(e: openraft::error::RaftError<NodeId, CheckIsLeaderError<NodeId, Node>>) -> Self {
        match e {
            openraft::error::RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => f.into(),
            openraft::error::RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)) => RequestError::NoLeader,
            openraft::error::RaftError::Fatal(f) => f.into(),
        }
    }
}

/// A running Raft member of the Convoy cluster. Clones are cheap and share the member.
#[derive(Clone)]
pub(crate) struct RaftNode {
    id: NodeId,
    addr: String,
    raft: Raft,
    secret: Option<String>,
    identity: Identity,
    network: NetworkFactory,
    /// A leader that has not heard from a majority for this long stops acting as leader.
    quorum_lease: Duration,
    /// When a majority last acknowledged this node as leader (see [`watch_metrics`]).
    quorum_ack: pre_vote::QuorumAck,
    /// What this member heard from leaders, and its answers to pre-votes (see [`failover`]).
    elections: pre_vote::Elections,
    flushed: watch::Receiver<u64>,
    /// Who leads, whether this member may commit, whether its leader went silent (see
    /// [`leadership`]).
    leadership: watch::Receiver<Leadership>,
    /// How long a request waits for a leader to be elected: two of the longest election timeouts.
    leader_wait: Duration,
    /// What the leadership view is judged by.
    leadership_limits: leadership::Limits,
    /// The heartbeat interval.
    heartbeat: Duration,
    /// The task that forms the cluster with the configured peers, while it runs.
    forming: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// Snapshots installed since start (this member caught up by snapshot).
    installed: Arc<AtomicU64>,
    _runtime: Arc<RaftRuntime>,
}

/// The tokio runtime openraft's tasks run on: its core, state-machine worker, replication and
/// timers. It is separate from the server's so that the log and state-machine adapters can
/// commit small writes to redb on its thread (blocking it delays only Raft), with no hop to the
/// blocking pool: measured on the single-job submit path, the hop cost ~150 µs per append.
struct RaftRuntime(Option<tokio::runtime::Runtime>);

/// Worker threads of the Raft runtime. One: the core appends an entry and the state-machine
/// worker applies it on the same thread, without a wake-up across threads; measured against two
/// workers, single-job submits went ~10% faster (5.2k against 4.7k req/s, five runs each).
const RAFT_THREADS: usize = 1;

impl RaftRuntime {
    fn new() -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RAFT_THREADS)
            .thread_name("convoy-raft")
            .enable_all()
            .build()?;
        Ok(Self(Some(rt)))
    }

    fn handle(&self) -> Option<&tokio::runtime::Handle> {
        self.0.as_ref().map(|rt| rt.handle())
    }
}

impl Drop for RaftRuntime {
    fn drop(&mut self) {
        // The last clone of a node may be dropped inside an async context, where a blocking
        // runtime shutdown would panic.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl RaftNode {
    /// Starts member `node_id`, reachable by peers at `addr` (its base URL), with its log in `db`,
    /// its snapshot files in `snapshot_dir` and `state` as its state machine.
    /// `settings.bootstrap` says how a node that has never been part of a cluster gets into one.
    ///
    /// Needs a process-wide rustls crypto provider (see [`NetworkFactory::new`]). Serve
    /// [`RaftNode::router`] on `addr` for peers to reach this node.
    pub(crate) async fn start<S: ReplicatedState>(
        node_id: NodeId,
        addr: impl Into<String>,
        db: Arc<redb::Database>,
        snapshot_dir: PathBuf,
        state: S,
        settings: RaftSettings,
    ) -> Result<Self, RaftError> {
        let addr = addr.into();
        let config = Arc::new(settings.to_config()?);
        let log_store = LogStore::open(db.clone())?;
        let identity = Identity::load(node_id, db.clone())?;
        let network =
            NetworkFactory::new(identity.clone(), settings.cluster_secret.as_deref(), settings.tls_ca.as_deref())?;
        let flushed = log_store.flushed();
        let log_reader = log_store.clone();
        let state_machine = StateMachine::new(db, snapshot_dir, state)?
            .keeping_free(settings.keep_free)
            .keeping_replay_bases(settings.keep_replay_bases)?;
        let installed = state_machine.installed_counter();
        let runtime = Arc::new(RaftRuntime::new()?);
        let handle = runtime.handle().ok_or_else(|| RaftError::Shutdown("the raft runtime is gone".into()))?;
        // openraft spawns its tasks on the runtime it is created in.
        let raft = handle
            .spawn(Raft::new(node_id, config, network.clone(), log_store, state_machine))
            .await
            .map_err(|e| RaftError::Shutdown(format!("starting raft: {e}")))??;
        let quorum_ack: pre_vote::QuorumAck = Arc::new(std::sync::Mutex::new(None));
        let (leadership_tx, leadership) = watch::channel(Leadership::default());
        let leadership_limits = leadership::Limits {
            lease: settings.election_timeout_max,
            silence: settings.election_timeout_max.saturating_mul(2),
        };
        let node = Self {
            id: node_id,
            addr,
            raft,
            secret: settings.cluster_secret,
            identity: identity.clone(),
            network: network.clone(),
            // A heartbeat short of the earliest election, so the old leader stops before a new
            // one can be elected even when the last acknowledgement it counts came late.
            quorum_lease: settings.election_timeout_min.saturating_sub(settings.heartbeat_interval),
            quorum_ack: quorum_ack.clone(),
            elections: pre_vote::Elections::new(
                log_reader,
                quorum_ack,
                pre_vote::Timing {
                    lease: settings.election_timeout_max,
                    election_min: settings.election_timeout_min,
                    election_max: settings.election_timeout_max,
                    heartbeat: settings.heartbeat_interval,
                },
            ),
            flushed,
            leadership,
            leader_wait: settings.election_timeout_max.saturating_mul(2),
            leadership_limits,
            heartbeat: settings.heartbeat_interval,
            forming: Arc::new(std::sync::Mutex::new(None)),
            installed,
            _runtime: runtime,
        };
        tokio::spawn(failover::watch(node.raft.clone(), node_id, node.elections.clone(), node.network.clone()));
        tokio::spawn(watch_metrics(node.raft.metrics(), node.quorum_ack.clone(), node.network.stats()));
        tokio::spawn(leadership::publish(
            node.raft.clone(),
            node_id,
            node.quorum_ack.clone(),
            node.elections.clone(),
            leadership_limits,
            leadership_tx,
        ));
        let initialized = node.raft.is_initialized().await?;
        let single = settings.bootstrap == Bootstrap::Single;
        match settings.bootstrap {
            Bootstrap::Single if !initialized => {
                let members = BTreeMap::from([(node_id, BasicNode { addr: node.addr.clone() })]);
                node.initialize(members).await?;
            }
            Bootstrap::Peers(members) if !initialized => {
                let task =
                    tokio::spawn(bootstrap::form_with_peers(node.raft.clone(), identity.clone(), network, members));
                *node.forming.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
            }
            _ => {}
        }
        // A cluster formed before cluster ids existed, or a cluster of one, gets its id here; the
        // members it adds take it from the first RPC that reaches them.
        if (initialized || single) && identity.cluster_id().is_none() {
            identity.adopt(&identity::new_cluster_id()).map_err(|e| RaftError::Initialize(e.to_string()))?;
        }
        tracing::info!(node_id, addr = %node.addr, cluster_id = ?identity.cluster_id(), "raft node started");
        Ok(node)
    }

    /// Makes `members` (including this node) the cluster's first membership. Does nothing if the
    /// node already has a log or a vote, so it is safe to call on every start.
    pub(crate) async fn initialize(&self, members: BTreeMap<NodeId, Node>) -> Result<(), RaftError> {
        match self.raft.initialize(members.clone()).await {
            Ok(()) => {
                tracing::info!(node_id = self.id, members = ?members.keys().collect::<Vec<_>>(), "raft cluster initialized");
                Ok(())
            }
            Err(openraft::error::RaftError::APIError(InitializeError::NotAllowed(e))) => {
                tracing::info!(node_id = self.id, reason = %e, "raft cluster already initialized");
                Ok(())
            }
            Err(openraft::error::RaftError::APIError(e)) => Err(RaftError::Initialize(e.to_string())),
            Err(openraft::error::RaftError::Fatal(f)) => Err(f.into()),
        }
    }

    /// The underlying openraft handle, for what the façade does not cover.
    #[cfg(test)]
    pub(crate) fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The peer RPC routes for this node, guarded by the configured cluster secret.
    pub(crate) fn router(&self) -> axum::Router {
        raft_router(self.raft.clone(), self.identity.clone(), self.elections.clone(), self.secret.clone())
    }

    /// Peer RPC latency and failures, and leader changes.
    pub(crate) fn stats(&self) -> Arc<stats::PeerStats> {
        self.network.stats()
    }

    /// The HTTP client of peer RPCs.
    pub(crate) fn http_client(&self) -> reqwest::Client {
        self.network.http_client().clone()
    }

    /// The HTTP/2-only client of relayed gRPC calls.
    pub(crate) fn h2_client(&self) -> reqwest::Client {
        self.network.h2_client().clone()
    }

    /// Whether this node currently believes it is the leader. A hint for routing requests; use
    /// [`ensure_linearizable`](Self::ensure_linearizable) before a read that must be current.
    pub(crate) fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id)
    }

    /// The leader this node knows of, with its address.
    pub(crate) fn leader(&self) -> Option<(NodeId, Node)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let id = m.current_leader?;
        m.membership_config.membership().get_node(&id).map(|n| (id, n.clone()))
    }

    /// Whether this node leads and may act on it: it applied its own term's first entry (so its
    /// state holds everything committed before), and a majority of the voters acknowledged it
    /// within the (minimum) election timeout. openraft 0.9 does not make a leader cut off from the others
    /// step down, so a leader that only believes it leads must not hand out leases, accept run
    /// events, schedule or judge executors: a new leader is being elected on the other side.
    pub(crate) fn serving(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        if m.state != ServerState::Leader || m.current_leader != Some(self.id) {
            return false;
        }
        // Until the new term's first entry is applied, the state may lack entries of earlier
        // terms that are committed already: decisions taken on it could contradict them.
        if m.last_applied.is_none_or(|l| l.leader_id.term != m.current_term) {
            return false;
        }
        let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
        if voters.len() <= 1 {
            return true;
        }
        let ack = *self.quorum_ack.lock().unwrap_or_else(|p| p.into_inner());
        ack.is_some_and(|at| at.elapsed() <= self.quorum_lease)
    }

    /// The index of the last log entry applied to the state (0 before any).
    pub(crate) fn applied_index(&self) -> u64 {
        self.raft.metrics().borrow().last_applied.map_or(0, |l| l.index)
    }

    /// Waits until the state has applied log entry `index`; false if `timeout` passed first.
    pub(crate) async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        self.raft.wait(Some(timeout)).applied_index_at_least(Some(index), "read your writes").await.is_ok()
    }

    /// Returns once this node's state includes every write committed before the call, so that a
    /// read that follows is linearizable: the leader checks it still leads (a heartbeat round)
    /// and waits for its own state; a follower asks the leader for that index (read index) and
    /// waits until it has applied it.
    ///
    /// It waits at most `within`, and less when the answer is known sooner: a leader without a
    /// majority gives up after two election timeouts, and a follower whose leader is replaced
    /// asks the new one instead of waiting on the old.
    pub(crate) async fn linearize(&self, within: Duration) -> Result<(), RequestError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut watch = self.leadership.clone();
        loop {
            let seen = *watch.borrow_and_update();
            if seen.stopped {
                return Err(RequestError::Remote("raft has stopped on this server".into()));
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(RequestError::Remote(format!("no leader confirmed the read within {within:?}")));
            }
            let f = match confirm_leadership(&self.raft, remaining.min(self.leader_wait)).await {
                Ok(_) => return Ok(()),
                Err(openraft::error::RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => f,
                Err(e) => return Err(e.into()),
            };
            // openraft's answer may lack the leader's address that the metrics know.
            let known = match (f.leader_id, f.leader_node) {
                (Some(id), Some(node)) => Some((id, node)),
                _ => self.leader(),
            };
            let Some((leader, node)) = known else {
                // An election is under way: wait for its outcome.
                if !leadership::moved_on(&mut watch, &seen, remaining.min(self.leader_wait)).await {
                    return Err(RequestError::NoLeader);
                }
                continue;
            };
            // This member may itself have been stopped a while: a few heartbeats tell.
            if seen.leader_silent && leadership::heard_again(&mut watch, &seen, self.heartbeat * 3).await {
                continue;
            }
            if seen.leader_silent {
                return Err(RequestError::Remote(format!(
                    "this server has not heard from the leader (node {leader}) lately: it may be cut off from it"
                )));
            }
            let asked = tokio::select! {
                r = self.network.read_index(leader, &node.addr) => Some(r),
                moved = leadership::moved_on(&mut watch, &seen, remaining) => {
                    if !moved {
                        return Err(RequestError::Remote(format!("the leader did not confirm the read within {within:?}")));
                    }
                    None
                }
            };
            match asked {
                Some(Ok(index)) => {
                    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                    return if self.wait_applied(index, remaining).await {
                        Ok(())
                    } else {
                        Err(RequestError::Remote(format!("did not apply the leader's index {index} within {within:?}")))
                    };
                }
                // The leader could not confirm: ask again once another leads.
                Some(Err(e)) => {
                    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                    if !leadership::moved_on(&mut watch, &seen, remaining.min(self.leader_wait)).await {
                        return Err(RequestError::Remote(e.to_string()));
                    }
                }
                // The leader changed (or went silent) while asked: ask the next one.
                None => {}
            }
        }
    }

    /// This member's view of the leadership, kept current.
    pub(crate) fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// How long a request waits for a leader to be elected before it gives up.
    pub(crate) fn leader_wait(&self) -> Duration {
        self.leader_wait
    }

    /// This member's view of the leadership computed now (the published one may be a few tens
    /// of milliseconds old).
    pub(crate) fn leadership_now(&self) -> Leadership {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let ack = *self.quorum_ack.lock().unwrap_or_else(|p| p.into_inner());
        leadership::view(&m, self.id, ack, self.elections.last_contact(), self.leadership_limits)
    }

    /// Whether this member may lead. One that may not never starts an election, and, leading,
    /// stops its heartbeats so that the others elect another leader once its lease is over (it
    /// must also stop proposing: an append is a heartbeat too). openraft 0.9 has no transfer
    /// of leadership; this is how a leader whose disk is nearly full steps aside.
    pub(crate) fn set_may_lead(&self, yes: bool) {
        self.elections.set_may_stand(yes);
        self.raft.runtime_config().heartbeat(yes);
    }

    /// The number of voting members.
    pub(crate) fn voters(&self) -> usize {
        self.raft.metrics().borrow().membership_config.membership().voter_ids().count()
    }

    /// How many snapshots this member installed since it started: each time it caught up with a
    /// leader whose log no longer held the entries it lacked.
    pub(crate) fn snapshots_installed(&self) -> u64 {
        self.installed.load(Ordering::Relaxed)
    }

    /// The current Raft term as this node knows it.
    pub(crate) fn current_term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// Ticks each time a log append is durable: a proposer that batches can wait for it to send
    /// its next batch while the log is free.
    pub(crate) fn log_flushed(&self) -> watch::Receiver<u64> {
        self.flushed.clone()
    }

    /// Proposes `cmd` and waits until it is committed and applied; returns what applying it
    /// answered. Only the leader accepts writes: others answer [`RequestError::ForwardToLeader`].
    /// A write that fails with `ForwardToLeader` or `NoLeader` after this node proposed it may
    /// still commit under the next leader, so retried commands must be idempotent.
    pub(crate) async fn write(&self, cmd: Command) -> Result<Response, RequestError> {
        Ok(self.raft.client_write(cmd).await?.data)
    }

    /// Returns once this node's state includes every write committed before the call (a
    /// linearizable read may follow). Only the leader can answer; others say where it is.
    #[cfg(test)]
    pub(crate) async fn ensure_linearizable(&self) -> Result<(), RequestError> {
        self.raft.ensure_linearizable().await?;
        Ok(())
    }

    /// Adds node `id` at `addr` as a learner (it replicates but does not vote). With `blocking`,
    /// waits until it has caught up with the leader's log.
    #[cfg(test)]
    pub(crate) async fn add_learner(
        &self,
        id: NodeId,
        addr: impl Into<String>,
        blocking: bool,
    ) -> Result<(), RequestError> {
        self.raft.add_learner(id, BasicNode { addr: addr.into() }, blocking).await?;
        Ok(())
    }

    /// Makes `voters` the voting members (they must be members or learners already). With
    /// `retain`, removed voters stay as learners.
    #[cfg(test)]
    pub(crate) async fn change_membership(&self, voters: BTreeSet<NodeId>, retain: bool) -> Result<(), RequestError> {
        self.raft.change_membership(voters, retain).await?;
        Ok(())
    }

    /// Purges the log up to and including `upto` (at most up to the latest snapshot; on a leader,
    /// once every follower has the entries). For the server's replay retention.
    pub(crate) async fn purge_log(&self, upto: u64) -> Result<(), RequestError> {
        self.raft.trigger().purge_log(upto).await?;
        Ok(())
    }

    /// Raft metrics (role, term, leader, log and applied indexes, membership), updated live.
    pub(crate) fn metrics(&self) -> watch::Receiver<RaftMetrics> {
        self.raft.metrics()
    }

    /// Stops the Raft tasks. Requests still in flight fail with [`RequestError::Fatal`].
    pub(crate) async fn shutdown(&self) -> Result<(), RaftError> {
        if let Some(task) = self.forming.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
        self.raft.shutdown().await.map_err(|e| RaftError::Shutdown(e.to_string()))?;
        tracing::info!(node_id = self.id, "raft node stopped");
        Ok(())
    }
}

/// Follows the metrics: keeps `ack` at the instant a majority last acknowledged this node as
/// leader, and counts leader changes. The metrics give the age of that acknowledgement when they
/// were reported, and they are reported only as often as Raft's core wakes up; turned into an
/// instant at once, the age can be judged at any later time without the staleness of the report.
async fn watch_metrics(
    mut metrics: watch::Receiver<openraft::RaftMetrics<NodeId, Node>>,
    ack: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    stats: Arc<stats::PeerStats>,
) {
    let mut leader = None;
    loop {
        let (at, now_leader) = {
            let m = metrics.borrow_and_update();
            let at = m
                .millis_since_quorum_ack
                .and_then(|ms| std::time::Instant::now().checked_sub(Duration::from_millis(ms)));
            (at, m.current_leader)
        };
        *ack.lock().unwrap_or_else(|p| p.into_inner()) = at;
        if now_leader.is_some() && now_leader != leader {
            if leader.is_some() {
                stats.leader_changed();
            }
            tracing::info!(leader = ?now_leader, "leader known");
            leader = now_leader;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// openraft's `ensure_linearizable`, retried while a majority does not answer in time: openraft
/// allows the confirming heartbeat round one heartbeat interval, which a busy follower (an fsync
/// under way) can miss without anything being wrong.
pub(crate) async fn confirm_leadership(
    raft: &Raft,
    within: Duration,
) -> Result<Option<LogId>, openraft::error::RaftError<NodeId, CheckIsLeaderError<NodeId, Node>>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match raft.ensure_linearizable().await {
            Err(openraft::error::RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)))
                if tokio::time::Instant::now() < deadline =>
            {
                tracing::debug!(error = %q, "leadership not confirmed by a majority in time; asking again");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}
