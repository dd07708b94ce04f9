//! The nodes of the cluster as the state knows them, with their quarantines, and lifting a
//! quarantine (admins only; on a follower the API relays it to the leader).

use super::auth::{AdminRole, Authorized, Principal};
use super::problem::{ApiError, json};
use crate::control::{Control, now_ms, rfc3339};
use crate::model::api::{NodeList, NodeView, Problem, QuarantineView};
use crate::model::{ExecutorName, NodeName, Resources};
use crate::scheduler::QuarantineConfig;
use crate::state::{Command, State};
use axum::extract::{Path, State as AppState};
use axum::response::Response;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every node of the known executors, then the quarantined nodes no executor reports, by
/// executor and name, as of `now_ms`. With quarantine off (`max_failures = 0`) no node shows a
/// quarantine or failures: the scheduler ignores them then.
pub fn node_views(st: &State, cfg: &QuarantineConfig, now_ms: i64) -> Vec<NodeView> {
    let mut jobs: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for ids in st.by_executor.values() {
        for id in ids {
            if let Some(run) = st.jobs.get(id).and_then(|j| j.record.active_run()) {
                *jobs.entry((run.executor.as_str(), run.node.as_str())).or_default() += 1;
            }
        }
    }
    let health = |e: &ExecutorName, n: &NodeName| {
        let key = (e.clone(), n.clone());
        let h = st.node_health.get(&key).filter(|_| cfg.enabled());
        let recent = h.map_or(0, |h| h.failures_within(now_ms, cfg.policy().window_ms) as u32);
        let quarantine = h.and_then(|h| h.quarantined_at(now_ms)).map(|q| QuarantineView {
            since: rfc3339(q.since_ms),
            until: rfc3339(q.until_ms),
            reason: q.reason.clone(),
        });
        (recent, quarantine)
    };
    let mut out = Vec::new();
    for e in st.executors.values() {
        for n in &e.nodes {
            let (recent_failures, quarantine) = health(&e.name, &n.name);
            out.push(NodeView {
                executor: e.name.clone(),
                name: n.name.clone(),
                pool: Some(n.pool.clone()),
                reported: true,
                unschedulable: n.unschedulable,
                allocatable: n.allocatable.clone(),
                jobs: jobs.get(&(e.name.as_str(), n.name.as_str())).copied().unwrap_or(0),
                recent_failures,
                quarantine,
            });
        }
    }
    for (e, n) in st.node_health.keys() {
        let reported = st.executors.get(e).is_some_and(|x| x.nodes.iter().any(|r| &r.name == n));
        if reported {
            continue;
        }
        let (recent_failures, quarantine) = health(e, n);
        if quarantine.is_none() {
            continue;
        }
        out.push(NodeView {
            executor: e.clone(),
            name: n.clone(),
            pool: None,
            reported: false,
            unschedulable: false,
            allocatable: Resources::new(),
            jobs: jobs.get(&(e.as_str(), n.as_str())).copied().unwrap_or(0),
            recent_failures,
            quarantine,
        });
    }
    out.sort_by(|a, b| (a.executor.as_str(), a.name.as_str()).cmp(&(b.executor.as_str(), b.name.as_str())));
    out
}

/// Nodes
///
/// The nodes of the known executors with their pool, cordon state, jobs, the failures counted
/// against them and their quarantine (with its reason); also quarantined nodes whose executor
/// went away.
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
pub async fn list(AppState(app): AppState<Arc<Control>>, _p: Principal) -> Response {
    let nodes = node_views(&app.state(), &app.config.scheduler.quarantine, now_ms());
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
pub async fn lift_quarantine(
    AppState(app): AppState<Arc<Control>>,
    _admin: Authorized<AdminRole>,
    Path((executor, node)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let executor = ExecutorName::new(&executor).map_err(|e| ApiError::bad_request("executor", e.to_string()))?;
    let node = NodeName::new(&node).map_err(|e| ApiError::bad_request("node", e.to_string()))?;
    let at_ms = now_ms();
    app.write(Command::LiftQuarantine { executor: executor.clone(), node: node.clone(), at_ms }).await?;
    let view = node_views(&app.state(), &app.config.scheduler.quarantine, at_ms)
        .into_iter()
        .find(|v| v.executor == executor && v.name == node)
        .unwrap_or(NodeView {
            // Lifted, and no executor reports it: nothing else is known about it.
            executor,
            name: node,
            pool: None,
            reported: false,
            unschedulable: false,
            allocatable: Resources::new(),
            jobs: 0,
            recent_failures: 0,
            quarantine: None,
        });
    Ok(json(view))
}
