//! `convoy simulate --from-server` and `--from-data-dir` on a real server: the state written as
//! a scenario, replayed and changed offline with `convoy simulate`.

use crate::common::{Server, job, node};
use crate::server_auth::{ADMIN, ALICE, start_with_auth};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

fn convoy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_convoy")).args(args).env("NO_COLOR", "1").output().expect("convoy runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `convoy simulate FILE`: the first round's record.
fn round_0(file: &Path) -> Value {
    let out = convoy(&["simulate", &file.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v["rounds"][0].clone()
}

/// The scenario without what changes from one export to the next (the header's time, round 0's
/// time and the jobs' times relative to it).
fn comparable(yaml: &str) -> Value {
    let mut v: Value = serde_yaml_ng::from_str(yaml).expect("YAML");
    v.as_object_mut().map(|v| v.remove("round_0_at"));
    let strip = |j: &mut Value| {
        for key in ["started_at_seconds", "running_at_seconds", "queued_at_seconds", "backoff_until_seconds"] {
            j.as_object_mut().map(|j| j.remove(key));
        }
    };
    v["running"].as_array_mut().into_iter().flatten().for_each(strip);
    let rounds = v["rounds"].as_array_mut().into_iter().flatten();
    rounds.flat_map(|r| r["submit"].as_array_mut()).flatten().for_each(strip);
    v
}

#[tokio::test]
async fn the_live_state_replays_and_answers_what_if() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    // A fake executor with one 4-cpu node runs A's two 2-cpu jobs.
    let nodes = vec![node("n1", "4")];
    s.poll("e1", &nodes, &[], 0.0).await;
    let a = s.submit("A", "sa", vec![job("2"), job("2")]).await;
    let mut leases = Vec::new();
    while leases.len() < 2 {
        let v = s.poll("e1", &nodes, &[], 10.0).await;
        leases.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    let events: Vec<Value> =
        leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "kind": "running"})).collect();
    assert_eq!(s.report("e1", events).await, 2);
    // B's two jobs find no room.
    let b = s.submit("B", "sb", vec![job("2"), job("2")]).await;
    for id in &b {
        s.wait_job(id, std::time::Duration::from_secs(10), "waiting with a reason", |j| j["reason"].is_string()).await;
    }

    let tmp = tempfile::tempdir().expect("temp dir");
    let file = tmp.path().join("live.yaml");
    let out = convoy(&["simulate", "--from-server", &s.url, "--out", &file.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("nodes: 1, queues: 2, running jobs: 2, queued jobs: 2"), "{}", stderr(&out));
    let yaml = std::fs::read_to_string(&file).expect("the scenario");
    let v = comparable(&yaml);
    assert_eq!(v["nodes"][0]["name"], "n1", "{yaml}");
    assert_eq!(v["nodes"][0]["executor"], "e1", "{yaml}");
    let running: Vec<(&str, &str)> = v["running"]
        .as_array()
        .expect("running")
        .iter()
        .map(|r| (r["id"].as_str().unwrap_or(""), r["node"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(running, vec![(a[0].as_str(), "n1"), (a[1].as_str(), "n1")], "{yaml}");
    let queued: Vec<&str> =
        v["rounds"][0]["submit"].as_array().expect("submit").iter().map(|j| j["id"].as_str().unwrap_or("")).collect();
    assert_eq!(queued, vec![b[0].as_str(), b[1].as_str()], "{yaml}");

    // Replayed as it is: A's jobs stay on n1, B's stay queued.
    let r0 = round_0(&file);
    assert_eq!(r0["scheduled"], json!({}), "{r0:#}");
    assert_eq!(r0["preempted"], json!({}), "{r0:#}");
    assert_eq!(r0["nodes"]["n1"], json!({"A": 2}), "{r0:#}");
    assert_eq!(
        (r0["jobs"][&b[0]]["state"].as_str(), r0["jobs"][&b[1]]["state"].as_str()),
        (Some("queued"), Some("queued"))
    );

    // What if the executor had a second node: B's jobs start there, A's are not moved.
    let grown = tmp.path().join("grown.yaml");
    let edited =
        yaml.replacen("\nnodes:\n", "\nnodes:\n- {name: n2, executor: e1, allocatable: {cpu: '4', memory: 64Gi}}\n", 1);
    assert_ne!(edited, yaml);
    std::fs::write(&grown, edited).expect("write");
    let r0 = round_0(&grown);
    assert_eq!(r0["scheduled"], json!({"B": 2}), "{r0:#}");
    assert_eq!(r0["preempted"], json!({}), "{r0:#}");
    assert_eq!(r0["nodes"], json!({"n1": {"A": 2}, "n2": {"B": 2}}), "{r0:#}");
    for id in a.iter().chain(&b) {
        assert_eq!(r0["jobs"][id]["state"], "running", "{id}: {r0:#}");
    }

    // The data directory of the running server, with its configuration file, gives the same
    // scenario.
    let (data, config) = (s.dir.join("data").display().to_string(), s.dir.join("convoy.toml").display().to_string());
    let out = convoy(&["simulate", "--from-data-dir", &data, "--config", &config]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(comparable(&String::from_utf8_lossy(&out.stdout)), v);

    // The web UI offers the same scenario to download, from the cluster page.
    let (st, page) = s.text("/ui/cluster").await;
    assert_eq!(st, 200, "{page}");
    assert!(page.contains("href=\"/ui/scenario.yaml\""), "{page}");
    let r = s.client.get(format!("{}/ui/scenario.yaml", s.url)).send().await.expect("download");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/yaml");
    assert!(r.headers()["content-disposition"].to_str().is_ok_and(|d| d.contains("convoy-scenario.yaml")));
    let downloaded = r.text().await.expect("YAML");
    assert!(downloaded.starts_with("# The state of the convoy server at "), "{downloaded}");
    assert_eq!(comparable(&downloaded), v);
}

#[tokio::test]
async fn only_admins_export_the_state() {
    let (s, _tmp) = start_with_auth();
    s.ready().await;
    use reqwest::Method as M;
    let (st, _) = s.call(M::GET, "/v1/scenario", None, None).await;
    assert_eq!(st, 401);
    let (st, v) = s.call(M::GET, "/v1/scenario", Some(ALICE), None).await;
    assert_eq!(st, 403, "{v}");
    // Replay reads every queue's decisions: admins only as well.
    let (st, v) = s.call(M::GET, "/v1/replay", Some(ALICE), None).await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = s.call(M::GET, "/v1/replay", Some(ADMIN), None).await;
    assert_eq!((st, &v["cycles"]), (200, &json!([])), "{v}");
    let (st, v) = s.call(M::GET, "/v1/scenario", Some(ADMIN), None).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["rounds"].is_array() && v["config"]["priority_classes"].is_array(), "{v}");

    let out = convoy(&["--token", ALICE, "simulate", "--from-server", &s.url]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("403") && stderr(&out).contains("lacks the admin role"), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let out = convoy(&["--token", ADMIN, "simulate", "--from-server", &s.url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("# The state of the convoy server at"));
}

#[test]
fn bad_sources_are_named() {
    let out = convoy(&["simulate", "--from-data-dir", "/nonexistent/convoy-data"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("/nonexistent/convoy-data does not exist"), "{}", stderr(&out));
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = convoy(&["simulate", "--from-data-dir", &tmp.path().display().to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("convoy.redb does not exist"), "{}", stderr(&out));
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let url = format!("http://127.0.0.1:{port}");
    let out = convoy(&["simulate", "--from-server", &url]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&format!("cannot reach the convoy server at {url}")), "{}", stderr(&out));
    let out = convoy(&["simulate", "scenario.yaml", "--from-server", &url]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot be used with"), "{}", stderr(&out));
}

/// `convoy simulate --from-server URL`, comparable.
fn export_from(url: &str) -> Value {
    let out = convoy(&["simulate", "--from-server", url]);
    assert!(out.status.success(), "{}", stderr(&out));
    comparable(&String::from_utf8_lossy(&out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_cluster_exports_the_same_state() {
    let trio = crate::common::trio::Trio::start(3).await;
    let leader = trio.api(trio.leader().await);
    leader.create_queue("A").await;
    let nodes = vec![node("n1", "4")];
    leader.poll("e1", &nodes, &[], 0.0).await;
    let ids = leader.submit("A", "s", vec![job("3"), job("3")]).await;
    let mut leases = Vec::new();
    while leases.is_empty() {
        let v = leader.poll("e1", &nodes, &[], 10.0).await;
        leases.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    let events: Vec<Value> =
        leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "kind": "running"})).collect();
    leader.report("e1", events).await;
    let within = std::time::Duration::from_secs(10);
    leader.wait_job(&ids[1], within, "waiting with a reason", |j| j["reason"].is_string()).await;

    let want = export_from(&leader.url);
    assert_eq!(want["running"][0]["id"], ids[0].as_str(), "{want:#}");
    assert_eq!(want["rounds"][0]["submit"][0]["id"], ids[1].as_str(), "{want:#}");
    for m in &trio.members {
        // A follower answers as of what it has applied: it catches up within moments.
        let deadline = std::time::Instant::now() + within;
        loop {
            let got = export_from(&m.api().url);
            if got == want {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "member {}: {got:#}\nleader: {want:#}", m.id);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let (data, config) =
            (m.dir.join("data").display().to_string(), m.dir.join("convoy.toml").display().to_string());
        let out = convoy(&["simulate", "--from-data-dir", &data, "--config", &config]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(comparable(&String::from_utf8_lossy(&out.stdout)), want, "member {}'s data directory", m.id);
    }
}

/// A job item with `key` set to `value`.
fn with(mut job: Value, key: &str, value: Value) -> Value {
    job[key] = value;
    job
}

#[tokio::test]
async fn the_policies_inputs_are_exported_and_replay_as_the_server_decided() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = crate::common::config(dir.path(), "").replace(
        "[scheduler]\n",
        "[scheduler]\nmin_runtime_before_preemption = \"10m\"\n\
         floating_resources = [{name = \"licence\", pools = {default = \"1\"}}]\n",
    );
    let s = Server::start_in(dir.path(), &config);
    s.ready().await;
    let (st, v) = s.post("/v1/queues", &json!({"name": "A", "guaranteed": {"cpu": "2"}})).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.post("/v1/queues", &json!({"name": "B", "preemption_policy": "fence"})).await;
    assert_eq!(st, 201, "{v}");
    let nodes = vec![node("n1", "4")];
    s.poll("e1", &nodes, &[], 0.0).await;
    // p runs; x fails its first run with a retried exit code and backs off for ten minutes.
    let retry = json!({"max_attempts": 3, "on_exit_codes": [75], "backoff_seconds": 600});
    let ids = s.submit("A", "sa", vec![job("2"), with(job("1"), "retry", retry)]).await;
    let (p, x) = (ids[0].clone(), ids[1].clone());
    let mut leases = Vec::new();
    while leases.len() < 2 {
        let v = s.poll("e1", &nodes, &[], 10.0).await;
        leases.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    let run = |job: &str| leases.iter().find(|l| l["job_id"] == job).map(|l| l["run_id"].clone());
    let events = vec![
        json!({"run_id": run(&p), "job_id": p, "kind": "running"}),
        json!({"run_id": run(&x), "job_id": x, "kind": "failed", "exit_code": 75}),
    ];
    assert_eq!(s.report("e1", events).await, 2);
    // d waits for p.
    let d = s.submit("B", "sb", vec![with(job("1"), "depends_on", json!([{"job_id": p}]))]).await.remove(0);
    let within = std::time::Duration::from_secs(10);
    let held =
        s.wait_job(&x, within, "held back", |j| j["reason"].as_str().is_some_and(|r| r.contains("back-off"))).await;
    let waiting = s.wait_job(&d, within, "waiting", |j| j["reason"].is_string()).await;

    let out = convoy(&["simulate", "--from-server", &s.url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let yaml = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: Value = serde_yaml_ng::from_str(&yaml).expect("YAML");
    assert_eq!(v["config"]["min_runtime_before_preemption"], "10m", "{yaml}");
    assert_eq!(v["config"]["floating_resources"][0]["name"], "licence", "{yaml}");
    assert_eq!(v["queues"][0]["guaranteed"], json!({"cpu": "2"}), "{yaml}");
    assert_eq!(v["queues"][1]["preemption_policy"], "fence", "{yaml}");
    assert!(v["round_0_at"].is_string(), "{yaml}");
    assert_eq!(v["running"][0]["id"], p.as_str(), "{yaml}");
    assert!(v["running"][0]["started_at_seconds"].as_f64().is_some_and(|t| t < 0.0), "{yaml}");
    let submit = v["rounds"][0]["submit"].as_array().cloned().unwrap_or_default();
    let entry = |id: &str| submit.iter().find(|e| e["id"] == id).cloned().unwrap_or_else(|| panic!("{id}: {yaml}"));
    let xe = entry(&x);
    assert_eq!(xe["retry"]["max_attempts"], 3, "{yaml}");
    assert_eq!(xe["attempts_spent"], 1, "{yaml}");
    assert!(xe["backoff_until_seconds"].as_f64().is_some_and(|t| t > 500.0 && t <= 600.0), "{yaml}");
    assert_eq!(entry(&d)["depends_on"], json!([{"id": p, "on": "succeeded"}]), "{yaml}");

    // Replayed: nothing moves, and the held and the waiting job wait as the server says.
    let tmp = tempfile::tempdir().expect("temp dir");
    let file = tmp.path().join("live.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let r0 = round_0(&file);
    assert_eq!((&r0["scheduled"], &r0["preempted"]), (&json!({}), &json!({})), "{r0:#}");
    assert_eq!(r0["jobs"][&x]["reason"], held["reason"], "{r0:#}");
    assert_eq!(r0["jobs"][&d]["reason"], waiting["reason"], "{r0:#}");
    // What if p succeeded: d is released and starts.
    let edited = format!("{yaml}  finish: [{p}]\n");
    std::fs::write(&file, edited).expect("write");
    let r0 = round_0(&file);
    assert_eq!(r0["jobs"][&d]["state"], "running", "{r0:#}");
}
