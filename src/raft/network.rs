//! Raft RPC between servers over HTTP: `POST {addr}/raft/append`, `/raft/vote` and
//! `/raft/snapshot`, with bincode bodies (`application/octet-stream`). The response body is the
//! bincode of the receiving Raft's `Result<Response, RaftError>`, so remote Raft errors reach the
//! caller's openraft as `RemoteError`s. When a cluster secret is configured, every request carries
//! it in `x-convoy-cluster-secret` and the server answers 401 to a wrong or missing one.
//!
//! Peers advertised as `https://` are reached over TLS; with a CA configured
//! ([`super::RaftSettings::tls_ca`]) only certificates it signed are trusted, else the system's
//! roots.
//!
//! Every request names the peer protocol version it speaks ([`PROTOCOL_HEADER`]); a server of
//! another version refuses it with 400 and says which versions meet, rather than misreading it.

use super::acked::{Acked, LostEntries};
use super::identity::{AdoptError, CLUSTER_HEADER, Identity, TARGET_HEADER};
use super::pre_vote::{Elections, PreVoteAnswer, PreVoteRequest};
use super::stats::PeerStats;
use super::types::{Node, NodeId, Raft, TypeConfig};
use crate::certs::{PemFileError, https_client};
use crate::record::{CodecError, decode, encode};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{RPCTypes, RaftNetwork, RaftNetworkFactory};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Header carrying the cluster secret on peer RPCs.
pub(super) const SECRET_HEADER: &str = "x-convoy-cluster-secret";

/// Header naming the node that sends a peer RPC (for logs, and for fault-injecting proxies in
/// tests).
pub(super) const SENDER_HEADER: &str = "x-convoy-sender-node";

/// Header carrying the peer protocol version on peer RPCs.
pub const PROTOCOL_HEADER: &str = "x-convoy-peer-protocol";

/// Version of the peer protocol: openraft's RPC messages (as openraft 0.9 encodes them) carrying
/// log entries of log format [`crate::record::LOG_FORMAT_VERSION`] and snapshot chunks of
/// snapshot file format [`crate::record::SNAPSHOT_FORMAT_VERSION`]. It changes with any of them.
/// Requests without the header come from servers older than it, which spoke version 1.
///
/// - 1: snapshots were the state's inline snapshot record.
/// - 2: snapshots are snapshot files (the log entries did not change).
/// - 3: log format 3 (purges of finished jobs, which a server of version 2 cannot decode) and
///   snapshots of state schema 3 (with the `finished` index).
/// - 4: log format 4 (run events with node faults, quarantine lifts) and snapshots of state
///   schema 4 (with the `node_health` table).
/// - 5: log format 5 (records of the queues' usage) and snapshots of state schema 5 (with the
///   `queue_usage` meta row).
/// - 6: log format 6 (queues with their place in the queue tree) and snapshots of state schema 6
///   (with the `queue_tree` meta row).
/// - 7: log format 7 (submissions with namespaces, run events with pods) and snapshots of state
///   schema 7 (jobs with namespaces, runs with pods, the `run_jobs` index).
/// - 8: log format 8 (submissions with their owner) and snapshots of state schema 8 (the
///   `job_owners` table).
/// - 9: log format 9 (run events with what a run used) and snapshots of state schema 9 (the
///   `run_usage` table).
/// - 10: log format 10 (scheduling cycles with their inputs, the recorded scheduler
///   configuration) and snapshots of state schema 10 (its meta rows).
/// - 11: log format 11 (submissions with dependencies and retry policies) and snapshots of state
///   schema 11 (the `job_policies` table).
/// - 12: log format 12 (queues with their guarantee and preemption policy) and snapshots of
///   state schema 12 (the `queue_policies` meta row).
/// - 13: log format 13 (queues with retry policies, reservation changes) and snapshots of state
///   schema 13 (the `queue_policies` meta row with retry policies).
pub const PROTOCOL_VERSION: u32 = 13;

/// Largest RPC body the server accepts. Snapshot chunks are bounded by the configured chunk size
/// (a chunk is read from the snapshot file and held once, by the sender and the receiver, so a
/// snapshot of any size costs each side one chunk of memory) and append batches by
/// `max_payload_entries`; a batch above this gets 413 and the sender retries with fewer entries.
pub(crate) const MAX_RPC_BODY: usize = 64 * 1024 * 1024;

/// How long a client waits for a TCP connection to a peer. Short: a peer that does not accept
/// quickly is treated as unreachable and retried with back-off.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Largest append batch sent at once, in encoded bytes; a larger one is split (a single entry
/// larger than this still goes alone).
const MAX_APPEND_BYTES: usize = 1024 * 1024;

const OCTET_STREAM: &str = "application/octet-stream";

/// Why the network client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkSetupError {
    /// rustls has no process-wide crypto provider to build the TLS client with.
    #[error(
        "no rustls crypto provider is installed; install one (rustls::crypto::ring::default_provider().install_default()) before starting Raft"
    )]
    NoCryptoProvider,
    /// The cluster secret cannot be sent as an HTTP header value.
    #[error("the cluster secret is not a valid HTTP header value")]
    InvalidSecret,
    /// The CA file for peers' certificates is not usable.
    #[error("tls.ca: {0}")]
    Ca(#[from] PemFileError),
    /// reqwest could not build the HTTP client.
    #[error("cannot build the HTTP client for Raft RPC: {0}")]
    Client(#[from] reqwest::Error),
}

/// An HTTP exchange with a peer that did not produce a Raft answer.
#[derive(Debug, thiserror::Error)]
enum PeerHttpError {
    #[error("peer answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("cannot encode or decode an RPC body")]
    Codec(#[from] CodecError),
}

/// Creates one [`PeerClient`] per target; all share one pooled HTTP client.
#[derive(Clone)]
pub(crate) struct NetworkFactory {
    identity: Identity,
    client: reqwest::Client,
    h2_client: reqwest::Client,
    secret: Option<HeaderValue>,
    stats: Arc<PeerStats>,
    acked: Arc<Acked>,
}

impl NetworkFactory {
    /// A factory for the outgoing RPCs of the node `identity` names, sending `secret` with each.
    /// With `ca` (a PEM file), `https://` peers must present a certificate it signed; without it,
    /// one the operating system trusts. Requires a process-wide rustls crypto provider (only used
    /// if a peer address is `https://`, but the HTTP client is built with TLS support).
    pub(crate) fn new(identity: Identity, secret: Option<&str>, ca: Option<&Path>) -> Result<Self, NetworkSetupError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(NetworkSetupError::NoCryptoProvider);
        }
        let secret = match secret {
            Some(s) => {
                let mut v = HeaderValue::from_str(s).map_err(|_| NetworkSetupError::InvalidSecret)?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let builder = || {
            reqwest::Client::builder()
                // A relay passes the leader's redirects (the web UI's after an action) on as
                // they are; peer RPCs have none.
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .pool_idle_timeout(Duration::from_secs(60))
        };
        let client = https_client(builder(), ca)?.build()?;
        let h2_client = https_client(builder().http2_prior_knowledge(), ca)?.build()?;
        Ok(Self {
            identity,
            client,
            h2_client,
            secret,
            stats: Arc::new(PeerStats::default()),
            acked: Arc::new(Acked::default()),
        })
    }

    /// Forgets what member `id` acknowledged: it left the cluster, and may come back afresh.
    pub(crate) fn forget_acknowledged(&self, id: NodeId) {
        self.acked.forget(id);
    }

    /// Latency and failures of this server's peer RPCs.
    pub(crate) fn stats(&self) -> Arc<PeerStats> {
        self.stats.clone()
    }

    /// The HTTP client of peer RPCs (its TLS trust is the peers'), for requests a follower
    /// relays to the leader.
    pub(crate) fn http_client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The same client speaking only HTTP/2 (prior knowledge over plain TCP, ALPN `h2` over
    /// TLS), for the gRPC calls a follower relays: gRPC answers end in trailers.
    pub(crate) fn h2_client(&self) -> &reqwest::Client {
        &self.h2_client
    }

    /// A request to peer `target` at `addr` (its base URL) for `path`, with the headers every
    /// peer RPC carries: protocol version, target and sending node, cluster id and secret.
    fn request(&self, method: reqwest::Method, addr: &str, path: &str, target: NodeId) -> reqwest::RequestBuilder {
        let url = format!("{}{path}", addr.trim_end_matches('/'));
        let mut request = self
            .client
            .request(method, url)
            .header(PROTOCOL_HEADER, PROTOCOL_VERSION)
            .header(TARGET_HEADER, target)
            .header(SENDER_HEADER, self.identity.node_id());
        if let Some(c) = self.identity.cluster_id() {
            request = request.header(CLUSTER_HEADER, c);
        }
        if let Some(secret) = &self.secret {
            request = request.header(SECRET_HEADER, secret.clone());
        }
        request
    }

    /// Asks peer `target` at `addr` whether it is part of a cluster yet.
    pub(crate) async fn peer_status(&self, target: NodeId, addr: &str) -> Result<PeerStatus, PeerCallError> {
        self.call_json(reqwest::Method::GET, addr, "/raft/status", target).await
    }

    /// Asks the leader `target` at `addr` for a read index: it confirms it still leads and answers
    /// the index of the last entry it had applied, which includes every committed write.
    pub(crate) async fn read_index(&self, target: NodeId, addr: &str) -> Result<u64, PeerCallError> {
        let answer: ReadIndex = self.call_json(reqwest::Method::POST, addr, "/raft/read-index", target).await?;
        Ok(answer.index)
    }

    /// Asks voter `target` at `addr` whether it would vote for this member now (see
    /// [`super::failover`]); `timeout` bounds the call.
    pub(crate) async fn pre_vote(
        &self,
        target: NodeId,
        addr: &str,
        req: &PreVoteRequest,
        timeout: Duration,
    ) -> Result<PreVoteAnswer, PeerCallError> {
        json_answer(self.request(reqwest::Method::POST, addr, "/raft/pre-vote", target).timeout(timeout).json(req))
            .await
    }

    /// A bodiless request to a peer's JSON route, its answer decoded.
    async fn call_json<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        addr: &str,
        path: &str,
        target: NodeId,
    ) -> Result<T, PeerCallError> {
        json_answer(self.request(method, addr, path, target).timeout(PEER_CALL_TIMEOUT)).await
    }

    /// Gives peer `target` at `addr` the id of the cluster it is about to be a founding member of.
    pub(crate) async fn give_cluster_id(
        &self,
        target: NodeId,
        addr: &str,
        cluster_id: &str,
    ) -> Result<(), PeerCallError> {
        let response = self
            .request(reqwest::Method::POST, addr, "/raft/cluster-id", target)
            .timeout(PEER_CALL_TIMEOUT)
            .json(&ClusterIdRequest { cluster_id: cluster_id.to_string() })
            .send()
            .await
            .map_err(PeerCallError::Http)?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.bytes().await.map_err(PeerCallError::Http)?;
        Err(PeerCallError::Refused { status: status.as_u16(), body: text_of(&body) })
    }
}

/// Sends a request to a peer's JSON route and decodes its answer; any other status is refused.
async fn json_answer<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, PeerCallError> {
    let response = request.send().await.map_err(PeerCallError::Http)?;
    let status = response.status();
    let body = response.bytes().await.map_err(PeerCallError::Http)?;
    if !status.is_success() {
        return Err(PeerCallError::Refused { status: status.as_u16(), body: text_of(&body) });
    }
    serde_json::from_slice(&body).map_err(|e| PeerCallError::Refused { status: status.as_u16(), body: e.to_string() })
}

/// How long a status or cluster-id call to a peer may take.
const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// An error with its causes, on one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}

fn text_of(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned()
}

/// A peer's answer to `GET /raft/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub(crate) struct PeerStatus {
    /// The peer's node id.
    pub node_id: NodeId,
    /// True once it is a member of a cluster (it has a log or a vote).
    pub initialized: bool,
    /// The cluster it belongs to or was given, if any.
    pub cluster_id: Option<String>,
}

/// Answer of `POST /raft/read-index`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct ReadIndex {
    index: u64,
}

/// Body of `POST /raft/cluster-id`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct ClusterIdRequest {
    cluster_id: String,
}

/// A status or cluster-id call to a peer that did not go through.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerCallError {
    /// The peer could not be reached, or did not answer in time (the message carries the causes,
    /// such as a certificate the CA did not sign).
    #[error("peer unreachable: {}", error_chain(.0))]
    Http(reqwest::Error),
    /// The peer answered with an error.
    #[error("peer answered HTTP {status}: {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The start of its answer.
        body: String,
    },
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        PeerClient { factory: self.clone(), target, node: node.clone() }
    }
}

/// Sends Raft RPCs to one peer.
pub(crate) struct PeerClient {
    factory: NetworkFactory,
    target: NodeId,
    node: Node,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, Node, RaftError<NodeId, E>>>;

impl PeerClient {
    /// POSTs `req` to `{addr}/raft/{path}` and decodes the remote Raft's answer.
    async fn call<Req, Resp, E>(
        &self,
        action: RPCTypes,
        path: &'static str,
        req: &Req,
        option: &RPCOption,
        entries: u64,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let started = std::time::Instant::now();
        let result = self.exchange(action, path, req, option, entries).await;
        let stats = &self.factory.stats;
        match &result {
            Err(RPCError::Unreachable(_) | RPCError::Timeout(_) | RPCError::Network(_)) => {
                stats.failed(self.target, path)
            }
            _ => stats.answered(self.target, path, started.elapsed()),
        }
        result
    }

    /// One exchange of [`call`](Self::call).
    async fn exchange<Req, Resp, E>(
        &self,
        action: RPCTypes,
        path: &'static str,
        req: &Req,
        option: &RPCOption,
        entries: u64,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = encode(req).map_err(|e| RPCError::Network(NetworkError::new(&PeerHttpError::Codec(e))))?;
        if action == RPCTypes::AppendEntries && entries > 1 && body.len() > MAX_APPEND_BYTES {
            // openraft allows an append one heartbeat interval: a lagging member fed hundreds of
            // large entries at once would time out every time and never catch up.
            let hint = (entries * MAX_APPEND_BYTES as u64 / body.len() as u64).max(1);
            return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint)));
        }
        let request = self
            .factory
            .request(reqwest::Method::POST, &self.node.addr, &format!("/raft/{path}"), self.target)
            .timeout(option.hard_ttl())
            .header(header::CONTENT_TYPE, OCTET_STREAM)
            .body(body);
        let timeout = |_| {
            RPCError::Timeout(Timeout {
                action,
                id: self.factory.identity.node_id(),
                target: self.target,
                timeout: option.hard_ttl(),
            })
        };
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                RPCError::Unreachable(Unreachable::new(&e))
            } else if e.is_timeout() {
                timeout(e)
            } else {
                RPCError::Network(NetworkError::new(&e))
            }
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| if e.is_timeout() { timeout(e) } else { RPCError::Network(NetworkError::new(&e)) })?;
        if status == StatusCode::PAYLOAD_TOO_LARGE && action == RPCTypes::AppendEntries {
            // Ask openraft to resend with fewer entries.
            let hint = (entries / 2).max(1);
            tracing::warn!(target = self.target, entries, hint, "peer refused an append batch as too large");
            return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint)));
        }
        if !status.is_success() {
            let body = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
            return Err(RPCError::Network(NetworkError::new(&PeerHttpError::Status { status: status.as_u16(), body })));
        }
        let answer: Result<Resp, RaftError<NodeId, E>> =
            decode(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&PeerHttpError::Codec(e))))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }
}

impl PeerClient {
    /// The error that keeps openraft from recording a member's loss of data: "unreachable", so
    /// that it retries with back-off instead of at once. Logged once per member and term.
    fn lost_entries<E: std::error::Error>(&self, e: LostEntries) -> RPCError<NodeId, Node, E> {
        if self.factory.acked.first_report(&e) {
            tracing::error!(target = self.target, error = %e, "a member lost log entries it had acknowledged");
        }
        RPCError::Unreachable(Unreachable::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        let entries = rpc.entries.len() as u64;
        let term = rpc.vote.leader_id().term;
        let prev = rpc.prev_log_id.map(|l| l.index);
        let last = rpc.entries.last().map(|e| e.log_id.index).or(prev);
        let answer = self.call(RPCTypes::AppendEntries, "append", &rpc, &option, entries).await?;
        let lost = match &answer {
            AppendEntriesResponse::Success => self.factory.acked.matched(self.target, term, last),
            AppendEntriesResponse::PartialSuccess(m) => {
                self.factory.acked.matched(self.target, term, m.map(|l| l.index))
            }
            AppendEntriesResponse::Conflict => self.factory.acked.conflict(self.target, term, prev),
            AppendEntriesResponse::HigherVote(_) => None,
        };
        match lost {
            None => Ok(answer),
            Some(e) => Err(self.lost_entries(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let (term, done, last) = (rpc.vote.leader_id().term, rpc.done, rpc.meta.last_log_id.map(|l| l.index));
        let answer = self.call(RPCTypes::InstallSnapshot, "snapshot", &rpc, &option, 0).await?;
        if done && let Some(e) = self.factory.acked.matched(self.target, term, last) {
            return Err(self.lost_entries(e));
        }
        Ok(answer)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(RPCTypes::Vote, "vote", &rpc, &option, 0).await
    }
}

#[derive(Clone)]
struct ServerState {
    raft: Raft,
    identity: Identity,
    elections: Elections,
}

/// The peer-facing routes: `/raft/append`, `/raft/vote`, `/raft/snapshot`, `/raft/pre-vote`,
/// `/raft/read-index`, and for forming a cluster `/raft/status` and `/raft/cluster-id`. With `secret`, requests without the matching
/// `x-convoy-cluster-secret` header get 401 before their body is read; requests of another
/// protocol version get 400, and requests meant for another node or from another cluster 409.
pub(crate) fn raft_router(raft: Raft, identity: Identity, elections: Elections, secret: Option<String>) -> Router {
    let routes = Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .route("/raft/status", get(status))
        .route("/raft/cluster-id", post(cluster_id))
        .route("/raft/read-index", post(read_index))
        .route("/raft/pre-vote", post(pre_vote))
        .layer(DefaultBodyLimit::max(MAX_RPC_BODY))
        .layer(axum::middleware::from_fn_with_state(identity.clone(), check_identity))
        .layer(axum::middleware::from_fn(check_protocol))
        .with_state(ServerState { raft, identity, elections });
    match secret {
        Some(s) => routes.layer(axum::middleware::from_fn_with_state(Arc::<str>::from(s), check_secret)),
        None => routes,
    }
}

/// Refuses requests of another peer protocol version before their body is read.
async fn check_protocol(request: Request, next: Next) -> Response {
    let presented = match request.headers().get(PROTOCOL_HEADER) {
        None => Some(1),
        Some(v) => v.to_str().ok().and_then(|s| s.trim().parse::<u32>().ok()),
    };
    match presented {
        Some(PROTOCOL_VERSION) => next.run(request).await,
        other => {
            let theirs = other.map_or_else(|| "an unreadable version".to_string(), |v| format!("version {v}"));
            tracing::warn!(path = %request.uri().path(), peer_protocol = ?other, "raft RPC refused: other protocol version");
            let message = format!(
                "this server speaks peer protocol version {PROTOCOL_VERSION} and the request {theirs}: every server of a \
                 cluster must run a convoy release with the same peer protocol"
            );
            (StatusCode::BAD_REQUEST, message).into_response()
        }
    }
}

/// Refuses requests meant for another node or coming from another cluster; a member that does
/// not know its cluster yet takes the sender's (it is being added, or was wiped). The cluster-id
/// route itself hands the id over explicitly, so it is not taken from its header here.
async fn check_identity(State(identity): State<Identity>, request: Request, next: Next) -> Response {
    let (target, cluster) = match peer_headers(&request) {
        Ok(h) => h,
        Err(response) => return response,
    };
    let checked = identity.check(target, cluster.as_deref());
    match checked {
        Ok(()) => next.run(request).await,
        Err(AdoptError::Mismatch(m)) => {
            tracing::warn!(path = %request.uri().path(), reason = %m, "raft RPC refused");
            (StatusCode::CONFLICT, m.to_string()).into_response()
        }
        Err(AdoptError::Storage(e)) => {
            tracing::error!(error = %e, "cannot record the cluster id");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot record the cluster id").into_response()
        }
    }
}

/// The target node and cluster id a peer request names (the cluster-id route hands its id over
/// in the body instead).
#[allow(clippy::result_large_err)] // The error is the answer itself.
fn peer_headers(request: &Request) -> Result<(Option<NodeId>, Option<String>), Response> {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let target = match header(TARGET_HEADER).map(|t| t.trim().parse::<NodeId>()) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => {
            return Err((StatusCode::BAD_REQUEST, format!("{TARGET_HEADER} is not a node id")).into_response());
        }
    };
    let cluster = if request.uri().path() == "/raft/cluster-id" { None } else { header(CLUSTER_HEADER) };
    Ok((target, cluster))
}

/// Confirms this node still leads and answers its applied index (see [`NetworkFactory::read_index`]).
async fn read_index(State(s): State<ServerState>) -> Response {
    match super::confirm_leadership(&s.raft, PEER_CALL_TIMEOUT / 2).await {
        Ok(_) => {
            let index = s.raft.metrics().borrow().last_applied.map_or(0, |l| l.index);
            axum::Json(ReadIndex { index }).into_response()
        }
        Err(e) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("not a leader that can confirm a read: {e}")).into_response()
        }
    }
}

/// Answers a candidate's pre-vote (see [`super::failover`]).
async fn pre_vote(State(s): State<ServerState>, body: Bytes) -> Response {
    match serde_json::from_slice::<PreVoteRequest>(&body) {
        Ok(req) => axum::Json(s.elections.answer(&req)).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("cannot decode pre-vote request: {e}")).into_response(),
    }
}

async fn status(State(s): State<ServerState>) -> Response {
    let initialized = match s.raft.is_initialized().await {
        Ok(i) => i,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("raft stopped: {e}")).into_response(),
    };
    let body = PeerStatus { node_id: s.identity.node_id(), initialized, cluster_id: s.identity.cluster_id() };
    axum::Json(body).into_response()
}

/// Takes the id of a cluster this node is about to found. Refused once it is a member of one.
async fn cluster_id(State(s): State<ServerState>, body: Bytes) -> Response {
    let req: ClusterIdRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("cannot decode cluster-id request: {e}")).into_response(),
    };
    match s.raft.is_initialized().await {
        Ok(false) => {}
        Ok(true) if s.identity.cluster_id().as_deref() == Some(req.cluster_id.as_str()) => {
            return StatusCode::NO_CONTENT.into_response();
        }
        Ok(true) => return (StatusCode::CONFLICT, "this server is already a member of a cluster").into_response(),
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("raft stopped: {e}")).into_response(),
    }
    match s.identity.adopt(&req.cluster_id) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(AdoptError::Mismatch(m)) => (StatusCode::CONFLICT, m.to_string()).into_response(),
        Err(AdoptError::Storage(e)) => {
            tracing::error!(error = %e, "cannot record the cluster id");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot record the cluster id").into_response()
        }
    }
}

async fn check_secret(State(secret): State<Arc<str>>, request: Request, next: Next) -> Response {
    let presented = request.headers().get(SECRET_HEADER).map(HeaderValue::as_bytes);
    match presented {
        Some(p) if constant_time_eq(p, secret.as_bytes()) => next.run(request).await,
        _ => {
            tracing::warn!(path = %request.uri().path(), "raft RPC refused: wrong or missing cluster secret");
            (StatusCode::UNAUTHORIZED, "wrong or missing cluster secret").into_response()
        }
    }
}

/// Compares without an early exit, so timing does not reveal how much of the secret matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn octets(bytes: Vec<u8>) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(OCTET_STREAM));
    (StatusCode::OK, headers, bytes).into_response()
}

fn bad_request(what: &str, e: CodecError) -> Response {
    let cause = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
    tracing::warn!(rpc = what, error = %e, cause, "undecodable raft RPC");
    (StatusCode::BAD_REQUEST, format!("cannot decode {what} request: {e}{cause}")).into_response()
}

fn answer<T: Serialize>(what: &str, result: &T) -> Response {
    match encode(result) {
        Ok(bytes) => octets(bytes),
        Err(e) => {
            tracing::error!(rpc = what, error = %e, "cannot encode raft RPC answer");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode {what} answer: {e}")).into_response()
        }
    }
}

async fn append(State(s): State<ServerState>, body: Bytes) -> Response {
    match decode::<AppendEntriesRequest<TypeConfig>>(&body) {
        Ok(req) => {
            let result = s.raft.append_entries(req).await;
            // Word from a stale leader (refused with a higher vote) does not hold off elections.
            if matches!(
                result,
                Ok(AppendEntriesResponse::Success
                    | AppendEntriesResponse::PartialSuccess(_)
                    | AppendEntriesResponse::Conflict)
            ) {
                s.elections.heard();
            }
            answer("append", &result)
        }
        Err(e) => bad_request("append", e),
    }
}

async fn vote(State(s): State<ServerState>, body: Bytes) -> Response {
    match decode::<VoteRequest<NodeId>>(&body) {
        Ok(req) => answer("vote", &s.raft.vote(req).await),
        Err(e) => bad_request("vote", e),
    }
}

async fn snapshot(State(s): State<ServerState>, body: Bytes) -> Response {
    match decode::<InstallSnapshotRequest<TypeConfig>>(&body) {
        Ok(req) => {
            let vote = req.vote;
            let result = s.raft.install_snapshot(req).await;
            if result.as_ref().is_ok_and(|r| r.vote <= vote) {
                s.elections.heard();
            }
            answer("snapshot", &result)
        }
        Err(e) => bad_request("snapshot", e),
    }
}
