//! Operations endpoints: health, readiness, metrics, cluster status.

use super::auth::Principal;
use super::problem::{ApiError, json};
use crate::server::app::App;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;

pub async fn healthz() -> Response {
    json(serde_json::json!({ "status": "ok" }))
}

pub async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.cluster.ready() {
        json(serde_json::json!({ "status": "ready", "leader": app.cluster.leader_addr() }))
    } else {
        ApiError::unavailable("not ready: the log is not applied yet or no leader is known").into_response()
    }
}

pub async fn cluster(State(app): State<Arc<App>>, _p: Principal) -> Response {
    json(app.cluster.status())
}

/// Prometheus text format, computed from the state at scrape time.
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut out = String::new();
    {
        let st = app.state();
        let _ = writeln!(out, "# HELP convoy_jobs Live jobs by queue and state.\n# TYPE convoy_jobs gauge");
        for (name, q) in &st.queues {
            for (state, n) in &q.counts {
                let _ = writeln!(out, "convoy_jobs{{queue=\"{name}\",state=\"{state}\"}} {n}");
            }
        }
        let _ = writeln!(out, "# HELP convoy_executors Known executors.\n# TYPE convoy_executors gauge\nconvoy_executors {}", st.executors.len());
        let nodes: usize = st.executors.values().map(|e| e.nodes.len()).sum();
        let _ = writeln!(out, "# HELP convoy_nodes Known nodes.\n# TYPE convoy_nodes gauge\nconvoy_nodes {nodes}");
    }
    {
        let s = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "# HELP convoy_scheduling_cycles_total Scheduling cycles run by this server.\n# TYPE convoy_scheduling_cycles_total counter\nconvoy_scheduling_cycles_total {}", s.cycles);
        let _ = writeln!(out, "# HELP convoy_scheduling_cycle_seconds Duration of the last cycle.\n# TYPE convoy_scheduling_cycle_seconds gauge\nconvoy_scheduling_cycle_seconds {}", s.last_cycle_ms / 1000.0);
        let _ = writeln!(out, "# HELP convoy_queue_fair_share Adjusted fair share per queue and pool.\n# TYPE convoy_queue_fair_share gauge");
        for p in &s.pools {
            for q in &p.queues {
                let _ = writeln!(out, "convoy_queue_fair_share{{pool=\"{}\",queue=\"{}\"}} {}", p.pool, q.queue, q.adjusted_fair_share);
                let _ = writeln!(out, "convoy_queue_share{{pool=\"{}\",queue=\"{}\"}} {}", p.pool, q.queue, q.share_after);
            }
        }
    }
    let _ = writeln!(out, "# HELP convoy_leader 1 if this server is the leader.\n# TYPE convoy_leader gauge\nconvoy_leader {}", u8::from(app.cluster.is_leader()));
    (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
