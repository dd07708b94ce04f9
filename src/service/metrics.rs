//! The families computed from the state at scrape time (jobs by state, queue shares of the last
//! cycle, quarantines, disk, Raft), beside the instruments updated as things happen
//! ([`crate::metrics`]), and the rendering of both for `GET /metrics`: OpenMetrics, or Prometheus' text format
//! (docs/metrics.md lists every family).

use crate::control::Control;
use crate::control::{PeerRpcFigures, SchedulingView};
use crate::model::Resources;
use crate::model::api::ClusterStatus;
use crate::raft::stats::LATENCY_BUCKETS;
use crate::scheduler::QueueShare;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Every family of this server as one exposition: `(content type, text)`, in OpenMetrics when
/// `openmetrics`, else in Prometheus' text format.
pub(crate) fn scrape(app: &Control, openmetrics: bool) -> Result<(&'static str, String), std::fmt::Error> {
    let mut scrape = Registry::default();
    {
        let st = app.state();
        state_metrics(&mut scrape, &st);
        quarantine_metrics(&mut scrape, &st, &app.config.scheduler.quarantine, crate::control::now_ms());
    }
    {
        let view = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
        scheduling_metrics(&mut scrape, &view);
        if crate::scheduler::reservation::enabled(&app.config.scheduler) {
            reservation_metrics(&mut scrape, &view);
        }
    }
    int_gauge(&mut scrape, "convoy_leader", "1 if this server is the leader.", u64::from(app.cluster.is_leader()));
    disk_metrics(&mut scrape, app.disk.free(), app.disk.reserve());
    raft_metrics(&mut scrape, &app.cluster.status(), &app.cluster.peer_rpcs());
    let out = render(&scrape)?;
    Ok(if openmetrics { (OPENMETRICS, out) } else { (TEXT, to_text_format(&out)) })
}

/// Content type of the answer to a scraper that accepts OpenMetrics (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the answer to anyone else (curl, promtool).
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus text format (0.0.4) of an OpenMetrics text: a counter's family is named
/// with its `_total` suffix, as its samples are, and there is no `# EOF` or `# UNIT` line.
fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let header = ["# HELP ", "# TYPE "].into_iter().find_map(|p| Some((p, line.strip_prefix(p)?)));
        match header {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) { "_total" } else { "" };
                out.push_str(&format!("{prefix}{name}{total} {tail}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The scrape-time families, then the process-wide instruments, then `# EOF`.
fn render(scrape: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    encode_registry(&mut out, scrape)?;
    encode_registry(&mut out, crate::metrics::global().registry())?;
    encode_eof(&mut out)?;
    Ok(out)
}

/// Label pairs of a scrape-time sample (bounded values: queue, pool, resource, executor, peer).
type Labels = Vec<(&'static str, String)>;
/// A scrape-time gauge family with fractional values.
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;
/// A scrape-time gauge family with whole values.
type IntGauges = Family<Labels, Gauge>;

/// Registers `family` under `name` and answers a handle to fill it.
fn family<M: prometheus_client::registry::Metric + Clone>(r: &mut Registry, name: &str, help: &str, family: M) -> M {
    // The registry ends help texts with a period itself.
    r.register(name, help.strip_suffix('.').unwrap_or(help), family.clone());
    family
}

/// The data directory's free space and reserve (`free` is `u64::MAX` when it cannot be read).
fn disk_metrics(r: &mut Registry, free: u64, reserve: u64) {
    if free != u64::MAX {
        let help = "Bytes free on the data directory's file system (for unprivileged writers).";
        int_gauge(r, "convoy_data_dir_free_bytes", help, free);
    }
    let help = "server.disk_reserve: below this many free bytes the server refuses writes that add data.";
    int_gauge(r, "convoy_data_dir_reserve_bytes", help, reserve);
}

/// One whole-valued gauge without labels.
fn int_gauge(r: &mut Registry, name: &str, help: &str, value: u64) {
    family(r, name, help, Gauge::<i64>::default()).set(i64::try_from(value).unwrap_or(i64::MAX));
}

/// One counter without labels, set from a total kept elsewhere.
fn counter(r: &mut Registry, name: &str, help: &str, total: u64) {
    family(r, name, help, Counter::<u64>::default()).inc_by(total);
}

/// Families computed from the replicated state.
fn state_metrics(r: &mut Registry, st: &crate::state::State) {
    let jobs = family(r, "convoy_jobs", "Live jobs by queue and state.", IntGauges::default());
    for q in st.queues() {
        let name = &q.queue.name;
        for (state, n) in &q.counts {
            jobs.get_or_create(&vec![("queue", name.to_string()), ("state", state.to_string())]).set(*n as i64);
        }
    }
    job_policy_metrics(r, st.policy_counts());
    int_gauge(r, "convoy_executors", "Known executors.", st.executors().len() as u64);
    let nodes: usize = st.executors().map(|e| e.nodes().len()).sum();
    int_gauge(r, "convoy_nodes", "Known nodes.", nodes as u64);
}

/// What retry policies and dependencies did since this server started applying.
fn job_policy_metrics(r: &mut Registry, counts: &crate::state::PolicyCounts) {
    let help = "Failed runs retried by their job's retry policy, by cause (exit_code, oom, node_failure).";
    let retries = family(r, "convoy_job_retries", help, Family::<Labels, Counter>::default());
    for reason in ["exit_code", "oom", "node_failure"] {
        retries
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc_by(counts.retries.get(reason).copied().unwrap_or(0));
    }
    let help = "Jobs that failed because a dependency could no longer be met.";
    counter(r, "convoy_job_dependency_failures", help, counts.dependency_failures);
}

/// Quarantined nodes per executor and pool (0 for every executor and pool with nodes, so that a
/// lifted quarantine shows as a drop rather than a vanished series). A quarantined node no
/// executor reports counts under its executor with `pool=""`.
fn quarantine_metrics(r: &mut Registry, st: &crate::state::State, cfg: &crate::scheduler::QuarantineConfig, now: i64) {
    let quarantined = |e: &crate::model::ExecutorName, n: &crate::model::NodeName| {
        cfg.enabled() && st.health_of(e, n).is_some_and(|h| h.quarantined_at(now).is_some())
    };
    let mut counts: std::collections::BTreeMap<(&str, &str), u64> = std::collections::BTreeMap::new();
    for e in st.executors() {
        for n in e.nodes() {
            *counts.entry((e.name.as_str(), n.pool.as_str())).or_default() += u64::from(quarantined(&e.name, &n.name));
        }
    }
    for ((e, n), _) in st.node_health() {
        let reported = st.executor(e).is_some_and(|x| x.has_node(n));
        if !reported && quarantined(e, n) {
            *counts.entry((e.as_str(), "")).or_default() += 1;
        }
    }
    let help = "Nodes under quarantine (too many failures of the node), per executor and pool.";
    let gauges = family(r, "convoy_quarantined_nodes", help, IntGauges::default());
    for ((executor, pool), n) in counts {
        gauges.get_or_create(&vec![("executor", executor.to_string()), ("pool", pool.to_string())]).set(n as i64);
    }
}

/// Per queue with a guarantee and pool: the guaranteed share of the last cycle, and whether it
/// was scaled down because the guarantees add up to more than the pool.
fn guarantee_metrics(r: &mut Registry, s: &SchedulingView) {
    let help = "Share of the pool a queue is guaranteed in the last cycle (after nesting and scaling, capped by \
                demand), per queue with a guarantee and pool.";
    let shares = family(r, "convoy_queue_guaranteed_share", help, Gauges::default());
    let help = "1 if a queue's guarantee was scaled down in the last cycle because the guarantees add up to more \
                than the pool, per queue with a guarantee and pool.";
    let scaled = family(r, "convoy_queue_guarantee_scaled", help, IntGauges::default());
    for p in &s.pools {
        for q in &p.queues {
            let Some(g) = q.guaranteed_share else { continue };
            let labels = vec![("pool", p.pool.to_string()), ("queue", q.queue.to_string())];
            shares.get_or_create(&labels).set(g);
            scaled.get_or_create(&labels).set(i64::from(q.guarantee_scaled));
        }
    }
}

/// A per-queue family: its name, help and the value it reads from a queue's report.
type PerQueue<T> = (&'static str, &'static str, fn(&QueueShare) -> T);
/// A per-queue, per-resource family: its name, help and the resources it reads.
type PerQueueResources = (&'static str, &'static str, fn(&QueueShare) -> &Resources);

/// Families from this server's latest scheduling cycle: per queue and pool its shares, per
/// queue, pool and resource its allocation and demand, per pool and resource the capacity.
fn scheduling_metrics(r: &mut Registry, s: &SchedulingView) {
    counter(r, "convoy_scheduling_cycles", "Scheduling cycles run by this server.", s.cycles);
    let help = "Duration of the last cycle.";
    family(r, "convoy_scheduling_cycle_seconds", help, Gauge::<f64, AtomicU64>::default())
        .set(s.last_cycle_ms / 1000.0);
    let shares: [PerQueue<f64>; 5] = [
        (
            "convoy_queue_fair_share",
            "Adjusted fair share per queue and pool (fair share capped by demand, surplus shared).",
            |q| q.adjusted_fair_share,
        ),
        (
            "convoy_queue_base_fair_share",
            "Fair share per queue and pool: weight over the sum of the active queues' weights.",
            |q| q.fair_share,
        ),
        (
            "convoy_queue_actual_share",
            "Share of the pool a queue held at the start of the last cycle, per queue and pool.",
            |q| q.actual_share,
        ),
        (
            "convoy_queue_share",
            "Share of the pool a queue holds after the last cycle's decisions, per queue and pool.",
            |q| q.share_after,
        ),
        ("convoy_queue_weight", "A queue's weight (1 / priority factor) in the last cycle, per queue and pool.", |q| {
            q.weight
        }),
    ];
    for (name, help, value) in shares {
        let gauges = family(r, name, help, Gauges::default());
        for p in &s.pools {
            for q in &p.queues {
                gauges.get_or_create(&vec![("pool", p.pool.to_string()), ("queue", q.queue.to_string())]).set(value(q));
            }
        }
    }
    guarantee_metrics(r, s);
    let resources: [PerQueueResources; 2] = [
        (
            "convoy_queue_allocated",
            "Resources a queue holds after the last cycle, per queue, pool and resource.",
            |q| &q.allocated,
        ),
        (
            "convoy_queue_demand",
            "Resources a queue holds plus those its queued jobs request, per queue, pool and resource.",
            |q| &q.demand,
        ),
    ];
    for (name, help, value) in resources {
        let gauges = family(r, name, help, IntGauges::default());
        for p in &s.pools {
            for q in &p.queues {
                for (resource, amount) in value(q).iter() {
                    let labels = vec![
                        ("pool", p.pool.to_string()),
                        ("queue", q.queue.to_string()),
                        ("resource", resource.to_string()),
                    ];
                    gauges.get_or_create(&labels).set(amount);
                }
            }
        }
    }
    let help = "Resources of a pool's schedulable nodes in the last cycle, per pool and resource.";
    let capacity = family(r, "convoy_pool_capacity", help, IntGauges::default());
    for p in &s.pools {
        for (resource, amount) in p.total.iter() {
            capacity.get_or_create(&vec![("pool", p.pool.to_string()), ("resource", resource.to_string())]).set(amount);
        }
    }
    policy_metrics(r, s);
}

/// Families of the minimum runtime before preemption and of floating resources, from the last
/// cycle: jobs eviction spared per pool, and each pool's floating resources.
fn policy_metrics(r: &mut Registry, s: &SchedulingView) {
    let help = "Running jobs fair-share eviction spared in the last cycle because they had run less than \
                min_runtime_before_preemption, per pool.";
    let spared = family(r, "convoy_evictions_spared_min_runtime", help, IntGauges::default());
    for p in &s.pools {
        spared.get_or_create(&vec![("pool", p.pool.to_string())]).set(p.evictions_spared_min_runtime as i64);
    }
    let help = "A pool's amount of a floating resource (counted per pool, not per node), per pool and resource.";
    let capacity = family(r, "convoy_floating_resource_capacity", help, IntGauges::default());
    let help = "What a pool's leased and running jobs hold of a floating resource after the last cycle.";
    let allocated = family(r, "convoy_floating_resource_allocated", help, IntGauges::default());
    for p in &s.pools {
        for f in &p.floating {
            let labels = vec![("pool", p.pool.to_string()), ("resource", f.resource.to_string())];
            capacity.get_or_create(&labels).set(f.capacity);
            allocated.get_or_create(&labels).set(f.allocated);
        }
    }
}

/// With `gang_reservation_after` set: per pool of the latest cycle, the reservations it held, the
/// nodes they hold, and the jobs kept off those nodes.
fn reservation_metrics(r: &mut Registry, s: &SchedulingView) {
    let mut per_pool: std::collections::BTreeMap<&str, (i64, i64, i64)> =
        s.pools.iter().map(|p| (p.pool.as_str(), (0, 0, 0))).collect();
    for res in &s.reservations {
        let e = per_pool.entry(res.pool.as_str()).or_default();
        e.0 += 1;
        e.1 += res.nodes.len() as i64;
        e.2 += i64::from(res.kept_off);
    }
    let families = [
        ("convoy_pool_reservations", "Reservations held by the last cycle (gang_reservation_after), per pool."),
        ("convoy_pool_reserved_nodes", "Nodes held by reservations in the last cycle, per pool."),
        (
            "convoy_pool_jobs_kept_off_reserved_nodes",
            "Jobs of the last cycle that would have fitted on a reserved node and were kept off it, per pool.",
        ),
    ];
    for (i, (name, help)) in families.into_iter().enumerate() {
        let gauges = family(r, name, help, IntGauges::default());
        for (pool, v) in &per_pool {
            let value = [v.0, v.1, v.2][i];
            gauges.get_or_create(&vec![("pool", pool.to_string())]).set(value);
        }
    }
}

/// On the leader: the highest index a majority of voters holds (the leader counts with its last
/// log index). None elsewhere: a follower does not know it.
fn commit_index(st: &ClusterStatus) -> Option<u64> {
    if st.state != "Leader" {
        return None;
    }
    let mut held: Vec<u64> = st
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| if m.id == st.id { st.last_log_index.unwrap_or(0) } else { m.matched_index.unwrap_or(0) })
        .collect();
    held.sort_unstable_by(|a, b| b.cmp(a));
    held.get(held.len() / 2).copied()
}

/// Families of the Raft layer: role, term, leader, indexes, quorum, replication lag, peer RPCs.
fn raft_metrics(r: &mut Registry, st: &ClusterStatus, rpcs: &PeerRpcFigures) {
    int_gauge(r, "convoy_raft_term", "Current Raft term.", st.term);
    int_gauge(
        r,
        "convoy_raft_leader_id",
        "Id of the leader this server knows (0: none known).",
        st.leader.unwrap_or(0),
    );
    let state = family(r, "convoy_raft_state", "1 for this server's Raft role.", IntGauges::default());
    for role in ["Leader", "Follower", "Candidate", "Learner", "Shutdown"] {
        state.get_or_create(&vec![("state", role.to_lowercase())]).set(i64::from(st.state == role));
    }
    let help = "1 if this server leads and a majority acknowledged it lately.";
    int_gauge(r, "convoy_raft_serving", help, u64::from(st.serving));
    counter(r, "convoy_raft_leader_changes", "Leader changes this server saw.", st.leader_changes);
    let help = "Index of the last entry in the log.";
    int_gauge(r, "convoy_raft_last_log_index", help, st.last_log_index.unwrap_or(0));
    if let Some(i) = commit_index(st) {
        let help = "On the leader: index of the last entry a majority of voters holds (committed).";
        int_gauge(r, "convoy_raft_commit_index", help, i);
    }
    int_gauge(r, "convoy_raft_applied_index", "Index of the last applied entry.", st.last_applied.unwrap_or(0));
    let help = "Index of the last entry the latest snapshot covers.";
    int_gauge(r, "convoy_raft_snapshot_index", help, st.snapshot_index.unwrap_or(0));
    let help = "Index of the last entry purged from the log.";
    int_gauge(r, "convoy_raft_purged_index", help, st.purged_index.unwrap_or(0));
    let help = "Snapshots this server installed since it started (it caught up by snapshot).";
    counter(r, "convoy_raft_snapshots_installed", help, st.snapshots_installed);
    if let Some(ms) = st.millis_since_quorum_ack {
        let help = "On the leader: time since a majority acknowledged it.";
        family(r, "convoy_raft_quorum_ack_age_seconds", help, Gauge::<f64, AtomicU64>::default())
            .set(ms as f64 / 1000.0);
    }
    let help = "On the leader: entries each member is behind.";
    let lag = family(r, "convoy_raft_replication_lag_entries", help, IntGauges::default());
    for m in &st.members {
        if let Some(l) = m.lag {
            lag.get_or_create(&vec![("peer", m.id.to_string())]).set(i64::try_from(l).unwrap_or(i64::MAX));
        }
    }
    r.register_collector(Box::new(PeerRpcs(rpcs.clone())));
}

/// The peer RPC histograms and failure counts, encoded from the Raft layer's own figures.
#[derive(Debug)]
struct PeerRpcs(PeerRpcFigures);

impl Collector for PeerRpcs {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let help = "Latency of answered peer RPCs, by peer and kind (append, vote, snapshot).";
        let mut latency =
            encoder.encode_descriptor("convoy_raft_peer_rpc_seconds", help, None, MetricType::Histogram)?;
        for ((peer, kind), h) in &self.0.latency {
            let labels = [("peer", peer.to_string()), ("rpc", kind.to_string())];
            let bounds = LATENCY_BUCKETS.iter().copied().chain([f64::INFINITY]);
            let buckets: Vec<(f64, u64)> = bounds.zip(h.buckets.iter().copied()).collect();
            latency.encode_family(&labels)?.encode_histogram::<NoLabelSet>(h.sum, h.count, &buckets, None)?;
        }
        let help = "Peer RPCs that got no answer, by peer and kind.";
        let mut failures =
            encoder.encode_descriptor("convoy_raft_peer_rpc_failures", help, None, MetricType::Counter)?;
        for ((peer, kind), n) in &self.0.failures {
            let labels = [("peer", peer.to_string()), ("rpc", kind.to_string())];
            failures.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PoolName, QueueName, Resources};
    use crate::scheduler::PoolReport;
    use std::time::Duration;

    /// The families `fill` registers, encoded.
    fn encoded(fill: impl FnOnce(&mut Registry)) -> String {
        let mut r = Registry::default();
        fill(&mut r);
        let mut out = String::new();
        encode_registry(&mut out, &r).unwrap();
        out
    }

    /// Runs `promtool check metrics` (Prometheus' own parser and linter) on `text`. Answers
    /// None when promtool is not installed and CONVOY_REQUIRE_PROMTOOL is not 1 (CI sets it).
    fn promtool_check(text: &str) -> Option<Result<(), String>> {
        use std::io::Write as _;
        let child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && !std::env::var("CONVOY_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1") =>
            {
                eprintln!(
                    "SKIPPED: promtool is not installed (Debian package `prometheus`); set CONVOY_REQUIRE_PROMTOOL=1 to fail instead"
                );
                return None;
            }
            Err(e) => panic!("promtool could not be started: {e}"),
        };
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        Some(if out.status.success() && said.trim().is_empty() { Ok(()) } else { Err(said) })
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
            guaranteed_share: None,
            guarantee_scaled: false,
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
            evictions_spared_min_runtime: 0,
            floating: Vec::new(),
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
        let out = encoded(|r| scheduling_metrics(r, &view));
        let families: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("# TYPE ")).collect();
        assert_eq!(
            families[..4],
            [
                "convoy_scheduling_cycles counter",
                "convoy_scheduling_cycle_seconds gauge",
                "convoy_queue_fair_share gauge",
                "convoy_queue_base_fair_share gauge"
            ]
        );
        assert!(out.contains("\nconvoy_queue_share{pool=\"default\",queue=\"b\"} 0.75\n"), "{out}");
        assert!(out.contains("\nconvoy_queue_share{pool=\"gpu\",queue=\"a\"} 1.0\n"), "{out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("convoy_queue_share{")).count(), 3, "{out}");
        assert!(out.contains("\nconvoy_scheduling_cycle_seconds 0.0125\n"), "{out}");
    }

    #[test]
    fn spared_evictions_and_floating_resources_per_pool() {
        let mut p = pool(PoolName::default_pool(), vec![]);
        p.evictions_spared_min_runtime = 8;
        p.floating = vec![crate::scheduler::FloatingUse {
            resource: "licence/matlab".parse().unwrap(),
            capacity: 3000,
            allocated: 2000,
        }];
        let view = SchedulingView { pools: vec![p], ..Default::default() };
        let out = encoded(|r| scheduling_metrics(r, &view));
        assert!(out.contains("\nconvoy_evictions_spared_min_runtime{pool=\"default\"} 8\n"), "{out}");
        let labels = "{pool=\"default\",resource=\"licence/matlab\"}";
        assert!(out.contains(&format!("\nconvoy_floating_resource_capacity{labels} 3000\n")), "{out}");
        assert!(out.contains(&format!("\nconvoy_floating_resource_allocated{labels} 2000\n")), "{out}");
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
        let out = encoded(|r| raft_metrics(r, &st, &rpcs));
        assert!(out.contains("# TYPE convoy_raft_peer_rpc_seconds histogram"), "{out}");
        for line in [
            "convoy_raft_term 4",
            "convoy_raft_state{state=\"leader\"} 1",
            "convoy_raft_state{state=\"follower\"} 0",
            "convoy_raft_serving 1",
            "convoy_raft_leader_changes_total 2",
            "convoy_raft_purged_index 40",
            "convoy_raft_snapshots_installed_total 1",
            "convoy_raft_quorum_ack_age_seconds 0.12",
            "convoy_raft_commit_index 100",
            "convoy_raft_leader_id 1",
            "convoy_raft_replication_lag_entries{peer=\"3\"} 7",
            "convoy_raft_peer_rpc_seconds_bucket{le=\"0.0025\",peer=\"2\",rpc=\"append\"} 1",
            "convoy_raft_peer_rpc_seconds_bucket{le=\"0.05\",peer=\"2\",rpc=\"append\"} 2",
            "convoy_raft_peer_rpc_seconds_bucket{le=\"+Inf\",peer=\"2\",rpc=\"append\"} 2",
            "convoy_raft_peer_rpc_seconds_count{peer=\"2\",rpc=\"append\"} 2",
            "convoy_raft_peer_rpc_failures_total{peer=\"3\",rpc=\"append\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        // The leader itself has no lag sample.
        assert!(!out.contains("lag_entries{peer=\"1\"}"));
    }

    /// Node 1 leading term 2, with `index` entries applied and these members.
    fn leader_status(index: u64, members: Vec<crate::model::api::ClusterMember>) -> ClusterStatus {
        ClusterStatus {
            id: 1,
            state: "Leader".into(),
            serving: true,
            term: 2,
            leader: Some(1),
            leader_addr: None,
            last_log_index: Some(index),
            last_applied: Some(index),
            snapshot_index: None,
            purged_index: None,
            millis_since_quorum_ack: Some(5),
            leader_changes: 1,
            snapshots_installed: 0,
            members,
        }
    }

    /// Peer 2 answered one append (2 ms) and failed one vote.
    fn peer_rpcs() -> PeerRpcFigures {
        let stats = crate::raft::stats::PeerStats::default();
        stats.answered(2, "append", Duration::from_millis(2));
        stats.failed(2, "vote");
        PeerRpcFigures {
            latency: stats.latency().into_iter().collect(),
            failures: stats.failures().into_iter().collect(),
        }
    }

    #[test]
    fn the_whole_answer_passes_promtool() {
        let view = SchedulingView {
            cycles: 3,
            last_cycle_ms: 2.0,
            pools: vec![pool(PoolName::default_pool(), vec![share("a", 0.5, 0.25), share("b", 0.5, 0.75)])],
            ..Default::default()
        };
        let status = leader_status(9, vec![]);
        let rpcs = peer_rpcs();
        let global = crate::metrics::global();
        global.observe_request("/v1/jobs", &http::Method::POST, http::StatusCode::OK, Duration::from_millis(4));
        global.scheduling_cycle.observe(0.002);
        let mut r = Registry::default();
        scheduling_metrics(&mut r, &view);
        raft_metrics(&mut r, &status, &rpcs);
        let openmetrics = render(&r).unwrap();
        assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
        assert!(openmetrics.contains("\n# TYPE convoy_scheduling_cycles counter\nconvoy_scheduling_cycles_total 3\n"));
        let text = to_text_format(&openmetrics);
        assert!(text.contains("\n# TYPE convoy_scheduling_cycles_total counter\nconvoy_scheduling_cycles_total 3\n"));
        assert!(!text.contains("# EOF"), "{text}");
        if let Some(verdict) = promtool_check(&text) {
            verdict.unwrap_or_else(|e| panic!("promtool check metrics: {e}\n{text}"));
        }
    }

    #[test]
    fn promtool_rejects_a_bad_exposition() {
        // The check above can fail: a counter without `_total` and a duplicate family.
        let bad = "# HELP a A.\n# TYPE a counter\na 1\n# HELP a A.\n# TYPE a counter\na 2\n";
        if let Some(verdict) = promtool_check(bad) {
            assert!(verdict.is_err());
        }
    }

    /// The families a full answer has (text format names), with every optional family present.
    fn all_families() -> Vec<String> {
        let mut held = share("a", 0.5, 0.25);
        held.allocated = [(crate::model::ResourceName::new("cpu").unwrap(), 2)].into_iter().collect();
        held.demand = held.allocated.clone();
        let mut p = pool(PoolName::default_pool(), vec![held]);
        p.total = [(crate::model::ResourceName::new("cpu").unwrap(), 8)].into_iter().collect();
        p.floating = vec![crate::scheduler::FloatingUse {
            resource: crate::model::ResourceName::new("licence/matlab").unwrap(),
            capacity: 3000,
            allocated: 0,
        }];
        let view = SchedulingView { cycles: 1, last_cycle_ms: 1.0, pools: vec![p], ..Default::default() };
        let member = |id, lag| crate::model::api::ClusterMember {
            id,
            addr: String::new(),
            voter: true,
            matched_index: Some(5),
            lag: Some(lag),
        };
        let status = leader_status(5, vec![member(2, 0)]);
        let rpcs = peer_rpcs();
        // The process instruments' labelled families appear once they have a sample.
        let global = crate::metrics::global();
        global.observe_request("/v1/jobs", &http::Method::POST, http::StatusCode::OK, Duration::from_millis(4));
        let job = crate::model::JobId::from_parts(1, 1);
        let q = crate::model::QueueName::new("a").unwrap();
        let decisions = crate::scheduler::Decisions {
            leases: vec![crate::scheduler::Lease {
                job_id: job,
                queue: q.clone(),
                pool: PoolName::default_pool(),
                executor: crate::model::ExecutorName::new("e").unwrap(),
                node: crate::model::NodeName::new("n").unwrap(),
            }],
            preemptions: vec![crate::scheduler::Preemption {
                job_id: job,
                queue: q.clone(),
                executor: crate::model::ExecutorName::new("e").unwrap(),
                node: crate::model::NodeName::new("n").unwrap(),
                reason: crate::scheduler::PreemptionReason::FairShare { by: job, by_queue: q.clone() },
            }],
            failures: vec![crate::scheduler::Failure {
                job_id: job,
                queue: q,
                reason: crate::scheduler::Reason::NoPool,
            }],
            ..Default::default()
        };
        crate::metrics::count_decisions(global, &decisions);
        let mut r = Registry::default();
        let settings = crate::state::StateSettings::from_config(&crate::scheduler::SchedulerConfig::default());
        let st = crate::state::State::new(settings);
        state_metrics(&mut r, &st);
        quarantine_metrics(&mut r, &st, &crate::scheduler::QuarantineConfig::default(), 0);
        int_gauge(&mut r, "convoy_leader", "1 if this server is the leader.", 1);
        disk_metrics(&mut r, 1 << 30, 64 << 20);
        scheduling_metrics(&mut r, &view);
        reservation_metrics(&mut r, &view);
        raft_metrics(&mut r, &status, &rpcs);
        let text = to_text_format(&render(&r).unwrap());
        text.lines().filter_map(|l| Some(l.strip_prefix("# TYPE ")?.split(' ').next()?.to_string())).collect()
    }

    #[test]
    fn every_family_is_documented_and_the_dashboard_uses_only_real_ones() {
        let docs = include_str!("../../docs/metrics.md");
        let mut families = all_families();
        for f in &families {
            assert!(docs.contains(&format!("| `{f}` |")), "{f} is not in docs/metrics.md");
        }
        // Families of live jobs and of nodes appear once the state has some (tests/it checks
        // them on a running server), those of guarantees once a queue has one.
        families.extend(
            [
                "convoy_jobs",
                "convoy_quarantined_nodes",
                "convoy_queue_guaranteed_share",
                "convoy_queue_guarantee_scaled",
            ]
            .map(String::from),
        );
        let documented: Vec<&str> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .filter(|n| n.starts_with("convoy_"))
            .collect();
        for d in &documented {
            assert!(families.iter().any(|f| f == d), "docs/metrics.md lists {d}, which /metrics does not have");
        }
        assert_eq!(documented.len(), families.len(), "{documented:?}");
        let dashboard = include_str!("../../packaging/grafana-dashboard.json");
        let mut used = 0;
        for word in
            dashboard.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("convoy_"))
        {
            let name = ["_bucket", "_count", "_sum"].iter().find_map(|s| word.strip_suffix(s)).unwrap_or(word);
            assert!(families.iter().any(|f| f == name), "the dashboard uses {word}, which /metrics does not have");
            used += 1;
        }
        assert!(used > 20);
    }
}
