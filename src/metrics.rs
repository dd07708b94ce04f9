//! Process-wide Prometheus instruments (prometheus-client): the histograms and counters that the
//! API, the lease poll and the scheduling loop update as they go. Families computed from the
//! state at scrape time are built by the service layer (`service::metrics`), which renders both
//! for `GET /metrics`
//! (docs/metrics.md lists them all).
//!
//! Updates are cheap and never await: counters are atomics, a histogram observation takes its
//! own short lock, and a labelled family takes a read lock on its map (a write lock only the
//! first time a label set is seen). Labels are bounded: queue, pool, route, method, status
//! class and reason kind, never a job id.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The instruments of this process, registered once.
static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide instruments.
pub(crate) fn global() -> &'static Metrics {
    &METRICS
}

/// Labels of an API request: the matched route template (`/v1/jobs/{id}`, never the raw path),
/// the method and the status class (`2xx`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    /// The route template the request matched.
    pub route: String,
    /// The HTTP method.
    pub method: Method,
    /// The answer's status class.
    pub status: StatusClass,
}

/// HTTP methods, as a closed set (an unusual method counts as `other`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(missing_docs, clippy::upper_case_acronyms)]
pub(crate) enum Method {
    GET,
    POST,
    PUT,
    PATCH,
    DELETE,
    HEAD,
    OPTIONS,
    OTHER,
}

impl From<&http::Method> for Method {
    fn from(m: &http::Method) -> Self {
        match *m {
            http::Method::GET => Method::GET,
            http::Method::POST => Method::POST,
            http::Method::PUT => Method::PUT,
            http::Method::PATCH => Method::PATCH,
            http::Method::DELETE => Method::DELETE,
            http::Method::HEAD => Method::HEAD,
            http::Method::OPTIONS => Method::OPTIONS,
            _ => Method::OTHER,
        }
    }
}

/// The class of an HTTP status: `1xx` … `5xx`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
#[allow(missing_docs)]
pub(crate) enum StatusClass {
    Informational,
    Success,
    Redirection,
    ClientError,
    ServerError,
}

impl EncodeLabelValue for StatusClass {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let class = match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        };
        EncodeLabelValue::encode(&class, encoder)
    }
}

impl From<http::StatusCode> for StatusClass {
    fn from(s: http::StatusCode) -> Self {
        match s.as_u16() {
            ..200 => StatusClass::Informational,
            200..300 => StatusClass::Success,
            300..400 => StatusClass::Redirection,
            400..500 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }
}

/// Labels of a scheduling decision: the job's queue and why (the reason's kind, e.g.
/// `fair_share`; `scheduled` for a placement).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    /// The job's queue.
    pub queue: String,
    /// The pool, where the decision names one (placements); empty otherwise.
    pub pool: String,
    /// The reason's kind.
    pub reason: String,
}

/// The process-wide instruments.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    /// Time a scheduling cycle took to decide.
    pub scheduling_cycle: Histogram,
    /// Time a scheduling cycle took to read the state it decides over, under the state's read
    /// lock (writes wait meanwhile).
    pub scheduling_snapshot: Histogram,
    /// CPU time scheduling cycles spent reading the state and deciding (what paces them).
    pub scheduling_cpu: Counter<f64, AtomicU64>,
    /// Time a cycle's decisions took to commit: proposed, replicated, logged and applied (in
    /// memory and to the store).
    pub scheduling_commit: Histogram,
    /// Time an API request took to answer, by route, method and status class.
    pub api_request: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// Time from a job's submission to its lease reaching an executor.
    pub submit_to_lease: Histogram,
    /// Time a lease poll waited before it answered.
    pub lease_poll_wait: Histogram,
    /// Jobs placed by the scheduler, by queue and pool.
    pub scheduled: Family<DecisionLabels, Counter>,
    /// Running jobs preempted by the scheduler, by queue and reason.
    pub preempted: Family<DecisionLabels, Counter>,
    /// Queued jobs the scheduler failed for good, by queue and reason.
    pub failed: Family<DecisionLabels, Counter>,
    /// When this server last built a Raft snapshot (Unix seconds; 0: not since it started).
    pub snapshot_built_at: Gauge<f64, AtomicU64>,
    /// When this server last installed a leader's Raft snapshot (Unix seconds; 0: never).
    pub snapshot_installed_at: Gauge<f64, AtomicU64>,
    /// Writes refused because the data directory was (nearly) full.
    pub writes_refused_for_disk: Counter,
}

/// Now, in seconds since the Unix epoch.
pub(crate) fn unix_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Buckets for durations from 1 ms to about 33 s (doubling).
fn fast_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Buckets for waits from 10 ms to about 5.8 days (factor 4): jobs may queue for a long time.
fn slow_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 4.0, 16))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            scheduling_cycle: fast_buckets(),
            scheduling_snapshot: fast_buckets(),
            scheduling_cpu: Counter::default(),
            scheduling_commit: fast_buckets(),
            api_request: Family::new_with_constructor(fast_buckets),
            submit_to_lease: slow_buckets(),
            lease_poll_wait: slow_buckets(),
            scheduled: Family::default(),
            preempted: Family::default(),
            failed: Family::default(),
            snapshot_built_at: Gauge::default(),
            snapshot_installed_at: Gauge::default(),
            writes_refused_for_disk: Counter::default(),
        };
        // Metrics are shared handles (Arc inside): the registry encodes the same values.
        registry.register(
            "convoy_scheduling_cycle_duration_seconds",
            "Time a scheduling cycle took to decide",
            m.scheduling_cycle.clone(),
        );
        registry.register(
            "convoy_scheduling_snapshot_duration_seconds",
            "Time a scheduling cycle took to read the state it decides over (writes wait meanwhile)",
            m.scheduling_snapshot.clone(),
        );
        registry.register(
            "convoy_scheduling_cpu_seconds",
            "CPU time scheduling cycles spent reading the state and deciding (a cycle's wall time also counts waits for a core)",
            m.scheduling_cpu.clone(),
        );
        registry.register(
            "convoy_scheduling_commit_duration_seconds",
            "Time a scheduling cycle's decisions took to commit (replicated, written to the log, applied in memory and to the store), for cycles that decided something",
            m.scheduling_commit.clone(),
        );
        registry.register(
            "convoy_api_request_duration_seconds",
            "Time an API request took to answer, by matched route template, method and status class",
            m.api_request.clone(),
        );
        registry.register(
            "convoy_submit_to_lease_seconds",
            "Time from a job's submission to its lease being handed to an executor",
            m.submit_to_lease.clone(),
        );
        registry.register(
            "convoy_lease_poll_wait_seconds",
            "Time an executor's lease poll waited before it answered",
            m.lease_poll_wait.clone(),
        );
        registry.register(
            "convoy_jobs_scheduled",
            "Jobs placed on a node by this server's scheduling cycles (committed), by queue and pool",
            m.scheduled.clone(),
        );
        registry.register(
            "convoy_jobs_preempted",
            "Running jobs preempted by this server's scheduling cycles (committed), by queue and reason",
            m.preempted.clone(),
        );
        registry.register(
            "convoy_jobs_failed",
            "Queued jobs failed for good by this server's scheduling cycles (committed), by queue and reason",
            m.failed.clone(),
        );
        registry.register(
            "convoy_raft_snapshot_built_timestamp_seconds",
            "When this server last built a Raft snapshot, in Unix seconds (0: not since it started)",
            m.snapshot_built_at.clone(),
        );
        registry.register(
            "convoy_raft_snapshot_installed_timestamp_seconds",
            "When this server last installed a snapshot sent by the leader, in Unix seconds (0: not since it started)",
            m.snapshot_installed_at.clone(),
        );
        registry.register(
            "convoy_writes_refused_for_disk",
            "Writes refused before they were proposed because the data directory had less free space than server.disk_reserve",
            m.writes_refused_for_disk.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The registry of these instruments, for rendering.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Records an answered API request.
    pub(crate) fn observe_request(&self, route: &str, method: &http::Method, status: http::StatusCode, took: Duration) {
        let labels = RouteLabels { route: route.to_string(), method: method.into(), status: status.into() };
        self.api_request.get_or_create(&labels).observe(took.as_secs_f64());
    }
}

/// The kind of a scheduler reason (its `kind` tag, e.g. `no_capacity`), a bounded label value.
pub(crate) fn reason_kind(reason: &impl serde::Serialize) -> String {
    match serde_json::to_value(reason) {
        Ok(serde_json::Value::Object(m)) => m.get("kind").and_then(|k| k.as_str()).unwrap_or("other").to_string(),
        _ => "other".to_string(),
    }
}

/// Counts the committed decisions of one scheduling cycle.
pub(crate) fn count_decisions(m: &Metrics, d: &crate::scheduler::Decisions) {
    for l in &d.leases {
        let labels =
            DecisionLabels { queue: l.queue.to_string(), pool: l.pool.to_string(), reason: "scheduled".into() };
        m.scheduled.get_or_create(&labels).inc();
    }
    for p in &d.preemptions {
        let labels = DecisionLabels { queue: p.queue.to_string(), pool: String::new(), reason: reason_kind(&p.reason) };
        m.preempted.get_or_create(&labels).inc();
    }
    for f in &d.failures {
        let labels = DecisionLabels { queue: f.queue.to_string(), pool: String::new(), reason: reason_kind(&f.reason) };
        m.failed.get_or_create(&labels).inc();
    }
}

/// Records an API request's latency under its matched route template. Requests that matched
/// no route are not recorded (their paths are unbounded); added with `route_layer`.
pub(crate) async fn track_requests(
    matched: Option<axum::extract::MatchedPath>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = req.method().clone();
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    if let Some(route) = matched {
        global().observe_request(route.as_str(), &method, resp.status(), started.elapsed());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode_registry;

    #[test]
    fn request_latency_is_labelled_by_route_template_and_status_class() {
        let m = Metrics::new();
        m.observe_request("/v1/jobs/{id}", &http::Method::GET, http::StatusCode::NOT_FOUND, Duration::from_millis(3));
        m.observe_request("/v1/jobs/{id}", &http::Method::GET, http::StatusCode::OK, Duration::from_millis(3));
        m.observe_request("/v1/jobs/{id}", &http::Method::GET, http::StatusCode::OK, Duration::from_millis(1));
        let mut out = String::new();
        encode_registry(&mut out, m.registry()).unwrap();
        let count =
            "convoy_api_request_duration_seconds_count{route=\"/v1/jobs/{id}\",method=\"GET\",status=\"2xx\"} 2";
        assert!(out.contains(count), "{out}");
        let count =
            "convoy_api_request_duration_seconds_count{route=\"/v1/jobs/{id}\",method=\"GET\",status=\"4xx\"} 1";
        assert!(out.contains(count), "{out}");
        let bucket = "convoy_api_request_duration_seconds_bucket{le=\"0.002\",route=\"/v1/jobs/{id}\",method=\"GET\",status=\"2xx\"} 1";
        assert!(out.contains(bucket), "{out}");
    }

    #[test]
    fn decisions_count_by_queue_and_reason_kind() {
        use crate::model::{ExecutorName, JobId, NodeName, PoolName, QueueName, ResourceName};
        use crate::scheduler::{Decisions, Failure, Lease, Preemption, PreemptionReason, Reason};
        let q = QueueName::new("a").unwrap();
        let job = JobId::from_parts(1, 1);
        let d = Decisions {
            leases: vec![
                Lease {
                    job_id: job,
                    queue: q.clone(),
                    pool: PoolName::default_pool(),
                    executor: ExecutorName::new("e").unwrap(),
                    node: NodeName::new("n").unwrap(),
                };
                2
            ],
            preemptions: vec![Preemption {
                job_id: job,
                queue: q.clone(),
                executor: ExecutorName::new("e").unwrap(),
                node: NodeName::new("n").unwrap(),
                reason: PreemptionReason::FairShare { by: job, by_queue: q.clone() },
            }],
            failures: vec![Failure {
                job_id: job,
                queue: q.clone(),
                reason: Reason::UnknownResource {
                    pool: PoolName::default_pool(),
                    resource: ResourceName::new("gpu").unwrap(),
                },
            }],
            ..Default::default()
        };
        let m = Metrics::new();
        count_decisions(&m, &d);
        let mut out = String::new();
        encode_registry(&mut out, m.registry()).unwrap();
        assert!(
            out.contains("convoy_jobs_scheduled_total{queue=\"a\",pool=\"default\",reason=\"scheduled\"} 2"),
            "{out}"
        );
        assert!(out.contains("convoy_jobs_preempted_total{queue=\"a\",pool=\"\",reason=\"fair_share\"} 1"), "{out}");
        assert!(out.contains("convoy_jobs_failed_total{queue=\"a\",pool=\"\",reason=\"unknown_resource\"} 1"), "{out}");
    }
}
