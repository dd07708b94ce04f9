//! A real server with a `priority` pool ([scheduler.pools.<pool>]): head-of-line blocking and
//! the zero-slot line seen through the HTTP API, and the policy in the queue report.

use crate::common::{Server, config};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A job of `priority` requesting `gpus` GPUs (and a little cpu).
fn gpu_job(priority: u32, gpus: u32) -> Value {
    let mut resources = json!({"cpu": "1", "memory": "64Mi"});
    if gpus > 0 {
        resources["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    json!({
        "priority": priority,
        "pod_spec": {"containers": [{
            "name": "main",
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": resources, "limits": resources}
        }]}
    })
}

#[tokio::test]
async fn a_priority_pool_blocks_lower_priorities_behind_a_waiting_job() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let text = config(dir, "").replace("[auth]", "[scheduler.pools.gpu]\npolicy = \"priority\"\n\n[auth]");
    let s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    let nodes = vec![
        json!({"name": "n1", "pool": "gpu", "allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}}),
    ];
    s.poll("e1", &nodes, &[], 0.0).await;

    // Three of the four GPUs taken.
    let hold = s.submit("A", "s", vec![gpu_job(5, 3)]).await;
    s.wait_job(&hold[0], Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;

    // A priority-1 job needing 2 GPUs waits for room; a priority-2 job needing 1 would fit but
    // waits behind it; a CPU-only job of priority 9 is in a line of its own and starts.
    let wide = s.submit("B", "s", vec![gpu_job(1, 2)]).await;
    let rest = s.submit("A", "s", vec![gpu_job(2, 1), gpu_job(9, 0)]).await;
    let (narrow, cpu) = (&rest[0], &rest[1]);
    s.wait_job(cpu, Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    let want = format!("behind higher-priority pending job {} (priority 1) in pool gpu", wide[0]);
    let j = s.wait_job(narrow, Duration::from_secs(20), "behind the wide job", |j| j["reason"] == json!(want)).await;
    assert_eq!(j["state"], "queued", "{j:#}");
    let j = s.job(&wide[0]).await;
    assert_eq!(
        (&j["state"], &j["reason"]),
        (&json!("queued"), &json!("no node with 2 nvidia.com/gpu free in pool gpu"))
    );

    // The queue report names the pool's policy.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, r) = s.get("/v1/queues/A/report").await;
        assert_eq!(st, 200, "{r}");
        if let Some(p) = r["pools"].as_array().and_then(|p| p.first()) {
            assert_eq!((&p["pool"], &p["policy"]), (&json!("gpu"), &json!("priority")), "{r}");
            assert!(p.get("proportional_target").is_none(), "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "no pool in the report: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_bad_pool_policy_is_refused_at_start_naming_the_key() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    for (extra, key) in [
        ("[scheduler.pools.gpu]\npolicy = \"fifo\"\n", "scheduler.pools.gpu.policy"),
        ("[scheduler.pools.gpu]\npolicy = \"fair_share\"\npreemption = true\n", "scheduler.pools.gpu.preemption"),
    ] {
        let text = config(dir, "").replace("[auth]", &format!("{extra}\n[auth]"));
        let path = dir.join("bad.toml");
        std::fs::write(&path, text).expect("write config");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["server", "--config"])
            .arg(&path)
            .output()
            .expect("convoy runs");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{key} not named: {err}");
    }
}
