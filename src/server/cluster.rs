//! The Raft node as the control plane uses it: proposing through it (`Replicate`, for the
//! writer) and reading leadership and membership from it (`ClusterView`, for the API).

use crate::control::{
    Addition, ClusterView, Leadership, MembershipError, PeerRpcFigures, RelayError, Replicate, WriteError,
};
use crate::model::api::{ClusterMember, ClusterStatus};
use crate::raft::{RaftNode, RequestError};
use crate::state::{Command, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Proposing through the Raft node.
pub(super) struct RaftReplicate(pub RaftNode);

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
pub(super) struct RaftView {
    /// The Raft node.
    pub node: RaftNode,
    /// The state machine's last applied index (see [`crate::server::machine::ServerMachine::applied_counter`]).
    pub applied: Arc<AtomicU64>,
}

impl ClusterView for RaftView {
    fn is_leader(&self) -> bool {
        self.node.is_leader()
    }

    fn serving(&self) -> bool {
        self.node.serving()
    }

    fn applied_index(&self) -> u64 {
        self.applied.load(Ordering::Acquire).max(self.node.applied_index())
    }

    fn wait_applied(&self, index: u64, timeout: Duration) -> BoxFuture<'static, bool> {
        let node = self.node.clone();
        Box::pin(async move { node.wait_applied(index, timeout).await })
    }

    fn linearize(&self, timeout: Duration) -> BoxFuture<'static, Result<(), String>> {
        let node = self.node.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, node.linearize(timeout)).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no confirmation from the leader within {timeout:?}")),
            }
        })
    }

    fn term(&self) -> u64 {
        self.node.current_term()
    }

    fn leadership(&self) -> tokio::sync::watch::Receiver<Leadership> {
        self.node.leadership()
    }

    fn leadership_now(&self) -> Leadership {
        self.node.leadership_now()
    }

    fn leader_wait(&self) -> Duration {
        self.node.leader_wait()
    }

    fn leader_addr(&self) -> Option<String> {
        self.node.leader().map(|(_, n)| n.addr)
    }

    fn ready(&self) -> bool {
        let m = self.node.metrics().borrow().clone();
        // A leader is ready once it has applied an entry of its own term (the blank entry every
        // new leader commits first): everything before it is then applied too. Comparing with the
        // last log index instead made a busy leader, with writes in flight, look unready.
        match m.current_leader {
            None => false,
            Some(leader) if leader == m.id => m.last_applied.is_some_and(|l| l.leader_id.get_term() == m.current_term),
            Some(_) => true,
        }
    }

    fn status(&self) -> ClusterStatus {
        let m = self.node.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let last_log = m.last_log_index.unwrap_or(0);
        let progress = m.replication.clone().unwrap_or_default();
        let members = m
            .membership_config
            .nodes()
            .map(|(id, n)| {
                let matched = progress.get(id).map(|l| l.map_or(0, |l| l.index));
                ClusterMember {
                    id: *id,
                    addr: n.addr.clone(),
                    voter: membership.voter_ids().any(|v| v == *id),
                    matched_index: matched,
                    lag: matched.map(|i| last_log.saturating_sub(i)),
                }
            })
            .collect();
        ClusterStatus {
            id: m.id,
            state: format!("{:?}", m.state),
            serving: self.node.serving(),
            term: m.current_term,
            leader: m.current_leader,
            leader_addr: self.leader_addr(),
            last_log_index: m.last_log_index,
            last_applied: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            millis_since_quorum_ack: m.millis_since_quorum_ack,
            leader_changes: self.node.stats().leader_changes(),
            snapshots_installed: self.node.snapshots_installed(),
            members,
        }
    }

    fn peer_rpcs(&self) -> PeerRpcFigures {
        let stats = self.node.stats();
        PeerRpcFigures {
            latency: stats.latency().into_iter().collect(),
            failures: stats.failures().into_iter().collect(),
        }
    }

    fn add_member(
        &self,
        id: u64,
        addr: String,
        wait: Duration,
    ) -> BoxFuture<'static, Result<Addition, MembershipError>> {
        let node = self.node.clone();
        Box::pin(async move { node.add_member(id, addr, wait).await })
    }

    fn remove_member(&self, id: u64) -> BoxFuture<'static, Result<(), MembershipError>> {
        let node = self.node.clone();
        Box::pin(async move { node.remove_member(id).await })
    }

    fn relay(
        &self,
        addr: &str,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<Bytes>, RelayError>> {
        let client = self.node.http_client();
        let addr = addr.trim_end_matches('/').to_string();
        Box::pin(async move { relay(client, addr, request, timeout).await })
    }

    fn relay_h2(
        &self,
        addr: &str,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<axum::body::Body>, RelayError>> {
        let client = self.node.h2_client();
        let addr = addr.trim_end_matches('/').to_string();
        Box::pin(async move {
            let answer = send(&client, &addr, request, timeout).await?;
            let mut response: http::Response<reqwest::Body> = answer.into();
            let hop_by_hop: Vec<_> = response.headers().keys().filter(|n| is_hop_by_hop(n)).cloned().collect();
            for name in hop_by_hop {
                response.headers_mut().remove(name);
            }
            Ok(response.map(axum::body::Body::new))
        })
    }
}

/// Sends `request` to `addr` and reads the whole answer.
async fn relay(
    client: reqwest::Client,
    addr: String,
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<http::Response<Bytes>, RelayError> {
    let answer = send(&client, &addr, request, timeout).await?;
    let mut response = http::Response::builder().status(answer.status());
    for (name, value) in answer.headers().iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        response = response.header(name, value);
    }
    let body = answer
        .bytes()
        .await
        .map_err(|e| RelayError::Lost { addr: addr.clone(), message: crate::service::error_chain(&e) })?;
    response.body(body).map_err(|e| RelayError::Lost { addr: addr.clone(), message: e.to_string() })
}

/// Sends `request` to `addr`; the answer once its head arrived.
async fn send(
    client: &reqwest::Client,
    addr: &str,
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<reqwest::Response, RelayError> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut outgoing = client.request(parts.method, format!("{addr}{path}")).timeout(timeout).body(body);
    for (name, value) in parts.headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        outgoing = outgoing.header(name, value);
    }
    let lost = |e: reqwest::Error| {
        let message = crate::service::error_chain(&e);
        let addr = addr.to_string();
        // Only a failure to connect proves the leader never saw the request.
        if e.is_connect() { RelayError::NotSent { addr, message } } else { RelayError::Lost { addr, message } }
    };
    outgoing.send().await.map_err(lost)
}

/// Headers that belong to one connection, not to the request (RFC 9110 section 7.6.1), and the
/// ones the client recomputes.
fn is_hop_by_hop(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}
