//! Queues, whatever the transport: create, read, update, delete, the report of a queue's place in
//! each pool, and the queue-wide operations: cordon and uncordon a queue, cancel or preempt its
//! jobs across every job set (Armada's `CordonQueue`, `UncordonQueue`, `CancelOnQueue`,
//! `PreemptOnQueue`).
//!
//! A cordon is a queue update (admins only, as every queue change). A queue-wide cancel or
//! preempt is allowed to whoever may cancel in the queue; the leader picks the jobs from its
//! state ([`State::queue_jobs`](crate::state::State::queue_jobs)) and commits them through the
//! existing per-job-set `Cancel` and `Preempt` commands, at most [`MAX_IDS_PER_COMMAND`] ids
//! each, so a queue of 100,000 jobs never makes one giant log entry and applying stays the
//! existing deterministic code. The commands carry the state filter too, so a job that changed
//! state between the pick and the commit is only cancelled if it still matches.

use super::access::Principal;
use super::error::{ErrorKind, ServiceError};
use crate::config::Role;
use crate::control::{Control, now_ms};
use crate::model::api::{QueueCancelRequest, QueuePoolReport, QueuePreemptRequest, QueueReport};
use crate::model::{JobId, JobState, PoolName, PriorityClassName, Queue, QueueName};
use crate::state::{Command, QueueJobFilter, Response};
use std::collections::BTreeMap;

/// A queue name of a request; `field` "queue" when it is not one.
pub(crate) fn queue_name(s: &str) -> Result<QueueName, ServiceError> {
    QueueName::new(s).map_err(|e| ServiceError::invalid("queue", e.to_string()))
}

/// Every queue.
pub(crate) fn list(app: &Control) -> Vec<Queue> {
    app.state().queues().map(|q| q.queue.clone()).collect()
}

/// One queue.
pub(crate) fn get(app: &Control, name: &QueueName) -> Result<Queue, ServiceError> {
    let q = app.state().queue(name).map(|q| q.queue.clone());
    q.ok_or_else(|| ServiceError::not_found(format!("queue {name} does not exist")))
}

/// Creates a queue (admins only); a queue of that name must not exist.
pub(crate) async fn create(app: &Control, p: &Principal, queue: Queue) -> Result<(), ServiceError> {
    p.require(Role::Admin)?;
    queue.validate()?;
    app.write(Command::create_queue(queue)).await?;
    Ok(())
}

/// Replaces a queue's settings (admins only); the queue must exist.
pub(crate) async fn update(app: &Control, p: &Principal, queue: Queue) -> Result<(), ServiceError> {
    p.require(Role::Admin)?;
    queue.validate()?;
    app.write(Command::update_queue(queue)).await?;
    Ok(())
}

/// Deletes a queue (admins only); with jobs not finished only when `force`d.
pub(crate) async fn delete(app: &Control, p: &Principal, name: QueueName, force: bool) -> Result<(), ServiceError> {
    p.require(Role::Admin)?;
    app.write(Command::DeleteQueue { name, force, at_ms: now_ms() }).await?;
    Ok(())
}

/// A queue's weight, its jobs by state, its decayed usage, and its place in each pool as the
/// last scheduling cycle saw it.
pub(crate) fn report(app: &Control, name: QueueName) -> Result<QueueReport, ServiceError> {
    let halftime = app.config.scheduler.queue_usage_halftime;
    let (queue, jobs, usage) = {
        let st = app.state();
        let q = st.queue(&name).ok_or_else(|| ServiceError::not_found(format!("queue {name} does not exist")))?;
        let now = now_ms();
        let usage: BTreeMap<PoolName, f64> = if halftime.is_zero() {
            BTreeMap::new()
        } else {
            let recorded = st.queue_usage();
            recorded.pools.keys().filter_map(|p| Some((p.clone(), recorded.at(p, &name, now, halftime)?))).collect()
        };
        (q.queue.clone(), q.counts.clone(), usage)
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
                protected: q.protected,
                allocated: q.allocated.clone(),
                demand: q.demand.clone(),
                pool_total: p.total.clone(),
                home_allocated: q.home_allocated.clone(),
                guest_allocated: q.guest_allocated.clone(),
                usage: q.usage,
                parent: q.parent.clone(),
                is_parent: q.is_parent,
                policy: p.policy,
                proportional_target: q.proportional_target.clone(),
                guaranteed_share: q.guaranteed_share,
                guarantee_scaled: q.guarantee_scaled,
            })
        })
        .collect();
    Ok(QueueReport { queue: name, weight: queue.weight(), pools, jobs, usage })
}

/// Most job ids one `Cancel` or `Preempt` command of a queue-wide operation carries.
pub(crate) const MAX_IDS_PER_COMMAND: usize = 1000;

/// The queue as stored; NotFound naming the field `queue` if there is none.
pub(crate) fn stored_queue(app: &Control, name: &QueueName) -> Result<Queue, ServiceError> {
    app.state()
        .queue(name)
        .map(|q| q.queue.clone())
        .ok_or_else(|| ServiceError::field(ErrorKind::NotFound, "queue", format!("queue {name} does not exist")))
}

/// Cordons (`true`) or uncordons a queue; answers the queue as stored. Admins only. Setting the
/// state it already has changes nothing and is not an error.
pub(crate) async fn set_cordon(
    app: &Control,
    p: &Principal,
    name: &QueueName,
    cordoned: bool,
) -> Result<Queue, ServiceError> {
    p.require(Role::Admin)?;
    let mut queue = stored_queue(app, name)?;
    if queue.cordoned == cordoned {
        return Ok(queue);
    }
    queue.cordoned = cordoned;
    app.write(Command::update_queue(queue.clone())).await?;
    Ok(queue)
}

/// Checks a filter's priority classes against the configured ones.
fn check_classes(app: &Control, classes: &[PriorityClassName]) -> Result<(), ServiceError> {
    for (i, c) in classes.iter().enumerate() {
        if app.config.scheduler.priority_class(c.as_str()).is_none() {
            let known: Vec<&str> = app.config.scheduler.priority_classes.iter().map(|p| p.name.as_str()).collect();
            return Err(ServiceError::invalid(
                format!("priority_classes[{i}]"),
                format!("unknown priority class {:?} (known: {})", c.as_str(), known.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The job ids a job command answers.
pub(super) fn ids_of(r: Response) -> Result<Vec<JobId>, ServiceError> {
    match r {
        Response::JobIds(ids) => Ok(ids),
        other => Err(ServiceError::internal(format!("unexpected response {other:?}"))),
    }
}

/// Cancels the queue's live jobs the request's filters reach, in every job set; answers the
/// jobs cancelled (in job set order).
pub(crate) async fn cancel_on_queue(
    app: &Control,
    p: &Principal,
    name: &QueueName,
    req: QueueCancelRequest,
) -> Result<Vec<JobId>, ServiceError> {
    p.require_queue(&stored_queue(app, name)?)?;
    if let Some((i, s)) = req.states.iter().enumerate().find(|(_, s)| s.is_terminal()) {
        return Err(ServiceError::invalid(
            format!("states[{i}]"),
            format!("{s} jobs are already over and cannot be cancelled"),
        ));
    }
    check_classes(app, &req.priority_classes)?;
    let states: Option<Vec<JobState>> = (!req.states.is_empty()).then(|| req.states.clone());
    let filter = QueueJobFilter { states: req.states, priority_classes: req.priority_classes, pools: req.pools };
    let reason = req.reason.unwrap_or_else(|| format!("cancelled by {}", p.name));
    let sets = app.state().queue_jobs(name, &filter);
    let mut cancelled = Vec::new();
    for (job_set, ids) in sets {
        for chunk in ids.chunks(MAX_IDS_PER_COMMAND) {
            let r = app
                .write(Command::Cancel {
                    queue: name.clone(),
                    job_set: job_set.clone(),
                    job_ids: Some(chunk.to_vec()),
                    states: states.as_ref().map(|s| s.iter().copied().map(Into::into).collect()),
                    reason: reason.clone(),
                    at_ms: now_ms(),
                })
                .await?;
            cancelled.extend(ids_of(r)?);
        }
    }
    Ok(cancelled)
}

/// Preempts the queue's jobs that hold a node (leased, pending or running) and that the
/// request's filters reach, in every job set; answers the jobs preempted.
pub(crate) async fn preempt_on_queue(
    app: &Control,
    p: &Principal,
    name: &QueueName,
    req: QueuePreemptRequest,
) -> Result<Vec<JobId>, ServiceError> {
    p.require_queue(&stored_queue(app, name)?)?;
    check_classes(app, &req.priority_classes)?;
    let filter = QueueJobFilter {
        states: vec![JobState::Leased, JobState::Pending, JobState::Running],
        priority_classes: req.priority_classes,
        pools: req.pools,
    };
    let reason = req.reason.unwrap_or_else(|| format!("preempted by {}", p.name));
    let sets = app.state().queue_jobs(name, &filter);
    let mut preempted = Vec::new();
    for (job_set, ids) in sets {
        for chunk in ids.chunks(MAX_IDS_PER_COMMAND) {
            let r = app
                .write(Command::Preempt {
                    queue: name.clone(),
                    job_set: job_set.clone(),
                    job_ids: chunk.to_vec(),
                    reason: reason.clone(),
                    at_ms: now_ms(),
                })
                .await?;
            preempted.extend(ids_of(r)?);
        }
    }
    Ok(preempted)
}
