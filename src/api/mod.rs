//! HTTP: the public `/v1` API, the executor API and operations endpoints, as thin axum adapters
//! around the state machine and the store. Every error is `application/problem+json`.

pub mod auth;
pub mod events;
pub mod executors;
pub mod jobs;
pub mod ops;
pub mod problem;
pub mod queues;
pub mod validate;

use crate::server::app::App;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use axum::routing::{get, post};
use problem::ApiError;
use std::sync::Arc;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Request ids: ULIDs (clients may send their own `x-request-id`).
#[derive(Clone, Default)]
struct Ulids;

impl MakeRequestId for Ulids {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        axum::http::HeaderValue::from_str(&crate::server::ids::run_id().to_string()).ok().map(RequestId::new)
    }
}

/// The whole HTTP API.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.server.max_request_bytes;
    Router::new()
        .route("/v1/queues", post(queues::create).get(queues::list))
        .route("/v1/queues/{queue}", get(queues::get).put(queues::update).delete(queues::delete))
        .route("/v1/queues/{queue}/report", get(queues::report))
        .route("/v1/queues/{queue}/job-sets/{job_set}/events", get(events::stream))
        .route("/v1/jobs", post(jobs::submit).get(jobs::list))
        .route("/v1/jobs/cancel", post(jobs::cancel))
        .route("/v1/jobs/reprioritize", post(jobs::reprioritize))
        .route("/v1/jobs/preempt", post(jobs::preempt))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/jobs/{id}/logs", get(jobs::logs))
        .route("/v1/executors/{executor}/lease", post(executors::lease))
        .route("/v1/executors/{executor}/events", post(executors::events))
        .route("/v1/cluster", get(ops::cluster))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async { ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let id = req.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), Ulids))
        .with_state(app)
}
