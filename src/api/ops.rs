//! Operations endpoints: health, readiness, metrics, cluster status.

use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::api::Problem;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;

/// Answer of `GET /healthz`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(super) struct Health {
    /// Always `ok`.
    #[schema(examples("ok"))]
    pub status: String,
}

/// Answer of `GET /readyz` (fields in the order `serde_json::json!` wrote them).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(super) struct Readiness {
    /// Address of the leader.
    pub leader: Option<String>,
    /// Always `ready`.
    #[schema(examples("ready"))]
    pub status: String,
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
pub(super) async fn healthz() -> Response {
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
pub(super) async fn readyz(State(app): State<Arc<Control>>) -> Response {
    if !app.started.load(std::sync::atomic::Ordering::Acquire) {
        return ApiError::unavailable("not ready: the server is still being set up").into_response();
    }
    let free = app.disk.free();
    if app.disk.state_at(free) != crate::control::disk::DiskState::Ample {
        return ApiError::unavailable(format!(
            "not ready: the data directory {} has {free} bytes free, below server.disk_reserve ({} bytes), so it \
             refuses writes",
            app.disk.dir().display(),
            app.disk.reserve()
        ))
        .into_response();
    }
    if app.cluster.ready() {
        json(Readiness { leader: app.cluster.leader_addr(), status: "ready".into() })
    } else {
        ApiError::unavailable("not ready: the log is not applied yet or no leader is known").into_response()
    }
}

/// Prometheus metrics
///
/// OpenMetrics text (prometheus-client): families computed from the state at scrape time, then
/// this process's histograms and counters (docs/metrics.md lists them all).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses((status = 200, description = "Metrics in the OpenMetrics text format, version 1.0.0 (also read by Prometheus' text parser)", body = String, content_type = "text/plain"))
)]
pub(super) async fn metrics(State(app): State<Arc<Control>>, headers: axum::http::HeaderMap) -> Response {
    let openmetrics = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    match crate::service::metrics::scrape(&app, openmetrics) {
        Ok((content_type, out)) => {
            (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, content_type)], out).into_response()
        }
        Err(_) => ApiError::internal("the metrics could not be encoded").into_response(),
    }
}
