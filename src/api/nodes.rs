//! The nodes of the cluster and lifting a quarantine (admins only; on a follower the API relays
//! it to the leader), over [`crate::service::nodes`].

use super::auth::{AdminRole, Authorized, Principal};
use super::problem::{ApiError, json};
use crate::control::{Control, now_ms};
use crate::model::api::{NodeList, NodeView, Problem};
use crate::model::{ExecutorName, NodeName};
use crate::service::nodes::{self, node_views};
use axum::extract::{Path, State as AppState};
use axum::response::Response;
use std::sync::Arc;

/// Nodes
///
/// The nodes of the known executors with their pool, cordon state, jobs, the failures counted
/// against them and their quarantine (with its reason), and the reservation holding them, if any;
/// also quarantined nodes whose executor went away.
#[utoipa::path(
    get,
    path = "/v1/cluster/nodes",
    operation_id = "listNodes",
    tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The nodes, by executor and name", body = NodeList),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn list(AppState(app): AppState<Arc<Control>>, _p: Principal) -> Response {
    let mut nodes = node_views(&app.state(), &app.config.scheduler.quarantine, now_ms());
    nodes::mark_reserved(&mut nodes, &app);
    json(NodeList { nodes })
}

/// Lift a node's quarantine
///
/// Admins only. The node takes new jobs again at once, and the failures counted against it are
/// forgotten.
#[utoipa::path(
    delete,
    path = "/v1/cluster/nodes/{executor}/{node}/quarantine",
    operation_id = "liftQuarantine",
    tag = "operations",
    security(("bearer" = [])),
    params(
        ("executor" = ExecutorName, Path, description = "Executor of the node"),
        ("node" = NodeName, Path, description = "Node name"),
    ),
    responses(
        (status = 200, description = "Lifted: the node as it is now", body = NodeView),
        (status = 400, description = "The executor or node name is invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The node is not quarantined", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No leader, or the write could not be committed; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn lift_quarantine(
    AppState(app): AppState<Arc<Control>>,
    admin: Authorized<AdminRole>,
    Path((executor, node)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let executor = ExecutorName::new(&executor).map_err(|e| ApiError::bad_request("executor", e.to_string()))?;
    let node = NodeName::new(&node).map_err(|e| ApiError::bad_request("node", e.to_string()))?;
    let view = nodes::lift_quarantine(&app, &admin.principal, executor, node).await?;
    Ok(json(view))
}
