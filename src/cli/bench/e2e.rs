//! `convoy bench e2e`: a server and a fake agent (both real processes), plus a probe executor
//! in the benchmark itself. Prints submit→lease-received latency at idle and under load (the
//! probe submits one job at a time to its own tainted node and long-polls for it), and how many
//! jobs per second go through the whole path: scheduled, leased over the long poll, run by the
//! fake agent and reported back.

use super::harness::{BenchServer, StoreArgs, config, live_jobs, metric_sum, percentile, tenths};
use super::submit::tempfile_dir;
use anyhow::{Context, bail};
use rand_core::Rng;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `convoy bench e2e`.
#[derive(clap::Args, Debug)]
pub(crate) struct E2eArgs {
    /// Fake nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: u32,
    /// CPUs per fake node.
    #[arg(long, default_value_t = 16)]
    node_cpu: u32,
    /// Load jobs (1 cpu each, running for `--runtime-ms`).
    #[arg(long, default_value_t = 100_000)]
    jobs: u64,
    #[arg(long, default_value_t = 10)]
    queues: u64,
    /// How long each load job "runs" on the fake agent.
    #[arg(long, default_value_t = 0)]
    runtime_ms: u64,
    /// Probe jobs measured at idle and again under load (under load, only while load jobs are
    /// live: fewer if the load drains first; the output says how many).
    #[arg(long, default_value_t = 100)]
    samples: usize,
    /// Gap between the probe's submissions before the load starts: the default lets the scheduler
    /// fall quiet between them; a short one (e.g. 20) is a user submitting jobs one after another.
    #[arg(long, default_value_t = 150)]
    idle_gap_ms: u64,
    /// The server's `[scheduler] schedule_interval_min` (e.g. `50ms`; default: the server's),
    /// to see how much of the latency under load is the wait for the next cycle.
    #[arg(long)]
    schedule_interval_min: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

/// The server's running totals of its scheduling cycles, read from one scrape of `/metrics`:
/// where the wait under load goes.
#[derive(Debug, Clone, Copy)]
struct CycleTotals {
    cycles: f64,
    /// Seconds deciding (wall time).
    cycle_s: f64,
    /// Seconds reading the state (wall time).
    snapshot_s: f64,
    /// CPU seconds reading and deciding (what paces the cycles).
    cpu_s: f64,
    /// Cycles whose decisions were committed, and the seconds their commits took.
    commits: f64,
    commit_s: f64,
}

impl CycleTotals {
    async fn read(http: &reqwest::Client, url: &str) -> anyhow::Result<Self> {
        let text = http.get(format!("{url}/metrics")).send().await?.text().await?;
        let m = |name: &str| metric_sum(&text, name);
        Ok(CycleTotals {
            cycles: m("convoy_scheduling_cycle_duration_seconds_count"),
            cycle_s: m("convoy_scheduling_cycle_duration_seconds_sum"),
            snapshot_s: m("convoy_scheduling_snapshot_duration_seconds_sum"),
            cpu_s: m("convoy_scheduling_cpu_seconds_total"),
            commits: m("convoy_scheduling_commit_duration_seconds_count"),
            commit_s: m("convoy_scheduling_commit_duration_seconds_sum"),
        })
    }

    /// What was added since `before`.
    fn since(&self, before: &Self) -> Self {
        CycleTotals {
            cycles: self.cycles - before.cycles,
            cycle_s: self.cycle_s - before.cycle_s,
            snapshot_s: self.snapshot_s - before.snapshot_s,
            cpu_s: self.cpu_s - before.cpu_s,
            commits: self.commits - before.commits,
            commit_s: self.commit_s - before.commit_s,
        }
    }
}

fn probe_job() -> Value {
    json!({"pod_spec": {
        "containers": [{"name": "probe", "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}}],
        "nodeSelector": {"convoy.io/probe": "true"},
        "tolerations": [{"key": "convoy.io/probe", "operator": "Exists", "effect": "NoSchedule"}]
    }})
}

/// An executor inside the benchmark with one tainted node: measures how long after a
/// submission its long poll receives the lease.
struct Probe {
    http: reqwest::Client,
    url: String,
}

impl Probe {
    fn node() -> Value {
        json!({"name": "probe-0", "labels": {"convoy.io/probe": "true"}, "taints": [{"key": "convoy.io/probe", "value": "true", "effect": "NoSchedule"}],
            "allocatable": {"cpu": "4", "memory": "1Gi"}})
    }

    async fn poll(&self, held: &[Value], wait: f64) -> anyhow::Result<Value> {
        let r = self
            .http
            .post(format!("{}/v1/executors/probe/lease", self.url))
            .json(&json!({"nodes": [Probe::node()], "runs": held, "wait_seconds": wait}))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("probe lease poll: {}", r.status());
        }
        Ok(r.json().await?)
    }

    /// One sample: submit, then long-poll until the lease arrives; acknowledges and ends the run.
    /// Returns how long until the lease arrived, how long of that the submission took, and when
    /// (wall clock) the lease of which job arrived.
    async fn sample(&self) -> anyhow::Result<(Duration, Duration, Arrival)> {
        let t0 = Instant::now();
        let r = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .json(&json!({"queue": "probe", "job_set": "probe", "jobs": [probe_job()]}))
            .send()
            .await?;
        let v: Value = r.json().await?;
        let accepted = t0.elapsed();
        let id = v["job_ids"][0].as_str().context("probe job id")?.to_string();
        loop {
            let v = self.poll(&[], 10.0).await?;
            let leases = v["leases"].as_array().cloned().unwrap_or_default();
            if let Some(l) = leases.iter().find(|l| l["job_id"].as_str() == Some(id.as_str())) {
                let took = t0.elapsed();
                let events: Vec<Value> = ["running", "succeeded"]
                    .iter()
                    .map(|k| json!({"run_id": l["run_id"], "job_id": l["job_id"], "kind": k, "exit_code": 0}))
                    .collect();
                self.http
                    .post(format!("{}/v1/executors/probe/events", self.url))
                    .json(&json!({"events": events}))
                    .send()
                    .await?;
                return Ok((took, accepted, Arrival { job_id: id, at_ms: wall_ms() }));
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("probe job {id} was not leased within 60 s");
            }
        }
    }

    /// Up to `n` samples, until `until` turns true: the submit→lease times and the submission
    /// times, each sorted. Between samples the probe waits `gap`, or with `jitter` a pseudo-random
    /// time from zero to twice `gap`: a fixed gap would lock the probe to the cycle period (each
    /// submission landing at the same point between two cycles), which measures that one point
    /// instead of the wait a job arriving at any time sees.
    async fn samples(&self, n: usize, gap: Duration, jitter: bool, until: &AtomicBool) -> anyhow::Result<Samples> {
        let mut out = Samples::default();
        let mut rng = rand_pcg::Pcg64Mcg::new(0x5eed);
        while out.leased.len() < n && !until.load(Ordering::Relaxed) {
            let (l, a, arrival) = self.sample().await?;
            out.leased.push(l);
            out.accepted.push(a);
            out.arrivals.push(arrival);
            let wait = if jitter { gap.mul_f64(2.0 * (rng.next_u32() as f64 / u32::MAX as f64)) } else { gap };
            tokio::time::sleep(wait).await;
        }
        out.leased.sort();
        out.accepted.sort();
        Ok(out)
    }
}

/// The probe's samples, each list sorted.
#[derive(Default)]
struct Samples {
    /// Submission to the lease received.
    leased: Vec<Duration>,
    /// Submission to its answer.
    accepted: Vec<Duration>,
    /// Each lease's arrival, in the order taken.
    arrivals: Vec<Arrival>,
}

/// When the probe received the lease of a job (wall clock, ms since the epoch: the server stamps
/// its records with the same machine's clock).
struct Arrival {
    job_id: String,
    at_ms: i64,
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A probe job's wait split at the server's own stamps: from its acceptance (`submitted_at`) to
/// the start of the cycle that placed it (`leased_at`: the cycle's time, taken after its snapshot
/// was read and before it decided), and from there to the lease's arrival at the probe (the
/// decision, its commit, the poll's wake-up and answer). Each list sorted.
#[derive(Default)]
struct Stages {
    to_cycle: Vec<Duration>,
    cycle_to_lease: Vec<Duration>,
}

impl Stages {
    /// Reads each sampled job's record once the load is over (reading them during it would add
    /// to the load).
    async fn read(http: &reqwest::Client, url: &str, arrivals: &[Arrival]) -> anyhow::Result<Self> {
        let mut out = Stages::default();
        let ms = |v: &Value| -> anyhow::Result<i64> {
            let text = v.as_str().context("a timestamp")?;
            let t = humantime::parse_rfc3339(text).with_context(|| format!("timestamp {text:?}"))?;
            Ok(t.duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64)
        };
        let span = |from: i64, to: i64| Duration::from_millis(to.saturating_sub(from).max(0) as u64);
        for a in arrivals {
            let job: Value = http.get(format!("{url}/v1/jobs/{}", a.job_id)).send().await?.json().await?;
            let submitted = ms(&job["submitted_at"])?;
            let leased = ms(&job["runs"][0]["leased_at"])?;
            out.to_cycle.push(span(submitted, leased));
            out.cycle_to_lease.push(span(leased, a.at_ms));
        }
        out.to_cycle.sort();
        out.cycle_to_lease.sort();
        Ok(out)
    }
}

pub(super) fn run(args: E2eArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.queues >= 1 && args.nodes >= 1, "--queues and --nodes must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let tmp = tempfile_dir()?;
        let mut extra = format!("max_jobs_per_request = 10000\n{}", args.store.server_lines());
        if let Some(i) = &args.schedule_interval_min {
            extra.push_str(&format!("\n[scheduler]\nschedule_interval_min = {:?}", i));
        }
        let server = BenchServer::start(&tmp, &config(&tmp, &extra))?;
        let http = reqwest::Client::new();
        server.ready(&http).await?;
        let url = server.url.clone();
        for q in (0..args.queues).map(|i| format!("load-{i}")).chain(["probe".to_string()]) {
            let r = http.post(format!("{url}/v1/queues")).json(&json!({"name": q})).send().await?;
            anyhow::ensure!(r.status().is_success(), "creating queue {q}: {}", r.status());
        }
        let probe = Probe { http: http.clone(), url: url.clone() };
        probe.poll(&[], 0.0).await?;

        // Idle: nothing else happens; with the default gap each probe job arrives after the
        // scheduler has been quiet for longer than schedule_interval_min (default 100 ms).
        let idle_gap = Duration::from_millis(args.idle_gap_ms);
        let idle = probe.samples(args.samples, idle_gap, false, &AtomicBool::new(false)).await?.leased;

        // Load: queue every job, then start the fake agent and drain.
        let per = 1000usize;
        let job = json!({"pod_spec": {"containers": [{"name": "load", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
            "annotations": {"convoy.io/fake-runtime": format!("{}", args.runtime_ms as f64 / 1000.0)}});
        let mut submitted = 0u64;
        let mut q = 0u64;
        while submitted < args.jobs {
            let n = (per as u64).min(args.jobs - submitted) as usize;
            let body = json!({"queue": format!("load-{}", q % args.queues), "job_set": "load", "jobs": vec![job.clone(); n]});
            let r = http.post(format!("{url}/v1/jobs")).json(&body).send().await?;
            anyhow::ensure!(r.status().is_success(), "submitting: {} {}", r.status(), r.text().await.unwrap_or_default());
            submitted += n as u64;
            q += 1;
        }
        let agent_cfg = tmp.join("agent.toml");
        std::fs::write(
            &agent_cfg,
            format!(
                "executor = \"fake\"\nservers = [\"{url}\"]\ndata_dir = \"{}\"\nruntime = \"fake\"\n[[fake.node_groups]]\ncount = {}\nname_prefix = \"fake\"\nallocatable = {{ cpu = \"{}\", memory = \"256Gi\" }}\n",
                tmp.join("agent").display(),
                args.nodes,
                args.node_cpu
            ),
        )?;
        let exe = std::env::current_exe()?;
        let mut agent = Command::new(exe)
            .args(["agent", "--config"])
            .arg(&agent_cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(tmp.join("agent.log"))?))
            .spawn()
            .context("starting the fake agent")?;
        let cycles_before = CycleTotals::read(&http, &url).await?;
        let start = Instant::now();
        // Samples are taken only while load jobs are live: once they drained, a sample measures
        // an idle server.
        let drained_flag = AtomicBool::new(false);
        let load = probe.samples(args.samples, Duration::from_millis(20), true, &drained_flag);
        let drain = async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if live_jobs(&http, &url, "load-").await? == 0 {
                    drained_flag.store(true, Ordering::Relaxed);
                    return anyhow::Ok(start.elapsed());
                }
                if start.elapsed() > Duration::from_secs(1800) {
                    bail!("the load did not drain in 30 minutes");
                }
            }
        };
        let (load, drained) = tokio::join!(load, drain);
        let (load, drained) = (load?, drained?);
        // Where the wait under load goes: how many cycles ran, how long each took to read the
        // state and to decide, the CPU that took (what paces the cycles), and how long the
        // decisions took to commit.
        let c = CycleTotals::read(&http, &url).await?.since(&cycles_before);
        let stages = Stages::read(&http, &url, &load.arrivals).await?;
        let failed: Value = http.get(format!("{url}/v1/jobs?state=failed&limit=1000")).send().await?.json().await?;
        let failed = failed["jobs"].as_array().map(|a| a.len()).unwrap_or(0);
        let _ = agent.kill();
        let _ = agent.wait();
        let out = json!({
            "nodes": args.nodes,
            "jobs": args.jobs,
            "queues": args.queues,
            "schedule_interval_min": args.schedule_interval_min.as_deref().unwrap_or("default"),
            "idle_gap_ms": idle_gap.as_millis() as u64,
            "idle_p50_ms": tenths(percentile(&idle, 50.0)),
            "idle_p99_ms": tenths(percentile(&idle, 99.0)),
            "load_samples": load.leased.len(),
            "load_p50_ms": tenths(percentile(&load.leased, 50.0)),
            "load_p99_ms": tenths(percentile(&load.leased, 99.0)),
            "load_max_ms": tenths(load.leased.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0)),
            "load_submit_p50_ms": tenths(percentile(&load.accepted, 50.0)),
            "load_to_cycle_p50_ms": tenths(percentile(&stages.to_cycle, 50.0)),
            "load_cycle_to_lease_p50_ms": tenths(percentile(&stages.cycle_to_lease, 50.0)),
            "load_cycles_per_sec": tenths(c.cycles / drained.as_secs_f64()),
            "load_cycle_mean_ms": tenths(c.cycle_s * 1000.0 / c.cycles.max(1.0)),
            "load_snapshot_mean_ms": tenths(c.snapshot_s * 1000.0 / c.cycles.max(1.0)),
            "load_cycle_cpu_mean_ms": tenths(c.cpu_s * 1000.0 / c.cycles.max(1.0)),
            "load_commit_mean_ms": tenths(c.commit_s * 1000.0 / c.commits.max(1.0)),
            "drain_s": tenths(drained.as_secs_f64()),
            "leased_jobs_per_sec": (args.jobs as f64 / drained.as_secs_f64()).round(),
            "failed": failed,
            "server_rss_mb": server.rss_mb().round(),
        });
        println!("{out}");
        drop(server);
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(())
    })
}
