//! Armada's gRPC API (package `api`) beside the REST API, on the same listener: each service is
//! routed by its path prefix (`/api.Submit/...`) on the axum router, HTTP/2 over plain TCP (h2c)
//! or TLS (ALPN `h2`). The services are adapters over the service layer ([`crate::service`]: the same
//! authentication, validation, commands and event log as REST), so the two APIs cannot disagree.
//! docs/armada-grpc.md says what is served and how Armada's messages map onto Convoy's.

mod active_queues;
mod events;
mod fields;
pub mod ingress;
mod jobs;
pub mod k8s;
mod queues;
mod relay;
mod submit;

use crate::control::Control;
use crate::service::access::{Principal, authenticate};
use crate::service::{ErrorKind, ServiceError};
use axum::Router;
use axum::response::Response;
use std::sync::Arc;
use tonic::{Code, Status};

/// The Rust types and services generated from `proto/armada/*.proto` (package `api`).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("api");
}

/// The gRPC services, each routed by its path prefix. Merge it into the API router (whose
/// fallback answers gRPC requests for other services with UNIMPLEMENTED, see [`unimplemented`]).
pub(crate) fn router(app: Arc<Control>) -> Router {
    use pb::submit_server::SubmitServer;
    use pb::{event_server::EventServer, jobs_server::JobsServer, queue_service_server::QueueServiceServer};
    let limit = app.config.server.max_request_bytes;
    Router::new()
        .route_service(
            "/api.Submit/{*method}",
            SubmitServer::new(submit::SubmitService(app.clone())).max_decoding_message_size(limit),
        )
        .route_service(
            "/api.QueueService/{*method}",
            QueueServiceServer::new(queues::QueueService(app.clone())).max_decoding_message_size(limit),
        )
        .route_service("/api.Jobs/{*method}", JobsServer::new(jobs::JobsService(app.clone())))
        .route_service("/api.Event/{*method}", EventServer::new(events::EventService(app.clone())))
        .layer(axum::middleware::from_fn_with_state(app, relay::route))
        .layer(tower_http::trace::TraceLayer::new_for_grpc())
}

/// Whether a request is a gRPC call (`content-type: application/grpc...`).
pub(crate) fn is_grpc(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// The answer to a gRPC call of a service this server does not serve: grpc-status UNIMPLEMENTED
/// in a trailers-only answer (HTTP 200, as gRPC requires), not a problem+json 404.
pub(crate) fn unimplemented(path: &str) -> Response {
    // tonic percent-encodes the message into grpc-message.
    Status::unimplemented(format!("convoy does not serve {path} (see docs/armada-grpc.md)")).into_http()
}

/// The one place a service error becomes a gRPC status: the same refusal as REST's under gRPC's
/// codes. The message names the field first, as Armada's do
/// (`job_request_items[0].pod_specs[0].containers: ...`).
fn status(e: ServiceError) -> Status {
    let code = match e.kind {
        ErrorKind::Invalid => Code::InvalidArgument,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::Forbidden => Code::PermissionDenied,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Conflict => Code::FailedPrecondition,
        ErrorKind::InsufficientStorage => Code::ResourceExhausted,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Internal => Code::Internal,
    };
    match e.field {
        Some(field) => Status::new(code, format!("{field}: {}", e.detail)),
        None => Status::new(code, e.detail),
    }
}

/// The caller of a gRPC request, from its `authorization` metadata (Bearer or Basic).
fn principal<T>(app: &Control, req: &tonic::Request<T>) -> Result<Principal, Status> {
    let value = match req.metadata().get("authorization") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            Status::unauthenticated("the authorization metadata is not text (Bearer <token> or Basic <credentials>)")
        })?),
    };
    authenticate(app, value).map_err(status)
}

/// Refuses a write unless this server leads and may act (a new leader waits for its first
/// heartbeat round). A follower that knows the leader relays writes before they get here
/// ([`relay`]), so what reaches this on a follower found no leader to relay to.
async fn leading(app: &Control) -> Result<(), Status> {
    if app.cluster.is_leader() && crate::control::relay::await_serving(app).await {
        return Ok(());
    }
    Err(if app.cluster.is_leader() {
        Status::unavailable(
            "this server was elected leader but has not heard from a majority of the servers lately, so it takes \
             no writes; retry (on another server if this one stays cut off)",
        )
    } else {
        Status::unavailable("no leader is elected right now (an election is under way); retry shortly")
    })
}

/// A required text field of a request: INVALID_ARGUMENT naming it when empty.
fn required<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() { Err(Status::invalid_argument(format!("{field}: is required"))) } else { Ok(value) }
}
