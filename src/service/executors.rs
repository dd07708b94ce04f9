//! The executor API's work, whatever carries it: the lease long-poll (an agent reports its
//! nodes and the runs it holds, and gets the runs to start and to kill), the run events it
//! reports, and the followed output it sends. Only a leader a majority follows does this work.

use super::error::ServiceError;
use crate::control::{Control, now_ms};
use crate::model::api::{
    EventsRequest, EventsResponse, HeldRun, KillOrder, LeaseOrder, LeaseRequest, LeaseResponse, NodeReport,
    OutputReport, RunEventKind, RunEventReport, raw_json, raw_null,
};
use crate::model::{ExecutorName, JobId, Node, NodeFault, RunId};
use crate::record::NodeRecord;
use crate::state::{
    Command, FaultedRunReport, PodRunReport, QuarantinePolicyRecord, Response, RunReport, RunReportKind, UsageRunReport,
};
use rustc_hash::FxHashSet as HashSet;
use std::time::Duration;

/// Grace period for runs an agent holds that the server does not know.
const ORPHAN_GRACE_SECONDS: f64 = 5.0;

/// An executor name of a request path; `field` "executor" when it is not one.
pub(crate) fn executor_name(s: &str) -> Result<ExecutorName, ServiceError> {
    ExecutorName::new(s).map_err(|e| ServiceError::invalid("executor", e.to_string()))
}

/// Leases and run events are only for a leader a majority follows (the API's relaying sends them
/// there; this catches a leader that lost its majority since).
fn require_serving(app: &Control) -> Result<(), ServiceError> {
    if app.cluster.serving() {
        return Ok(());
    }
    Err(ServiceError::unavailable(match app.cluster.leader_addr() {
        Some(l) if !app.cluster.is_leader() => format!("this server is not the leader; the leader is {l}"),
        _ => "no leader that a majority follows is known right now; retry shortly".to_string(),
    }))
}

/// Resolves once this server may no longer hand out leases (it lost its majority or its
/// leadership), so that an open long poll ends and the agent turns to the new leader.
async fn serving_lapsed(app: &Control) {
    while app.cluster.serving() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The reported nodes as the state keeps them, in name order.
fn nodes_of(executor: &ExecutorName, reports: &[NodeReport]) -> Vec<Node> {
    let mut v: Vec<Node> = reports
        .iter()
        .map(|r| {
            let NodeReport { name, pool, labels, taints, allocatable, unallocatable, unschedulable } = r.clone();
            Node { name, executor: executor.clone(), pool, labels, taints, allocatable, unallocatable, unschedulable }
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// True if `reports` are the nodes the state keeps (`kept`) for `executor`, as [`nodes_of`]
/// would make them, without copying them: an agent sends all its nodes with every poll, and
/// copying a thousand nodes' labels to find them unchanged was a share of the poll's cost.
fn same_nodes(executor: &ExecutorName, kept: &[Node], reports: &[NodeReport]) -> bool {
    if kept.len() != reports.len() {
        return false;
    }
    let mut sorted: Vec<&NodeReport> = reports.iter().collect();
    if !sorted.is_sorted_by(|a, b| a.name <= b.name) {
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
    }
    kept.iter().zip(sorted).all(|(k, r)| {
        let NodeReport { name, pool, labels, taints, allocatable, unallocatable, unschedulable } = r;
        k.name == *name
            && k.executor == *executor
            && k.pool == *pool
            && k.labels == *labels
            && k.taints == *taints
            && k.allocatable == *allocatable
            && k.unallocatable == *unallocatable
            && k.unschedulable == *unschedulable
    })
}

/// A run event as the log records it. A `returned` run never started on its node, which is
/// the node's fault whether or not the agent said so (agents before node faults do not); a
/// fault on any other kind than `failed` means nothing and is dropped.
fn run_report(e: RunEventReport, tail_limit: usize) -> UsageRunReport {
    let RunEventReport { run_id, job_id, kind, time_ms, exit_code, reason, message, log_tail, node_fault, pod, usage } =
        e;
    // What a run used counts with its end only.
    let usage = usage.filter(|_| matches!(kind, RunEventKind::Succeeded | RunEventKind::Failed));
    // The leader cuts the tail to its setting, so that every server stores the same.
    let log_tail = log_tail.map(|t| crate::state::last_bytes(&t, tail_limit).to_string()).filter(|t| !t.is_empty());
    let (kind, node_fault) = match kind {
        RunEventKind::Pending => (RunReportKind::Pending, None),
        RunEventKind::Running => (RunReportKind::Running, None),
        RunEventKind::Succeeded => (RunReportKind::Succeeded, None),
        RunEventKind::Failed => (RunReportKind::Failed, node_fault),
        RunEventKind::Returned => (RunReportKind::Returned, Some(node_fault.unwrap_or(NodeFault::NotStarted))),
    };
    UsageRunReport {
        event: PodRunReport {
            event: FaultedRunReport {
                report: RunReport { run_id, job_id, kind, time_ms, exit_code, reason, message, log_tail },
                node_fault: node_fault.map(Into::into),
            },
            pod: pod.map(Into::into),
        },
        usage: usage.map(Into::into),
    }
}

/// This server's quarantine settings, as a run events command carries them.
fn quarantine_policy(app: &Control) -> QuarantinePolicyRecord {
    let p = app.config.scheduler.quarantine.policy();
    QuarantinePolicyRecord { max_failures: p.max_failures, window_ms: p.window_ms, duration_ms: p.duration_ms }
}

/// A lease answer's jobs, without their payloads yet.
struct Pending {
    leases: Vec<(JobId, RunId, crate::model::Job)>,
    kills: Vec<KillOrder>,
}

fn pending_for(app: &Control, executor: &ExecutorName, held: &HashSet<RunId>, max_leases: usize) -> Pending {
    let st = app.state();
    let mut out = Pending { leases: vec![], kills: vec![] };
    for job in st.killing_for(executor) {
        let Some(run) = job.record.active_run() else { continue };
        if let Some(k) = &run.kill {
            out.kills.push(KillOrder {
                run_id: run.run_id,
                job_id: Some(job.record.id),
                grace_period_seconds: k.grace_period_ms as f64 / 1000.0,
                reason: k.reason.clone(),
            });
        }
    }
    for (id, run) in st.unacked_for(executor) {
        if out.leases.len() >= max_leases {
            break;
        }
        if held.contains(&run) {
            continue;
        }
        let Some(job) = st.job(id) else { continue };
        if job.record.active_run().is_some_and(|r| r.run_id == run) {
            out.leases.push((id, run, job.record.clone()));
        }
    }
    out
}

/// Kill orders for the runs the agent holds that are not (or no longer) this executor's live
/// runs. Asked once, when the poll arrives: `runs` is what the agent held when it sent the poll,
/// so later in the poll a run that ended since (reported by the agent itself) would look unknown
/// and draw a needless kill; and an agent holds thousands of runs under load, each looked up.
fn orphan_kills(app: &Control, executor: &ExecutorName, runs: &[HeldRun]) -> Vec<KillOrder> {
    let st = app.state();
    let mut kills = Vec::new();
    for h in runs {
        if h.state.is_terminal() {
            continue;
        }
        let known =
            st.job_of_run(h.run_id).and_then(|j| j.record.active_run()).is_some_and(|r| &r.executor == executor);
        if !known {
            kills.push(KillOrder {
                run_id: h.run_id,
                job_id: Some(h.job_id),
                grace_period_seconds: ORPHAN_GRACE_SECONDS,
                reason: "the server does not know this run".into(),
            });
        }
    }
    kills
}

/// Answers a lease poll of `executor`: records its nodes if they changed, then waits (up to the
/// poll's `wait_seconds`, at most `max_lease_wait`) for runs to start or kill, or for output
/// someone follows, and answers with them.
pub(crate) async fn lease(
    app: &Control,
    executor: ExecutorName,
    req: LeaseRequest,
) -> Result<LeaseResponse, ServiceError> {
    check_lease_request(&req)?;
    register_nodes(app, &executor, &req).await?;
    let pending = wait_for_work(app, &executor, &req).await?;
    lease_answer(app, &executor, pending).await
}

/// The poll's own rules: each node once, a wait that is a number of seconds.
fn check_lease_request(req: &LeaseRequest) -> Result<(), ServiceError> {
    let mut names = HashSet::default();
    for (i, n) in req.nodes.iter().enumerate() {
        if !names.insert(&n.name) {
            return Err(ServiceError::invalid(format!("nodes[{i}].name"), format!("node {} is listed twice", n.name)));
        }
    }
    if let Some(w) = req.wait_seconds
        && !(w.is_finite() && w >= 0.0)
    {
        return Err(ServiceError::invalid("wait_seconds", "must be a number of seconds >= 0"));
    }
    Ok(())
}

/// Marks the executor alive and records its nodes when they changed.
async fn register_nodes(app: &Control, executor: &ExecutorName, req: &LeaseRequest) -> Result<(), ServiceError> {
    require_serving(app)?;
    app.liveness.touch(executor);
    let changed = app.state().executor(executor).is_none_or(|e| !same_nodes(executor, e.nodes(), &req.nodes));
    if changed {
        app.write(Command::UpsertExecutor {
            executor: executor.clone(),
            nodes: nodes_of(executor, &req.nodes).into_iter().map(NodeRecord::from).collect(),
            at_ms: now_ms(),
        })
        .await?;
    }
    Ok(())
}

/// Waits until there is work for the executor (or the poll's time is up, the server stops, or
/// output someone follows is due); fails if this server stops serving meanwhile.
async fn wait_for_work(app: &Control, executor: &ExecutorName, req: &LeaseRequest) -> Result<Pending, ServiceError> {
    let max_wait = app.config.server.max_lease_wait.as_secs_f64();
    let wait = Duration::from_secs_f64(req.wait_seconds.unwrap_or(30.0).clamp(0.0, max_wait));
    let deadline = tokio::time::Instant::now() + wait;
    let max_leases = req.max_leases.map(|m| m as usize).unwrap_or(usize::MAX).max(1);
    let held: HashSet<RunId> = req.runs.iter().map(|r| r.run_id).collect();
    let mut orphans = Some(orphan_kills(app, executor, &req.runs));
    let notify = app.notify.executor(executor);
    let mut stopping = app.shutdown.clone();
    let polled = std::time::Instant::now();
    let pending = loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let mut pending = pending_for(app, executor, &held, max_leases);
        pending.kills.extend(orphans.take().into_iter().flatten());
        let now = tokio::time::Instant::now();
        // Output someone follows is asked for without waiting for the poll's end.
        let ask_at = app.output.next_ask(executor, now.into_std()).map(tokio::time::Instant::from_std);
        if !pending.leases.is_empty()
            || !pending.kills.is_empty()
            || now >= deadline
            || ask_at.is_some_and(|a| a <= now)
        {
            break pending;
        }
        if *stopping.borrow() {
            break pending;
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(ask_at.map_or(deadline, |a| a.min(deadline))) => {}
            _ = stopping.changed() => {}
            _ = serving_lapsed(app) => {
                return Err(ServiceError::unavailable(
                    "this server stopped leading (or lost its majority) during the poll; poll the other servers",
                ));
            }
        }
        app.liveness.touch(executor);
    };
    crate::metrics::global().lease_poll_wait.observe(polled.elapsed().as_secs_f64());
    Ok(pending)
}

/// The lease answer: each leased run with its job's stored payload and owner, the kills, and the
/// output asked for.
async fn lease_answer(app: &Control, executor: &ExecutorName, pending: Pending) -> Result<LeaseResponse, ServiceError> {
    let metrics = crate::metrics::global();
    let now = now_ms();
    for (_, _, r) in &pending.leases {
        metrics.submit_to_lease.observe(now.saturating_sub(r.submitted_at_ms).max(0) as f64 / 1000.0);
    }
    let ids: Vec<JobId> = pending.leases.iter().map(|(id, _, _)| *id).collect();
    let store = app.store.clone();
    let (payloads, owners) = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
        Ok((store.payloads(&ids)?, store.owners(&ids)?))
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))??;
    let mut leases = Vec::with_capacity(pending.leases.len());
    for (((id, run_id, r), payload), owner) in pending.leases.into_iter().zip(payloads).zip(owners) {
        let Some(payload) = payload else {
            tracing::error!(job_id = %id, "leased job has no stored pod spec");
            continue;
        };
        // Stored as submitted, after the submission checked it: valid JSON text.
        let raw = |s: &str| serde_json::value::RawValue::from_string(s.to_owned()).unwrap_or_else(|_| raw_null());
        let node = r.active_run().map(|run| run.node.clone());
        let Some(node) = node else { continue };
        leases.push(LeaseOrder {
            run_id,
            job_id: id,
            queue: r.queue.clone(),
            job_set: r.job_set.clone(),
            node,
            priority_class: r.priority_class.clone(),
            pod_spec: without_floating(raw(&payload.pod_spec), &app.config.scheduler),
            services: payload.services.iter().map(|s| raw(s)).collect(),
            ingresses: payload.ingresses.iter().map(|s| raw(s)).collect(),
            annotations: r.annotations.clone(),
            labels: r.labels.clone(),
            termination_grace_period_seconds: r.termination_grace_period_ms as f64 / 1000.0,
            active_deadline_seconds: r.active_deadline_seconds,
            namespace: r.namespace.clone(),
            owner,
            output_tail_bytes: Some(app.config.server.finished_output_tail),
        });
    }
    let output = app.output.asks_for(executor, std::time::Instant::now());
    Ok(LeaseResponse { leases, kills: pending.kills, output })
}

/// The pod spec an agent gets: without the floating resources' requests and limits (as Armada
/// does), which the scheduler counts per pool and no node has, so that Kubernetes does not wait
/// for a node offering them.
fn without_floating(
    pod_spec: Box<serde_json::value::RawValue>,
    cfg: &crate::scheduler::SchedulerConfig,
) -> Box<serde_json::value::RawValue> {
    if cfg.floating_resources.is_empty() {
        return pod_spec;
    }
    let Ok(mut pod_spec) = serde_json::from_str::<serde_json::Value>(pod_spec.get()) else { return pod_spec };
    let strip = |m: Option<&mut serde_json::Value>| {
        if let Some(serde_json::Value::Object(m)) = m {
            m.retain(|name, _| cfg.floating_resource(name).is_none());
        }
    };
    for list in ["containers", "initContainers"] {
        let Some(serde_json::Value::Array(cs)) = pod_spec.get_mut(list) else { continue };
        for c in cs {
            let Some(r) = c.get_mut("resources") else { continue };
            strip(r.get_mut("requests"));
            strip(r.get_mut("limits"));
        }
    }
    strip(pod_spec.get_mut("overhead"));
    raw_json(&pod_spec)
}

/// Takes the output the agent of `executor` sends for those following it (kept on the leader,
/// not stored).
pub(crate) fn report_output(
    app: &Control,
    executor: ExecutorName,
    req: OutputReport,
) -> Result<EventsResponse, ServiceError> {
    require_serving(app)?;
    app.liveness.touch(&executor);
    for (i, c) in req.chunks.iter().enumerate() {
        if c.to < c.from {
            return Err(ServiceError::invalid(format!("chunks[{i}].to"), "must not be before `from`"));
        }
    }
    let accepted = app.output.receive(&executor, req.chunks);
    Ok(EventsResponse { accepted: u32::try_from(accepted).unwrap_or(u32::MAX) })
}

/// Applies the run events the agent of `executor` reports, as one command.
pub(crate) async fn report_events(
    app: &Control,
    executor: ExecutorName,
    req: EventsRequest,
) -> Result<EventsResponse, ServiceError> {
    require_serving(app)?;
    app.liveness.touch(&executor);
    if req.events.is_empty() {
        return Ok(EventsResponse { accepted: 0 });
    }
    let tail_limit = usize::try_from(app.config.server.finished_output_tail).unwrap_or(usize::MAX);
    let r = app
        .write(Command::RunEvents {
            executor,
            at_ms: now_ms(),
            events: req.events.into_iter().map(|e| run_report(e, tail_limit)).collect(),
            max_attempted_runs: app.config.server.max_attempted_runs,
            quarantine: quarantine_policy(app),
        })
        .await?;
    let accepted = match r {
        Response::Accepted(n) => n,
        other => return Err(ServiceError::internal(format!("unexpected response {other:?}"))),
    };
    Ok(EventsResponse { accepted })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeName, PoolName, Resources};

    fn report(name: &str, cpu: &str, zone: &str) -> NodeReport {
        NodeReport {
            name: NodeName::new(name).expect("name"),
            pool: PoolName::default_pool(),
            labels: [("zone".to_string(), zone.to_string())].into(),
            taints: vec![],
            allocatable: Resources::parse([("cpu", cpu)]).expect("resources"),
            unallocatable: Resources::default(),
            unschedulable: false,
        }
    }

    /// `same_nodes` answers as comparing with what `nodes_of` makes, which the poll did before.
    #[test]
    fn nodes_compared_in_place_answer_as_nodes_made_and_compared() {
        let e = ExecutorName::new("e1").expect("name");
        let kept = nodes_of(&e, &[report("n2", "8", "a"), report("n1", "4", "a"), report("n10", "4", "b")]);
        let cases: Vec<Vec<NodeReport>> = vec![
            vec![report("n1", "4", "a"), report("n10", "4", "b"), report("n2", "8", "a")],
            vec![report("n2", "8", "a"), report("n10", "4", "b"), report("n1", "4", "a")],
            vec![report("n1", "4", "a"), report("n10", "4", "b"), report("n2", "16", "a")],
            vec![report("n1", "4", "a"), report("n10", "4", "c"), report("n2", "8", "a")],
            vec![report("n1", "4", "a"), report("n2", "8", "a")],
            vec![report("n1", "4", "a"), report("n11", "4", "b"), report("n2", "8", "a")],
            vec![],
        ];
        let answers: Vec<bool> = cases.iter().map(|r| same_nodes(&e, &kept, r)).collect();
        assert_eq!(answers, vec![true, true, false, false, false, false, false]);
        for r in &cases {
            assert_eq!(same_nodes(&e, &kept, r), nodes_of(&e, r) == kept);
        }
        let mut cordoned = cases[0].clone();
        cordoned[1].unschedulable = true;
        assert!(!same_nodes(&e, &kept, &cordoned));
        assert!(!same_nodes(&ExecutorName::new("e2").expect("name"), &kept, &cases[0]));
    }
}
