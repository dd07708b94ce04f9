//! Gang reservations (`[scheduler] gang_reservation_after`) on a real server, with a fake
//! executor written in the test: a gang that waited at the head of its queue gets the busy node
//! reserved; the nodes API, the job's reason and why, and the metrics show it; a freed cpu stays
//! free for it, except for a job whose deadline ends before the reservation's expected start;
//! the gang's members' events record the reservation once.

use crate::common::{Server, config, job, node};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A one-cpu job with a deadline of `secs`.
fn with_deadline(secs: u64) -> Value {
    let mut j = job("1");
    j["pod_spec"]["activeDeadlineSeconds"] = json!(secs);
    j
}

fn held(leases: &[Value], state: &str) -> Vec<Value> {
    leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": state})).collect()
}

/// Polls as executor e1 (holding `runs`) until `n` new leases came, or panics after 20 s.
async fn leases(s: &Server, nodes: &[Value], runs: &[Value], n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got: Vec<Value> = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} leases came: {got:?}", got.len());
        let mut holding = runs.to_vec();
        holding.extend(held(&got, "pending"));
        let v = s.poll("e1", nodes, &holding, 1.0).await;
        got.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    got
}

/// The messages of a job's reservation events.
fn reservation_events(job: &Value) -> Vec<String> {
    job["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.starts_with("reserved ") || m.starts_with("reservation of "))
        .map(str::to_string)
        .collect()
}

async fn node_view(s: &Server, name: &str) -> Value {
    let (st, v) = s.get("/v1/cluster/nodes").await;
    assert_eq!(st, 200, "{v}");
    v["nodes"].as_array().and_then(|n| n.iter().find(|n| n["name"] == name).cloned()).unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_waiting_gang_holds_the_busy_node_and_only_a_short_job_backfills() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let text = config(dir, "").replace(
        "schedule_interval_max = \"200ms\"",
        "schedule_interval_max = \"200ms\"\ngang_reservation_after = \"1s\"\nmax_reservations_per_pool = 1",
    );
    let s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    let nodes = [node("n1", "4")];
    s.poll("e1", &nodes, &[], 0.0).await;

    // B fills the node with four one-cpu jobs that end within the hour (their deadline).
    s.submit("B", "fill", (0..4).map(|_| with_deadline(3600)).collect()).await;
    let running = leases(&s, &nodes, &[], 4).await;
    let mut holding = held(&running, "pending");

    // A's gang of four one-cpu jobs waits; after a second at the head of its queue the node is
    // reserved for it, expected to fit when B's jobs end.
    let gang: Vec<Value> = (0..4)
        .map(|_| {
            let mut j = job("1");
            j["annotations"] = json!({"convoy.io/gang-id": "g", "convoy.io/gang-cardinality": "4"});
            j
        })
        .collect();
    let members = s.submit("A", "gang", gang).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let reserved = loop {
        s.poll("e1", &nodes, &holding, 0.0).await;
        let v = node_view(&s, "n1").await;
        if !v["reserved_for"].is_null() {
            break v["reserved_for"].clone();
        }
        assert!(Instant::now() < deadline, "n1 never reserved: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (&reserved["job_id"], &reserved["gang"], &reserved["queue"]),
        (&json!(members[0]), &json!("g"), &json!("A"))
    );
    let expected = reserved["expected_start"].as_str().expect("an expected start").to_string();
    let j = s.job(&members[0]).await;
    assert_eq!(j["state"], "queued");
    // The reason gives the time to the second.
    let at = format!("{}Z", expected.get(..19).unwrap_or_default());
    assert_eq!(j["reason"], json!(format!("reserved node n1 in pool default; expected to fit at {at}")));
    let (st, why) = s.get(&format!("/v1/jobs/{}/why", members[0])).await;
    assert_eq!(st, 200, "{why}");
    assert!(why["reason"].as_str().is_some_and(|r| r.starts_with("reserved node n1 in pool default")), "{why}");
    // Each member's events say so, once (the leader records a reservation when it changes).
    let event = format!("reserved node n1 in pool default (expected start {at})");
    for m in &members {
        s.wait_job(m, Duration::from_secs(20), "a reservation event", |j| reservation_events(j) == [event.clone()])
            .await;
    }

    // One of B's jobs ends: its cpu stays free. A job ending after the expected start is kept
    // off; one with a one-minute deadline backfills.
    let done = &running[0];
    let ev = |kind: &str| json!({"run_id": done["run_id"], "job_id": done["job_id"], "kind": kind});
    assert_eq!(s.report("e1", vec![ev("running"), ev("succeeded")]).await, 2);
    holding.remove(0);
    let late = s.submit("B", "late", vec![with_deadline(7200)]).await;
    let kept_off = format!(
        "node n1 in pool default reserved for job {} until it fits; only jobs whose deadline ends before the \
         reservation's expected start may use it",
        members[0]
    );
    let j = s.wait_job(&late[0], Duration::from_secs(20), "kept off", |j| j["reason"] == json!(kept_off)).await;
    assert_eq!(j["state"], "queued");
    let short = s.submit("B", "short", vec![with_deadline(60)]).await;
    let backfill = leases(&s, &nodes, &holding, 1).await;
    assert_eq!((&backfill[0]["job_id"], &backfill[0]["node"]), (&json!(short[0]), &json!("n1")));
    assert_eq!(s.job(&late[0]).await["state"], "queued");

    // The metrics count the reservation, its node and the job kept off.
    let (_, text) = s.text("/metrics").await;
    for line in [
        "convoy_pool_reservations{pool=\"default\"} 1",
        "convoy_pool_reserved_nodes{pool=\"default\"} 1",
        "convoy_pool_jobs_kept_off_reserved_nodes{pool=\"default\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    // The nodes page shows it.
    let (st, html) = s.text("/ui/nodes").await;
    assert_eq!(st, 200, "{html}");
    assert!(html.contains(&format!("reserved for job <a href=\"/ui/jobs/{0}\">{0}</a>", members[0])), "{html}");

    // Later cycles kept the same node reserved: no further event.
    assert_eq!(reservation_events(&s.job(&members[0]).await), [event]);

    // Replay recomputes the reservation from the log: the cycle that backfilled (and kept the
    // long job off) replays identically.
    let (st, v) = s.get("/v1/replay").await;
    assert_eq!(st, 200, "{v}");
    let cycles = v["cycles"].as_array().expect("cycles");
    assert!(cycles.len() >= 2, "{v:#}");
    assert!(cycles.iter().all(|c| c["verdict"] == "identical"), "{v:#}");
}

#[test]
fn a_bad_reservation_setting_is_refused_at_start_naming_the_key() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    for (extra, key) in [
        ("gang_reservation_after = \"soon\"", "gang_reservation_after"),
        ("gang_reservation_after = \"10m\"\nmax_reservations_per_pool = 0", "max_reservations_per_pool"),
    ] {
        let text = config(dir, "")
            .replace("schedule_interval_max = \"200ms\"", &format!("schedule_interval_max = \"200ms\"\n{extra}"));
        let path = dir.join("convoy.toml");
        std::fs::write(&path, text).expect("write config");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["server", "--config"])
            .arg(&path)
            .output()
            .expect("run convoy");
        assert!(!out.status.success(), "{extra}: started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{extra}: {err}");
    }
}
