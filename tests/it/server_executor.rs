//! The executor API of a real server, driven by a fake executor written in the test.

use crate::common::{Server, job, node};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn ev(run: &Value, kind: &str) -> Value {
    json!({"run_id": run["run_id"], "job_id": run["job_id"], "kind": kind})
}

/// A ready server with `config` and queue `A`.
async fn with_queue_a(config: &str) -> Server {
    let s = Server::start(config);
    s.ready().await;
    s.create_queue("A").await;
    s
}

/// Registers `nodes` as executor `e1`'s, submits one job to queue `A` (which must exist) and
/// has it leased and reported running; its id and lease.
async fn one_running_job(s: &Server, nodes: &[Value]) -> (String, Value) {
    s.poll("e1", nodes, &[], 0.0).await;
    let ids = s.submit("A", "s", vec![job("1")]).await;
    let v = s.poll("e1", nodes, &[], 20.0).await;
    let lease = v["leases"][0].clone();
    assert!(lease.is_object(), "{v}");
    s.report("e1", vec![ev(&lease, "running")]).await;
    (ids[0].clone(), lease)
}

#[tokio::test]
async fn leases_events_and_kill_orders() {
    let s = with_queue_a("").await;
    let nodes = vec![node("n1", "4")];
    // The first poll registers the node; nothing to do yet.
    let v = s.poll("e1", &nodes, &[], 0.0).await;
    assert!(v["leases"].as_array().is_some_and(|l| l.is_empty()));
    let ids = s.submit("A", "s", vec![job("1"), job("1"), job("1")]).await;

    // The long poll answers as soon as the leases commit (well before its 20 s wait).
    let t = Instant::now();
    let v = s.poll("e1", &nodes, &[], 20.0).await;
    assert!(t.elapsed() < Duration::from_secs(10), "lease answer took {:?}", t.elapsed());
    let mut leases = v["leases"].as_array().cloned().unwrap_or_default();
    // Collect all three (they may come in more than one answer).
    while leases.len() < 3 {
        let held: Vec<Value> =
            leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "pending"})).collect();
        let v = s.poll("e1", &nodes, &held, 5.0).await;
        leases.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    assert_eq!(leases.len(), 3);
    let lease = &leases[0];
    assert_eq!(lease["node"], "n1");
    assert_eq!(lease["pod_spec"]["containers"][0]["command"][0], "sh");
    assert_eq!(lease["termination_grace_period_seconds"], 1.0);
    assert!(lease["active_deadline_seconds"].as_u64().unwrap_or(0) > 0);
    for l in &leases {
        assert_eq!(s.job(l["job_id"].as_str().unwrap()).await["state"], "leased");
    }

    // At-least-once delivery: a lease the executor does not report is sent again.
    let held: Vec<Value> =
        leases[1..].iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "pending"})).collect();
    let v = s.poll("e1", &nodes, &held, 0.0).await;
    assert_eq!(v["leases"].as_array().map(|l| l.len()), Some(1));
    assert_eq!(v["leases"][0]["run_id"], lease["run_id"]);

    // Run events: pending, running, succeeded / failed.
    assert_eq!(s.report("e1", vec![ev(&leases[0], "pending"), ev(&leases[0], "running")]).await, 2);
    assert_eq!(s.job(leases[0]["job_id"].as_str().unwrap()).await["state"], "running");
    let mut done = ev(&leases[0], "succeeded");
    done["exit_code"] = json!(0);
    done["log_tail"] = json!("hello from the test\n");
    s.report("e1", vec![done]).await;
    let j = s.job(leases[0]["job_id"].as_str().unwrap()).await;
    assert_eq!(j["state"], "succeeded");
    assert_eq!(j["runs"][0]["state"], "succeeded");
    assert_eq!(s.logs(leases[0]["job_id"].as_str().unwrap()).await, "hello from the test\n");
    let mut failed = ev(&leases[1], "failed");
    failed["exit_code"] = json!(3);
    s.report("e1", vec![ev(&leases[1], "running"), failed]).await;
    let j = s.job(leases[1]["job_id"].as_str().unwrap()).await;
    assert_eq!(j["state"], "failed");
    assert!(j["reason"].as_str().unwrap_or("").contains("exit code 3"), "{j}");
    // An event for an unknown run is ignored.
    assert_eq!(
        s.report("e1", vec![json!({"run_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "job_id": ids[0], "kind": "running"})])
            .await,
        0
    );

    // Cancelling the running job becomes a kill order with its grace period.
    s.report("e1", vec![ev(&leases[2], "running")]).await;
    let (st, _) =
        s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s", "job_ids": [leases[2]["job_id"]]})).await;
    assert_eq!(st, 200);
    let held = vec![json!({"run_id": leases[2]["run_id"], "job_id": leases[2]["job_id"], "state": "running"})];
    let v = s.poll("e1", &nodes, &held, 5.0).await;
    let kills = v["kills"].as_array().cloned().unwrap_or_default();
    assert_eq!(kills.len(), 1, "{v}");
    assert_eq!(kills[0]["run_id"], leases[2]["run_id"]);
    assert_eq!(kills[0]["grace_period_seconds"], 1.0);
    let mut killed = ev(&leases[2], "failed");
    killed["exit_code"] = json!(143);
    killed["reason"] = json!("killed");
    s.report("e1", vec![killed]).await;
    let j = s.job(leases[2]["job_id"].as_str().unwrap()).await;
    assert_eq!((j["state"].as_str(), j["runs"][0]["state"].as_str()), (Some("cancelled"), Some("cancelled")));

    // A run the server does not know is ordered killed.
    let stranger = vec![json!({"run_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "job_id": ids[0], "state": "running"})];
    let v = s.poll("e1", &nodes, &stranger, 0.0).await;
    assert_eq!(v["kills"][0]["run_id"], "01ARZ3NDEKTSV4RRFFQ69G5FAV");
}

#[tokio::test]
async fn preemption_becomes_a_kill_order() {
    let s = with_queue_a("").await;
    let nodes = vec![node("n1", "2")];
    let (id, lease) = one_running_job(&s, &nodes).await;
    let (st, v) = s.post("/v1/jobs/preempt", &json!({"queue": "A", "job_set": "s", "job_ids": [id]})).await;
    assert_eq!(st, 200, "{v}");
    let held = vec![json!({"run_id": lease["run_id"], "job_id": lease["job_id"], "state": "running"})];
    let v = s.poll("e1", &nodes, &held, 5.0).await;
    assert_eq!(v["kills"][0]["run_id"], lease["run_id"], "{v}");
    assert_eq!(s.job(&id).await["state"], "preempted");
}

/// A poll lists what the agent held when it sent it. A run that ends while the poll waits (the
/// agent reports it on another request) is no longer the server's, but the agent knows it ended:
/// the poll's answer carries no kill order for it.
#[tokio::test]
async fn a_run_that_ends_during_a_poll_draws_no_kill_order() {
    let s = with_queue_a("").await;
    let nodes = vec![node("n1", "2")];
    let (id, lease) = one_running_job(&s, &nodes).await;
    let held = vec![json!({"run_id": lease["run_id"], "job_id": lease["job_id"], "state": "running"})];
    let (answer, next) = tokio::join!(s.poll("e1", &nodes, &held, 20.0), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut done = ev(&lease, "succeeded");
        done["exit_code"] = json!(0);
        assert_eq!(s.report("e1", vec![done]).await, 1);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Work that ends the poll.
        s.submit("A", "s", vec![job("1")]).await
    });
    assert_eq!(answer["kills"].as_array().map(Vec::len), Some(0), "{answer}");
    assert_eq!(answer["leases"][0]["job_id"].as_str(), Some(next[0].as_str()), "{answer}");
    assert_eq!(s.job(&id).await["state"], "succeeded");
}

#[tokio::test]
async fn lost_executor_requeues_its_jobs() {
    // A short timeout needs short lease waits and elections (the config checks they fit).
    let s = with_queue_a(
        "[server]\nexecutor_timeout = \"2s\"\nmax_lease_wait = \"500ms\"\n\n[cluster]\nheartbeat_interval = \"50ms\"\nelection_timeout = \"150ms\"\n",
    )
    .await;
    let nodes = vec![node("n1", "2")];
    let (id, lease) = one_running_job(&s, &nodes).await;
    // The executor goes silent: after the timeout its run is lost and the job queued again.
    let j = s.wait_job(&id, Duration::from_secs(20), "queued", |j| j["state"] == "queued").await;
    assert_eq!(j["runs"][0]["state"], "lost");
    assert!(j["runs"][0]["reason"].as_str().unwrap_or("").contains("executor e1 lost"), "{j}");
    // Its nodes left the pool.
    let (_, m) = s.get("/metrics").await;
    let text = m.as_str().unwrap_or("").to_string();
    assert!(text.contains("convoy_nodes 0"), "{text}");
    // When it comes back it gets the job again as a new run, and its old run is killed.
    let held = vec![json!({"run_id": lease["run_id"], "job_id": lease["job_id"], "state": "running"})];
    let v = s.poll("e1", &nodes, &held, 0.0).await;
    assert_eq!(v["kills"][0]["run_id"], lease["run_id"], "{v}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = s.poll("e1", &nodes, &[], 2.0).await;
        if let Some(l) = v["leases"].as_array().and_then(|l| l.first()) {
            assert_ne!(l["run_id"], lease["run_id"]);
            assert_eq!(l["job_id"].as_str(), Some(id.as_str()));
            break;
        }
        assert!(Instant::now() < deadline, "no new lease");
    }
}

/// The queue report comes from scheduling cycles, and cycles are skipped while nothing is queued:
/// once the last job of a queue ended, an idle cycle still runs (on the slow timer) so the
/// report does not keep showing the finished job's allocation.
#[tokio::test]
async fn the_queue_report_drops_an_ended_job_s_allocation_with_nothing_queued() {
    let s = with_queue_a("").await;
    let nodes = vec![node("n1", "4")];
    s.poll("e1", &nodes, &[], 0.0).await;
    s.submit("A", "s", vec![job("1")]).await;
    let v = s.poll("e1", &nodes, &[], 20.0).await;
    let lease = v["leases"][0].clone();
    assert!(lease.is_object(), "{v}");
    s.report("e1", vec![ev(&lease, "pending"), ev(&lease, "running")]).await;
    let share = |r: &Value| r["pools"].as_array().and_then(|p| p.first()).map(|p| p["actual_share"].clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = s.get("/v1/queues/A/report").await;
        if share(&r).is_some_and(|a| a.as_f64().is_some_and(|a| a > 0.0)) {
            break;
        }
        assert!(Instant::now() < deadline, "the running job never showed in the report: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut done = ev(&lease, "succeeded");
    done["exit_code"] = json!(0);
    s.report("e1", vec![done]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = s.get("/v1/queues/A/report").await;
        // A pool with nothing allocated or asked for leaves the report.
        if share(&r).is_none_or(|a| a == json!(0.0)) {
            break;
        }
        assert!(Instant::now() < deadline, "the report kept the ended job's allocation: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
