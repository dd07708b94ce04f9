//! HTTP: the public `/v1` API, the executor API and operations endpoints, as thin axum adapters
//! around the state machine and the store. Every error is `application/problem+json`.

pub mod auth;
pub mod events;
pub mod executors;
pub mod jobs;
pub mod openapi;
pub mod ops;
pub mod problem;
pub mod queues;
pub mod validate;

use crate::control::Control;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use problem::ApiError;
use std::sync::Arc;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Request ids: ULIDs (clients may send their own `x-request-id`).
#[derive(Clone, Default)]
struct Ulids;

impl MakeRequestId for Ulids {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        axum::http::HeaderValue::from_str(&crate::control::ids::run_id().to_string()).ok().map(RequestId::new)
    }
}

/// Every route of the API with its OpenAPI description. Each handler carries a `#[utoipa::path]`
/// annotation that gives its method and path; `routes!` registers it with the router and its
/// operation with the document, so the two cannot disagree. Add routes here, and only this way.
pub fn routes() -> OpenApiRouter<Arc<Control>> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(queues::create, queues::list))
        .routes(routes!(queues::get, queues::update, queues::delete))
        .routes(routes!(queues::report))
        .routes(routes!(events::stream))
        .routes(routes!(jobs::submit, jobs::list))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::reprioritize))
        .routes(routes!(jobs::preempt))
        .routes(routes!(jobs::get))
        .routes(routes!(jobs::logs))
        .routes(routes!(executors::lease))
        .routes(routes!(executors::events))
        .routes(routes!(ops::cluster))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(openapi::document))
}

/// The whole HTTP API: [`routes`], problem+json fallbacks, body limit, request ids and tracing.
pub fn router(app: Arc<Control>) -> Router {
    let limit = app.config.server.max_request_bytes;
    let (routes, _) = routes().split_for_parts();
    routes
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let id = req.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), Ulids))
        .with_state(app)
}
