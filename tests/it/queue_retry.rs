//! Retry policies of queues through a real server, its CLI and a real agent on the fake runtime:
//! a bad policy is refused naming the field and nothing is stored; a job without a policy of its
//! own is retried by its queue's, and the `requeued` event names the queue; the CLI sets, shows
//! and removes the policy.

use crate::cli_client::ok;
use crate::common::Server;
use serde_json::{Value, json};
use std::process::Child;
use std::time::Duration;

/// Stops the agent however the test ends.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fake job that ends at once with `exit`.
fn job(exit: i32) -> Value {
    json!({
        "pod_spec": {"containers": [{"name": "fake", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
        "annotations": {"convoy.io/fake-runtime": "0", "convoy.io/fake-exit-code": exit.to_string()}
    })
}

fn requeued(job: &Value) -> Vec<String> {
    job["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "requeued")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_retry_policy_retries_its_jobs_and_is_set_through_the_api_and_the_cli() {
    let s = Server::start("");
    s.ready().await;

    // A bad policy is refused naming the field; nothing is stored.
    let (st, v) = s.post("/v1/queues", &json!({"name": "physics", "retry": {"max_attempts": 0}})).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("retry.max_attempts")), "{v}");
    assert_eq!(s.get("/v1/queues/physics").await.0, 404);
    let bad = json!({"name": "physics", "retry": {"max_attempts": 2, "on_exit_codes": [0]}});
    let (st, v) = s.post("/v1/queues", &bad).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("retry.on_exit_codes[0]")), "{v}");

    let retry = json!({"max_attempts": 2, "on_exit_codes": [75], "on_oom": false, "on_node_failure": false, "backoff_seconds": 0});
    let (st, v) = s.post("/v1/queues", &json!({"name": "physics", "retry": retry})).await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(s.get("/v1/queues/physics").await.1["retry"], retry);
    // A queue without one has no `retry` key.
    s.create_queue("plain").await;
    assert!(s.get("/v1/queues/plain").await.1.get("retry").is_none());

    let _agent = Reap(s.fake_agent(1, "8", "8Gi"));
    let id = s.submit("physics", "r", vec![job(75)]).await.remove(0);
    let j = s.wait_job(&id, Duration::from_secs(30), "failed", |j| j["state"] == "failed").await;
    assert_eq!(j["runs"].as_array().map(Vec::len), Some(2), "{j:#}");
    assert!(j.get("retry").is_none_or(Value::is_null), "the queue's policy is not the job's: {j:#}");
    let (_, detail) = s.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(requeued(&detail), vec!["retry 2 of 2 after exit code 75 (queue physics's retry policy)"]);
    // A job's own policy wins whole: exit code 75 is not among its codes.
    let own = json!({"max_attempts": 3, "on_exit_codes": [76]});
    let mut with_own = job(75);
    with_own["retry"] = own;
    let id = s.submit("physics", "r", vec![with_own]).await.remove(0);
    let j = s.wait_job(&id, Duration::from_secs(30), "failed", |j| j["state"] == "failed").await;
    assert_eq!(j["runs"].as_array().map(Vec::len), Some(1), "{j:#}");

    // An update with a bad policy is refused and leaves the stored one.
    let (st, v) = s.put("/v1/queues/physics", &json!({"name": "physics", "retry": {"max_attempts": 101}})).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("retry.max_attempts")), "{v}");
    assert_eq!(s.get("/v1/queues/physics").await.1["retry"], retry);

    // The CLI sets it, shows it, and removes it.
    let url = s.url.clone();
    ok(
        &url,
        &["queue", "update", "physics", "--retry", "max_attempts=3,on_exit_codes=75:76,on_oom,backoff_seconds=30"],
    )
    .await;
    let stored = s.get("/v1/queues/physics").await.1;
    assert_eq!(
        stored["retry"],
        json!({"max_attempts": 3, "on_exit_codes": [75, 76], "on_oom": true, "on_node_failure": false, "backoff_seconds": 30})
    );
    let list = ok(&url, &["queue", "list", "--output", "table"]).await;
    assert!(list.contains("up to 3 attempts on exit codes [75, 76], OOM kills, back-off 30 s"), "{list}");
    let (_, page) = s.text("/ui/queues/physics").await;
    assert!(page.contains("up to 3 attempts on exit codes [75, 76], OOM kills, back-off 30 s"), "{page}");
    ok(&url, &["queue", "update", "physics", "--retry", "none"]).await;
    assert!(s.get("/v1/queues/physics").await.1.get("retry").is_none());
}
