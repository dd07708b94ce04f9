//! `convoy bench submit`: acknowledged jobs per second against a server it starts, with batches
//! of 100 and with one job per request (16 concurrent clients), and request latency. With
//! `--grpc`: the batches through Armada's gRPC `SubmitJobs` and through REST in the same run.

use super::harness::{BenchServer, StoreArgs, config, percentile, tenths};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `convoy bench submit`.
#[derive(clap::Args, Debug)]
pub(crate) struct SubmitArgs {
    /// Jobs to submit in batches (with `--grpc`: through each API).
    #[arg(long, visible_alias = "jobs", default_value_t = 200_000)]
    batched_jobs: u64,
    /// Jobs per batch.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Concurrent clients sending batches.
    #[arg(long, default_value_t = 8)]
    batch_clients: usize,
    /// Requests of one job each.
    #[arg(long, default_value_t = 40_000)]
    single_requests: u64,
    /// Concurrent clients sending single jobs.
    #[arg(long, default_value_t = 16)]
    single_clients: usize,
    /// Compare Armada's gRPC API with REST instead: the batched jobs through `api.Submit/SubmitJobs`
    /// (a tonic client over h2c, plain HTTP/2 without TLS) and through `POST /v1/jobs`, with the
    /// same batch size and clients, in the order REST, gRPC, gRPC, REST (half the jobs each) so
    /// that the store's growth weighs on both alike; prints both figures and gRPC/REST.
    #[arg(long)]
    grpc: bool,
    #[command(flatten)]
    store: StoreArgs,
}

fn item(i: u64) -> Value {
    json!({"pod_spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", format!("echo {i}")],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}})
}

/// What the throughput clients send with: their headers (the servers' token, when they want one),
/// how long one request may take, the queue, and the prefix of their job sets (client `c`
/// submits to `<prefix><c>`). Jobs sent to a cluster the bench did not start ask for a node label
/// no node has: they are queued and counted, never run.
pub(super) struct Sending {
    headers: reqwest::header::HeaderMap,
    timeout: Option<Duration>,
    pub queue: String,
    pub job_set_prefix: String,
    unrunnable: bool,
}

/// The node label the jobs sent to a cluster the bench did not start ask for (and no node has).
pub(super) const UNRUNNABLE_LABEL: &str = "convoy-bench-never";

impl Sending {
    /// To the queue `bench` of a server this bench started (no token, no time limit), job sets
    /// `client-<c>`.
    pub(super) fn local() -> Sending {
        Sending {
            headers: reqwest::header::HeaderMap::new(),
            timeout: None,
            queue: "bench".into(),
            job_set_prefix: "client-".into(),
            unrunnable: false,
        }
    }

    /// To `queue` of servers the bench did not start, with `token` as every request's bearer
    /// token and `timeout` as the longest a request may take.
    pub(super) fn remote(
        queue: &str,
        job_set_prefix: &str,
        token: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<Sending> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = token {
            let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| anyhow::anyhow!("--token: only visible ASCII characters may form a bearer token"))?;
            v.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        Ok(Sending {
            headers,
            timeout: Some(timeout),
            queue: queue.to_string(),
            job_set_prefix: job_set_prefix.to_string(),
            unrunnable: true,
        })
    }

    /// An HTTP client for `clients` concurrent clients.
    pub(super) fn client(&self, clients: usize) -> anyhow::Result<reqwest::Client> {
        let mut b = reqwest::Client::builder().pool_max_idle_per_host(clients).default_headers(self.headers.clone());
        if let Some(t) = self.timeout {
            b = b.timeout(t).connect_timeout(t.min(Duration::from_secs(5)));
        }
        Ok(b.build()?)
    }

    /// The body client `c` sends again and again: `per_request` jobs.
    fn body(&self, c: usize, per_request: usize) -> Vec<u8> {
        let jobs: Vec<Value> = (0..per_request as u64)
            .map(|i| {
                let mut job = item(i);
                if self.unrunnable {
                    job["pod_spec"]["nodeSelector"] = json!({UNRUNNABLE_LABEL: "true"});
                }
                job
            })
            .collect();
        let body = json!({"queue": self.queue, "job_set": format!("{}{c}", self.job_set_prefix), "jobs": jobs});
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// Sends `total` requests from `clients` tasks, client `c` to `urls[c % urls.len()]`; returns
/// (wall time, sorted latencies, jobs acked).
pub(super) async fn drive(
    to: &Sending,
    urls: &[String],
    clients: usize,
    total: u64,
    per_request: usize,
) -> anyhow::Result<(Duration, Vec<Duration>, u64)> {
    let (wall, by_url, acked) = drive_each(to, urls, clients, total, per_request).await?;
    let mut lat: Vec<Duration> = by_url.into_iter().flatten().collect();
    lat.sort();
    Ok((wall, lat, acked))
}

/// [`drive`], with the latencies kept apart by the URL they were sent to (in `urls`' order, each
/// sorted).
pub(super) async fn drive_each(
    to: &Sending,
    urls: &[String],
    clients: usize,
    total: u64,
    per_request: usize,
) -> anyhow::Result<(Duration, Vec<Vec<Duration>>, u64)> {
    anyhow::ensure!(!urls.is_empty(), "no server to send to");
    let http = to.client(clients)?;
    // One body per client, built once and before the clock starts: the server is measured, not
    // the client's JSON.
    let bodies: Vec<Vec<u8>> = (0..clients).map(|c| to.body(c, per_request)).collect();
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, body) in bodies.into_iter().enumerate() {
        let (http, next, acked, url) = (http.clone(), next.clone(), acked.clone(), urls[c % urls.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let body = body.clone();
                let t = Instant::now();
                let r = http
                    .post(format!("{url}/v1/jobs"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        lat.push(t.elapsed());
                        acked.fetch_add(per_request as u64, Ordering::Relaxed);
                    }
                    Ok(r) => eprintln!("submit failed: {} {}", r.status(), r.text().await.unwrap_or_default()),
                    Err(e) => eprintln!("submit failed: {e}"),
                }
            }
            lat
        }));
    }
    let mut by_url = vec![Vec::new(); urls.len()];
    for (c, t) in tasks.into_iter().enumerate() {
        by_url[c % urls.len()].extend(t.await?);
    }
    let wall = start.elapsed();
    for lat in &mut by_url {
        lat.sort();
    }
    Ok((wall, by_url, acked.load(Ordering::Relaxed)))
}

pub(super) fn run(args: SubmitArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let tmp = tempfile_dir()?;
        let server = BenchServer::start(
            &tmp,
            &config(&tmp, &format!("max_jobs_per_request = 10000\n{}", args.store.server_lines())),
        )?;
        let http = reqwest::Client::new();
        server.ready(&http).await?;
        let r = http.post(format!("{}/v1/queues", server.url)).json(&json!({"name": "bench"})).send().await?;
        anyhow::ensure!(r.status().is_success(), "creating the queue: {}", r.status());

        let batches = args.batched_jobs.div_ceil(args.batch as u64);
        if args.grpc {
            return compare(&server, &args, batches, tmp).await;
        }
        let cpu0 = server.cpu_time();
        let to = Sending::local();
        let (bwall, blat, bjobs) =
            drive(&to, std::slice::from_ref(&server.url), args.batch_clients, batches, args.batch).await?;
        let cpu1 = server.cpu_time();
        let (swall, slat, sjobs) =
            drive(&to, std::slice::from_ref(&server.url), args.single_clients, args.single_requests, 1).await?;
        let cpu2 = server.cpu_time();
        let us_per = |cpu: std::time::Duration, n: u64| (cpu.as_secs_f64() * 1e6 / n.max(1) as f64).round();
        let out = json!({
            "batched_jobs": bjobs,
            "batch_size": args.batch,
            "batch_clients": args.batch_clients,
            "batched_jobs_per_sec": (bjobs as f64 / bwall.as_secs_f64()).round(),
            "batched_p50_ms": tenths(percentile(&blat, 50.0)),
            "batched_p99_ms": tenths(percentile(&blat, 99.0)),
            "batched_server_cpu_us_per_job": us_per(cpu1.saturating_sub(cpu0), bjobs),
            "single_requests": sjobs,
            "single_clients": args.single_clients,
            "single_requests_per_sec": (sjobs as f64 / swall.as_secs_f64()).round(),
            "single_p50_ms": tenths(percentile(&slat, 50.0)),
            "single_p99_ms": tenths(percentile(&slat, 99.0)),
            "single_server_cpu_us_per_request": us_per(cpu2.saturating_sub(cpu1), sjobs),
            "server_rss_mb": server.rss_mb().round(),
        });
        println!("{out}");
        drop(server);
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(())
    })
}

/// Figures of one API over the segments it was driven in.
#[cfg(feature = "grpc")]
#[derive(Default)]
struct Figures {
    wall: Duration,
    lat: Vec<Duration>,
    jobs: u64,
    cpu: Duration,
}

#[cfg(feature = "grpc")]
impl Figures {
    fn jobs_per_sec(&self) -> f64 {
        self.jobs as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn json(&mut self, api: &str) -> Value {
        self.lat.sort();
        let ms = |p: f64| tenths(percentile(&self.lat, p));
        json!({
            format!("{api}_jobs"): self.jobs,
            format!("{api}_jobs_per_sec"): self.jobs_per_sec().round(),
            format!("{api}_p50_ms"): ms(50.0),
            format!("{api}_p99_ms"): ms(99.0),
            format!("{api}_server_cpu_us_per_job"): (self.cpu.as_secs_f64() * 1e6 / self.jobs.max(1) as f64).round(),
        })
    }
}

/// `--grpc`: the batches through REST and through gRPC, in the order REST, gRPC, gRPC, REST.
#[cfg(feature = "grpc")]
async fn compare(server: &BenchServer, args: &SubmitArgs, batches: u64, tmp: std::path::PathBuf) -> anyhow::Result<()> {
    let (mut rest, mut grpc) = (Figures::default(), Figures::default());
    let to = Sending::local();
    let half = batches.div_ceil(2);
    for (i, use_grpc) in [false, true, true, false].into_iter().enumerate() {
        // The second half of each API's batches: what is left of the total.
        let n = if i < 2 { half } else { batches - half };
        let cpu0 = server.cpu_time();
        let (wall, lat, jobs) = if use_grpc {
            super::submit_grpc::drive(&server.url, args.batch_clients, n, args.batch).await?
        } else {
            drive(&to, std::slice::from_ref(&server.url), args.batch_clients, n, args.batch).await?
        };
        let f = if use_grpc { &mut grpc } else { &mut rest };
        f.wall += wall;
        f.lat.extend(lat);
        f.jobs += jobs;
        f.cpu += server.cpu_time().saturating_sub(cpu0);
    }
    let mut out = json!({
        "batch_size": args.batch,
        "batch_clients": args.batch_clients,
        "grpc_to_rest": (grpc.jobs_per_sec() / rest.jobs_per_sec().max(1e-9) * 1000.0).round() / 1000.0,
        "server_rss_mb": server.rss_mb().round(),
    });
    for (api, f) in [("rest", &mut rest), ("grpc", &mut grpc)] {
        if let (Some(o), Value::Object(add)) = (out.as_object_mut(), f.json(api)) {
            o.extend(add);
        }
    }
    println!("{out}");
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

#[cfg(not(feature = "grpc"))]
async fn compare(_: &BenchServer, _: &SubmitArgs, _: u64, _: std::path::PathBuf) -> anyhow::Result<()> {
    anyhow::bail!("--grpc: this convoy was built without the `grpc` feature")
}

/// A scratch directory under the system temp dir.
pub(super) fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("convoy-bench-{}-{}", std::process::id(), super::nanos()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
