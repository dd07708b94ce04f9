//! The queue report of a real server: allocation at home and as a guest on earmarked nodes, and
//! the decayed usage (`queue_usage_halftime`), which is replicated state and so survives a
//! restart.

use crate::common::{Server, config, job};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn report(s: &Server, queue: &str) -> Value {
    let (st, v) = s.get(&format!("/v1/queues/{queue}/report")).await;
    assert_eq!(st, 200, "{v}");
    v
}

#[tokio::test]
async fn the_report_shows_earmarked_allocation_and_a_usage_that_survives_a_restart() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let text = config(dir, "").replace("[scheduler]\n", "[scheduler]\nqueue_usage_halftime = \"1h\"\n");
    let mut s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("A").await;
    // n1 is earmarked for A; n2 for nobody. A's jobs take their home node first.
    let nodes = vec![
        json!({"name": "n1", "allocatable": {"cpu": "4", "memory": "16Gi"}, "labels": {"convoy.io/reserved-for": "A"}}),
        json!({"name": "n2", "allocatable": {"cpu": "4", "memory": "16Gi"}}),
    ];
    s.poll("e1", &nodes, &[], 0.0).await;
    let ids = s.submit("A", "s", vec![job("1"), job("1")]).await;
    for id in &ids {
        s.wait_job(id, Duration::from_secs(20), "leased", |j| j["state"] == "leased").await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let before = loop {
        let r = report(&s, "A").await;
        let home = r["pools"][0]["home_allocated"]["cpu"].clone();
        let usage = r["usage"]["default"].as_f64();
        if home == json!("2") && usage.is_some_and(|u| u > 0.0) {
            assert_eq!(r["pools"][0]["guest_allocated"], json!({}), "{r}");
            assert_eq!(r["pools"][0]["allocated"]["cpu"], json!("2"), "{r}");
            break usage.unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "no home allocation or usage in the report: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A holds a quarter of the pool: its average moves towards 0.25 with a half-time of an hour.
    assert!(before < 0.25 * (1.0 - 0.5f64.powf(60.0 / 3600.0)), "{before}");

    s.terminate();
    let s = Server::start_in(dir, &text);
    s.ready().await;
    // Before any cycle of the new process: the usage comes from the replicated state.
    let r = report(&s, "A").await;
    let after = r["usage"]["default"].as_f64().expect("usage after the restart");
    assert!(after >= before && after < 0.25, "{before} then {after}: {r}");
}
