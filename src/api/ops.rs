//! Operations endpoints: health, readiness, metrics, cluster status, the state digest.

use super::auth::{AdminRole, Authorized, Principal};
use super::problem::{ApiError, json};
use crate::control::Control;
use crate::control::SchedulingView;
use crate::model::api::Problem;
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

/// Answer of `GET /v1/cluster`: this server's view of the Raft cluster. The server builds it as
/// JSON (see `ClusterView::status`); this type only documents it.
#[derive(Debug, Clone, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// This server's Raft node id.
    pub id: u64,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    /// The current Raft term.
    pub term: u64,
    /// The leader's node id, if one is known.
    pub leader: Option<u64>,
    /// The leader's address, if one is known.
    pub leader_addr: Option<String>,
    /// Index of the last entry in this server's log.
    pub last_log_index: Option<u64>,
    /// Index of the last entry this server applied.
    pub last_applied: Option<u64>,
    /// Index of the last entry this server's current snapshot includes.
    pub snapshot_index: Option<u64>,
    /// Index of the last entry purged from this server's log (entries up to it are only in the
    /// snapshot).
    pub purged_index: Option<u64>,
    /// Snapshots this server installed since it started: each time it caught up with a leader
    /// whose log no longer held what it lacked.
    pub snapshots_installed: u64,
    /// Voters and learners.
    pub members: Vec<ClusterMember>,
}

/// Answer of `GET /v1/cluster/digest`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StateDigest {
    /// This server's Raft node id.
    pub node_id: u64,
    /// Index of the last log entry the digested state includes (0 before any).
    pub applied_index: u64,
    /// SHA-256 of the replicated state at that index, in lower-case hex.
    #[schema(examples("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"))]
    pub digest: String,
    /// Rows hashed (events one by one).
    pub rows: u64,
}

/// One member of the Raft cluster.
#[derive(Debug, Clone, utoipa::ToSchema)]
pub struct ClusterMember {
    /// Raft node id.
    pub id: u64,
    /// Address its peers reach it at.
    pub addr: String,
    /// False for learners.
    pub voter: bool,
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

/// Raft cluster status
#[utoipa::path(
    get,
    path = "/v1/cluster",
    operation_id = "clusterStatus",
    tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "This server's view of the cluster", body = ClusterStatus),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cluster(State(app): State<Arc<Control>>, _p: Principal) -> Response {
    json(app.cluster.status())
}

/// Replicated state digest
///
/// Admins only. A SHA-256 over the whole replicated state (every state table's rows in key
/// order, without this server's own bookkeeping), read from one consistent view together with the
/// index of the last log entry it includes: members of a cluster at the same applied index answer
/// the same digest. It reads the whole state, which takes seconds with millions of jobs.
#[utoipa::path(
    get,
    path = "/v1/cluster/digest",
    operation_id = "clusterDigest",
    tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The digest of this server's state", body = StateDigest),
        (status = 401, description = "No valid bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The state could not be read", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn digest(State(app): State<Arc<Control>>, _admin: Authorized<AdminRole>) -> Result<Response, ApiError> {
    let store = app.store.clone();
    let d =
        tokio::task::spawn_blocking(move || store.digest()).await.map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(json(StateDigest {
        node_id: app.config.server.node_id,
        applied_index: d.applied_index(),
        digest: d.hex(),
        rows: d.rows,
    }))
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
    state_metrics(&mut out, &app.state());
    scheduling_metrics(&mut out, &app.scheduling.read().unwrap_or_else(|p| p.into_inner()));
    Family::new(&mut out, "convoy_leader", "gauge", "1 if this server is the leader.")
        .sample("", u8::from(app.cluster.is_leader()));
    (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
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
                    let name = sample.split('{').next().unwrap_or(sample);
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
            allocated: Resources::new(),
            demand: Resources::new(),
        }
    }

    fn pool(name: PoolName, queues: Vec<QueueShare>) -> PoolReport {
        PoolReport { pool: name, total: Resources::new(), nodes: 1, queues, evicted: 0, jobs_tried: 0 }
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
