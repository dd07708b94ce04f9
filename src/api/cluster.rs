//! The cluster endpoints: this server's view of the Raft cluster, adding and removing servers
//! (admins only; on a follower the API relays the changes to the leader), and the digest of this
//! server's replicated state (admins only), to check that the members agree.

use super::auth::{AdminRole, Authorized, Principal};
use super::problem::{ApiError, ApiJson, json};
use crate::control::{Addition, Control, MembershipError};
use crate::model::api::{AddMemberRequest, ClusterDigest, ClusterStatus, MembershipChange, Problem};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use std::sync::Arc;
use std::time::Duration;

/// How long an addition waits by default for the newcomer to catch up and vote.
const DEFAULT_ADD_WAIT: Duration = Duration::from_secs(20);
/// The longest wait a caller may ask for (relayed requests must finish within the relay's timeout).
const MAX_ADD_WAIT: Duration = Duration::from_secs(30);

/// Query of `POST /v1/cluster/members`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct AddQuery {
    /// Seconds to wait for the new server to catch up and vote (default 20, at most 30). The
    /// change goes on after that; the answer then says `catching_up`.
    pub wait_seconds: Option<f64>,
}

impl From<MembershipError> for ApiError {
    fn from(e: MembershipError) -> Self {
        match e {
            MembershipError::Invalid(m) => ApiError::new(axum::http::StatusCode::CONFLICT, m),
            e @ MembershipError::NotFound(_) => ApiError::not_found(e.to_string()),
            MembershipError::Raft(e) => ApiError::unavailable(format!("the membership change did not happen: {e}")),
        }
    }
}

/// Raft cluster status
///
/// This server's view of the cluster: its role, the term, the leader, its log indexes, and the
/// members. On the leader each member also has its replication progress (`matched_index`,
/// `lag`).
#[utoipa::path(
    get,
    path = "/v1/cluster",
    operation_id = "clusterStatus",
    tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "This server's view of the cluster", body = ClusterStatus),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn status(State(app): State<Arc<Control>>, _p: Principal) -> Response {
    json(app.cluster.status())
}

/// Add a server
///
/// Adds a server to the cluster: it joins as a learner (it receives the log but does not vote)
/// and becomes a voter once it has caught up. Start it first, with a `[cluster] peers` list that
/// names the current members and itself: it then waits to be added instead of forming a cluster.
#[utoipa::path(
    post,
    path = "/v1/cluster/members",
    operation_id = "addClusterMember",
    tag = "operations",
    security(("bearer" = [])),
    params(AddQuery),
    request_body = AddMemberRequest,
    responses(
        (status = 200, description = "The server votes, or is catching up (`outcome`)", body = MembershipChange),
        (status = 400, description = "The body is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The id or the address belongs to another member", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the change could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn add(
    State(app): State<Arc<Control>>,
    _caller: Authorized<AdminRole>,
    Query(q): Query<AddQuery>,
    ApiJson(req): ApiJson<AddMemberRequest>,
) -> Result<Response, ApiError> {
    let addr = req.addr.trim().trim_end_matches('/').to_string();
    let url =
        reqwest::Url::parse(&addr).map_err(|e| ApiError::bad_request("addr", format!("{addr:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() || url.path() != "/" {
        return Err(ApiError::bad_request("addr", "must be http(s)://host:port with no path"));
    }
    if req.id == 0 {
        return Err(ApiError::bad_request("id", "node ids start at 1"));
    }
    let wait = match q.wait_seconds {
        None => DEFAULT_ADD_WAIT,
        Some(w) if w.is_finite() && w >= 0.0 => Duration::from_secs_f64(w).min(MAX_ADD_WAIT),
        Some(_) => return Err(ApiError::bad_request("wait_seconds", "must be a number of seconds >= 0")),
    };
    let added = app.cluster.add_member(req.id, addr, wait).await?;
    let outcome = match added {
        Addition::Voter => "voter",
        Addition::CatchingUp => "catching_up",
    };
    Ok(json(MembershipChange { outcome: outcome.into(), cluster: app.cluster.status() }))
}

/// Remove a server
///
/// Removes a server (voter or learner) from the cluster. Stop it afterwards. The last voter
/// cannot be removed.
#[utoipa::path(
    delete,
    path = "/v1/cluster/members/{id}",
    operation_id = "removeClusterMember",
    tag = "operations",
    security(("bearer" = [])),
    params(("id" = u64, Path, description = "Node id of the server to remove")),
    responses(
        (status = 200, description = "The server is no longer a member", body = MembershipChange),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No member has this id", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is the last voter", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the change could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn remove(
    State(app): State<Arc<Control>>,
    _caller: Authorized<AdminRole>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: u64 = id.parse().map_err(|_| ApiError::bad_request("id", format!("{id:?} is not a node id")))?;
    app.cluster.remove_member(id).await?;
    Ok(json(MembershipChange { outcome: "removed".into(), cluster: app.cluster.status() }))
}

/// Replicated state digest
///
/// Admins only. A SHA-256 over the whole replicated state (every state table's rows in key
/// order, without this server's own bookkeeping), read from one consistent view together with the
/// index of the last log entry it includes: members of a cluster at the same applied index answer
/// the same digest. It reads the whole state, which takes seconds with millions of jobs.
#[utoipa::path(
    get,
    path = "/v1/cluster/digest",
    operation_id = "clusterDigest",
    tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The digest of this server's state", body = ClusterDigest),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The state could not be read", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn digest(
    State(app): State<Arc<Control>>,
    _admin: Authorized<AdminRole>,
) -> Result<Response, ApiError> {
    let store = app.store.clone();
    let d =
        tokio::task::spawn_blocking(move || store.digest()).await.map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(json(ClusterDigest {
        node_id: app.config.server.node_id,
        applied_index: d.applied_index(),
        digest: d.hex(),
        rows: d.rows,
    }))
}
