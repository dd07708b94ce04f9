//! Operations endpoints: health, readiness, metrics, cluster status.

use super::auth::Principal;
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::api::Problem;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::fmt::Write;
use std::sync::Arc;

/// Answer of `GET /healthz`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(examples("ok"))]
    pub status: String,
}

/// Answer of `GET /readyz` (fields in the order `serde_json::json!` wrote them).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Address of the leader.
    pub leader: Option<String>,
    /// Always `ready`.
    #[schema(examples("ready"))]
    pub status: String,
}

/// Answer of `GET /v1/cluster`: this server's view of the Raft cluster. The server builds it as
/// JSON (see `ClusterView::status`); this type only documents it.
#[derive(Debug, Clone, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// This server's Raft node id.
    pub id: u64,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    /// The current Raft term.
    pub term: u64,
    /// The leader's node id, if one is known.
    pub leader: Option<u64>,
    /// The leader's address, if one is known.
    pub leader_addr: Option<String>,
    /// Index of the last entry in this server's log.
    pub last_log_index: Option<u64>,
    /// Index of the last entry this server applied.
    pub last_applied: Option<u64>,
    /// Voters and learners.
    pub members: Vec<ClusterMember>,
}

/// One member of the Raft cluster.
#[derive(Debug, Clone, utoipa::ToSchema)]
pub struct ClusterMember {
    /// Raft node id.
    pub id: u64,
    /// Address its peers reach it at.
    pub addr: String,
    /// False for learners.
    pub voter: bool,
}

/// Liveness
///
/// Answers as long as the process serves HTTP.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    responses((status = 200, description = "The server is up", body = Health))
)]
pub async fn healthz() -> Response {
    json(Health { status: "ok".into() })
}

/// Readiness
///
/// Ready once the replicated log is applied and a leader is known.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready yet", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(app): State<Arc<Control>>) -> Response {
    if app.cluster.ready() {
        json(Readiness { leader: app.cluster.leader_addr(), status: "ready".into() })
    } else {
        ApiError::unavailable("not ready: the log is not applied yet or no leader is known").into_response()
    }
}

/// Raft cluster status
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
pub async fn cluster(State(app): State<Arc<Control>>, _p: Principal) -> Response {
    json(app.cluster.status())
}

/// Prometheus metrics
///
/// Prometheus text format (0.0.4), computed from the state at scrape time.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses((status = 200, description = "Metrics in the Prometheus text exposition format, version 0.0.4", body = String, content_type = "text/plain"))
)]
pub async fn metrics(State(app): State<Arc<Control>>) -> Response {
    let mut out = String::new();
    {
        let st = app.state();
        let _ = writeln!(out, "# HELP convoy_jobs Live jobs by queue and state.\n# TYPE convoy_jobs gauge");
        for (name, q) in &st.queues {
            for (state, n) in &q.counts {
                let _ = writeln!(out, "convoy_jobs{{queue=\"{name}\",state=\"{state}\"}} {n}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP convoy_executors Known executors.\n# TYPE convoy_executors gauge\nconvoy_executors {}",
            st.executors.len()
        );
        let nodes: usize = st.executors.values().map(|e| e.nodes.len()).sum();
        let _ = writeln!(out, "# HELP convoy_nodes Known nodes.\n# TYPE convoy_nodes gauge\nconvoy_nodes {nodes}");
    }
    {
        let s = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(
            out,
            "# HELP convoy_scheduling_cycles_total Scheduling cycles run by this server.\n# TYPE convoy_scheduling_cycles_total counter\nconvoy_scheduling_cycles_total {}",
            s.cycles
        );
        let _ = writeln!(
            out,
            "# HELP convoy_scheduling_cycle_seconds Duration of the last cycle.\n# TYPE convoy_scheduling_cycle_seconds gauge\nconvoy_scheduling_cycle_seconds {}",
            s.last_cycle_ms / 1000.0
        );
        let _ = writeln!(
            out,
            "# HELP convoy_queue_fair_share Adjusted fair share per queue and pool.\n# TYPE convoy_queue_fair_share gauge"
        );
        for p in &s.pools {
            for q in &p.queues {
                let _ = writeln!(
                    out,
                    "convoy_queue_fair_share{{pool=\"{}\",queue=\"{}\"}} {}",
                    p.pool, q.queue, q.adjusted_fair_share
                );
                let _ =
                    writeln!(out, "convoy_queue_share{{pool=\"{}\",queue=\"{}\"}} {}", p.pool, q.queue, q.share_after);
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP convoy_leader 1 if this server is the leader.\n# TYPE convoy_leader gauge\nconvoy_leader {}",
        u8::from(app.cluster.is_leader())
    );
    (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
