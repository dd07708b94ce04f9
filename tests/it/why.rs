//! `GET /v1/jobs/{id}/why`, `convoy why` and the job's page, on a real server with a fake agent:
//! a job that waits for room is told how much and where, with an estimate from the running jobs'
//! deadlines; a job of a cordoned queue is told so, and uncordoning the queue starts it.

use crate::cli_client::ok;
use crate::common::Server;
use serde_json::{Value, json};
use std::time::Duration;

/// A job of `cpu` cpus that runs for an hour on the fake node, with a 10-minute deadline.
fn job(cpu: &str) -> Value {
    json!({
        "pod_spec": {"activeDeadlineSeconds": 600,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "annotations": {"convoy.io/fake-runtime": "3600"}
    })
}

async fn submit(s: &Server, queue: &str, jobs: Vec<Value>) -> Vec<String> {
    let (st, v) = s.post("/v1/jobs", &json!({"queue": queue, "job_set": "set", "jobs": jobs})).await;
    assert_eq!(st, 200, "{v}");
    v["job_ids"].as_array().expect("ids").iter().map(|i| i.as_str().expect("id").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_is_told_what_would_start_it_and_when() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    let mut agent = s.fake_agent(1, "4", "16Gi");
    // Three 1-cpu jobs fill three of the node's four cpus.
    let running = submit(&s, "A", vec![job("1"), job("1"), job("1")]).await;
    for id in &running {
        s.wait_job(id, Duration::from_secs(20), "running", |j| j["state"] == "running").await;
    }
    // A 2-cpu job waits behind them.
    let big = submit(&s, "A", vec![job("2")]).await.remove(0);
    let j = s.wait_job(&big, Duration::from_secs(10), "waiting with a reason", |j| j["reason"].is_string()).await;
    assert_eq!(j["state"], "queued", "{j}");

    let (st, why) = s.get(&format!("/v1/jobs/{big}/why")).await;
    assert_eq!(st, 200, "{why}");
    assert_eq!((&why["queue_position"], &why["jobs_ahead"]), (&json!(1), &json!(0)), "{why}");
    let conditions = why["would_start_if"].as_array().expect("conditions");
    assert_eq!(conditions.len(), 1, "{why:#}");
    assert_eq!(conditions[0]["kind"], "capacity", "{why:#}");
    assert_eq!(
        conditions[0]["detail"],
        "2 cpu, 1Gi memory free on one node of pool default (the most free now is 1 cpu, 13Gi memory)",
        "{why:#}"
    );
    // One of the running jobs must end: the first to reach its 10-minute deadline.
    let estimate = &why["estimated_start"];
    assert_eq!(
        estimate["method"], "when 1 running job ends (1 by its deadline), if nothing more urgent arrives first",
        "{why:#}"
    );
    assert!(estimate["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{why:#}");

    // The CLI prints the same, after the reason line.
    let text = ok(&s.url, &["why", &big]).await;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with(&format!("{big} is queued: ")), "{text}");
    assert_eq!(lines[1], "  place in queue A: 1, 0 ahead of it in its pools", "{text}");
    assert_eq!(
        lines[3],
        "    - 2 cpu, 1Gi memory free on one node of pool default (the most free now is 1 cpu, 13Gi memory) [capacity]",
        "{text}"
    );
    assert!(lines[4].starts_with("  estimated start: ") && lines[4].contains("1 by its deadline"), "{text}");

    // The job's page shows it too.
    let (st, html) = s.text(&format!("/ui/jobs/{big}")).await;
    assert_eq!(st, 200, "{html}");
    assert!(html.contains("<h2>What would start it</h2>"), "{html}");
    assert!(html.contains("<li data-kind=\"capacity\">2 cpu, 1Gi memory free on one node of pool default"), "{html}");

    // A cordoned queue's job: uncordoning is the condition, and meeting it starts the job.
    assert_eq!(s.post("/v1/queues/B/cordon", &json!({})).await.0, 200);
    let small = submit(&s, "B", vec![job("1")]).await.remove(0);
    s.wait_job(&small, Duration::from_secs(10), "waiting with a reason", |j| {
        j["reason"].as_str().is_some_and(|r| r.contains("cordoned"))
    })
    .await;
    let (_, why) = s.get(&format!("/v1/jobs/{small}/why")).await;
    assert_eq!(why["would_start_if"], json!([{"kind": "queue_uncordoned", "detail": "queue B uncordoned"}]), "{why:#}");
    assert_eq!(s.post("/v1/queues/B/uncordon", &json!({})).await.0, 200);
    s.wait_job(&small, Duration::from_secs(20), "running once uncordoned", |j| j["state"] == "running").await;

    // A running job: its state, nothing to start; an unknown job: 404.
    let (st, why) = s.get(&format!("/v1/jobs/{}/why", running[0])).await;
    assert_eq!((st, &why["state"], &why["would_start_if"]), (200, &json!("running"), &json!([])), "{why}");
    let (st, _) = s.get("/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/why").await;
    assert_eq!(st, 404);
    let _ = agent.kill();
    let _ = agent.wait();
}
