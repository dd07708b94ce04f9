//! Operations endpoints: health, readiness, metrics, cluster status.

use super::problem::{ApiError, json};
use crate::control::Control;
use crate::control::{PeerRpcFigures, SchedulingView};
use crate::model::api::ClusterStatus;
use crate::model::api::Problem;
use crate::raft::stats::{Histogram, LATENCY_BUCKETS};
use crate::scheduler::QueueShare;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::fmt::{Display, Write};
use std::sync::Arc;

/// Answer of `GET /healthz`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(examples("ok"))]
    pub status: String,
}

/// Answer of `GET /readyz` (fields in the order `serde_json::json!` wrote them).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Address of the leader.
    pub leader: Option<String>,
    /// Always `ready`.
    #[schema(examples("ready"))]
    pub status: String,
}

/// Liveness
///
/// Answers as long as the process serves HTTP.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    responses((status = 200, description = "The server is up", body = Health))
)]
pub async fn healthz() -> Response {
    json(Health { status: "ok".into() })
}

/// Readiness
///
/// Ready once the replicated log is applied and a leader is known.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready yet", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(app): State<Arc<Control>>) -> Response {
    if app.cluster.ready() {
        json(Readiness { leader: app.cluster.leader_addr(), status: "ready".into() })
    } else {
        ApiError::unavailable("not ready: the log is not applied yet or no leader is known").into_response()
    }
}

/// Prometheus metrics
///
/// Prometheus text format (0.0.4), computed from the state at scrape time.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses((status = 200, description = "Metrics in the Prometheus text exposition format, version 0.0.4", body = String, content_type = "text/plain"))
)]
pub async fn metrics(State(app): State<Arc<Control>>) -> Response {
    let mut out = String::new();
    {
        let st = app.state();
        state_metrics(&mut out, &st);
        quarantine_metrics(&mut out, &st, &app.config.scheduler.quarantine, crate::control::now_ms());
    }
    scheduling_metrics(&mut out, &app.scheduling.read().unwrap_or_else(|p| p.into_inner()));
    Family::new(&mut out, "convoy_leader", "gauge", "1 if this server is the leader.")
        .sample("", u8::from(app.cluster.is_leader()));
    raft_metrics(&mut out, &app.cluster.status(), &app.cluster.peer_rpcs());
    (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// Families of the Raft layer: role, term, indexes, quorum, replication lag, peer RPCs.
fn raft_metrics(out: &mut String, st: &ClusterStatus, rpcs: &PeerRpcFigures) {
    Family::new(out, "convoy_raft_term", "gauge", "Current Raft term.").sample("", st.term);
    let mut state = Family::new(out, "convoy_raft_state", "gauge", "1 for this server's Raft role.");
    for role in ["Leader", "Follower", "Candidate", "Learner", "Shutdown"] {
        state.sample(&format!("state=\"{}\"", role.to_lowercase()), u8::from(st.state == role));
    }
    Family::new(out, "convoy_raft_serving", "gauge", "1 if this server leads and a majority acknowledged it lately.")
        .sample("", u8::from(st.serving));
    Family::new(out, "convoy_raft_leader_changes_total", "counter", "Leader changes this server saw.")
        .sample("", st.leader_changes);
    Family::new(out, "convoy_raft_last_log_index", "gauge", "Index of the last entry in the log.")
        .sample("", st.last_log_index.unwrap_or(0));
    Family::new(out, "convoy_raft_applied_index", "gauge", "Index of the last applied entry.")
        .sample("", st.last_applied.unwrap_or(0));
    Family::new(out, "convoy_raft_snapshot_index", "gauge", "Index of the last entry the latest snapshot covers.")
        .sample("", st.snapshot_index.unwrap_or(0));
    Family::new(out, "convoy_raft_purged_index", "gauge", "Index of the last entry purged from the log.")
        .sample("", st.purged_index.unwrap_or(0));
    let help = "Snapshots this server installed since it started (it caught up by snapshot).";
    Family::new(out, "convoy_raft_snapshots_installed_total", "counter", help).sample("", st.snapshots_installed);
    if let Some(ms) = st.millis_since_quorum_ack {
        Family::new(
            out,
            "convoy_raft_quorum_ack_age_seconds",
            "gauge",
            "On the leader: time since a majority acknowledged it.",
        )
        .sample("", ms as f64 / 1000.0);
    }
    let mut lag = Family::new(
        out,
        "convoy_raft_replication_lag_entries",
        "gauge",
        "On the leader: entries each member is behind.",
    );
    for m in &st.members {
        if let Some(l) = m.lag {
            lag.sample(&format!("peer=\"{}\"", m.id), l);
        }
    }
    let help = "Latency of answered peer RPCs, by peer and kind (append, vote, snapshot).";
    let mut latency = Family::new(out, "convoy_raft_peer_rpc_seconds", "histogram", help);
    for ((peer, kind), h) in &rpcs.latency {
        let labels = format!("peer=\"{peer}\",rpc=\"{kind}\"");
        latency.histogram(&labels, h);
    }
    let mut failures = Family::new(
        out,
        "convoy_raft_peer_rpc_failures_total",
        "counter",
        "Peer RPCs that got no answer, by peer and kind.",
    );
    for ((peer, kind), n) in &rpcs.failures {
        failures.sample(&format!("peer=\"{peer}\",rpc=\"{kind}\""), n);
    }
}

/// One metric family in the text exposition format. Its `# HELP` and `# TYPE` lines are written
/// first and the samples go right after them: a family's samples must form one block, so a
/// family is finished before the next one is begun (the borrow of `out` enforces it).
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &'static str, kind: &str, help: &str) -> Self {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        Family { out, name }
    }

    /// The `_bucket`, `_sum` and `_count` samples of a histogram.
    fn histogram(&mut self, labels: &str, h: &Histogram) {
        let name = self.name;
        let cumulative = h.cumulative();
        for (i, n) in cumulative.iter().enumerate() {
            let le = LATENCY_BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(self.out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
        }
        let _ = writeln!(self.out, "{name}_sum{{{labels}}} {}", h.sum);
        let _ = writeln!(self.out, "{name}_count{{{labels}}} {}", h.count);
    }

    /// A sample; `labels` is `k="v",…` (empty for none). Label values are validated names,
    /// which need no escaping.
    fn sample(&mut self, labels: &str, value: impl Display) {
        let name = self.name;
        let _ = if labels.is_empty() {
            writeln!(self.out, "{name} {value}")
        } else {
            writeln!(self.out, "{name}{{{labels}}} {value}")
        };
    }
}

/// Families computed from the replicated state.
fn state_metrics(out: &mut String, st: &crate::state::State) {
    let mut jobs = Family::new(out, "convoy_jobs", "gauge", "Live jobs by queue and state.");
    for (name, q) in &st.queues {
        for (state, n) in &q.counts {
            jobs.sample(&format!("queue=\"{name}\",state=\"{state}\""), n);
        }
    }
    Family::new(out, "convoy_executors", "gauge", "Known executors.").sample("", st.executors.len());
    let nodes: usize = st.executors.values().map(|e| e.nodes.len()).sum();
    Family::new(out, "convoy_nodes", "gauge", "Known nodes.").sample("", nodes);
}

/// Quarantined nodes per executor and pool (0 for every executor and pool with nodes, so that a
/// lifted quarantine shows as a drop rather than a vanished series). A quarantined node no
/// executor reports counts under its executor with `pool=""`.
fn quarantine_metrics(out: &mut String, st: &crate::state::State, cfg: &crate::scheduler::QuarantineConfig, now: i64) {
    let quarantined = |e: &crate::model::ExecutorName, n: &crate::model::NodeName| {
        cfg.enabled() && st.node_health.get(&(e.clone(), n.clone())).is_some_and(|h| h.quarantined_at(now).is_some())
    };
    let mut counts: std::collections::BTreeMap<(&str, &str), u64> = std::collections::BTreeMap::new();
    for e in st.executors.values() {
        for n in &e.nodes {
            *counts.entry((e.name.as_str(), n.pool.as_str())).or_default() += u64::from(quarantined(&e.name, &n.name));
        }
    }
    for (e, n) in st.node_health.keys() {
        let reported = st.executors.get(e).is_some_and(|x| x.nodes.iter().any(|r| &r.name == n));
        if !reported && quarantined(e, n) {
            *counts.entry((e.as_str(), "")).or_default() += 1;
        }
    }
    let help = "Nodes under quarantine (too many failures of the node), per executor and pool.";
    let mut family = Family::new(out, "convoy_quarantined_nodes", "gauge", help);
    for ((executor, pool), n) in counts {
        family.sample(&format!("executor=\"{executor}\",pool=\"{pool}\""), n);
    }
}

/// Families from this server's latest scheduling cycle.
fn scheduling_metrics(out: &mut String, s: &SchedulingView) {
    Family::new(out, "convoy_scheduling_cycles_total", "counter", "Scheduling cycles run by this server.")
        .sample("", s.cycles);
    Family::new(out, "convoy_scheduling_cycle_seconds", "gauge", "Duration of the last cycle.")
        .sample("", s.last_cycle_ms / 1000.0);
    let help = "Adjusted fair share per queue and pool.";
    per_queue(out, s, "convoy_queue_fair_share", help, |q| q.adjusted_fair_share);
    let help = "Share of the pool a queue holds after the last cycle's decisions, per queue and pool.";
    per_queue(out, s, "convoy_queue_share", help, |q| q.share_after);
}

/// A family with one sample per queue and pool: its own pass over the pools, so that its
/// samples stay together.
fn per_queue(out: &mut String, s: &SchedulingView, name: &'static str, help: &str, value: fn(&QueueShare) -> f64) {
    let mut family = Family::new(out, name, "gauge", help);
    for p in &s.pools {
        for q in &p.queues {
            family.sample(&format!("pool=\"{}\",queue=\"{}\"", p.pool, q.queue), value(q));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PoolName, QueueName, Resources};
    use crate::scheduler::PoolReport;
    use std::collections::HashSet;
    use std::time::Duration;

    /// Checks the text exposition format: every family has `# HELP` then `# TYPE`, and all its
    /// samples follow them in one block; no family appears twice. Answers the families in order.
    fn check_exposition(text: &str) -> Result<Vec<String>, String> {
        let (mut families, mut seen) = (Vec::new(), HashSet::new());
        let (mut current, mut want_type): (Option<&str>, Option<&str>) = (None, None);
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["#", "HELP", name, _, ..] => {
                    if let Some(w) = want_type {
                        return Err(format!("{w} has HELP but no TYPE"));
                    }
                    if !seen.insert(*name) {
                        return Err(format!("family {name} appears twice"));
                    }
                    (current, want_type) = (None, Some(*name));
                }
                ["#", "TYPE", name, kind] => {
                    if want_type != Some(*name) {
                        return Err(format!("TYPE of {name} does not follow its HELP"));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(kind) {
                        return Err(format!("{name} has the unknown type {kind}"));
                    }
                    (current, want_type) = (Some(*name), None);
                    families.push(name.to_string());
                }
                ["#", ..] | [] => {}
                [sample, .., value] => {
                    let full = sample.split('{').next().unwrap_or(sample);
                    // A histogram's samples are its name with _bucket, _sum or _count.
                    let name = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|suffix| full.strip_suffix(suffix).filter(|base| current == Some(*base)))
                        .unwrap_or(full);
                    if current != Some(name) {
                        return Err(match seen.contains(name) {
                            true => format!("a sample of {name} is outside its family's block: {line}"),
                            false => format!("{name} has no HELP and TYPE: {line}"),
                        });
                    }
                    value.parse::<f64>().map_err(|_| format!("bad value: {line}"))?;
                }
                [_] => return Err(format!("a sample without a value: {line}")),
            }
        }
        match want_type {
            Some(w) => Err(format!("{w} has HELP but no TYPE")),
            None => Ok(families),
        }
    }

    fn share(queue: &str, adjusted: f64, after: f64) -> QueueShare {
        QueueShare {
            queue: QueueName::new(queue).unwrap(),
            weight: 1.0,
            fair_share: 0.5,
            adjusted_fair_share: adjusted,
            actual_share: 0.0,
            share_after: after,
            protected: true,
            allocated: Resources::new(),
            demand: Resources::new(),
            home_allocated: Resources::new(),
            guest_allocated: Resources::new(),
            usage: after,
            parent: None,
            is_parent: false,
            proportional_target: None,
        }
    }

    fn pool(name: PoolName, queues: Vec<QueueShare>) -> PoolReport {
        PoolReport {
            pool: name,
            policy: Default::default(),
            total: Resources::new(),
            nodes: 1,
            queues,
            evicted: 0,
            jobs_tried: 0,
            queue_priority: Default::default(),
        }
    }

    #[test]
    fn each_scheduling_family_is_one_block_with_help_and_type() {
        let view = SchedulingView {
            cycles: 7,
            last_cycle_ms: 12.5,
            pools: vec![
                pool(PoolName::default_pool(), vec![share("a", 0.5, 0.25), share("b", 0.5, 0.75)]),
                pool(PoolName::new("gpu").unwrap(), vec![share("a", 1.0, 1.0)]),
            ],
            ..Default::default()
        };
        let mut out = String::new();
        scheduling_metrics(&mut out, &view);
        let families = check_exposition(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
        assert_eq!(
            families,
            [
                "convoy_scheduling_cycles_total",
                "convoy_scheduling_cycle_seconds",
                "convoy_queue_fair_share",
                "convoy_queue_share"
            ]
        );
        assert!(out.contains("\nconvoy_queue_share{pool=\"default\",queue=\"b\"} 0.75\n"), "{out}");
        assert!(out.contains("\nconvoy_queue_share{pool=\"gpu\",queue=\"a\"} 1\n"), "{out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("convoy_queue_share{")).count(), 3, "{out}");
        assert!(out.contains("\nconvoy_scheduling_cycle_seconds 0.0125\n"), "{out}");
    }

    #[test]
    fn raft_families_are_blocks_and_histograms_are_cumulative() {
        use crate::model::api::ClusterMember;
        let member = |id, lag: Option<u64>| ClusterMember {
            id,
            addr: format!("http://127.0.0.1:{id}"),
            voter: true,
            matched_index: lag.map(|l| 100 - l),
            lag,
        };
        let st = ClusterStatus {
            id: 1,
            state: "Leader".into(),
            serving: true,
            term: 4,
            leader: Some(1),
            leader_addr: Some("http://127.0.0.1:1".into()),
            last_log_index: Some(100),
            last_applied: Some(99),
            snapshot_index: Some(50),
            purged_index: Some(40),
            millis_since_quorum_ack: Some(120),
            leader_changes: 2,
            snapshots_installed: 1,
            members: vec![member(1, None), member(2, Some(0)), member(3, Some(7))],
        };
        let stats = crate::raft::stats::PeerStats::default();
        stats.answered(2, "append", Duration::from_millis(2));
        stats.answered(2, "append", Duration::from_millis(30));
        stats.answered(3, "vote", Duration::from_millis(1));
        stats.failed(3, "append");
        let rpcs = PeerRpcFigures {
            latency: stats.latency().into_iter().collect(),
            failures: stats.failures().into_iter().collect(),
        };
        let mut out = String::new();
        raft_metrics(&mut out, &st, &rpcs);
        let families = check_exposition(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert!(families.iter().any(|f| f == "convoy_raft_peer_rpc_seconds"), "{families:?}");
        for line in [
            "convoy_raft_term 4",
            "convoy_raft_state{state=\"leader\"} 1",
            "convoy_raft_state{state=\"follower\"} 0",
            "convoy_raft_serving 1",
            "convoy_raft_leader_changes_total 2",
            "convoy_raft_purged_index 40",
            "convoy_raft_snapshots_installed_total 1",
            "convoy_raft_quorum_ack_age_seconds 0.12",
            "convoy_raft_replication_lag_entries{peer=\"3\"} 7",
            "convoy_raft_peer_rpc_seconds_bucket{peer=\"2\",rpc=\"append\",le=\"0.0025\"} 1",
            "convoy_raft_peer_rpc_seconds_bucket{peer=\"2\",rpc=\"append\",le=\"0.05\"} 2",
            "convoy_raft_peer_rpc_seconds_bucket{peer=\"2\",rpc=\"append\",le=\"+Inf\"} 2",
            "convoy_raft_peer_rpc_seconds_count{peer=\"2\",rpc=\"append\"} 2",
            "convoy_raft_peer_rpc_failures_total{peer=\"3\",rpc=\"append\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        // The leader itself has no lag sample.
        assert!(!out.contains("lag_entries{peer=\"1\"}"));
    }

    #[test]
    fn the_format_check_catches_interleaving_and_missing_headers() {
        let interleaved = "# HELP a A.\n# TYPE a gauge\na{q=\"1\"} 1\n# HELP b B.\n# TYPE b gauge\nb 1\na{q=\"2\"} 2\n";
        assert!(check_exposition(interleaved).unwrap_err().contains("outside its family's block"));
        let headless = "# HELP a A.\n# TYPE a gauge\na{q=\"1\"} 1\nb{q=\"1\"} 1\n";
        assert!(check_exposition(headless).unwrap_err().contains("no HELP and TYPE"));
        assert!(check_exposition("# HELP a A.\na 1\n").is_err());
        assert!(check_exposition("# HELP a A.\n# TYPE a gauge\n# HELP a A.\n# TYPE a gauge\n").is_err());
        assert_eq!(check_exposition("# HELP a A.\n# TYPE a counter\na 1\n"), Ok(vec!["a".to_string()]));
    }
}
