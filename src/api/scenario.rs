//! The live state as a `convoy simulate` scenario, over [`crate::service::scenario`].

use super::auth::{AdminRole, Authorized};
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::api::Problem;
use crate::service::scenario;
use axum::extract::State;
use axum::response::Response;
use std::sync::Arc;

/// The state as a simulate scenario
///
/// Admins only. This server's state as a scenario of `convoy simulate` (docs/simulate.md): the
/// scheduler's configuration, the nodes, the queues, the running jobs (`running`, each on its
/// node) and the queued jobs (round 0's `submit`, in submission order), under their job ids.
/// Running it replays the next scheduling cycle offline; edit it first to ask "what if".
#[utoipa::path(
    get,
    path = "/v1/scenario",
    operation_id = "exportScenario",
    tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The scenario (the format of docs/simulate.md, as JSON)", body = Object),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn export(
    State(app): State<Arc<Control>>,
    admin: Authorized<AdminRole>,
) -> Result<Response, ApiError> {
    Ok(json(scenario::export(&app, &admin.principal)?))
}
