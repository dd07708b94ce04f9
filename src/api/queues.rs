//! Queue endpoints: CRUD and the fair-share report.

use super::auth::Principal;
use super::problem::{ApiError, ApiJson, json};
use crate::config::Role;
use crate::model::api::{QueuePoolReport, QueueReport};
use crate::model::{Queue, QueueName};
use crate::server::app::{App, now_ms};
use crate::state::Command;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;

pub(super) fn queue_name(s: &str) -> Result<QueueName, ApiError> {
    QueueName::new(s).map_err(|e| ApiError::bad_request("queue", e.to_string()))
}

pub async fn create(State(app): State<Arc<App>>, p: Principal, ApiJson(queue): ApiJson<Queue>) -> Result<Response, ApiError> {
    p.require(Role::Admin)?;
    queue.validate()?;
    app.write(Command::CreateQueue { queue: queue.clone() }).await?;
    Ok((StatusCode::CREATED, axum::Json(queue)).into_response())
}

pub async fn list(State(app): State<Arc<App>>, _p: Principal) -> Response {
    let queues: Vec<Queue> = app.state().queues.values().map(|q| q.queue.clone()).collect();
    json(queues)
}

pub async fn get(State(app): State<Arc<App>>, _p: Principal, Path(name): Path<String>) -> Result<Response, ApiError> {
    let name = queue_name(&name)?;
    let q = app.state().queues.get(&name).map(|q| q.queue.clone());
    q.map(json).ok_or_else(|| ApiError::not_found(format!("queue {name} does not exist")))
}

pub async fn update(State(app): State<Arc<App>>, p: Principal, Path(name): Path<String>, ApiJson(queue): ApiJson<Queue>) -> Result<Response, ApiError> {
    p.require(Role::Admin)?;
    let name = queue_name(&name)?;
    if queue.name != name {
        return Err(ApiError::bad_request("name", format!("the body names queue {} but the path names {name}", queue.name)));
    }
    queue.validate()?;
    app.write(Command::UpdateQueue { queue: queue.clone() }).await?;
    Ok(json(queue))
}

#[derive(Deserialize)]
pub struct DeleteParams {
    #[serde(default)]
    force: bool,
}

pub async fn delete(State(app): State<Arc<App>>, p: Principal, Path(name): Path<String>, Query(params): Query<DeleteParams>) -> Result<Response, ApiError> {
    p.require(Role::Admin)?;
    let name = queue_name(&name)?;
    app.write(Command::DeleteQueue { name, force: params.force, at_ms: now_ms() }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn report(State(app): State<Arc<App>>, _p: Principal, Path(name): Path<String>) -> Result<Response, ApiError> {
    let name = queue_name(&name)?;
    let (queue, jobs) = {
        let st = app.state();
        let q = st.queues.get(&name).ok_or_else(|| ApiError::not_found(format!("queue {name} does not exist")))?;
        (q.queue.clone(), q.counts.clone())
    };
    let sched = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
    let pools = sched
        .pools
        .iter()
        .filter_map(|p| {
            let q = p.queues.iter().find(|q| q.queue == name)?;
            Some(QueuePoolReport {
                pool: p.pool.clone(),
                fair_share: q.fair_share,
                adjusted_fair_share: q.adjusted_fair_share,
                actual_share: q.share_after,
                allocated: q.allocated.clone(),
                demand: q.demand.clone(),
                pool_total: p.total.clone(),
            })
        })
        .collect();
    Ok(json(QueueReport { queue: name, weight: queue.weight(), pools, jobs }))
}
