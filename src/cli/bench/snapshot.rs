//! `convoy bench snapshot`: writes a state database holding N jobs (as `bench recovery` does),
//! then measures building a Raft snapshot file of it and installing that file into an empty
//! database, with the code a server runs for them (the store's export and staged import, the
//! snapshot file format). Each phase runs in a child process of its own (this binary, with a
//! hidden `--phase`), so that each peak RSS is that phase's alone and not the populating's.
//!
//! Installing is what the last chunk RPC of a snapshot transfer waits for, so `install_s` is
//! printed beside the Raft timeout of that RPC (`install_snapshot_timeout_s`).

use super::harness::{StoreArgs, tenths};
use super::peak_rss_mb;
use super::recovery::populate;
use super::submit::tempfile_dir;
use anyhow::Context;
use convoy::raft::{LogId, RaftSettings, SnapshotMeta};
use convoy::raft::{SnapshotReader, SnapshotWriter};
use convoy::record::encode;
use convoy::record::raft::LogIdRecord;
use convoy::scheduler::SchedulerConfig;
use convoy::state::StateSettings;
use convoy::store::RAFT_APPLIED;
use convoy::store::{IMPORT_ROWS_PER_TX, Store};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Arguments of `convoy bench snapshot`.
#[derive(clap::Args, Debug)]
pub(crate) struct SnapshotArgs {
    /// Jobs stored (half stay queued, half are cancelled).
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// Queues they are spread over.
    #[arg(long, default_value_t = 10)]
    queues: u64,
    /// Run one phase in this process and print its figures (how the benchmark runs its phases).
    #[arg(long, hide = true, value_enum)]
    phase: Option<Phase>,
    /// The benchmark's scratch directory (with `--phase`).
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    /// redb's page cache of both databases, as a server's `db_cache_mb` sets it.
    #[command(flatten)]
    store: StoreArgs,
}

/// A phase of the benchmark.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Phase {
    /// Write the snapshot file of `<dir>/src/convoy.redb` to `<dir>/state.snap`.
    Build,
    /// Install `<dir>/state.snap` into a new `<dir>/dst/convoy.redb` and load the state.
    Install,
}

/// The meta the benchmark's snapshot carries.
fn meta(jobs: u64) -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), jobs)),
        last_membership: Default::default(),
        snapshot_id: format!("1-1-{jobs}-bench"),
    }
}

fn build(dir: &Path, jobs: u64, cache_mb: usize) -> anyhow::Result<Value> {
    let store = Store::open_with_cache(&dir.join("src/convoy.redb"), cache_mb << 20)?;
    let t = Instant::now();
    let view = store.pin_export()?;
    let mut w = SnapshotWriter::create(&dir.join("state.snap"), &meta(jobs))?;
    let rows = view.write_rows(&mut w)?;
    let done = w.finish()?;
    Ok(json!({
        "build_s": t.elapsed().as_secs_f64(),
        "rows": rows,
        "bytes": done.bytes,
        "build_peak_rss_mb": peak_rss_mb(),
    }))
}

fn install(dir: &Path, jobs: u64, cache_mb: usize) -> anyhow::Result<Value> {
    let store = Store::open_with_cache(&dir.join("dst/convoy.redb"), cache_mb << 20)?;
    let t = Instant::now();
    let mut reader = SnapshotReader::open(&dir.join("state.snap"))?;
    let applied = encode(&reader.meta().last_log_id.map(LogIdRecord::from))?;
    let stats = store.import_stream(&mut reader, &[(RAFT_APPLIED, applied)], IMPORT_ROWS_PER_TX)?;
    let import_s = t.elapsed().as_secs_f64();
    let import_rss = peak_rss_mb();
    let state = store.load_state(StateSettings::from_config(&SchedulerConfig::default()))?;
    let install_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(state.live_jobs() as u64 == jobs / 2, "{} live jobs after the install", state.live_jobs());
    Ok(json!({
        "import_s": import_s,
        "load_s": install_s - import_s,
        "install_s": install_s,
        "import_transactions": stats.transactions,
        "import_peak_rss_mb": import_rss,
        "install_peak_rss_mb": peak_rss_mb(),
    }))
}

/// Runs `phase` in a child process and returns the JSON it printed.
fn child(dir: &Path, args: &SnapshotArgs, phase: &str) -> anyhow::Result<Value> {
    let exe = std::env::current_exe().context("locating the convoy binary")?;
    let out = Command::new(exe)
        .args(["bench", "snapshot", "--phase", phase, "--jobs", &args.jobs.to_string()])
        .args(["--db-cache-mb", &args.store.db_cache_mb.to_string(), "--dir"])
        .arg(dir)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running the {phase} phase"))?;
    anyhow::ensure!(out.status.success(), "the {phase} phase failed ({})", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("the {phase} phase printed {line:?}"))
}

fn round(v: &Value, scale: f64) -> Value {
    v.as_f64().map_or(Value::Null, |x| json!((x * scale).round() / scale))
}

pub(super) fn run(args: SnapshotArgs) -> anyhow::Result<()> {
    if let Some(phase) = args.phase {
        let dir = args.dir.as_deref().context("--phase needs --dir")?;
        let figures = match phase {
            Phase::Build => build(dir, args.jobs, args.store.db_cache_mb)?,
            Phase::Install => install(dir, args.jobs, args.store.db_cache_mb)?,
        };
        println!("{figures}");
        return Ok(());
    }
    anyhow::ensure!(args.queues >= 1, "--queues must be at least 1");
    let tmp = tempfile_dir()?;
    let t = Instant::now();
    populate(&tmp.join("src/convoy.redb"), args.jobs, args.queues)?;
    let populate_s = t.elapsed().as_secs_f64();
    let db_mb = std::fs::metadata(tmp.join("src/convoy.redb")).map(|m| m.len() as f64 / (1 << 20) as f64)?;
    let b = child(&tmp, &args, "build")?;
    let i = child(&tmp, &args, "install")?;
    let timeout = RaftSettings::default().install_snapshot_timeout.as_secs_f64();
    println!(
        "{}",
        json!({
            "jobs": args.jobs,
            "populate_s": tenths(populate_s),
            "db_mb": db_mb.round(),
            "rows": b["rows"],
            "bytes": b["bytes"],
            "snapshot_mb": round(&json!(b["bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64), 1.0),
            "build_s": round(&b["build_s"], 100.0),
            "build_peak_rss_mb": round(&b["build_peak_rss_mb"], 1.0),
            "import_s": round(&i["import_s"], 100.0),
            "load_s": round(&i["load_s"], 100.0),
            "install_s": round(&i["install_s"], 100.0),
            "import_transactions": i["import_transactions"],
            "import_peak_rss_mb": round(&i["import_peak_rss_mb"], 1.0),
            "peak_rss_mb": round(&i["install_peak_rss_mb"], 1.0),
            "install_snapshot_timeout_s": timeout,
            "db_cache_mb": args.store.db_cache_mb,
        })
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
