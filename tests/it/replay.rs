//! `convoy replay` on a real server: a run with several queues, fair-share preemption and a gang
//! replays identically from the live data directory and from a copy of the stopped one; a changed
//! configuration is reported as a difference; `--job` tells a preempted job who took its place.

use crate::common::{Server, config};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn convoy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_convoy")).args(args).env("NO_COLOR", "1").output().expect("convoy runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A job of `cpu` cpus in `class` that runs for an hour on the fake runtime.
fn job(cpu: &str, class: &str) -> Value {
    json!({
        "pod_spec": {"priorityClassName": class,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "annotations": {"convoy.io/fake-runtime": "3600"}
    })
}

/// An agent process, stopped when dropped (a failed assertion leaves no agent behind).
struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gang_member(cpu: &str) -> Value {
    let mut j = job(cpu, "default");
    j["annotations"]["convoy.io/gang-id"] = json!("g1");
    j["annotations"]["convoy.io/gang-cardinality"] = json!("2");
    j
}

/// `convoy replay --data-dir DIR ARGS…`, its lines.
fn replay(dir: &Path, args: &[&str]) -> (bool, String) {
    let dir = dir.display().to_string();
    let mut all = vec!["replay", "--data-dir", dir.as_str()];
    all.extend_from_slice(args);
    let out = convoy(&all);
    (out.status.success(), text(&out))
}

/// The cycle lines of a replay's output.
fn cycle_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("cycle ")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_preemption_and_a_gang_replays_identically() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let mut s = Server::start_in(dir, &config(dir, ""));
    s.ready().await;
    for q in ["A", "B", "C"] {
        s.create_queue(q).await;
    }
    let agent = Agent(s.fake_agent(2, "4", "16Gi"));
    // A fills both nodes with preemptible jobs.
    let a = s.submit("A", "a", (0..8).map(|_| job("1", "preemptible")).collect()).await;
    for id in &a {
        s.wait_job(id, Duration::from_secs(20), "running", |j| j["state"] == "running").await;
    }
    // B's gang and C's job take their fair share back from A.
    let b = s.submit("B", "b", vec![gang_member("2"), gang_member("2")]).await;
    let c = s.submit("C", "c", vec![job("1", "default")]).await;
    for id in b.iter().chain(&c) {
        s.wait_job(id, Duration::from_secs(30), "running", |j| j["state"] == "running").await;
    }
    let mut preempted = None;
    for id in &a {
        let j = s.job(id).await;
        if j["state"] == "preempted" || j["state"] == "queued" {
            preempted = Some(id.clone());
        }
    }
    let preempted = preempted.expect("A lost a job to fair share");

    // On the live data directory: every recorded cycle is identical, preemptions included.
    let data = dir.join("data");
    let (ok, out) = replay(&data, &[]);
    assert!(ok, "{out}");
    let lines = cycle_lines(&out);
    // At least the cycle that leased A's jobs and the one that preempted some for B and C.
    assert!(lines.len() >= 2, "{out}");
    assert!(lines.iter().all(|l| l.ends_with(": identical")), "{out}");
    assert!(out.contains("from the empty state before the log's first entry"), "{out}");

    // --job names who took the preempted job's place.
    let (ok, out) = replay(&data, &["--job", &preempted]);
    assert!(ok, "{out}");
    assert!(out.contains("  outcome: preempted"), "{out}");
    let outcome = out.lines().find(|l| l.starts_with("  outcome: preempted")).expect("an outcome");
    assert!(b.iter().chain(&c).any(|id| outcome.contains(id.as_str())), "{out}");
    assert!(out.contains(&format!("  job {preempted}: running on fake/")), "{out}");
    // In the cycle that placed it, it was queued: each node of its pool has its verdict.
    assert!(out.contains(&format!("  job {preempted}: queued, position ")), "{out}");
    assert!(out.contains("    fake/fake-0 (pool default): "), "{out}");

    // The API and the web UI answer the same from the server's own log.
    let (st, v) = s.get(&format!("/v1/replay?job={preempted}")).await;
    assert_eq!(st, 200, "{v}");
    let cycles = v["cycles"].as_array().expect("cycles");
    assert!(!cycles.is_empty() && cycles.iter().all(|c| c["verdict"] == "identical"), "{v:#}");
    assert!(cycles.iter().any(|c| c["job"]["outcome"].as_str().is_some_and(|o| o.starts_with("preempted"))), "{v:#}");
    assert_eq!(v["differ"], 0, "{v:#}");
    let (_, doc) = s.get("/openapi.json").await;
    let schema = &doc["paths"]["/v1/replay"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    if let Err(e) = convoy::api::check_value(&doc, schema, &v) {
        panic!("the answer does not match the OpenAPI document: {e}\n{v:#}");
    }
    for (query, field) in [("cycle=1&index=2", "cycle"), ("at=yesterday", "at"), ("job=nope", "job")] {
        let (st, v) = s.get(&format!("/v1/replay?{query}")).await;
        assert_eq!((st, &v["field"]), (400, &json!(field)), "{query}: {v}");
    }
    let (st, html) = s.text(&format!("/ui/jobs/{preempted}/replay")).await;
    assert_eq!(st, 200, "{html}");
    assert!(html.contains("data-verdict=\"identical\"") && html.contains("<dd class=\"outcome\">preempted"), "{html}");
    let (_, job_page) = s.text(&format!("/ui/jobs/{preempted}")).await;
    assert!(job_page.contains(&format!("href=\"/ui/jobs/{preempted}/replay\"")), "{job_page}");

    // Another configuration decides otherwise, and replay says where.
    let other = dir.join("other.toml");
    std::fs::write(&other, config(dir, "").replace("[scheduler]", "[scheduler]\nnode_eviction_probability = 0.0"))
        .expect("config");
    let (ok, out) = replay(&data, &["--config", &other.display().to_string()]);
    assert!(!ok, "{out}");
    assert!(lines_with(&out, ": differs: ") >= 1, "{out}");
    assert!(out.contains("under --config (hash "), "{out}");

    // A copy of the stopped server's directory replays the same.
    drop(agent);
    assert_eq!(s.terminate(), Some(0), "{}", s.log());
    let copy = dir.join("copy");
    copy_dir(&data, &copy);
    let (ok, out_copy) = replay(&copy, &[]);
    assert!(ok, "{out_copy}");
    assert!(cycle_lines(&out_copy).len() >= lines.len(), "{out_copy}");
    // One cycle by its number, and by its index.
    let first = cycle_lines(&out_copy)[0].to_string();
    let index = first.split(' ').nth(3).expect("index").to_string();
    let (ok, out) = replay(&copy, &["--cycle", "1"]);
    assert!(ok && cycle_lines(&out).len() == 1 && cycle_lines(&out)[0] == first, "{out}\n{first}");
    let (ok, out) = replay(&copy, &["--index", &index]);
    assert!(ok && cycle_lines(&out) == vec![first.as_str()], "{out}");
}

fn lines_with(out: &str, what: &str) -> usize {
    out.lines().filter(|l| l.contains(what)).count()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycles_after_a_snapshot_replay_from_it_and_bad_selectors_are_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    // Snapshots every 20 entries, and a short log behind them: replay starts from a snapshot.
    let text = config(dir, "")
        .replace("[scheduler]", "[cluster]\nsnapshot_every_entries = 20\nlog_entries_kept = 2\n\n[scheduler]");
    let s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("A").await;
    let agent = Agent(s.fake_agent(1, "64", "256Gi"));
    // Rounds of one job each until a cycle follows a snapshot (the log before it is gone).
    let data = dir.join("data");
    let mut out = String::new();
    for round in 0..40 {
        let ids = s.submit("A", &format!("s{round}"), vec![job("1", "default")]).await;
        s.wait_job(&ids[0], Duration::from_secs(20), "running", |j| j["state"] == "running").await;
        out = replay(&data, &[]).1;
        if out.contains(", from the snapshot at index ") && out.contains(": identical") {
            break;
        }
    }
    assert!(out.contains(", from the snapshot at index "), "{out}");
    assert!(cycle_lines(&out).iter().any(|l| l.ends_with(": identical")), "{out}");
    // Cycles that read a state older than the snapshot are named as such, none differs.
    assert!(!out.contains(": differs: "), "{out}");
    assert!(
        cycle_lines(&out).iter().all(|l| l.ends_with(": identical") || l.contains("older than the oldest snapshot")),
        "{out}"
    );
    drop(agent);

    let (ok, out) = replay(&data, &["--at", "25:00"]);
    assert!(!ok && out.contains("--at 25:00"), "{out}");
    let (ok, out) = replay(&data, &["--job", "not-an-id"]);
    assert!(!ok && out.contains("--job not-an-id"), "{out}");
    let (ok, out) = replay(&dir.join("nowhere"), &[]);
    assert!(!ok && out.contains("does not exist"), "{out}");
    let (ok, out) = replay(&data, &["--cycle", "999999"]);
    assert!(!ok && out.contains("no recorded cycle matches"), "{out}");
}

/// The `.snap` files in `dir`.
fn snap_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|l| l.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "snap")).count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_retention_keeps_older_snapshots_and_the_log_behind_them() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let text = config(dir, "").replace(
        "[scheduler]",
        "[cluster]\nsnapshot_every_entries = 20\nlog_entries_kept = 2\nreplay_retention = \"3s\"\n\n[scheduler]",
    );
    let s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("A").await;
    let agent = Agent(s.fake_agent(1, "64", "256Gi"));
    let data = dir.join("data");
    let bases = data.join("snapshots").join("replay");
    let mut round = 0;
    let mut rounds = |n: usize| {
        let start = round;
        round += n;
        start..round
    };
    for r in rounds(12) {
        let ids = s.submit("A", &format!("s{r}"), vec![job("1", "default")]).await;
        s.wait_job(&ids[0], Duration::from_secs(20), "running", |j| j["state"] == "running").await;
    }
    // Within the window nothing is purged: every cycle replays from the log's first entry, and
    // the snapshots that newer ones replaced are kept.
    let (ok, out) = replay(&data, &[]);
    assert!(ok, "{out}");
    assert!(out.contains("from the empty state before the log's first entry"), "{out}");
    assert!(cycle_lines(&out).len() >= 12, "{out}");
    assert!(snap_files(&bases) >= 1, "no replay base kept: {out}");

    // Past the window the log is purged up to the newest base written before it, and replay
    // starts there.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for r in rounds(12) {
        let ids = s.submit("A", &format!("s{r}"), vec![job("1", "default")]).await;
        s.wait_job(&ids[0], Duration::from_secs(20), "running", |j| j["state"] == "running").await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let out = loop {
        let (_, out) = replay(&data, &[]);
        if out.contains(", from the snapshot at index ") || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(out.contains(", from the snapshot at index "), "{out}");
    assert!(!out.contains(": differs: "), "{out}");
    assert!(cycle_lines(&out).iter().filter(|l| l.ends_with(": identical")).count() >= 12, "{out}");
    drop(agent);
}
