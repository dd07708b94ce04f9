//! The nodes of the cluster as the state knows them, with their quarantines, and lifting a
//! quarantine (admins only).

use super::access::Principal;
use super::error::ServiceError;
use crate::config::Role;
use crate::control::{Control, now_ms, rfc3339};
use crate::model::api::{NodeReservationView, NodeView, QuarantineView};
use crate::model::{ExecutorName, NodeName, Resources};
use crate::scheduler::QuarantineConfig;
use crate::state::{Command, State};
use std::collections::BTreeMap;

/// Every node of the known executors, then the quarantined nodes no executor reports, by
/// executor and name, as of `now_ms`. With quarantine off (`max_failures = 0`) no node shows a
/// quarantine or failures: the scheduler ignores them then.
pub(crate) fn node_views(st: &State, cfg: &QuarantineConfig, now_ms: i64) -> Vec<NodeView> {
    let mut jobs: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for job in st.jobs_with_active_runs() {
        if let Some(run) = job.record.active_run() {
            *jobs.entry((run.executor.as_str(), run.node.as_str())).or_default() += 1;
        }
    }
    let health = |e: &ExecutorName, n: &NodeName| {
        let h = st.health_of(e, n).filter(|_| cfg.enabled());
        let recent = h.map_or(0, |h| h.failures_within(now_ms, cfg.policy().window_ms) as u32);
        let quarantine = h.and_then(|h| h.quarantined_at(now_ms)).map(|q| QuarantineView {
            since: rfc3339(q.since_ms),
            until: rfc3339(q.until_ms),
            reason: q.reason.clone(),
        });
        (recent, quarantine)
    };
    let mut out = Vec::new();
    for e in st.executors() {
        for n in e.nodes() {
            let (recent_failures, quarantine) = health(&e.name, &n.name);
            out.push(NodeView {
                executor: e.name.clone(),
                name: n.name.clone(),
                pool: Some(n.pool.clone()),
                reported: true,
                unschedulable: n.unschedulable,
                allocatable: n.allocatable.clone(),
                jobs: jobs.get(&(e.name.as_str(), n.name.as_str())).copied().unwrap_or(0),
                recent_failures,
                quarantine,
                reserved_for: None,
            });
        }
    }
    for ((e, n), _) in st.node_health() {
        let reported = st.executor(e).is_some_and(|x| x.has_node(n));
        if reported {
            continue;
        }
        let (recent_failures, quarantine) = health(e, n);
        if quarantine.is_none() {
            continue;
        }
        out.push(NodeView {
            executor: e.clone(),
            name: n.clone(),
            pool: None,
            reported: false,
            unschedulable: false,
            allocatable: Resources::new(),
            jobs: jobs.get(&(e.as_str(), n.as_str())).copied().unwrap_or(0),
            recent_failures,
            quarantine,
            reserved_for: None,
        });
    }
    out.sort_by(|a, b| (a.executor.as_str(), a.name.as_str()).cmp(&(b.executor.as_str(), b.name.as_str())));
    out
}

/// Marks the nodes the leader's latest cycle reserved ([`crate::scheduler::reservation`]).
pub(crate) fn mark_reserved(views: &mut [NodeView], app: &Control) {
    let scheduling = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
    for r in &scheduling.reservations {
        for n in &r.nodes {
            if let Some(v) = views.iter_mut().find(|v| v.executor == n.executor && v.name == n.node) {
                v.reserved_for = Some(NodeReservationView {
                    job_id: r.job_id,
                    gang: r.gang.clone(),
                    queue: r.queue.clone(),
                    expected_start: r.expected_start_ms.map(rfc3339),
                    waiting_since: rfc3339(r.queued_since_ms),
                });
            }
        }
    }
}

/// Lifts a node's quarantine (admins only): the node takes new jobs again at once, and the
/// failures counted against it are forgotten. Answers the node as it is now.
pub(crate) async fn lift_quarantine(
    app: &Control,
    p: &Principal,
    executor: ExecutorName,
    node: NodeName,
) -> Result<NodeView, ServiceError> {
    p.require(Role::Admin)?;
    let at_ms = now_ms();
    app.write(Command::LiftQuarantine { executor: executor.clone(), node: node.clone(), at_ms }).await?;
    let view = node_views(&app.state(), &app.config.scheduler.quarantine, at_ms)
        .into_iter()
        .find(|v| v.executor == executor && v.name == node)
        .unwrap_or(NodeView {
            // Lifted, and no executor reports it: nothing else is known about it.
            executor,
            name: node,
            pool: None,
            reported: false,
            unschedulable: false,
            allocatable: Resources::new(),
            jobs: 0,
            recent_failures: 0,
            quarantine: None,
            reserved_for: None,
        });
    Ok(view)
}
