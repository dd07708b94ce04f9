//! `convoy bench e2e`: a server and a fake agent (both real processes), plus a probe executor
//! in the benchmark itself. Prints submit→lease-received latency at idle and under load (the
//! probe submits one job at a time to its own tainted node and long-polls for it), and how many
//! jobs per second go through the whole path: scheduled, leased over the long poll, run by the
//! fake agent and reported back.

use super::harness::{BenchServer, config, live_jobs, percentile};
use super::submit::tempfile_dir;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
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
    /// Probe jobs measured at idle and again under load.
    #[arg(long, default_value_t = 100)]
    samples: usize,
    /// The server's `[scheduler] schedule_interval_min` (e.g. `50ms`; default: the server's),
    /// to see how much of the latency under load is the wait for the next cycle.
    #[arg(long)]
    schedule_interval_min: Option<String>,
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
    async fn sample(&self) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        let r = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .json(&json!({"queue": "probe", "job_set": "probe", "jobs": [probe_job()]}))
            .send()
            .await?;
        let v: Value = r.json().await?;
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
                return Ok(took);
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("probe job {id} was not leased within 60 s");
            }
        }
    }

    async fn samples(&self, n: usize, gap: Duration) -> anyhow::Result<Vec<Duration>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.sample().await?);
            tokio::time::sleep(gap).await;
        }
        out.sort();
        Ok(out)
    }
}

pub(super) fn run(args: E2eArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.queues >= 1 && args.nodes >= 1, "--queues and --nodes must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let tmp = tempfile_dir()?;
        let mut extra = "max_jobs_per_request = 10000".to_string();
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

        // Idle: nothing else happens, and each probe job arrives after the scheduler has been
        // quiet for longer than schedule_interval_min (default 100 ms).
        let idle_gap = Duration::from_millis(150);
        let idle = probe.samples(args.samples, idle_gap).await?;

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
        let start = Instant::now();
        let load = probe.samples(args.samples, Duration::from_millis(20));
        let drain = async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if live_jobs(&http, &url, "load-").await? == 0 {
                    return anyhow::Ok(start.elapsed());
                }
                if start.elapsed() > Duration::from_secs(1800) {
                    bail!("the load did not drain in 30 minutes");
                }
            }
        };
        let (load, drained) = tokio::join!(load, drain);
        let (load, drained) = (load?, drained?);
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
            "idle_p50_ms": (percentile(&idle, 50.0) * 10.0).round() / 10.0,
            "idle_p99_ms": (percentile(&idle, 99.0) * 10.0).round() / 10.0,
            "load_p50_ms": (percentile(&load, 50.0) * 10.0).round() / 10.0,
            "load_p99_ms": (percentile(&load, 99.0) * 10.0).round() / 10.0,
            "drain_s": (drained.as_secs_f64() * 10.0).round() / 10.0,
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
