//! `convoy bench recovery`: writes a database holding N jobs (half queued, half finished), then
//! measures how long a `convoy server` takes to become ready on it and how much memory it holds.

use super::harness::{BenchServer, config};
use super::submit::tempfile_dir;
use convoy::model::{
    JobId, JobPayload, JobSetName, PriorityClassName, Queue, QueueName, Resources, SchedulingRequirements,
};
use convoy::scheduler::SchedulerConfig;
use convoy::state::{ApplyContext, Command, NewJob, State, StateSettings};
use convoy::store::{Store, write_changes};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// Arguments of `convoy bench recovery`.
#[derive(clap::Args, Debug)]
pub(crate) struct RecoveryArgs {
    /// Jobs stored (half stay queued, half are cancelled).
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// Queues they are spread over.
    #[arg(long, default_value_t = 10)]
    queues: u64,
}

fn new_job(i: u64) -> NewJob {
    let pod = json!({"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", format!("echo {i}")],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]});
    NewJob {
        id: JobId::from_parts(1_700_000_000_000 + i / 1000, u128::from(i)),
        client_id: None,
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

/// Writes a state database at `path` holding `jobs` jobs spread over `queues` queues, as a
/// server applying their submissions would (half of them then cancelled, so half are history).
pub(super) fn populate(path: &Path, count: u64, queues: u64) -> anyhow::Result<()> {
    let store = Store::open(path)?;
    let mut state = State::new(StateSettings::from_config(&SchedulerConfig::default()));
    let set = JobSetName::new("bench").expect("valid");
    let mut cmds = Vec::new();
    for q in 0..queues {
        cmds.push(Command::CreateQueue {
            queue: Queue::new(QueueName::new(&format!("q{q}")).expect("valid"), 1.0).into(),
        });
    }
    let batch = 1000u64;
    let mut i = 0;
    while i < count {
        let n = batch.min(count - i);
        let queue = QueueName::new(&format!("q{}", (i / batch) % queues)).expect("valid");
        let jobs: Vec<NewJob> = (i..i + n).map(new_job).collect();
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        cmds.push(Command::Submit { queue: queue.clone(), job_set: set.clone(), at_ms: 0, jobs });
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

pub(super) fn run(args: RecoveryArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.queues >= 1, "--queues must be at least 1");
    let tmp = tempfile_dir()?;
    let data = tmp.join("data");
    let t = Instant::now();
    populate(&data.join("convoy.redb"), args.jobs, args.queues)?;
    let build_s = t.elapsed().as_secs_f64();
    let db_mb = std::fs::metadata(data.join("convoy.redb")).map(|m| m.len() as f64 / (1 << 20) as f64).unwrap_or(0.0);

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (restart_s, rss_mb, empty_rss_mb) = rt.block_on(async {
        let http = reqwest::Client::new();
        // An empty server, for the baseline memory.
        let empty_dir = tmp.join("empty");
        std::fs::create_dir_all(&empty_dir)?;
        let empty = BenchServer::start(&empty_dir, &config(&empty_dir, ""))?;
        empty.ready(&http).await?;
        let empty_rss = empty.rss_mb();
        drop(empty);
        let server = BenchServer::start(&tmp, &config(&tmp, ""))?;
        let ready = server.ready(&http).await?;
        // Let the first scheduling cycle over the queued jobs run before measuring memory.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let rss = server.rss_mb();
        anyhow::Ok((ready.as_secs_f64(), rss, empty_rss))
    })?;
    let queued = args.jobs / 2;
    let per_job = (rss_mb - empty_rss_mb) * 1024.0 * 1024.0 / queued.max(1) as f64;
    println!(
        "{}",
        json!({
            "jobs": args.jobs,
            "queued": queued,
            "db_mb": db_mb.round(),
            "build_s": (build_s * 10.0).round() / 10.0,
            "restart_s": (restart_s * 100.0).round() / 100.0,
            "rss_mb": rss_mb.round(),
            "empty_rss_mb": empty_rss_mb.round(),
            "rss_bytes_per_queued_job": per_job.round(),
        })
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
