//! The fake runtime at scale, with the real server and the real agent: 1,000 declared nodes,
//! 100,000 short jobs from 10 queues submitted over REST. Every job succeeds, and while the
//! cluster is full each queue holds its fair share of it.

use crate::common::Server;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const NODES: u32 = 1000;
const CPUS_PER_NODE: u32 = 8;
const QUEUES: usize = 10;
const JOBS: usize = 100_000;
const BATCH: usize = 1000;

/// Jobs holding a node (leased, pending or running) per queue, and all live jobs, from /metrics.
async fn holding(s: &Server) -> (BTreeMap<String, u64>, u64) {
    let (_, text) = s.text("/metrics").await;
    let mut per_queue = BTreeMap::new();
    let mut live = 0;
    for line in text.lines().filter(|l| l.starts_with("convoy_jobs{")) {
        let Some((labels, n)) = line.rsplit_once(' ') else { continue };
        let n: u64 = n.parse().unwrap_or(0);
        let queue = labels.split("queue=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("").to_string();
        let state = labels.split("state=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("");
        live += n;
        if ["leased", "pending", "running"].contains(&state) {
            *per_queue.entry(queue).or_insert(0) += n;
        }
    }
    (per_queue, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_jobs_on_a_thousand_fake_nodes() {
    let s = Server::start("max_jobs_per_request = 1000");
    s.ready().await;
    for q in 0..QUEUES {
        s.create_queue(&format!("q{q}")).await;
    }
    // Jobs run for 2 s on the fake nodes, long enough to see the cluster full.
    let job = json!({
        "pod_spec": {"containers": [{"name": "fake", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
        "annotations": {"convoy.io/fake-runtime": "2"}
    });
    let t = Instant::now();
    for b in 0..JOBS / BATCH {
        let body = json!({"queue": format!("q{}", b % QUEUES), "job_set": "load", "jobs": vec![job.clone(); BATCH]});
        let (st, v) = s.post("/v1/jobs", &body).await;
        assert_eq!(st, 200, "{v}");
    }
    let submit = t.elapsed();
    let (_, live) = holding(&s).await;
    assert_eq!(live, JOBS as u64);

    let mut agent = s.fake_agent(NODES, &CPUS_PER_NODE.to_string(), "64Gi");
    let t = Instant::now();

    // Sample the cluster while it is full: every queue has the same demand and weight, so each
    // should hold a tenth of the slots, within 5% of that.
    let slots = u64::from(NODES * CPUS_PER_NODE);
    let fair = 1.0 / QUEUES as f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    let sample = loop {
        let (per_queue, _) = holding(&s).await;
        let total: u64 = per_queue.values().sum();
        if total >= slots * 98 / 100 {
            break per_queue;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster never filled up ({total} of {slots} slots); agent log:\n{}",
            std::fs::read_to_string(s.dir.join("agent.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(sample.len(), QUEUES, "{sample:?}");
    for (q, n) in &sample {
        let share = *n as f64 / slots as f64;
        assert!(
            (share - fair).abs() <= 0.05 * fair,
            "queue {q} holds {n} of {slots} slots ({share:.4}); fair share {fair}: {sample:?}"
        );
    }
    // The scheduler's own report agrees on the fair share.
    let (_, report) = s.get("/v1/queues/q0/report").await;
    let adjusted = report["pools"][0]["adjusted_fair_share"].as_f64().unwrap_or(0.0);
    assert!((adjusted - fair).abs() < 1e-9, "{report}");
    assert!(report["pools"][0]["protected"].is_boolean(), "{report}");

    // Every job runs to success.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (_, live) = holding(&s).await;
        if live == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{live} jobs still live; agent log tail:\n{}",
            std::fs::read_to_string(s.dir.join("agent.log"))
                .unwrap_or_default()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain = t.elapsed();
    for state in ["failed", "cancelled", "preempted", "queued"] {
        assert_eq!(s.count_jobs(&format!("state={state}&limit=1000")).await, 0, "jobs {state}");
    }
    let (st, v) = s.get("/v1/jobs?queue=q3&job_set=load&limit=1000").await;
    assert_eq!(st, 200);
    let page = v["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(page.len(), 1000);
    assert!(
        page.iter().all(|j| j["state"] == "succeeded" && j["runs"].as_array().is_some_and(|r| r.len() == 1)),
        "{}",
        page[0]
    );
    let _ = agent.kill();
    let _ = agent.wait();
    eprintln!("submitted {JOBS} jobs in {submit:?}; all succeeded {drain:?} after the agent started");
    let _: Value = json!(null);
}
