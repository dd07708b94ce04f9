//! A real server with a minimum runtime before preemption and with floating resources
//! (`[scheduler] min_runtime_before_preemption`, `floating_resources`), seen through the HTTP
//! API: young jobs spared from fair-share eviction with the reason on the waiting jobs, then
//! evicted once old enough; licences counted per pool, refused at submission when unknown or
//! too many, and the metrics of both.

use crate::common::{Server, config, node};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A server whose `[scheduler]` section has `extra` too.
fn server(extra: &str) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let text = config(tmp.path(), "")
        .replace("schedule_interval_max = \"200ms\"", &format!("schedule_interval_max = \"200ms\"\n{extra}"));
    (Server::start_in(tmp.path(), &text), tmp)
}

/// A job item of `class` requesting one cpu and `more` resources.
fn job(class: &str, more: Value) -> Value {
    let mut requests = json!({"cpu": "1", "memory": "64Mi"});
    for (k, v) in more.as_object().into_iter().flatten() {
        requests[k] = v.clone();
    }
    json!({
        "priority_class": class,
        "pod_spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"],
                                     "resources": {"requests": requests}}]}
    })
}

async fn metrics(s: &Server) -> String {
    s.client.get(format!("{}/metrics", s.url)).send().await.expect("metrics").text().await.expect("text")
}

#[tokio::test]
async fn young_jobs_are_spared_fair_share_eviction_until_their_minimum_runtime() {
    let (s, _tmp) = server("min_runtime_before_preemption = \"4s\"");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    s.poll("e1", &[node("n1", "2")], &[], 0.0).await;
    let a = s.submit("A", "s", vec![job("preemptible", json!({})), job("preemptible", json!({}))]).await;
    for id in &a {
        s.wait_job(id, Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    }
    let leased = Instant::now();
    // B's jobs find A above its share, but A's jobs have run less than 4 s: they wait, saying so.
    let b = s.submit("B", "s", vec![job("preemptible", json!({}))]).await;
    let j = s
        .wait_job(&b[0], Duration::from_secs(10), "waiting for young jobs", |j| {
            j["reason"].as_str().is_some_and(|r| r.contains("fair-share eviction spared 2 running jobs"))
        })
        .await;
    assert_eq!(j["state"], "queued", "{j:#}");
    assert!(leased.elapsed() < Duration::from_secs(4), "the test was too slow to see the young jobs");
    let m = metrics(&s).await;
    assert!(m.contains("convoy_evictions_spared_min_runtime{pool=\"default\"} 2"), "{m}");
    for id in &a {
        assert_eq!(s.job(id).await["state"], "leased");
    }
    // Once they have run 4 s, one of them makes room for B.
    let j = s.wait_job(&b[0], Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    assert!(leased.elapsed() >= Duration::from_secs(3), "B started after {:?}: {j:#}", leased.elapsed());
    let mut states = Vec::new();
    for id in &a {
        states.push(s.job(id).await["state"].as_str().unwrap_or("").to_string());
    }
    states.sort();
    assert_eq!(states, ["leased", "preempted"]);
}

#[tokio::test]
async fn licences_are_counted_per_pool_and_unknown_resources_are_refused() {
    let (s, _tmp) = server("floating_resources = [{ name = \"licence/matlab\", pools = { default = \"3\" } }]");
    s.ready().await;
    s.create_queue("A").await;
    s.poll("e1", &[node("n1", "32")], &[], 0.0).await;

    // Refused at submission, naming the field: a resource neither a node nor a floating
    // resource has, and more licences than any pool has.
    for (more, field, says) in [
        (
            json!({"licence/maple": "1"}),
            "jobs[1].pod_spec.containers[0].resources.requests.licence/maple",
            "no node has a resource named \"licence/maple\"",
        ),
        (
            json!({"licence/matlab": "4"}),
            "jobs[1].pod_spec.containers[0].resources.requests.licence/matlab",
            "largest: 3",
        ),
    ] {
        let body = json!({"queue": "A", "job_set": "s", "jobs": [job("default", json!({})), job("default", more)]});
        let (st, v) = s.post("/v1/jobs", &body).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["field"], field, "{v}");
        assert!(v["detail"].as_str().is_some_and(|d| d.contains(says)) || v.to_string().contains(says), "{v}");
    }
    assert_eq!(s.count_jobs("queue=A").await, 0, "nothing of a refused submission is stored");

    // Five jobs of one licence each on plenty of cpu: three run, two wait for a licence.
    let licence = json!({"licence/matlab": "1"});
    let ids = s.submit("A", "s", (0..5).map(|_| job("default", licence.clone())).collect()).await;
    for id in &ids[..3] {
        s.wait_job(id, Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    }
    let why = "pool default has 0 of 3 licence/matlab left (floating resource); the job needs 1";
    for id in &ids[3..] {
        let j = s.wait_job(id, Duration::from_secs(20), "waiting for a licence", |j| j["reason"] == why).await;
        assert_eq!(j["state"], "queued", "{j:#}");
    }
    // The agent's pod spec does not ask Kubernetes for the licence (no node has it).
    let v = s.poll("e1", &[node("n1", "32")], &[], 5.0).await;
    let lease = &v["leases"][0];
    assert_eq!(
        lease["pod_spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "1", "memory": "64Mi"}),
        "{v}"
    );
    let m = metrics(&s).await;
    let labels = "{pool=\"default\",resource=\"licence/matlab\"}";
    assert!(m.contains(&format!("convoy_floating_resource_capacity{labels} 3000")), "{m}");
    assert!(m.contains(&format!("convoy_floating_resource_allocated{labels} 3000")), "{m}");

    // The first one ends: the next takes its licence, the last still waits.
    let first = s.job(&ids[0]).await;
    let run = json!({"run_id": first["runs"][0]["run_id"], "job_id": ids[0]});
    let ev = |kind: &str| {
        let mut e = run.clone();
        e["kind"] = json!(kind);
        e
    };
    let mut done = ev("succeeded");
    done["exit_code"] = json!(0);
    s.report("e1", vec![ev("pending"), ev("running"), done]).await;
    s.wait_job(&ids[3], Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let j = s.job(&ids[4]).await;
    assert_eq!((&j["state"], &j["reason"]), (&json!("queued"), &json!(why)), "{j:#}");
}
