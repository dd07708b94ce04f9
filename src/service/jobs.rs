//! Jobs, whatever the transport: submit (checked all or nothing by [`super::validate`]),
//! cancel, reprioritize, preempt, one job with its events, and a page of jobs. Each write is one
//! command; the caller's right to the queue is checked first.

use super::access::Principal;
use super::error::{ErrorKind, ServiceError};
use super::queues::{ids_of, queue_name, stored_queue};
use super::validate::{SubmitContext, check_submission};
use crate::control::ids;
use crate::control::{Control, now_ms, rfc3339};
use crate::model::api::{
    CancelRequest, EventView, JobDependencyStatus, JobList, JobRetryPolicy, JobView, PreemptRequest,
    ReprioritizeRequest, RunView, SubmitRequest,
};
use crate::model::duration::format_duration;
use crate::model::{Event, Job, JobId, JobSetName, JobState, QueueName, ResourceName, Resources, Run, RunId};
use crate::state::{Command, NamespacedJob, NewJob, PolicyJob};
use crate::store::JobFilter;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The submission path of every API: the caller's right to the queue, the checks of
/// [`check_submission`] (all or nothing), then one `Submit` command. Answers one id per job, in
/// order.
pub(crate) async fn submit_jobs(app: &Control, p: &Principal, req: SubmitRequest) -> Result<Vec<JobId>, ServiceError> {
    let queue = stored_queue(app, &req.queue)?;
    p.require_queue(&queue)?;
    if app.state().is_parent(&queue.name) {
        return Err(ServiceError::field(
            ErrorKind::Conflict,
            "queue",
            format!("queue {} is a parent queue: jobs are submitted to leaf queues only", queue.name),
        ));
    }
    let (largest, known, process_nodes_only) = node_facts(app);
    let ctx = SubmitContext {
        server: &app.config.server,
        scheduler: &app.config.scheduler,
        largest_node: &largest,
        known_resources: known.as_deref(),
        process_nodes_only,
    };
    let checked = check_submission(&req, &ctx)?;
    let ids: Vec<JobId> = checked.iter().map(|_| ids::job_id()).collect();
    let policies = if checked.iter().any(|c| c.policies != Default::default()) {
        let items: Vec<_> = checked.iter().map(|c| (c.client_id.clone(), c.policies.clone())).collect();
        super::job_policy::resolve_policies(app, &req.queue, &items, &ids).await?
    } else {
        vec![Default::default(); checked.len()]
    };
    let jobs = checked
        .into_iter()
        .zip(ids)
        .zip(policies)
        .map(|((c, id), policies)| PolicyJob {
            policies,
            job: NamespacedJob {
                namespace: c.namespace,
                job: NewJob {
                    id,
                    client_id: c.client_id,
                    priority: c.priority,
                    priority_class: c.priority_class,
                    requirements: c.requirements.into(),
                    gang: c.gang.map(Into::into),
                    annotations: c.annotations,
                    labels: c.labels,
                    termination_grace_period_ms: c.termination_grace_period_ms,
                    active_deadline_seconds: c.active_deadline_seconds,
                    payload: c.payload.into(),
                },
            },
        })
        .collect();
    let r = app
        .write(Command::Submit {
            queue: req.queue,
            job_set: req.job_set,
            at_ms: now_ms(),
            owner: Some(p.name.clone()),
            jobs,
        })
        .await?;
    ids_of(r)
}

/// What submissions are checked against of the known nodes: the largest amount of each
/// resource and the resource names jobs may ask for (both unchecked when no node is known or
/// `reject_jobs_larger_than_any_node` is off), and whether every node runs processes.
fn node_facts(app: &Control) -> (Resources, Option<Arc<BTreeSet<ResourceName>>>, bool) {
    let state = app.state();
    let process_only = state.process_nodes_only();
    if !app.config.server.reject_jobs_larger_than_any_node || state.node_resource_names().is_empty() {
        return (Resources::new(), None, process_only);
    }
    (state.largest_node().clone(), Some(state.node_resource_names().clone()), process_only)
}

/// The cancellation path of every API: the caller's right to the queue, the states asked for,
/// then one `Cancel` command. Answers the jobs cancelled.
pub(crate) async fn cancel_jobs(app: &Control, p: &Principal, req: CancelRequest) -> Result<Vec<JobId>, ServiceError> {
    p.require_queue(&stored_queue(app, &req.queue)?)?;
    if let Some(states) = &req.states
        && let Some((i, s)) = states.iter().enumerate().find(|(_, s)| s.is_terminal())
    {
        return Err(ServiceError::invalid(
            format!("states[{i}]"),
            format!("{s} jobs are already over and cannot be cancelled"),
        ));
    }
    let reason = req.reason.clone().unwrap_or_else(|| format!("cancelled by {}", p.name));
    let r = app
        .write(Command::Cancel {
            queue: req.queue,
            job_set: req.job_set,
            job_ids: req.job_ids,
            states: req.states.map(|s| s.into_iter().map(Into::into).collect()),
            reason,
            at_ms: now_ms(),
        })
        .await?;
    ids_of(r)
}

/// The reprioritization path of every API: the caller's right to the queue, then one
/// `Reprioritize` command. Answers the jobs whose priority changed.
pub(crate) async fn reprioritize_jobs(
    app: &Control,
    p: &Principal,
    req: ReprioritizeRequest,
) -> Result<Vec<JobId>, ServiceError> {
    p.require_queue(&stored_queue(app, &req.queue)?)?;
    let r = app
        .write(Command::Reprioritize {
            queue: req.queue,
            job_set: req.job_set,
            job_ids: req.job_ids,
            priority: req.priority,
            at_ms: now_ms(),
        })
        .await?;
    ids_of(r)
}

/// The preemption path of every API: the caller's right to the queue, at least one job, then
/// one `Preempt` command. Answers the jobs preempted (those that held a node).
pub(crate) async fn preempt_jobs(
    app: &Control,
    p: &Principal,
    req: PreemptRequest,
) -> Result<Vec<JobId>, ServiceError> {
    p.require_queue(&stored_queue(app, &req.queue)?)?;
    if req.job_ids.is_empty() {
        return Err(ServiceError::invalid("job_ids", "name at least one job to preempt"));
    }
    let reason = req.reason.clone().unwrap_or_else(|| format!("preempted by {}", p.name));
    let r = app
        .write(Command::Preempt {
            queue: req.queue,
            job_set: req.job_set,
            job_ids: req.job_ids,
            reason,
            at_ms: now_ms(),
        })
        .await?;
    ids_of(r)
}

pub(crate) fn event_view(e: &Event) -> EventView {
    EventView {
        seq: e.seq,
        job_id: e.job_id,
        at: rfc3339(e.at_ms),
        kind: e.kind,
        run_id: e.run_id,
        message: e.message.clone(),
    }
}

/// Why a job is where it is: the scheduler's latest reason for a queued job, the end reason
/// else.
pub(crate) fn job_reason(app: &Control, r: &Job) -> Option<String> {
    if r.state == JobState::Queued
        && let Some(d) = r.waiting_on()
    {
        return Some(d.waiting_reason());
    }
    if r.state == JobState::Queued {
        let sched = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
        sched
            .reasons
            .get(&r.id)
            .or_else(|| sched.queue_notes.get(&r.queue))
            .map(|x| x.to_string())
            .or_else(|| r.runs.last().and_then(|run| run.reason.clone()).map(|x| format!("requeued: {x}")))
    } else {
        r.state_reason.clone()
    }
}

/// A job for the API; `reason` as [`job_reason`] says.
fn job_view(app: &Control, r: &Job) -> JobView {
    let reason = job_reason(app, r);
    JobView {
        id: r.id,
        queue: r.queue.clone(),
        job_set: r.job_set.clone(),
        state: r.state,
        priority: r.priority,
        priority_class: r.priority_class.clone(),
        submitted_at: rfc3339(r.submitted_at_ms),
        requests: r.requirements.requests.clone(),
        annotations: r.annotations.clone(),
        labels: r.labels.clone(),
        client_id: r.client_id.clone(),
        namespace: r.namespace.clone(),
        owner: None,
        reason,
        runs: r.runs.iter().enumerate().map(|(i, run)| RunView { attempt: i as u32 + 1, ..run_view(run) }).collect(),
        depends_on: r
            .policies
            .iter()
            .flat_map(|p| p.depends_on.iter())
            .map(|d| JobDependencyStatus { job_id: d.job_id, on: d.on, met: d.met })
            .collect(),
        retry: r.policies.as_ref().and_then(|p| p.retry.as_ref()).map(retry_view),
        events: None,
        pod_spec: None,
    }
}

/// A retry policy for the API.
fn retry_view(r: &crate::model::RetryPolicy) -> JobRetryPolicy {
    JobRetryPolicy {
        max_attempts: r.max_attempts,
        on_exit_codes: r.on_exit_codes.clone(),
        on_oom: r.on_oom,
        on_node_failure: r.on_node_failure,
        backoff_seconds: r.backoff_ms / 1000,
    }
}

/// A run for the API.
pub(crate) fn run_view(run: &Run) -> RunView {
    RunView {
        run_id: run.run_id,
        executor: run.executor.to_string(),
        node: run.node.clone(),
        pool: run.pool.clone(),
        state: run.state,
        leased_at: rfc3339(run.leased_at_ms),
        pending_at: run.pending_at_ms.map(rfc3339),
        running_at: run.running_at_ms.map(rfc3339),
        finished_at: run.finished_at_ms.map(rfc3339),
        exit_code: run.exit_code,
        reason: run.reason.clone(),
        message: run.message.clone(),
        pod: run.pod.clone(),
        usage: None,
        attempt: 0,
    }
}

/// Fills in the runs' usage from what the store holds (`usage` lists it for every run of
/// `jobs`, in order).
fn with_usage(jobs: &mut [JobView], usage: Vec<Option<crate::record::RunUsageRecord>>) {
    let mut usage = usage.into_iter();
    for run in jobs.iter_mut().flat_map(|j| j.runs.iter_mut()) {
        run.usage = usage.next().flatten().map(Into::into);
    }
}

/// The 404 of a job the store does not hold: it never existed, or it finished longer than
/// `job_retention` ago and was deleted (the two cannot be told apart any more).
pub(crate) fn no_such_job(app: &Control, id: JobId) -> ServiceError {
    ServiceError::not_found(format!(
        "job {id} does not exist (finished jobs are deleted after server.job_retention = {})",
        format_duration(app.config.server.job_retention)
    ))
}

pub(crate) fn job_id(s: &str) -> Result<JobId, ServiceError> {
    s.parse().map_err(|e: crate::model::NameError| ServiceError::invalid("id", e.to_string()))
}

/// A job with its events and pod spec, as `GET /v1/jobs/{id}` answers it (the web UI shows the
/// same).
pub(crate) async fn job_details(app: &Control, id: JobId) -> Result<JobView, ServiceError> {
    let store = app.store.clone();
    let found = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
        let Some(mut r) = store.job(id)? else { return Ok(None) };
        r.policies = store.policies(&[id])?.pop().flatten();
        let events = store.job_events(&r)?;
        let payload = store.payload(id)?;
        let owner = store.owners(&[id])?.pop().flatten();
        let usage = store.run_usage(&r.runs.iter().map(|run| run.run_id).collect::<Vec<_>>())?;
        Ok(Some((r, events, payload, owner, usage)))
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))??;
    let Some((r, events, payload, owner, usage)) = found else { return Err(no_such_job(app, id)) };
    let mut v = job_view(app, &r);
    with_usage(std::slice::from_mut(&mut v), usage);
    v.owner = owner;
    v.events = Some(events.iter().map(event_view).collect());
    v.pod_spec = payload.and_then(|p| serde_json::from_str(&p.pod_spec).ok());
    Ok(v)
}

/// Query of `GET /v1/jobs`.
#[derive(Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Only jobs of this queue.
    #[param(value_type = Option<QueueName>)]
    pub(crate) queue: Option<String>,
    /// Only jobs of this job set (needs `queue`).
    #[param(value_type = Option<JobSetName>)]
    pub(crate) job_set: Option<String>,
    /// Comma-separated states (`queued,running`).
    #[param(example = "queued,running")]
    pub(crate) state: Option<String>,
    /// Page size, 1 to 1000.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub(crate) limit: Option<usize>,
    /// The `next` of the previous page: jobs past this id in the order listed.
    #[param(value_type = Option<JobId>)]
    pub(crate) after: Option<String>,
    /// Only jobs whose id, queue, job set, priority class, client id, state reason, or an
    /// annotation or label holds this text, in any case. A search looks at up to 100,000 jobs
    /// per page: a page may then hold fewer than `limit` jobs and still have a `next`.
    pub(crate) text: Option<String>,
    /// `oldest` first (default: submission order) or `newest` first.
    #[param(example = "newest")]
    pub(crate) order: Option<String>,
}

/// The jobs `q` selects, as `GET /v1/jobs` answers them (the web UI lists the same).
pub(crate) async fn list_jobs(app: &Control, q: &ListParams) -> Result<JobList, ServiceError> {
    let queue = q.queue.as_deref().map(queue_name).transpose()?;
    if let Some(name) = &queue {
        // An empty page would read as "no jobs" for a misspelt queue.
        stored_queue(app, name)?;
    }
    let job_set = q
        .job_set
        .as_deref()
        .map(|s| JobSetName::new(s).map_err(|e| ServiceError::invalid("job_set", e.to_string())))
        .transpose()?;
    if job_set.is_some() && queue.is_none() {
        return Err(ServiceError::invalid("job_set", "filtering by job set needs the queue too"));
    }
    let mut states = Vec::new();
    for s in q.state.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        states.push(JobState::parse(s).ok_or_else(|| ServiceError::invalid("state", format!("{s:?} is not a job state (queued, leased, pending, running, succeeded, failed, cancelled, preempted)")))?);
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ServiceError::invalid("limit", "must be between 1 and 1000"));
    }
    let after = q.after.as_deref().map(job_id).transpose().map_err(|e| ServiceError::invalid("after", e.detail))?;
    let newest_first = match q.order.as_deref().map(str::trim) {
        None | Some("") | Some("oldest") => false,
        Some("newest") => true,
        Some(other) => return Err(ServiceError::invalid("order", format!("{other:?} is not oldest or newest"))),
    };
    let text = q.text.as_deref().map(str::trim).filter(|t| !t.is_empty()).map(str::to_string);
    if text.as_ref().is_some_and(|t| t.len() > 200) {
        return Err(ServiceError::invalid("text", "at most 200 bytes"));
    }
    let filter = JobFilter { queue, job_set, states, after, limit, text, newest_first };
    let store = app.store.clone();
    let (page, owners, usage) = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
        let mut page = store.search_jobs(&filter)?;
        let ids: Vec<JobId> = page.jobs.iter().map(|j| j.id).collect();
        let owners = store.owners(&ids)?;
        for (j, p) in page.jobs.iter_mut().zip(store.policies(&ids)?) {
            j.policies = p;
        }
        let runs: Vec<RunId> = page.jobs.iter().flat_map(|j| j.runs.iter().map(|r| r.run_id)).collect();
        let usage = store.run_usage(&runs)?;
        Ok((page, owners, usage))
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))??;
    let mut jobs: Vec<JobView> =
        page.jobs.iter().zip(owners).map(|(r, owner)| JobView { owner, ..job_view(app, r) }).collect();
    with_usage(&mut jobs, usage);
    Ok(JobList { jobs, next: page.next })
}
