//! `convoy bench chaos`: three (or five) real servers and fake agents under load from clients
//! that submit, cancel, reprioritize and read, while faults are injected one after another at
//! random from a seed: kill -9 of the leader, a follower or an agent; SIGSTOP and SIGCONT;
//! partitions (network namespaces on a bridge, blackhole routes); a full disk (a tmpfs under each
//! server's data directory); a wiped data directory rejoining; membership changes. After
//! healing, the history of every operation is checked (`convoy::chaos::check`) and one JSON line
//! of figures is printed. Exits non-zero when the history shows something that must never
//! happen (with `--strict`, also when a figure misses its target). docs/reliability.md.

mod faults;
mod fleet;
mod net;
mod workload;

use anyhow::{Context, bail};
use convoy::chaos::history::{AgentRun, Fault, History, StoredJob, StoredRun};
use faults::Kind;
use fleet::{Fleet, Timings};
use futures::StreamExt;
use net::Network;
use rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use workload::{KEY_ANNOTATION, QUEUE, Shared};

/// Whether to use network namespaces.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Netns {
    /// When running as root and `ip` is there.
    Auto,
    /// Always (fails without root).
    On,
    /// Never: servers on loopback, no partitions.
    Off,
}

/// Arguments of `convoy bench chaos`.
#[derive(clap::Args, Debug)]
pub(crate) struct ChaosArgs {
    /// Servers in the cluster (3 or 5), plus one spare for membership changes.
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Faults to inject, one after another.
    #[arg(long, default_value_t = 10)]
    faults: usize,
    /// Seed of the fault schedule and the clients' choices; printed, so that a failing run can
    /// be replayed.
    #[arg(long)]
    seed: Option<u64>,
    /// Fault kinds to draw from, comma-separated (default: every kind this machine can inject):
    /// kill_leader, kill_follower, kill_agent, pause_leader, pause_follower, partition_leader,
    /// partition_follower, partition_minority, disk_full, wipe_rejoin, membership.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Longest a pause, partition or full disk lasts, in seconds (each lasts from 1 s to this).
    #[arg(long, default_value_t = 10.0)]
    max_hold: f64,
    /// Clients, each one operation at a time, each to a server drawn at random. Enough of them
    /// that some always send to servers a fault spared: a client that sent to a paused server
    /// waits for it, as any would.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Fake agents (each four nodes of 4 cpu).
    #[arg(long, default_value_t = 2)]
    agents: usize,
    /// `cluster.heartbeat_interval` of the servers (default: the configuration's).
    #[arg(long)]
    heartbeat_interval: Option<String>,
    /// `cluster.election_timeout` of the servers (default: the configuration's).
    #[arg(long)]
    election_timeout: Option<String>,
    /// Network namespaces for the servers (partitions need them; root).
    #[arg(long, value_enum, default_value = "auto")]
    netns: Netns,
    /// Keep the run's directory here: configurations, logs, data, and `history.json`.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also fail when a figure misses its target (failover median 1 s and max 3 s, no request
    /// to the majority side waiting over 3 s).
    #[arg(long)]
    strict: bool,
}

/// How long the cluster may take to be whole again after a fault.
const RECOVERY: Duration = Duration::from_secs(90);

pub(super) fn run(args: ChaosArgs) -> anyhow::Result<()> {
    if !(3..=9).contains(&args.servers) || args.servers.is_multiple_of(2) {
        bail!("--servers {}: give an odd number from 3 to 9", args.servers);
    }
    if args.agents == 0 || args.clients == 0 {
        bail!("--agents and --clients must be at least 1");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run_async(args))
}

async fn run_async(args: ChaosArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(|| super::nanos() as u64);
    eprintln!("convoy bench chaos: seed {seed} (--seed {seed} replays this schedule)");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let netns = match args.netns {
        Netns::On if !root => bail!("--netns on needs root (network namespaces)"),
        Netns::On => true,
        Netns::Auto => root && std::process::Command::new("ip").arg("-V").output().is_ok(),
        Netns::Off => false,
    };
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => super::submit::tempfile_dir()?,
    };
    let net = Network::new(args.servers + 1, netns)?;
    let partitions = net.can_partition();
    let timings = Timings { heartbeat: args.heartbeat_interval.clone(), election: args.election_timeout.clone() };
    let fleet = Fleet::prepare(&dir, args.servers, args.agents, net, root, &timings)?;
    let kinds = chosen_kinds(&args.kinds, partitions, root)?;
    let fleet = Arc::new(Mutex::new(fleet));
    let started = Instant::now();
    let outcome = drive(&args, seed, &fleet, &kinds).await;
    // Processes, namespaces and mounts go before the directory may.
    fleet.lock().await.release();
    let (history, unrecovered, restarts) = outcome?;
    std::fs::write(dir.join("history.json"), serde_json::to_vec(&history)?)?;
    report(&args, seed, &dir, &history, &unrecovered, restarts, partitions, root, started.elapsed())
}

/// The kinds named by `--kinds` (or all) that this machine can inject.
fn chosen_kinds(named: &[String], partitions: bool, disks: bool) -> anyhow::Result<Vec<Kind>> {
    let wanted = if named.is_empty() {
        Kind::ALL.to_vec()
    } else {
        named.iter().map(|n| Kind::parse(n)).collect::<anyhow::Result<Vec<_>>>()?
    };
    let (ok, not): (Vec<Kind>, Vec<Kind>) = wanted.into_iter().partition(|k| k.possible(partitions, disks));
    if !not.is_empty() {
        let names: Vec<&str> = not.iter().map(|k| k.name()).collect();
        eprintln!("convoy bench chaos: not injecting {} (partitions and full disks need root)", names.join(", "));
    }
    if ok.is_empty() {
        bail!("no fault kind left to inject");
    }
    Ok(ok)
}

/// Starts everything, injects the faults under load, heals, and collects the history; also the
/// faults after which the cluster did not recover, and the restarts of servers that exited.
async fn drive(
    args: &ChaosArgs,
    seed: u64,
    fleet: &Arc<Mutex<Fleet>>,
    kinds: &[Kind],
) -> anyhow::Result<(History, Vec<String>, usize)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    {
        let mut f = fleet.lock().await;
        for i in 0..args.servers {
            f.start(i)?;
        }
    }
    let l = faults::leader(fleet, &http, Duration::from_secs(60)).await.context("the cluster did not form")?;
    let leader_url = fleet.lock().await.members[l].url.clone();
    let r = http.post(format!("{leader_url}/v1/queues")).json(&json!({"name": QUEUE})).send().await?;
    if !r.status().is_success() {
        bail!("creating queue {QUEUE}: {} {}", r.status(), r.text().await.unwrap_or_default());
    }
    {
        let mut f = fleet.lock().await;
        for a in 0..args.agents {
            f.start_agent(a)?;
        }
    }
    let supervisor = tokio::spawn(supervise(fleet.clone()));
    let shared = Arc::new(Shared {
        urls: fleet.lock().await.urls(),
        t0: Instant::now(),
        ops: Default::default(),
        stop: Default::default(),
    });
    let clients: Vec<_> = (0..args.clients).map(|c| tokio::spawn(workload::client(shared.clone(), c, seed))).collect();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut faults = Vec::new();
    let mut unrecovered = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in 0..args.faults {
        let kind = kinds[(rng.next_u64() % kinds.len() as u64) as usize];
        let injected_ms = shared.now();
        let (fault, hold) = faults::inject(kind, fleet, &http, &mut rng, args.max_hold)
            .await
            .with_context(|| format!("injecting fault {n} ({})", kind.name()))?;
        eprintln!("fault {n}: {} of {} for {:.1} s", kind.name(), fault.target, hold.as_secs_f64());
        tokio::time::sleep(hold).await;
        faults::heal(&fault, fleet, &http).await.with_context(|| format!("healing fault {n} ({})", kind.name()))?;
        let healed_ms = shared.now();
        faults.push(Fault {
            kind: kind.name().to_string(),
            target: fault.target.clone(),
            minority: fault.minority.clone(),
            injected_ms,
            healed_ms,
        });
        if let Err(e) = whole(fleet, &http, RECOVERY).await {
            eprintln!("fault {n}: the cluster did not recover: {e:#}");
            unrecovered.push(format!("fault {n} ({}): {e:#}", kind.name()));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    shared.stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(60), c).await;
    }
    let ended = all_ended(fleet, &http, Duration::from_secs(180)).await;
    if let Err(e) = &ended {
        eprintln!("not every job ended: {e:#}");
    }
    whole(fleet, &http, RECOVERY).await.context("the cluster was not whole at the end")?;
    supervisor.abort();
    let stored = collect_stored(fleet, &http).await?;
    let agent_runs = {
        let mut f = fleet.lock().await;
        for a in 0..f.agents.len() {
            f.kill_agent(a);
        }
        agent_runs(&f)?
    };
    let ops = std::mem::take(&mut *shared.ops.lock().unwrap_or_else(|p| p.into_inner()));
    let restarts = fleet.lock().await.restarts;
    Ok((History { ops, faults, stored, agent_runs }, unrecovered, restarts))
}

/// Starts again servers that exited by themselves, as a service manager would, a second later.
async fn supervise(fleet: Arc<Mutex<Fleet>>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        match fleet.lock().await.supervise() {
            Ok(r) if !r.is_empty() => eprintln!("started again after they exited: servers {r:?}"),
            Ok(_) => {}
            Err(e) => eprintln!("supervising the servers: {e:#}"),
        }
    }
}

/// Waits until a leader serves and every running member of the cluster has applied what it had
/// logged when it was found.
async fn whole(fleet: &Mutex<Fleet>, http: &reqwest::Client, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let l = faults::leader(fleet, http, within).await?;
    let urls: Vec<(usize, String)> = {
        let f = fleet.lock().await;
        f.members.iter().filter(|m| m.joined && m.child.is_some()).map(|m| (m.index, m.url.clone())).collect()
    };
    let leader_url = &urls.iter().find(|(i, _)| *i == l).context("the leader is gone")?.1;
    let target = fleet::status(http, leader_url).await.and_then(|s| s["last_log_index"].as_u64()).unwrap_or(0);
    for (i, url) in &urls {
        loop {
            let applied = fleet::status(http, url).await.and_then(|s| s["last_applied"].as_u64()).unwrap_or(0);
            if applied >= target {
                break;
            }
            if Instant::now() > deadline {
                bail!("server {} applied only {applied} of {target} entries", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Waits until no job of the run is live (the `convoy_jobs` gauge of the leader).
async fn all_ended(fleet: &Mutex<Fleet>, http: &reqwest::Client, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let l = faults::leader(fleet, http, within).await?;
        let url = fleet.lock().await.members[l].url.clone();
        let live = super::harness::live_jobs(http, &url, QUEUE).await.unwrap_or(u64::MAX);
        if live == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{live} jobs still live after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every job of the run as each member of the cluster holds it.
async fn collect_stored(fleet: &Mutex<Fleet>, http: &reqwest::Client) -> anyhow::Result<Vec<(usize, Vec<StoredJob>)>> {
    let members: Vec<(usize, String)> = {
        let f = fleet.lock().await;
        f.members.iter().filter(|m| m.joined && m.child.is_some()).map(|m| (m.index, m.url.clone())).collect()
    };
    let mut out = Vec::new();
    for (i, url) in members {
        let mut ids = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut path = format!("{url}/v1/jobs?queue={QUEUE}&limit=1000");
            if let Some(a) = &after {
                path.push_str(&format!("&after={a}"));
            }
            let v: Value = http.get(&path).send().await?.error_for_status()?.json().await?;
            ids.extend(v["jobs"].as_array().into_iter().flatten().filter_map(|j| j["id"].as_str().map(str::to_string)));
            match v["next"].as_str() {
                Some(n) => after = Some(n.to_string()),
                None => break,
            }
        }
        let jobs: Vec<anyhow::Result<StoredJob>> = futures::stream::iter(ids)
            .map(|id| {
                let (http, url) = (http.clone(), url.clone());
                async move {
                    let v: Value =
                        http.get(format!("{url}/v1/jobs/{id}")).send().await?.error_for_status()?.json().await?;
                    Ok(stored_job(&v))
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        out.push((i, jobs.into_iter().collect::<anyhow::Result<Vec<_>>>()?));
    }
    Ok(out)
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn epoch_ms(v: &Value) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(v.as_str()?).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}

/// A job as `GET /v1/jobs/{id}` shows it.
fn stored_job(v: &Value) -> StoredJob {
    let text = |v: &Value| v.as_str().map(str::to_string);
    StoredJob {
        id: text(&v["id"]).unwrap_or_default(),
        key: text(&v["annotations"][KEY_ANNOTATION]),
        client_id: text(&v["client_id"]),
        state: text(&v["state"]).unwrap_or_default(),
        runs: v["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| StoredRun {
                run_id: text(&r["run_id"]).unwrap_or_default(),
                leased_ms: epoch_ms(&r["leased_at"]),
                finished_ms: epoch_ms(&r["finished_at"]),
            })
            .collect(),
        events: v["events"].as_array().into_iter().flatten().filter_map(|e| text(&e["kind"])).collect(),
    }
}

/// The runs the agents' journals record.
fn agent_runs(fleet: &Fleet) -> anyhow::Result<Vec<AgentRun>> {
    let mut out = Vec::new();
    for (a, agent) in fleet.agents.iter().enumerate() {
        let path = agent.dir.join("data").join(convoy::agent::runtime::fake::journal::FILE);
        for (run_id, r) in convoy::agent::runtime::fake::journal::read(&path)? {
            out.push(AgentRun {
                agent: a,
                run_id: run_id.to_string(),
                job_id: r.job_id.to_string(),
                start_ms: r.started_ms,
                end_ms: r.ended.map_or(r.ends_at_ms, |(at, _, _)| at),
            });
        }
    }
    Ok(out)
}

/// Median and max of the figures of one fault kind, and how many faults saw no acknowledged
/// write at all.
fn summary(samples: &[Option<f64>]) -> Value {
    let mut got: Vec<f64> = samples.iter().flatten().copied().collect();
    got.sort_by(f64::total_cmp);
    let median = got.get(got.len() / 2).copied();
    json!({"n": samples.len(), "median": median, "max": got.last(), "never": samples.len() - got.len()})
}

/// Prints the figures and judges the run.
#[allow(clippy::too_many_arguments)]
fn report(
    args: &ChaosArgs,
    seed: u64,
    dir: &std::path::Path,
    history: &History,
    unrecovered: &[String],
    restarts: usize,
    partitions: bool,
    disks: bool,
    elapsed: Duration,
) -> anyhow::Result<()> {
    let verdict = convoy::chaos::check(history);
    let figures = convoy::chaos::figures(history);
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &history.faults {
        *by_kind.entry(f.kind.as_str()).or_default() += 1;
    }
    let mut missed = Vec::new();
    let mut first_ack = serde_json::Map::new();
    let mut all = Vec::new();
    for (kind, samples) in &figures.first_ack_s {
        let s = summary(samples);
        if s["never"].as_u64() > Some(0) || s["median"].as_f64() > Some(1.0) || s["max"].as_f64() > Some(3.0) {
            missed.push(format!("failover after {kind}: {s}"));
        }
        all.extend(samples.iter().copied());
        first_ack.insert(kind.clone(), s);
    }
    first_ack.insert("all".into(), summary(&all));
    if figures.longest_majority_wait_s > 3.0 {
        missed.push(format!("a request to the majority side waited {:.2} s", figures.longest_majority_wait_s));
    }
    let correct = verdict.correct() && unrecovered.is_empty();
    let line = json!({
        "bench": "chaos",
        "seed": seed,
        "servers": args.servers,
        "agents": args.agents,
        "clients": args.clients,
        "network_namespaces": partitions,
        "disks": disks,
        "faults": history.faults.len(),
        "faults_by_kind": by_kind,
        "operations": history.ops.len(),
        "acknowledged": verdict.acknowledged,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "double_runs": verdict.double_runs,
        "unfinished": verdict.unfinished,
        "backwards": verdict.backwards,
        "stale_reads": verdict.stale_reads,
        "unrecovered": unrecovered,
        "restarts_after_exit": restarts,
        "first_ack_after_fault_s": first_ack,
        "longest_majority_wait_s": figures.longest_majority_wait_s,
        "longest_majority_wait_at": figures.longest_at,
        "targets_met": correct && missed.is_empty(),
        "missed": missed,
        "violations": verdict.violations,
        "elapsed_s": elapsed.as_secs_f64(),
        "history": (args.dir.is_some() || !correct).then(|| dir.join("history.json")),
    });
    println!("{line}");
    if !correct {
        bail!("the history shows what must never happen (seed {seed}); the run is kept in {}", dir.display());
    }
    if args.strict && !missed.is_empty() {
        bail!("figures missed their targets (seed {seed}): {}", missed.join("; "));
    }
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}
