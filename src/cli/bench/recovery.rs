//! `convoy bench recovery`: writes a database holding N jobs (half queued, half finished; or with
//! `--finished`, all run to success), then measures how long a `convoy server` takes to become
//! ready on it, how much memory it holds, how many bytes of database each job takes, and how fast
//! retention purges the finished ones.

use super::harness::{BenchServer, StoreArgs, config, percentile, tenths};
use super::submit::tempfile_dir;
use convoy::model::{
    ExecutorName, JobId, JobPayload, JobSetName, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName,
    Resources, RunId, SchedulingRequirements,
};
use convoy::record::{FrameSink, NodeRecord};
use convoy::scheduler::SchedulerConfig;
use convoy::server::PURGE_BATCH;
use convoy::state::{
    ApplyContext, Command, FaultedRunReport, NamespacedJob, NewJob, NewLease, PodRunReport, QuarantinePolicyRecord,
    Response, RunReport, RunReportKind, State, StateSettings, UsageRunReport,
};
use convoy::store::{Store, write_changes};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Arguments of `convoy bench recovery`.
#[derive(clap::Args, Debug)]
pub(crate) struct RecoveryArgs {
    /// Jobs stored (half stay queued, half are cancelled).
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// Queues they are spread over.
    #[arg(long, default_value_t = 10)]
    queues: u64,
    /// Every job runs to success (a run, five events, a client id and a line of output) and none
    /// stays queued: the database then holds finished jobs only, as retention keeps them.
    #[arg(long)]
    finished: bool,
    /// Jobs per submission (and per scheduling decision and run report with `--finished`); 20
    /// commands per write transaction. Smaller batches spread events over more chunks.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
    /// Queued jobs then cancelled one per request (16 clients), picked at random across the
    /// store: writes whose rows lie on pages the last writes did not touch, which is what the
    /// database's page cache (`--db-cache-mb`) is for. 0 skips the phase.
    #[arg(long, default_value_t = 20_000)]
    scattered_cancels: u64,
    #[command(flatten)]
    store: StoreArgs,
}

/// The executor the finished jobs run on.
fn executor() -> ExecutorName {
    ExecutorName::new("bench").expect("valid")
}

/// One node big enough for every job (leases must name a known node).
fn big_node() -> NodeRecord {
    NodeRecord::from(Node {
        name: NodeName::new("n1").expect("valid"),
        executor: executor(),
        pool: PoolName::default_pool(),
        labels: Default::default(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "100000000"), ("memory", "100000Ti")]).expect("valid"),
        unallocatable: Resources::new(),
        unschedulable: false,
    })
}

/// The commands that run `ids` to success, as an executor reporting them would.
fn run_to_success(ids: &[JobId], at_ms: i64) -> Vec<Command> {
    let run = |id: &JobId| RunId::from_u128(id.as_u128());
    let leases = ids
        .iter()
        .map(|id| NewLease {
            job_id: *id,
            run_id: run(id),
            executor: executor(),
            node: NodeName::new("n1").expect("valid"),
            pool: PoolName::default_pool(),
        })
        .collect();
    let report = |id: &JobId, kind| RunReport {
        run_id: run(id),
        job_id: *id,
        kind,
        time_ms: Some(at_ms),
        exit_code: (kind == RunReportKind::Succeeded).then_some(0),
        reason: None,
        message: None,
        log_tail: (kind == RunReportKind::Succeeded).then(|| format!("job {id} done\n")),
    };
    // Plain reports: no node to blame, no pod, no usage.
    let events = |kind| {
        ids.iter()
            .map(|id| UsageRunReport {
                event: PodRunReport {
                    event: FaultedRunReport { report: report(id, kind), node_fault: None },
                    pod: None,
                },
                usage: None,
            })
            .collect()
    };
    let quarantine_off = QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 };
    let inputs = convoy::record::ScheduleInputsRecord {
        cycle: 1,
        seed: 1,
        snapshot_index: 1,
        config_hash: convoy::record::config_hash(&Default::default()),
        scheduler_version: convoy::scheduler::SCHEDULER_VERSION,
        rate_limits: None,
    };
    vec![
        // As a leader records a cycle: with what it ran on, for replay.
        Command::Schedule { term: 0, at_ms, leases, preemptions: vec![], failures: vec![], inputs: Some(inputs) },
        Command::RunEvents {
            executor: executor(),
            at_ms: at_ms + 1,
            events: events(RunReportKind::Running),
            max_attempted_runs: 1,
            quarantine: quarantine_off,
        },
        Command::RunEvents {
            executor: executor(),
            at_ms: at_ms + 2,
            events: events(RunReportKind::Succeeded),
            max_attempted_runs: 1,
            quarantine: quarantine_off,
        },
    ]
}

/// The id of the workload's job number `i`.
fn job_id(i: u64) -> JobId {
    JobId::from_parts(1_700_000_000_000 + i / 1000, u128::from(i))
}

/// The queue the workload's job number `i` goes to, with `batch` jobs per submission.
fn queue_of(i: u64, batch: u64, queues: u64) -> String {
    format!("q{}", (i / batch) % queues)
}

fn new_job(i: u64, finished: bool) -> NewJob {
    let pod = json!({"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", format!("echo {i}")],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]});
    NewJob {
        id: job_id(i),
        client_id: finished.then(|| format!("bench-client-{i:012}")),
        priority: 0,
        priority_class: PriorityClassName::new("default").expect("valid"),
        requirements: SchedulingRequirements {
            requests: Resources::parse([("cpu", "100m"), ("memory", "64Mi")]).expect("valid"),
            ..Default::default()
        }
        .into(),
        gang: None,
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_ms: 1000,
        active_deadline_seconds: 3600,
        payload: JobPayload { pod_spec: pod.to_string(), services: vec![], ingresses: vec![] }.into(),
    }
}

/// What [`populate_with`] writes.
pub(super) struct Workload {
    /// Jobs stored.
    pub jobs: u64,
    /// Queues they are spread over.
    pub queues: u64,
    /// All jobs run to success (else half stay queued and half are cancelled).
    pub finished: bool,
    /// Jobs per submission (and per scheduling decision and run report).
    pub batch: u64,
}

/// Writes a state database at `path` holding `jobs` jobs spread over `queues` queues, as a
/// server applying their submissions would (half of them then cancelled, so half are history).
pub(super) fn populate(path: &Path, count: u64, queues: u64) -> anyhow::Result<()> {
    populate_with(path, &Workload { jobs: count, queues, finished: false, batch: 1000 })
}

/// Writes a state database at `path` holding the workload `w`, as a server applying its
/// commands would, 20 commands per write transaction.
pub(super) fn populate_with(path: &Path, w: &Workload) -> anyhow::Result<()> {
    let store = Store::open(path)?;
    let mut state = State::new(StateSettings::from_config(&SchedulerConfig::default()));
    let set = JobSetName::new("bench").expect("valid");
    let mut cmds = Vec::new();
    for q in 0..w.queues {
        cmds.push(Command::create_queue(Queue::new(QueueName::new(&format!("q{q}")).expect("valid"), 1.0)));
    }
    if w.finished {
        cmds.push(Command::UpsertExecutor { executor: executor(), nodes: vec![big_node()], at_ms: 0 });
    }
    let batch = w.batch.max(1);
    let mut i = 0;
    while i < w.jobs {
        let n = batch.min(w.jobs - i);
        let queue = QueueName::new(&queue_of(i, batch, w.queues)).expect("valid");
        let jobs: Vec<NamespacedJob> =
            (i..i + n).map(|i| NamespacedJob { job: new_job(i, w.finished), namespace: None }).collect();
        let ids: Vec<JobId> = jobs.iter().map(|j| j.job.id).collect();
        // No owner: the stored jobs are the same as those of the benchmark's earlier runs.
        let jobs = jobs.into_iter().map(Into::into).collect();
        cmds.push(Command::Submit { queue: queue.clone(), job_set: set.clone(), at_ms: 0, owner: None, jobs });
        if w.finished {
            cmds.extend(run_to_success(&ids, 0));
        } else {
            // Every other job ends (cancelled) so half the stored jobs are history.
            let ended: Vec<JobId> = ids.iter().step_by(2).copied().collect();
            cmds.push(Command::Cancel {
                queue,
                job_set: set.clone(),
                job_ids: Some(ended),
                states: None,
                reason: "bench".into(),
                at_ms: 0,
            });
        }
        i += n;
        if cmds.len() >= 20 {
            let tx = store.write()?;
            for c in cmds.drain(..) {
                write_changes(&tx, &state.apply(c, ApplyContext::default()).changes)?;
            }
            tx.commit()?;
        }
    }
    let tx = store.write()?;
    for c in cmds.drain(..) {
        write_changes(&tx, &state.apply(c, ApplyContext::default()).changes)?;
    }
    tx.commit()?;
    Ok(())
}

/// Counts the bytes of the frames of a snapshot stream (as a snapshot file holds them: each
/// frame and its length) without keeping them.
#[derive(Default)]
struct CountBytes(u64);

impl FrameSink for CountBytes {
    fn frame(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0 += 4 + bytes.len() as u64;
        Ok(())
    }
}

pub(super) fn run(args: RecoveryArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.queues >= 1, "--queues must be at least 1");
    let tmp = tempfile_dir()?;
    let data = tmp.join("data");
    let t = Instant::now();
    let workload = Workload { jobs: args.jobs, queues: args.queues, finished: args.finished, batch: args.batch };
    populate_with(&data.join("convoy.redb"), &workload)?;
    let build_s = t.elapsed().as_secs_f64();
    let (db_used, snapshot_bytes) = {
        let store = Store::open(&data.join("convoy.redb"))?;
        // A Raft snapshot holds every state table (a file in `snapshots/`, sent whole to a
        // member that lags).
        let mut count = CountBytes::default();
        store.pin_export()?.write_rows(&mut count)?;
        (used_bytes(&store)?, count.0)
    };
    let db_bytes = std::fs::metadata(data.join("convoy.redb")).map(|m| m.len()).unwrap_or(0);
    let mb = |bytes: u64| (bytes as f64 / (1 << 20) as f64).round();
    // The jobs finished at time 0: a retention of a century keeps them while the server runs.
    let keep = &format!("job_retention = \"36500days\"\n{}", args.store.server_lines());

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (restart_s, rss_mb, empty_rss_mb, cancels) = rt.block_on(async {
        let http = reqwest::Client::new();
        // An empty server, for the baseline memory.
        let empty_dir = tmp.join("empty");
        std::fs::create_dir_all(&empty_dir)?;
        let empty = BenchServer::start(&empty_dir, &config(&empty_dir, keep))?;
        empty.ready(&http).await?;
        let empty_rss = empty.rss_mb();
        drop(empty);
        let server = BenchServer::start(&tmp, &config(&tmp, keep))?;
        let ready = server.ready(&http).await?;
        // Let the first scheduling cycle over the queued jobs run before measuring memory.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let rss = server.rss_mb();
        let cancels = if args.finished { None } else { Some(scattered_cancels(&server, &args).await?) };
        anyhow::Ok((ready.as_secs_f64(), rss, empty_rss, cancels))
    })?;
    let queued = if args.finished { 0 } else { args.jobs / 2 };
    let per_job = (queued > 0).then(|| ((rss_mb - empty_rss_mb) * 1024.0 * 1024.0 / queued as f64).round());
    let purge = purge_all(&data.join("convoy.redb"))?;
    println!(
        "{}",
        json!({
            "jobs": args.jobs,
            "queued": queued,
            "db_mb": mb(db_bytes),
            "db_used_mb": mb(db_used),
            "db_bytes_per_job": (db_used as f64 / args.jobs.max(1) as f64).round(),
            "snapshot_bytes_per_job": (snapshot_bytes as f64 / args.jobs.max(1) as f64).round(),
            "build_s": tenths(build_s),
            "restart_s": (restart_s * 100.0).round() / 100.0,
            "rss_mb": rss_mb.round(),
            "empty_rss_mb": empty_rss_mb.round(),
            "rss_bytes_per_queued_job": per_job,
            "purged": purge.jobs,
            "purge_jobs_per_s": (purge.jobs as f64 / purge.total.as_secs_f64().max(1e-9)).round(),
            "purge_batch_ms_max": (purge.slowest.as_secs_f64() * 10_000.0).round() / 10.0,
            "db_mb_after_purge": mb(purge.db_bytes_after),
            "db_used_mb_after_purge": mb(purge.db_used_after),
            "db_cache_mb": args.store.db_cache_mb,
            "scattered_cancels_per_sec": cancels.as_ref().map(|c| c.per_sec.round()),
            "scattered_cancel_p50_ms": cancels.as_ref().map(|c| c.p50_ms),
            "scattered_cancel_p99_ms": cancels.as_ref().map(|c| c.p99_ms),
            "scattered_cancel_server_cpu_us": cancels.as_ref().map(|c| c.cpu_us.round()),
        })
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// What cancelling queued jobs picked across the store took.
struct CancelFigures {
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Server CPU per cancelled job.
    cpu_us: f64,
}

/// Cancels `--scattered-cancels` queued jobs (odd-numbered in [`populate_with`]'s numbering),
/// picked by a seeded generator, one per request from 16 clients.
async fn scattered_cancels(server: &BenchServer, args: &RecoveryArgs) -> anyhow::Result<CancelFigures> {
    use rand_core::Rng;
    let queued = args.jobs / 2;
    let want = args.scattered_cancels.min(queued);
    let mut rng = rand_pcg::Pcg64Mcg::new(0x5eed);
    let mut picked = std::collections::BTreeSet::new();
    while (picked.len() as u64) < want {
        picked.insert(2 * (rng.next_u64() % queued) + 1);
    }
    let mut order: Vec<u64> = picked.into_iter().collect();
    // Visit in a random order too, not the ids' order.
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let order = std::sync::Arc::new(order);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let http = reqwest::Client::builder().pool_max_idle_per_host(16).build()?;
    let cpu0 = server.cpu_time();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (http, order, next, url, batch, queues) =
            (http.clone(), order.clone(), next.clone(), server.url.clone(), args.batch.max(1), args.queues);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&i) = order.get(n) else { break };
                let body = json!({
                    "queue": queue_of(i, batch, queues),
                    "job_set": "bench",
                    "job_ids": [job_id(i)],
                    "reason": "bench",
                });
                let t = Instant::now();
                let r = http.post(format!("{url}/v1/jobs/cancel")).json(&body).send().await?;
                anyhow::ensure!(r.status().is_success(), "cancelling job {i}: {}", r.status());
                let _ = r.bytes().await;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    let wall = start.elapsed();
    let cpu = server.cpu_time().saturating_sub(cpu0);
    lat.sort();
    Ok(CancelFigures {
        per_sec: lat.len() as f64 / wall.as_secs_f64().max(1e-9),
        p50_ms: tenths(percentile(&lat, 50.0)),
        p99_ms: tenths(percentile(&lat, 99.0)),
        cpu_us: cpu.as_secs_f64() * 1e6 / lat.len().max(1) as f64,
    })
}

/// What purging every finished job took.
struct PurgeFigures {
    jobs: usize,
    total: Duration,
    slowest: Duration,
    db_bytes_after: u64,
    db_used_after: u64,
}

/// Bytes of the database in use: its allocated pages, without the free space of the file.
fn used_bytes(store: &Store) -> anyhow::Result<u64> {
    let tx = store.write()?;
    let stats = tx.stats()?;
    tx.abort()?;
    Ok(stats.allocated_pages() * stats.page_size() as u64)
}

/// Purges every finished job of the database at `path` as the leader's retention loop would
/// (plan, apply, write; `PURGE_BATCH` jobs at a time, durable once a second), timing it.
fn purge_all(path: &Path) -> anyhow::Result<PurgeFigures> {
    let store = Store::open(path)?;
    let mut state = store.load_state(StateSettings::from_config(&SchedulerConfig::default()))?;
    let mut figures =
        PurgeFigures { jobs: 0, total: Duration::ZERO, slowest: Duration::ZERO, db_bytes_after: 0, db_used_after: 0 };
    let mut last_durable = Instant::now();
    loop {
        let t = Instant::now();
        let plan = store.purge_plan(i64::MAX, PURGE_BATCH)?;
        let full = plan.jobs.len() >= PURGE_BATCH;
        let mut tx = store.write()?;
        if last_durable.elapsed() < Duration::from_secs(1) {
            tx.set_durability(redb::Durability::None)?;
        } else {
            last_durable = Instant::now();
        }
        let cmd = Command::PurgeFinished { purges: plan.purges, before_ms: i64::MAX, jobs: plan.jobs };
        let applied = state.apply(cmd, ApplyContext::default());
        write_changes(&tx, &applied.changes)?;
        tx.commit()?;
        let took = t.elapsed();
        figures.total += took;
        figures.slowest = figures.slowest.max(took);
        match applied.response {
            Some(Response::JobIds(ids)) => figures.jobs += ids.len(),
            other => anyhow::bail!("purge refused: {other:?}"),
        }
        if !full {
            break;
        }
    }
    let tx = store.write()?;
    tx.commit()?;
    figures.db_used_after = used_bytes(&store)?;
    drop(store);
    figures.db_bytes_after = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(figures)
}
