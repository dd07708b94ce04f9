//! Replay of this server's recorded scheduling cycles, over [`crate::service::replay`].

use super::auth::{AdminRole, Authorized};
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::model::api::Problem;
use crate::service::replay::api::{ReplayQuery, ReplayView, replay_here};
use axum::extract::{Query, State};
use axum::response::Response;
use std::sync::Arc;

/// Recorded scheduling cycles, run again
///
/// Admins only. Runs this server's recorded scheduling cycles again from its log (the same as
/// `convoy replay --data-dir` on its data directory) and says for each whether the scheduler
/// decides the same. With `job`, each cycle says where the job stood, what the cycle did with it
/// (who took its place, for a preempted job) and, for a queued job, each node's verdict.
#[utoipa::path(
    get,
    path = "/v1/replay",
    operation_id = "replayCycles",
    tag = "operations",
    security(("bearer" = [])),
    params(ReplayQuery),
    responses(
        (status = 200, description = "The replayed cycles", body = ReplayView),
        (status = 400, description = "Two selectors, a bad time or job id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The log could not be read", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn replay_handler(
    State(app): State<Arc<Control>>,
    admin: Authorized<AdminRole>,
    Query(q): Query<ReplayQuery>,
) -> Result<Response, ApiError> {
    let answer: ReplayView = replay_here(&app, &admin.principal, &q).await?;
    Ok(json(answer))
}
