//! Node quarantine on a real server, driven by a fake executor written in the test: run
//! failures its node is to blame for quarantine the node (no new jobs go there), the node view
//! and the metrics show it with its reason, and an admin lifts it.

use crate::cli_client::{convoy, ok};
use crate::common::{Server, job, node};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[scheduler.quarantine]
max_failures = 2
window = "10m"
duration = "1h"
"#;

fn ev(lease: &Value, kind: &str) -> Value {
    json!({"run_id": lease["run_id"], "job_id": lease["job_id"], "kind": kind})
}

fn held(leases: &[Value], state: &str) -> Vec<Value> {
    leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": state})).collect()
}

/// Polls until `n` new leases came (or panics after 20 s); `runs` are the runs the executor holds.
async fn leases(s: &Server, nodes: &[Value], runs: &[Value], n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got: Vec<Value> = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} leases came: {got:?}", got.len());
        let mut holding = runs.to_vec();
        holding.extend(held(&got, "pending"));
        let v = s.poll("e1", nodes, &holding, 2.0).await;
        got.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    got
}

fn on<'a>(leases: &'a [Value], node: &str) -> &'a Value {
    leases.iter().find(|l| l["node"] == node).unwrap_or_else(|| panic!("no lease on {node}: {leases:?}"))
}

async fn node_view(s: &Server, name: &str) -> Value {
    let (st, v) = s.get("/v1/cluster/nodes").await;
    assert_eq!(st, 200, "{v}");
    v["nodes"].as_array().and_then(|n| n.iter().find(|n| n["name"] == name).cloned()).unwrap_or(Value::Null)
}

async fn quarantined_gauge(s: &Server) -> String {
    let (_, text) = s.text("/metrics").await;
    text.lines().find(|l| l.starts_with("convoy_quarantined_nodes{executor=\"e1\"")).unwrap_or("").to_string()
}

#[tokio::test]
async fn node_faults_quarantine_a_node_until_an_admin_lifts_it() {
    let s = Server::start(CONFIG);
    s.ready().await;
    s.create_queue("A").await;
    let nodes = [node("n1", "1"), node("n2", "1")];
    s.poll("e1", &nodes, &[], 0.0).await;
    assert_eq!(quarantined_gauge(&s).await, "convoy_quarantined_nodes{executor=\"e1\",pool=\"default\"} 0");

    // Two jobs fill both nodes. n1's fails: its image cannot be pulled there (the node's fault);
    // n2's exits 1 (the job's own fault, which does not count).
    s.submit("A", "s", vec![job("1"), job("1")]).await;
    let first = leases(&s, &nodes, &[], 2).await;
    let mut pull = ev(on(&first, "n1"), "failed");
    pull["reason"] = json!("image pull error");
    pull["node_fault"] = json!("image_pull");
    let mut exit = ev(on(&first, "n2"), "failed");
    exit["exit_code"] = json!(1);
    assert_eq!(s.report("e1", vec![pull, exit]).await, 2);
    let v = node_view(&s, "n1").await;
    assert_eq!((v["recent_failures"].as_u64(), v["quarantine"].is_null()), (Some(1), true), "{v}");
    assert_eq!(node_view(&s, "n2").await["recent_failures"], 0);

    // Two more jobs: the one on n1 never starts (returned, which counts as not_started): the
    // second failure of n1 within the window quarantines it. The job goes back to the queue.
    s.submit("A", "s", vec![job("1"), job("1")]).await;
    let second = leases(&s, &nodes, &[], 2).await;
    let returned = on(&second, "n1").clone();
    let running = on(&second, "n2").clone();
    s.report("e1", vec![ev(&returned, "returned"), ev(&running, "running")]).await;
    let requeued = returned["job_id"].as_str().unwrap_or("").to_string();
    assert_eq!(s.job(&requeued).await["state"], "queued");
    let v = node_view(&s, "n1").await;
    let reason = v["quarantine"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("2 failures of the node within 10m: not_started ×1, image_pull ×1; the last one: job"),
        "{v}"
    );
    assert_eq!((v["recent_failures"].as_u64(), v["reported"].as_bool()), (Some(0), Some(true)), "{v}");
    assert!(v["quarantine"]["until"].as_str().is_some_and(|u| u > v["quarantine"]["since"].as_str().unwrap_or("")));
    assert_eq!(quarantined_gauge(&s).await, "convoy_quarantined_nodes{executor=\"e1\",pool=\"default\"} 1");

    // n1 is free but quarantined, n2 is busy: the requeued job is not placed.
    let runs = held(std::slice::from_ref(&running), "running");
    for _ in 0..3 {
        let v = s.poll("e1", &nodes, &runs, 0.5).await;
        assert_eq!(v["leases"], json!([]), "nothing goes to a quarantined node");
    }
    assert_eq!(s.job(&requeued).await["state"], "queued");

    // The CLI shows it with its reason.
    let table = ok(&s.url, &["cluster", "nodes"]).await;
    let n1 = table.lines().find(|l| l.starts_with("e1") && l.contains(" n1 ")).unwrap_or("");
    assert!(n1.contains("quarantined until ") && n1.contains(reason), "{table}");
    let n2 = table.lines().find(|l| l.contains(" n2 ")).unwrap_or("");
    assert!(n2.trim_end().ends_with("ready"), "{table}");

    // An admin lifts it (here with the CLI): the node takes the job at once.
    let out = ok(&s.url, &["cluster", "lift-quarantine", "e1", "n1"]).await;
    assert_eq!(out, "node n1 of executor e1 is no longer quarantined\n");
    let v = node_view(&s, "n1").await;
    assert_eq!((v["quarantine"].is_null(), v["recent_failures"].as_u64()), (true, Some(0)), "{v}");
    let again = leases(&s, &nodes, &runs, 1).await;
    assert_eq!((again[0]["node"].as_str(), again[0]["job_id"].as_str()), (Some("n1"), Some(requeued.as_str())));
    assert_eq!(quarantined_gauge(&s).await, "convoy_quarantined_nodes{executor=\"e1\",pool=\"default\"} 0");

    // Lifting a node that is not quarantined, or naming one badly, is refused.
    let (st, v) = s.delete("/v1/cluster/nodes/e1/n1/quarantine").await;
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["detail"], "node n1 of executor e1 is not quarantined");
    let out = convoy(&s.url, &["cluster", "lift-quarantine", "e1", "n1"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not quarantined"), "{out:?}");
    let (st, v) = s.delete("/v1/cluster/nodes/e1/-n1/quarantine").await;
    assert_eq!((st, v["field"].as_str()), (400, Some("node")), "{v}");
}

/// A quarantine ends by itself after `duration`: the node takes jobs again, its view and the
/// gauge clear, and its failure count starts over (one more fault does not quarantine it again).
#[tokio::test]
async fn a_quarantine_ends_by_itself_after_its_duration() {
    let s = Server::start("[scheduler.quarantine]\nmax_failures = 2\nwindow = \"10m\"\nduration = \"3s\"\n");
    s.ready().await;
    s.create_queue("A").await;
    let nodes = [node("n1", "1")];
    s.poll("e1", &nodes, &[], 0.0).await;
    // Two runs that never start on n1 quarantine it; the second job goes back to the queue.
    s.submit("A", "s", vec![job("1")]).await;
    let first = leases(&s, &nodes, &[], 1).await;
    s.report("e1", vec![ev(&first[0], "returned")]).await;
    let again = leases(&s, &nodes, &[], 1).await;
    s.report("e1", vec![ev(&again[0], "returned")]).await;
    let v = node_view(&s, "n1").await;
    assert!(!v["quarantine"].is_null(), "{v}");
    let until = v["quarantine"]["until"].as_str().unwrap_or_default().to_string();
    assert_eq!(quarantined_gauge(&s).await, "convoy_quarantined_nodes{executor=\"e1\",pool=\"default\"} 1");
    // While quarantined, nothing is leased; once it ends, the requeued job is.
    let deadline = Instant::now() + Duration::from_secs(30);
    let third = loop {
        let v = s.poll("e1", &nodes, &[], 0.5).await;
        if let Some(l) = v["leases"].as_array().and_then(|l| l.first()) {
            break l.clone();
        }
        assert!(Instant::now() < deadline, "the quarantine never ended (until {until})");
    };
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    assert!(now.as_str() >= until.as_str(), "leased at {now}, before the quarantine's end {until}");
    let v = node_view(&s, "n1").await;
    assert_eq!((v["quarantine"].is_null(), v["recent_failures"].as_u64()), (true, Some(0)), "{v}");
    assert_eq!(quarantined_gauge(&s).await, "convoy_quarantined_nodes{executor=\"e1\",pool=\"default\"} 0");
    // The count started over: one more fault leaves the node in service.
    s.report("e1", vec![ev(&third, "returned")]).await;
    let v = node_view(&s, "n1").await;
    assert_eq!((v["quarantine"].is_null(), v["recent_failures"].as_u64()), (true, Some(1)), "{v}");
}
