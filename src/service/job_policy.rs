//! Checks and resolution of a submission's dependencies and retry policies: the shape of each
//! (all or nothing, with the rest of [`super::validate`]), then, against the state and the
//! store, the job each dependency names and, for one that already ended, how it ended.

use super::error::ServiceError;
use crate::control::Control;
use crate::model::api::{JobDependency, JobRetryPolicy, SubmitItem};
use crate::model::{DependencyCondition, FieldError, JobId, JobState, QueueName, RetryPolicy};
use crate::record::{SubmitDependencyRecord, SubmitPoliciesRecord};

/// Most dependencies of one job.
const MAX_DEPENDENCIES: usize = 100;
/// Most attempts a retry policy may ask for (`max_attempted_runs` bounds them too).
const MAX_ATTEMPTS: u32 = 100;
/// Longest first back-off: a day.
const MAX_BACKOFF_SECONDS: u64 = 24 * 3600;

/// The job a checked dependency names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DependencyTarget {
    /// An existing job, by id.
    Job(JobId),
    /// An earlier job of the same request, by its index.
    Earlier(usize),
}

/// A checked dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckedDependency {
    /// The job waited for.
    pub target: DependencyTarget,
    /// The outcome waited for.
    pub on: DependencyCondition,
}

/// A job's checked dependencies and retry policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CheckedPolicies {
    /// The jobs waited for.
    pub depends_on: Vec<CheckedDependency>,
    /// When failed runs are retried.
    pub retry: Option<RetryPolicy>,
}

/// Checks job `index`'s dependencies and retry policy; `earlier` are the request's items before
/// it. Errors name fields relative to the job.
pub(crate) fn check_policies(
    item: &SubmitItem,
    earlier: &[SubmitItem],
    gang: bool,
) -> Result<CheckedPolicies, FieldError> {
    if gang && !item.depends_on.is_empty() {
        return Err(FieldError::new("depends_on", "a gang member cannot wait for other jobs"));
    }
    if gang && item.retry.is_some() {
        return Err(FieldError::new("retry", "a gang member's runs are not retried one by one"));
    }
    if item.depends_on.len() > MAX_DEPENDENCIES {
        return Err(FieldError::new("depends_on", format!("at most {MAX_DEPENDENCIES} dependencies")));
    }
    let depends_on = item
        .depends_on
        .iter()
        .enumerate()
        .map(|(j, d)| check_dependency(d, earlier).map_err(|e| e.within(&format!("depends_on[{j}]"))))
        .collect::<Result<_, _>>()?;
    let retry = item.retry.as_ref().map(check_retry).transpose().map_err(|e| e.within("retry"))?;
    Ok(CheckedPolicies { depends_on, retry })
}

fn check_dependency(d: &JobDependency, earlier: &[SubmitItem]) -> Result<CheckedDependency, FieldError> {
    let target = match (&d.job_id, &d.client_id) {
        (Some(id), None) => DependencyTarget::Job(*id),
        (None, Some(cid)) => {
            let found = earlier.iter().rposition(|e| e.client_id.as_ref() == Some(cid));
            let index = found.ok_or_else(|| {
                FieldError::new(
                    "client_id",
                    format!(
                        "no earlier job of this request has client id {cid:?} (a job may only wait for an earlier one)"
                    ),
                )
            })?;
            DependencyTarget::Earlier(index)
        }
        _ => return Err(FieldError::new("job_id", "name the job waited for by exactly one of job_id and client_id")),
    };
    Ok(CheckedDependency { target, on: d.on })
}

fn check_retry(r: &JobRetryPolicy) -> Result<RetryPolicy, FieldError> {
    if !(1..=MAX_ATTEMPTS).contains(&r.max_attempts) {
        return Err(FieldError::new("max_attempts", format!("must be 1 to {MAX_ATTEMPTS}")));
    }
    if let Some(i) = r.on_exit_codes.iter().position(|c| *c == 0) {
        return Err(FieldError::new(format!("on_exit_codes[{i}]"), "exit code 0 is a success, never retried"));
    }
    if r.backoff_seconds > MAX_BACKOFF_SECONDS {
        return Err(FieldError::new("backoff_seconds", format!("at most {MAX_BACKOFF_SECONDS} (a day)")));
    }
    Ok(RetryPolicy {
        max_attempts: r.max_attempts,
        on_exit_codes: r.on_exit_codes.clone(),
        on_oom: r.on_oom,
        on_node_failure: r.on_node_failure,
        backoff_ms: r.backoff_seconds * 1000,
    })
}

/// What the log carries of each job's policies: every dependency by job id (an earlier job of
/// the request by the id it gets, or by the job its client id already names), with how it ended
/// if it is no longer live. A job id the store does not hold is refused, naming the field.
pub(crate) async fn resolve_policies(
    app: &Control,
    queue: &QueueName,
    items: &[(Option<String>, CheckedPolicies)],
    ids: &[JobId],
) -> Result<Vec<SubmitPoliciesRecord>, ServiceError> {
    // Ids first, from memory: a client id that already names a job makes that job the target.
    let mut named: Vec<Vec<(JobId, DependencyCondition, bool)>> = Vec::with_capacity(items.len());
    {
        let state = app.state();
        let existing = |cid: &Option<String>| cid.as_ref().and_then(|c| state.job_of_client_id(queue, c));
        for (_, p) in items {
            let deps = p.depends_on.iter().map(|d| {
                let id = match d.target {
                    DependencyTarget::Job(id) => id,
                    DependencyTarget::Earlier(i) => existing(&items[i].0).unwrap_or(ids[i]),
                };
                let fresh = matches!(d.target, DependencyTarget::Earlier(i) if id == ids[i]);
                (id, d.on, fresh || state.job(id).is_some())
            });
            named.push(deps.collect());
        }
    }
    // Jobs neither live nor of this request are read from the store: ended, or unknown.
    let stored: Vec<JobId> = named.iter().flatten().filter(|(_, _, live)| !live).map(|(id, _, _)| *id).collect();
    let store = app.store.clone();
    let ends = tokio::task::spawn_blocking(move || -> Result<Vec<Option<JobState>>, crate::store::StoreError> {
        stored.iter().map(|id| Ok(store.job(*id)?.map(|j| j.state))).collect()
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))??;
    let mut ends = ends.into_iter();
    let mut out = Vec::with_capacity(items.len());
    for (i, ((_, p), deps)) in items.iter().zip(named).enumerate() {
        let mut depends_on = Vec::with_capacity(deps.len());
        for (j, (job_id, on, live)) in deps.into_iter().enumerate() {
            let ended = if live {
                None
            } else {
                let end = ends.next().flatten().ok_or_else(|| {
                    ServiceError::invalid(
                        format!("jobs[{i}].depends_on[{j}].job_id"),
                        format!("job {job_id} does not exist (a job may only wait for an existing or earlier job)"),
                    )
                })?;
                Some(end.into())
            };
            depends_on.push(SubmitDependencyRecord { job_id, on: on.into(), ended });
        }
        out.push(SubmitPoliciesRecord { depends_on, retry: p.retry.clone().map(Into::into) });
    }
    Ok(out)
}
