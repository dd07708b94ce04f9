//! A data directory that fills up: writes are refused with 507 before Raft could fail on the
//! disk (which would stop it for good), reads, leases and run reports go on, `/readyz` says 503,
//! and everything resumes by itself when space returns, with nothing acknowledged lost. A leader
//! of three whose disk runs low hands the leadership over. Each server's data directory is a
//! small tmpfs of its own (root: mount).

use crate::common::root::{Tmpfs, root_or_skip};
use crate::common::trio::Trio;
use crate::common::{Server, config, job, node};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Every server's reserve in these tests.
const RESERVE: &str = "disk_reserve = \"8Mi\"\n";

/// A submission of `n` jobs, each carrying about 2 KB of annotations, with client ids.
fn bulky(tag: &str, n: usize) -> Value {
    let jobs: Vec<Value> = (0..n)
        .map(|i| {
            let mut j = job("100m");
            j["client_id"] = json!(format!("{tag}-{i}"));
            j["annotations"] = json!({"padding": "x".repeat(2000)});
            j
        })
        .collect();
    json!({"queue": "A", "job_set": "s", "jobs": jobs})
}

/// Three servers, each with its data directory on a 48 MB tmpfs of its own.
async fn trio_on_tmpfs() -> (Trio, Vec<Tmpfs>) {
    let mut trio = Trio::prepare(3, false, RESERVE, "").await;
    let disks: Vec<Tmpfs> = trio.members.iter().map(|m| Tmpfs::mount(&m.dir.join("data"), "48m")).collect();
    trio.start_all();
    (trio, disks)
}

/// The free bytes the server last read (`convoy_data_dir_free_bytes`).
async fn free_seen(server: &Server) -> u64 {
    let (_, text) = server.text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix("convoy_data_dir_free_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("convoy_data_dir_free_bytes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_directory_refuses_writes_with_507_keeps_serving_and_resumes_when_space_returns() {
    if !root_or_skip("the full-disk test") {
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().to_path_buf();
    let fs = Tmpfs::mount(&dir.join("data"), "48m");
    let cfg = config(&dir, RESERVE);
    let mut server = Server::start_in(&dir, &cfg);
    server.ready().await;
    server.create_queue("A").await;

    // Leave a little room above the reserve, then submit until the server refuses.
    fs.fill_until("filler", 8 * MIB + 3 * MIB);
    let mut acked: Vec<String> = Vec::new();
    let refusal = loop {
        let (s, v) = server.post("/v1/jobs", &bulky(&format!("b{}", acked.len()), 50)).await;
        match s {
            200 => acked.extend(v["job_ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_string())),
            507 => break v,
            _ => panic!("a submission on a filling disk got {s}: {v}"),
        }
        assert!(acked.len() < 100_000, "the disk never filled");
    };
    assert!(!acked.is_empty());
    let detail = refusal["detail"].as_str().unwrap_or_default();
    let data = dir.join("data").display().to_string();
    assert!(detail.contains(&data) && detail.contains("server.disk_reserve"), "{detail}");
    assert!(detail.contains("nothing was stored"), "{detail}");

    // Not ready, but reading, leasing and reporting go on.
    let (s, v) = server.get("/readyz").await;
    assert_eq!(s, 503, "{v}");
    assert!(v["detail"].as_str().unwrap_or_default().contains("disk_reserve"), "{v}");
    let (s, j) = server.get(&format!("/v1/jobs/{}", acked[0])).await;
    assert_eq!(s, 200, "{j}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let lease = loop {
        let body = json!({"nodes": [node("n1", "4")], "runs": [], "wait_seconds": 0.5});
        let (s, v) = server.post("/v1/executors/e1/lease", &body).await;
        assert_eq!(s, 200, "a lease poll on a low disk: {v}");
        if let Some(l) = v["leases"].as_array().and_then(|l| l.first()) {
            break l.clone();
        }
        assert!(Instant::now() < deadline, "nothing was leased while the disk was low");
    };
    let report = json!({"events": [{"run_id": lease["run_id"], "job_id": lease["job_id"], "kind": "succeeded", "time_ms": 0, "exit_code": 0}]});
    let (s, v) = server.post("/v1/executors/e1/events", &report).await;
    assert_eq!(s, 200, "a run report on a low disk: {v}");
    let (s, text) = server.text("/metrics").await;
    assert_eq!(s, 200);
    assert!(text.contains("convoy_data_dir_free_bytes "), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("convoy_writes_refused_for_disk_total ") && !l.ends_with(" 0")),
        "{text}"
    );

    // Nearly full: every write is refused, a cancel too, once the server has seen it.
    fs.fill_until("filler", MIB);
    let deadline = Instant::now() + Duration::from_secs(20);
    while free_seen(&server).await > 2 * MIB {
        assert!(Instant::now() < deadline, "the server did not see the disk fill");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancel = json!({"queue": "A", "job_set": "s", "job_ids": [acked[1]]});
    let (s, v) = server.post("/v1/jobs/cancel", &cancel).await;
    assert_eq!(s, 507, "{v}");
    assert!(v["detail"].as_str().unwrap_or_default().contains("every write is refused"), "{v}");

    // Space returns: writes resume by themselves.
    fs.remove("filler");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, _) = server.get("/readyz").await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "not ready again after space returned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (s, v) = server.post("/v1/jobs", &bulky("after", 5)).await;
    assert_eq!(s, 200, "{v}");
    acked.extend(v["job_ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_string()));
    let (s, v) = server.post("/v1/jobs/cancel", &cancel).await;
    assert_eq!(s, 200, "{v}");
    assert!(!server.log().contains("raft stopped"), "{}", server.log());

    // Nothing acknowledged was lost, across a restart.
    assert_eq!(server.terminate(), Some(0), "{}", server.log());
    drop(server);
    let server = Server::start_in(&dir, &cfg);
    server.ready().await;
    let stored: HashSet<String> =
        server.all_jobs("queue=A").await.iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
    let lost: Vec<&String> = acked.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged jobs lost: {lost:?}", lost.len(), acked.len());
    drop(server);
    drop(fs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_runs_low_hands_the_leadership_over_and_writes_go_on() {
    if !root_or_skip("the full-disk hand-over test") {
        return;
    }
    let (mut trio, disks) = trio_on_tmpfs().await;
    let old = trio.leader().await;
    trio.api(old).create_queue("A").await;
    let disk = &disks[trio.members.iter().position(|m| m.id == old).unwrap()];
    disk.fill_until("filler", 4 * MIB);
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != old).collect();
    let new = trio.leader_among(&others, Duration::from_secs(30)).await;
    assert_ne!(new, old);
    // Writes go on through every member, the old leader included (it relays them).
    for id in [old, new] {
        let (s, v) = trio.api(id).post("/v1/jobs", &bulky(&format!("via-{id}"), 3)).await;
        assert_eq!(s, 200, "through {id}: {v}");
    }
    // The old leader follows, and stands for election again once it has room.
    let st = crate::common::trio::status(trio.api(old)).await.expect("status");
    assert_eq!(st["leader"].as_u64(), Some(new), "{st}");
    disk.remove("filler");
    let deadline = Instant::now() + Duration::from_secs(20);
    while trio.api(old).get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the old leader is not ready again after space returned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (s, v) = trio.api(old).get("/v1/jobs?queue=A&consistent=true").await;
    assert_eq!((s, v["jobs"].as_array().map(Vec::len)), (200, Some(6)), "{v}");
    for m in &mut trio.members {
        m.kill9();
    }
    drop(disks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_disk_fills_up_stops_with_an_error_and_catches_up_when_started_again() {
    if !root_or_skip("the full-disk follower test") {
        return;
    }
    let (mut trio, disks) = trio_on_tmpfs().await;
    let leader = trio.leader().await;
    trio.api(leader).create_queue("A").await;
    let follower = if leader == 1 { 2 } else { 1 };
    let disk = &disks[trio.members.iter().position(|m| m.id == follower).unwrap()];
    // Full to the last byte: the leader's entries cannot be stored there.
    disk.fill_until("filler", 0);
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        let (s, v) = trio.api(leader).post("/v1/jobs", &bulky(&format!("f{}", acked.len()), 20)).await;
        assert_eq!(s, 200, "the leader and the other follower still take writes: {v}");
        acked.extend(v["job_ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_string()));
        let child = &mut trio.member(follower).server.as_mut().expect("running").child;
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.code();
        }
        assert!(Instant::now() < deadline, "the follower with a full disk never stopped");
    };
    // Stopped with an error (systemd starts it again), saying why.
    assert_eq!(code, Some(1), "{}", trio.member(follower).log());
    assert!(trio.member(follower).log().contains("raft stopped"), "{}", trio.member(follower).log());
    trio.member(follower).server = None;
    disk.remove("filler");
    trio.member(follower).start();
    trio.leader().await;
    for id in &acked {
        let (s, j) = trio.api(follower).get(&format!("/v1/jobs/{id}?consistent=true")).await;
        assert_eq!(s, 200, "acknowledged job {id} missing on the restarted follower: {j}");
    }
    for m in &mut trio.members {
        m.kill9();
    }
    drop(disks);
}

/// An agent whose run directory is a small tmpfs: a job that fills it does not count as
/// succeeded although it exits 0; a run that cannot start there goes back to the queue saying
/// why; nothing half-written stays; once there is room, jobs run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_run_directory_fills_up_fails_what_it_cannot_keep_and_says_why() {
    use crate::common::pod;
    use crate::common::procs::{Agent, reap_runs};
    if !root_or_skip("the agent full-disk test") {
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().to_path_buf();
    let server = Server::start_in(&dir, &config(&dir, ""));
    server.ready().await;
    server.create_queue("A").await;
    let agent_dir = dir.join("agent");
    let fs = Tmpfs::mount(&agent_dir, "16m");
    let toml = "max_backoff = 1\n[process]\nnode = \"n1\"\nallocatable = { cpu = \"8\", memory = \"16Gi\" }\n";
    let agent = Agent::start(&server.url, "e1", &agent_dir, toml, &dir.join("agent.log"));
    let wait = Duration::from_secs(30);

    // Writes more than the disk holds, ignores the error, and exits 0.
    let filler =
        server.submit("A", "s", vec![json!({"pod_spec": pod("100m", "head -c 40000000 /dev/zero; exit 0")})]).await;
    let j = server.wait_job(&filler[0], wait, "over", |j| j["state"] == "failed" || j["state"] == "succeeded").await;
    assert_eq!(j["state"], "failed", "a job that filled the disk counted as succeeded: {j}");
    let run = &j["runs"][0];
    assert_eq!(run["reason"], "run directory full", "{j}");
    let message = run["message"].as_str().unwrap_or_default();
    assert!(message.contains(&agent_dir.display().to_string()) && message.contains("exit status 0"), "{message}");

    // The disk is full: the next run cannot start, and goes back to the queue saying why.
    assert!(fs.free() < 1 << 20, "the filler job left {} bytes free", fs.free());
    let next = server.submit("A", "s", vec![json!({"pod_spec": pod("100m", "echo hello")})]).await;
    let j = server.wait_job(&next[0], wait, "a returned run", |j| !j["runs"][0]["reason"].is_null()).await;
    let reason = j["runs"][0]["reason"].as_str().unwrap_or_default();
    assert_eq!(reason, format!("run directory full: {}", agent_dir.join("runs").display()), "{j}");
    assert!(agent.log().contains("No space left on device"), "{}", agent.log());
    let half_made: Vec<String> = std::fs::read_dir(agent_dir.join("runs"))
        .expect("runs dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(half_made.is_empty(), "half-made run directories left: {half_made:?}");

    // Room again (the filler's output goes): the job runs.
    let filler_run = server.job(&filler[0]).await["runs"][0]["run_id"].as_str().unwrap().to_string();
    std::fs::remove_file(agent_dir.join("runs").join(&filler_run).join("stdout")).expect("remove the output");
    let j = server.wait_job(&next[0], wait, "succeeded", |j| j["state"] == "succeeded").await;
    assert!(j["runs"].as_array().unwrap().len() >= 2, "{j}");
    drop(agent);
    reap_runs(&agent_dir);
    drop(fs);
}
