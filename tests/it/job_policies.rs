//! Dependencies and retries through a real server and a real agent on the fake runtime (jobs
//! "run" for the seconds of `convoy.io/fake-runtime` and exit with `convoy.io/fake-exit-code`):
//! an afterok chain runs in order, a failed job fails the job waiting for its success naming
//! it, a dependency on an unknown job is refused naming the field, and a run failing with a
//! retried exit code keeps the job's id and shows each run with its attempt number.

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

/// A fake job that runs for `seconds` and exits with `exit`.
fn job(seconds: u32, exit: i32) -> Value {
    json!({
        "pod_spec": {"containers": [{"name": "fake", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
        "annotations": {"convoy.io/fake-runtime": seconds.to_string(), "convoy.io/fake-exit-code": exit.to_string()}
    })
}

fn with(mut job: Value, key: &str, value: Value) -> Value {
    job[key] = value;
    job
}

fn time_of(job: &Value, key: &str) -> String {
    job["runs"][0][key].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_afterok_chain_runs_in_order_and_a_failed_job_fails_its_dependent() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let _agent = Reap(s.fake_agent(1, "8", "8Gi"));

    // a → b → c by client id within one request; each needs the one before to succeed.
    let chain = vec![
        with(job(1, 0), "client_id", json!("a")),
        with(with(job(1, 0), "client_id", json!("b")), "depends_on", json!([{"client_id": "a"}])),
        with(with(job(0, 0), "client_id", json!("c")), "depends_on", json!([{"client_id": "b", "on": "succeeded"}])),
    ];
    let ids = s.submit("A", "chain", chain).await;
    let b = s.job(&ids[1]).await;
    assert_eq!(b["state"], "queued", "{b:#}");
    assert_eq!(b["reason"], json!(format!("waiting for {} to succeed", ids[0])), "{b:#}");
    assert_eq!(b["depends_on"], json!([{"job_id": ids[0], "on": "succeeded", "met": false}]));
    let mut done = Vec::new();
    for id in &ids {
        done.push(s.wait_job(id, Duration::from_secs(30), "succeeded", |j| j["state"] == "succeeded").await);
    }
    // Each started only after the one before had finished.
    for w in done.windows(2) {
        assert!(time_of(&w[0], "finished_at") <= time_of(&w[1], "leased_at"), "{:#} then {:#}", w[0], w[1]);
    }
    assert_eq!(done[2]["depends_on"][0]["met"], json!(true));

    // A parent that fails: its afterok dependent (in another job set) fails naming it, its
    // afternotok one runs.
    let parent = s.submit("A", "p", vec![job(0, 3)]).await.remove(0);
    let kids = s
        .submit(
            "A",
            "kids",
            vec![
                with(job(0, 0), "depends_on", json!([{"job_id": parent}])),
                with(job(0, 0), "depends_on", json!([{"job_id": parent, "on": "failed"}])),
            ],
        )
        .await;
    let ok = s.wait_job(&kids[0], Duration::from_secs(30), "failed", |j| j["state"] == "failed").await;
    assert_eq!(ok["reason"], json!(format!("dependency {parent} ended failed; it had to succeed")), "{ok:#}");
    assert_eq!(ok["runs"], json!([]), "it never ran");
    s.wait_job(&kids[1], Duration::from_secs(30), "succeeded", |j| j["state"] == "succeeded").await;
    let events = s.job(&kids[0]).await;
    let (_, detail) = s.get(&format!("/v1/jobs/{}", kids[0])).await;
    let messages: Vec<&str> =
        detail["events"].as_array().into_iter().flatten().filter_map(|e| e["message"].as_str()).collect();
    assert!(messages.contains(&format!("waiting for {parent} to succeed").as_str()), "{events:#}");

    // A dependency on a job that does not exist is refused, naming the field; nothing is stored.
    let before = s.count_jobs("queue=A").await;
    let missing = "01JAAAAAAAAAAAAAAAAAAAAAAA";
    let body = json!({"queue": "A", "job_set": "x", "jobs": [job(0, 0), with(job(0, 0), "depends_on", json!([{"job_id": missing}]))]});
    let (st, v) = s.post("/v1/jobs", &body).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["field"], "jobs[1].depends_on[0].job_id", "{v}");
    let body =
        json!({"queue": "A", "job_set": "x", "jobs": [with(job(0, 0), "depends_on", json!([{"client_id": "later"}]))]});
    let (st, v) = s.post("/v1/jobs", &body).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("jobs[0].depends_on[0].client_id")), "{v}");
    assert_eq!(s.count_jobs("queue=A").await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_exit_code_keeps_the_id_and_shows_each_attempt() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let _agent = Reap(s.fake_agent(1, "8", "8Gi"));
    let retry = json!({"max_attempts": 2, "on_exit_codes": [75]});
    let id = s.submit("A", "r", vec![with(job(0, 75), "retry", retry.clone())]).await.remove(0);
    let j = s.wait_job(&id, Duration::from_secs(30), "failed", |j| j["state"] == "failed").await;
    assert_eq!(j["id"], json!(id));
    let runs = j["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 2, "{j:#}");
    let attempts: Vec<(&Value, &Value, &Value)> =
        runs.iter().map(|r| (&r["attempt"], &r["state"], &r["exit_code"])).collect();
    assert_eq!(attempts, vec![(&json!(1), &json!("failed"), &json!(75)), (&json!(2), &json!("failed"), &json!(75))]);
    assert_eq!(j["retry"]["max_attempts"], json!(2));
    let (_, detail) = s.get(&format!("/v1/jobs/{id}")).await;
    let requeued: Vec<&Value> =
        detail["events"].as_array().into_iter().flatten().filter(|e| e["kind"] == "requeued").collect();
    assert_eq!(requeued.len(), 1, "{detail:#}");
    assert_eq!(requeued[0]["message"], "retry 2 of 2 after exit code 75");
    // An exit code the policy does not name is not retried.
    let other = s.submit("A", "r", vec![with(job(0, 1), "retry", retry)]).await.remove(0);
    let j = s.wait_job(&other, Duration::from_secs(30), "failed", |j| j["state"] == "failed").await;
    assert_eq!(j["runs"].as_array().map(Vec::len), Some(1), "{j:#}");
    // The metrics count the retry by its cause.
    let (_, text) = s.text("/metrics").await;
    assert!(text.contains("convoy_job_retries_total{reason=\"exit_code\"} 1"), "{text}");
}
