//! HTTP: the public `/v1` API, the executor API and operations endpoints, as thin axum adapters
//! over the service layer ([`crate::service`]). Every error is `application/problem+json`. The
//! server ([`crate::server::http`]) puts these routes together with the web UI and gRPC.

mod auth;
mod cluster;
mod events;
mod executors;
pub(crate) mod forward;
mod jobs;
mod nodes;
mod openapi;
mod ops;
mod output;
pub(crate) mod problem;
mod queue_ops;
mod queues;
mod replay;
mod runs;
mod scenario;

/// The API's one public item: the integration tests check answers against the OpenAPI document.
pub use openapi::check_value;

use crate::control::Control;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Every route of the API with its OpenAPI description. Each handler carries a `#[utoipa::path]`
/// annotation that gives its method and path; `routes!` registers it with the router and its
/// operation with the document, so the two cannot disagree. Add routes here, and only this way.
pub(crate) fn routes() -> OpenApiRouter<Arc<Control>> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(queues::create, queues::list))
        .routes(routes!(queues::get, queues::update, queues::delete))
        .routes(routes!(queues::report))
        .routes(routes!(queue_ops::cordon))
        .routes(routes!(queue_ops::uncordon))
        .routes(routes!(queue_ops::cancel))
        .routes(routes!(queue_ops::preempt))
        .routes(routes!(events::stream))
        .routes(routes!(jobs::submit, jobs::list))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::reprioritize))
        .routes(routes!(jobs::preempt))
        .routes(routes!(jobs::get))
        .routes(routes!(jobs::logs))
        .routes(routes!(jobs::why_handler))
        .routes(routes!(output::job_output_handler))
        .routes(routes!(runs::get))
        .routes(routes!(executors::lease))
        .routes(routes!(executors::events))
        .routes(routes!(executors::output))
        .routes(routes!(cluster::status))
        .routes(routes!(cluster::add))
        .routes(routes!(cluster::remove))
        .routes(routes!(cluster::digest))
        .routes(routes!(nodes::list))
        .routes(routes!(nodes::lift_quarantine))
        .routes(routes!(scenario::export))
        .routes(routes!(replay::replay_handler))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(openapi::document))
}
