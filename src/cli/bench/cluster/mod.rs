//! `convoy bench cluster`: three servers on 127.0.0.1 as one Raft cluster. Submission throughput
//! through all three (followers relay to the leader) or through the leader alone, with the
//! latency of single requests by whether a follower relayed them; then repeated failovers:
//! SIGKILL of the leader, the time until the first acknowledged write and the first lease after
//! it, and at the end a count of acknowledged jobs that were lost or duplicated. With `--servers`
//! it measures a running cluster instead (on machines of its own): the throughput phases only.

mod remote;

use super::harness::{BenchServer, config, percentile};
use super::submit::{Sending, drive, drive_each, tempfile_dir};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `convoy bench cluster`.
#[derive(clap::Args, Debug)]
pub(crate) struct ClusterArgs {
    /// Jobs to submit in batches of 100.
    #[arg(long, default_value_t = 200_000)]
    batched_jobs: u64,
    /// Concurrent clients sending batches (to the servers `--send-to` names). Each batch waits for
    /// a majority's fsync and, on a follower, for its own apply: 32 keep three servers busy on
    /// two cores, fewer measure latency more than throughput.
    #[arg(long, default_value_t = 32)]
    batch_clients: usize,
    /// Requests of one job each.
    #[arg(long, default_value_t = 20_000)]
    single_requests: u64,
    /// Concurrent clients sending single jobs (to the servers `--send-to` names).
    #[arg(long, default_value_t = 16)]
    single_clients: usize,
    /// Where the clients of both throughput phases send: spread over all three servers (the
    /// followers relay to the leader), or all to the leader (what the relay costs is the
    /// difference).
    #[arg(long, value_enum, default_value_t = SendTo::All)]
    send_to: SendTo,
    /// Leader kills.
    #[arg(long, default_value_t = 10)]
    failovers: usize,
    /// `cluster.heartbeat_interval` of the servers (default: the configuration's default).
    #[arg(long)]
    heartbeat_interval: Option<String>,
    /// `cluster.election_timeout` of the servers (default: the configuration's default).
    #[arg(long)]
    election_timeout: Option<String>,
    /// Measure a running cluster instead of starting three servers here: the API address of each
    /// member, comma-separated. Only the throughput phases run (this bench kills only servers it
    /// started: give `--failovers 0`). The jobs go to job sets `bench-<ms>-<pid>-<client>` of
    /// `--queue`; they ask for a node label no node has, so none runs, and all are cancelled at
    /// the end.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// With `--servers`: the bearer token (a submitter who may use `--queue`; an admin if the
    /// queue must be made).
    #[arg(long, env = "CONVOY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// With `--servers`: the queue the jobs go to (made if missing, which takes an admin's token).
    /// The servers this bench starts have a queue `bench` of their own.
    #[arg(long, default_value = "bench", requires = "servers")]
    queue: String,
}

/// Which servers the throughput clients send to.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum SendTo {
    /// Spread over the three servers.
    All,
    /// All to the leader.
    Leader,
}

impl SendTo {
    fn as_str(self) -> &'static str {
        match self {
            SendTo::All => "all",
            SendTo::Leader => "leader",
        }
    }
}

/// One member: its directory, configuration, URL and process.
struct Member {
    id: u64,
    dir: PathBuf,
    config: String,
    url: String,
    server: Option<BenchServer>,
}

impl Member {
    fn start(&mut self) -> anyhow::Result<()> {
        self.server = Some(BenchServer::start(&self.dir, &self.config)?);
        Ok(())
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `GET /v1/cluster` of `url`, if it answers.
async fn status(http: &reqwest::Client, url: &str) -> Option<Value> {
    let r = http.get(format!("{url}/v1/cluster")).timeout(Duration::from_millis(500)).send().await.ok()?;
    r.json().await.ok()
}

/// Waits until every running member names the same serving leader; its id.
async fn leader(http: &reqwest::Client, members: &[Member]) -> anyhow::Result<u64> {
    let running: Vec<String> = members.iter().filter(|m| m.server.is_some()).map(|m| m.url.clone()).collect();
    Ok(leader_among(http, &running).await?.0)
}

/// The id of the server whose `GET /v1/cluster` answer this is, if it says it leads and serves.
fn serving_leader_id(status: &Value) -> Option<u64> {
    let id = status["id"].as_u64()?;
    (status["serving"] == true && status["leader"].as_u64() == Some(id)).then_some(id)
}

/// Waits until every server of `urls` names the same leader, and that leader, one of them, says
/// it serves; its id and URL.
async fn leader_among(http: &reqwest::Client, urls: &[String]) -> anyhow::Result<(u64, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders = HashSet::new();
        let mut serving = None;
        for url in urls {
            let st = status(http, url).await;
            leaders.insert(st.as_ref().and_then(|s| s["leader"].as_u64()));
            if let Some(l) = st.as_ref().and_then(serving_leader_id) {
                serving = Some((l, url.clone()));
            }
        }
        if leaders.len() == 1
            && let Some(found) = serving
        {
            return Ok(found);
        }
        if Instant::now() > deadline {
            bail!(
                "no leader that serves among {} within a minute (each must answer GET /v1/cluster, and the \
                 leader's API address must be one of them)",
                urls.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A job with a client id that only nodes labelled `round=<round>` can run.
fn job(client_id: &str, round: usize) -> Value {
    json!({"client_id": client_id, "pod_spec": {"nodeSelector": {"round": round.to_string()}, "containers": [{
        "name": "main", "image": "busybox", "command": ["true"],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}})
}

/// The three members' directories and configurations under `tmp`, on free loopback ports.
fn members(args: &ClusterArgs, tmp: &std::path::Path) -> anyhow::Result<Vec<Member>> {
    let ports = [free_port()?, free_port()?, free_port()?];
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{{ id = {}, addr = \"http://127.0.0.1:{p}\" }}", i + 1))
        .collect();
    let mut members = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let id = i as u64 + 1;
        let dir = tmp.join(format!("node-{id}"));
        std::fs::create_dir_all(&dir)?;
        let server = format!("node_id = {id}\nadvertise = \"http://127.0.0.1:{port}\"\nmax_jobs_per_request = 10000\n");
        let config = config(&dir, &server).replacen("127.0.0.1:0", &format!("127.0.0.1:{port}"), 1)
            + &format!("\n[cluster]\npeers = [{}]\n", peers.join(", "))
            + &args.heartbeat_interval.as_ref().map(|h| format!("heartbeat_interval = \"{h}\"\n")).unwrap_or_default()
            + &args.election_timeout.as_ref().map(|e| format!("election_timeout = \"{e}\"\n")).unwrap_or_default();
        members.push(Member { id, dir, config, url: format!("http://127.0.0.1:{port}"), server: None });
    }
    Ok(members)
}

/// Milliseconds to two decimals.
fn ms(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// The throughput phases: batches of 100, then single jobs, sent to `targets`; the figures.
async fn throughput(args: &ClusterArgs, to: &Sending, targets: &[String], leader_url: &str) -> anyhow::Result<Value> {
    let (bwall, _, bjobs) = drive(to, targets, args.batch_clients, args.batched_jobs.div_ceil(100), 100).await?;
    let (swall, by_target, sjobs) = drive_each(to, targets, args.single_clients, args.single_requests, 1).await?;
    // Latency of the single requests sent to the leader and of those a follower relayed.
    let (mut at_leader, mut relayed) = (Vec::new(), Vec::new());
    for (url, lat) in targets.iter().zip(by_target) {
        if url == leader_url { at_leader.extend(lat) } else { relayed.extend(lat) }
    }
    at_leader.sort();
    relayed.sort();
    Ok(json!({
        "batched_jobs": bjobs,
        "batched_jobs_per_sec": (bjobs as f64 / bwall.as_secs_f64()).round(),
        "single_requests": sjobs,
        "single_requests_per_sec": (sjobs as f64 / swall.as_secs_f64()).round(),
        "single_ms_at_leader_p50": ms(percentile(&at_leader, 50.0)),
        "single_ms_at_leader_p99": ms(percentile(&at_leader, 99.0)),
        "single_ms_relayed_p50": ms(percentile(&relayed, 50.0)),
        "single_ms_relayed_p99": ms(percentile(&relayed, 99.0)),
    }))
}

/// What the leader kills measured: ms from each kill to the first acknowledged write and to the
/// first lease, and every job acknowledged meanwhile (client id to job id).
#[derive(Default)]
struct Failovers {
    to_write: Vec<f64>,
    to_lease: Vec<f64>,
    acked: HashMap<String, String>,
}

/// `rounds` times: queues jobs for the round, kills the leader (`current` the first time), times the
/// first write and lease on the survivors, and starts the killed member again.
async fn failovers(
    http: &reqwest::Client,
    members: &mut [Member],
    rounds: usize,
    mut current: u64,
) -> anyhow::Result<Failovers> {
    let mut f = Failovers::default();
    let first_url = members.first().context("members")?.url.clone();
    for round in 0..rounds {
        // Jobs only this round's executor can take, queued before the kill.
        let ids: Vec<String> = (0..5).map(|k| format!("r{round}-queued-{k}")).collect();
        let body = json!({"queue": "bench", "job_set": "failover", "jobs": ids.iter().map(|c| job(c, round)).collect::<Vec<_>>()});
        let r = http.post(format!("{first_url}/v1/jobs")).json(&body).send().await?;
        anyhow::ensure!(r.status().is_success(), "queueing: {}", r.status());
        let got: Value = r.json().await?;
        for (c, j) in ids.iter().zip(got["job_ids"].as_array().context("job_ids")?) {
            f.acked.insert(c.clone(), j.as_str().unwrap_or_default().to_string());
        }

        let victim = members.iter_mut().find(|m| m.id == current).context("leader is a member")?;
        let killed = Instant::now();
        if let Some(mut s) = victim.server.take() {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        let survivors: Vec<String> = members.iter().filter(|m| m.server.is_some()).map(|m| m.url.clone()).collect();
        let (write_ms, lease_ms) = tokio::join!(
            first_write(http, &survivors, round, killed, &mut f.acked),
            first_lease(http, &survivors, round, killed)
        );
        f.to_write.push(write_ms?);
        f.to_lease.push(lease_ms?);
        current = leader(http, members).await?;
        members.iter_mut().find(|m| m.server.is_none()).context("the killed member")?.start()?;
        leader(http, members).await?;
    }
    Ok(f)
}

/// Acknowledged jobs missing from a member, and client ids stored more than once, over `urls`.
async fn lost_and_duplicated(
    http: &reqwest::Client,
    urls: &[String],
    acked: &HashMap<String, String>,
) -> anyhow::Result<(u64, u64)> {
    let (mut lost, mut duplicated) = (0u64, 0u64);
    for url in urls {
        let jobs = list(http, url).await?;
        let mut seen: HashMap<&str, u32> = HashMap::new();
        for cid in jobs.values() {
            *seen.entry(cid.as_str()).or_default() += 1;
        }
        duplicated += seen.values().filter(|n| **n > 1).count() as u64;
        lost += acked.iter().filter(|(c, j)| jobs.get(*j).map(String::as_str) != Some(c.as_str())).count() as u64;
    }
    Ok((lost, duplicated))
}

pub(super) fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if !args.servers.is_empty() {
        return rt.block_on(remote::run(&args));
    }
    rt.block_on(async {
        let tmp = tempfile_dir()?;
        let mut members = members(&args, &tmp)?;
        for m in &mut members {
            m.start()?;
        }
        let http = reqwest::Client::builder().build()?;
        let first = leader(&http, &members).await?;
        let urls: Vec<String> = members.iter().map(|m| m.url.clone()).collect();
        let r = http.post(format!("{}/v1/queues", urls[0])).json(&json!({"name": "bench"})).send().await?;
        anyhow::ensure!(r.status().is_success(), "creating the queue: {}", r.status());

        let leader_url = members.iter().find(|m| m.id == first).context("leader")?.url.clone();
        let targets = match args.send_to {
            SendTo::All => urls.clone(),
            SendTo::Leader => vec![leader_url.clone()],
        };
        let mut out = throughput(&args, &Sending::local(), &targets, &leader_url).await?;
        let append_ms = append_mean_ms(&http, &leader_url).await;
        // A leader replaced under load would make the latencies by target mean something else.
        let now = leader(&http, &members).await?;
        let mut f = failovers(&http, &mut members, args.failovers, now).await?;
        // Every acknowledged job is there once, on every member.
        let (lost, duplicated) = lost_and_duplicated(&http, &urls, &f.acked).await?;

        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let rest = json!({
            "batch_clients": args.batch_clients,
            "single_clients": args.single_clients,
            "send_to": args.send_to.as_str(),
            "leader_changed_during_throughput": now != first,
            "append_rtt_ms_mean": ms(append_ms),
            "failovers": args.failovers,
            "kill_to_first_write_ms_median": med(&mut f.to_write).round(),
            "kill_to_first_write_ms_max": max(&f.to_write).round(),
            "kill_to_first_lease_ms_median": med(&mut f.to_lease).round(),
            "kill_to_first_lease_ms_max": max(&f.to_lease).round(),
            "acknowledged_checked": f.acked.len(),
            "lost": lost,
            "duplicated": duplicated,
        });
        if let (Some(o), Value::Object(r)) = (out.as_object_mut(), rest) {
            o.extend(r);
        }
        println!("{out}");
        drop(members);
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(())
    })
}

/// Submits one job at a time to the survivors, in turn, until one is acknowledged; ms since the
/// kill. Retries reuse the client id, so a write that went through unacknowledged is not doubled.
async fn first_write(
    http: &reqwest::Client,
    urls: &[String],
    round: usize,
    killed: Instant,
    acked: &mut HashMap<String, String>,
) -> anyhow::Result<f64> {
    let cid = format!("r{round}-probe");
    let body = json!({"queue": "bench", "job_set": "failover", "jobs": [job(&cid, usize::MAX)]});
    for attempt in 0.. {
        let url = &urls[attempt % urls.len()];
        let r = http.post(format!("{url}/v1/jobs")).json(&body).timeout(Duration::from_secs(2)).send().await;
        if let Ok(r) = r
            && r.status().is_success()
        {
            let ms = killed.elapsed().as_secs_f64() * 1000.0;
            let v: Value = r.json().await?;
            acked.insert(cid, v["job_ids"][0].as_str().unwrap_or_default().to_string());
            return Ok(ms);
        }
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("no write acknowledged within a minute of the kill");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    unreachable!("the loop only ends by returning")
}

/// Polls for leases as this round's executor (one node labelled `round=<round>`) on the
/// survivors, in turn, until one comes; ms since the kill.
async fn first_lease(http: &reqwest::Client, urls: &[String], round: usize, killed: Instant) -> anyhow::Result<f64> {
    let node = json!({"name": format!("n{round}"), "labels": {"round": round.to_string()},
        "allocatable": {"cpu": "64", "memory": "256Gi"}});
    let body = json!({"nodes": [node], "runs": [], "wait_seconds": 1});
    for attempt in 0.. {
        let url = &urls[attempt % urls.len()];
        let r = http
            .post(format!("{url}/v1/executors/bench-{round}/lease"))
            .json(&body)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(r) = r
            && r.status().is_success()
        {
            let v: Value = r.json().await?;
            if v["leases"].as_array().is_some_and(|l| !l.is_empty()) {
                return Ok(killed.elapsed().as_secs_f64() * 1000.0);
            }
            continue;
        }
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("no lease within a minute of the kill");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    unreachable!("the loop only ends by returning")
}

/// Every job of the bench queue that has a client id, after a linearizable read: id → client id.
async fn list(http: &reqwest::Client, url: &str) -> anyhow::Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!("{url}/v1/jobs?queue=bench&job_set=failover&limit=1000&consistent=true");
        if let Some(a) = &after {
            path.push_str(&format!("&after={a}"));
        }
        let v: Value = http.get(&path).send().await?.json().await?;
        for j in v["jobs"].as_array().context("jobs")? {
            if let (Some(id), Some(c)) = (j["id"].as_str(), j["client_id"].as_str()) {
                out.insert(id.to_string(), c.to_string());
            }
        }
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => return Ok(out),
        }
    }
}

/// Mean time of the leader's append RPCs so far (follower's fsync included), from its metrics.
async fn append_mean_ms(http: &reqwest::Client, url: &str) -> f64 {
    let Ok(r) = http.get(format!("{url}/metrics")).send().await else { return 0.0 };
    let text = r.text().await.unwrap_or_default();
    let sum_of = |suffix: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with(&format!("convoy_raft_peer_rpc_seconds_{suffix}")) && l.contains("rpc=\"append\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let (sum, count) = (sum_of("sum"), sum_of("count"));
    if count > 0.0 { sum / count * 1000.0 } else { 0.0 }
}
