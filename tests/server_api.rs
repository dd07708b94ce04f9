//! The public API of a real `convoy server`: queues, submissions, job control, bad input.

mod common;

use common::{Server, job, pod};
use serde_json::{Value, json};

#[tokio::test]
async fn queue_crud() {
    let s = Server::start("");
    s.ready().await;
    let (st, v) = s.post("/v1/queues", &json!({"name": "team-a", "priority_factor": 2.0, "owners": ["alice"]})).await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["priority_factor"], 2.0);
    let (st, _) = s.post("/v1/queues", &json!({"name": "team-a"})).await;
    assert_eq!(st, 409);
    let (st, v) = s.get("/v1/queues/team-a").await;
    assert_eq!((st, v["owners"][0].as_str()), (200, Some("alice")));
    let (st, v) = s.get("/v1/queues").await;
    assert_eq!(st, 200);
    assert_eq!(v.as_array().map(|a| a.len()), Some(1));
    let (st, v) = s.put("/v1/queues/team-a", &json!({"name": "team-a", "priority_factor": 3.0, "cordoned": true})).await;
    assert_eq!(st, 200, "{v}");
    let (_, v) = s.get("/v1/queues/team-a").await;
    assert_eq!((v["priority_factor"].as_f64(), v["cordoned"].as_bool()), (Some(3.0), Some(true)));
    // Cordoned queues refuse submissions.
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "team-a", "job_set": "s", "jobs": [job("1")]})).await;
    assert_eq!(st, 409, "{v}");
    let (st, _) = s.put("/v1/queues/team-a", &json!({"name": "team-a"})).await;
    assert_eq!(st, 200);
    // A queue with jobs that are not finished is only deleted with force.
    s.submit("team-a", "s", vec![job("1")]).await;
    let (st, v) = s.delete("/v1/queues/team-a").await;
    assert_eq!(st, 409, "{v}");
    let (st, _) = s.delete("/v1/queues/team-a?force=true").await;
    assert_eq!(st, 204);
    let (st, v) = s.get("/v1/queues/team-a").await;
    assert_eq!(st, 404);
    assert_eq!(v["status"], 404);
    // Bad queues are refused naming the field.
    for (body, field) in [
        (json!({"name": "q", "priority_factor": 0}), "priority_factor"),
        (json!({"name": "bad name"}), "name"),
        (json!({"name": "q", "resource_limits": {"cpu": 1.5}}), "resource_limits.cpu"),
        (json!({"name": "q", "colour": "blue"}), "."),
    ] {
        let (st, v) = s.post("/v1/queues", &body).await;
        assert_eq!(st, 400, "{body}: {v}");
        let f = v["field"].as_str().unwrap_or("");
        assert!(f.contains(field) || v["detail"].as_str().unwrap_or("").contains("colour"), "{body}: {v}");
    }
    let (st, v) = s.put("/v1/queues/x", &json!({"name": "y"})).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("name")));
}

#[tokio::test]
async fn submit_get_list_reprioritize_cancel() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let ids = s.submit("A", "set-1", vec![job("1"), job("2"), job("3")]).await;
    assert_eq!(ids.len(), 3);
    let j = s.job(&ids[0]).await;
    assert_eq!(j["state"], "queued");
    assert_eq!(j["queue"], "A");
    assert_eq!(j["requests"]["cpu"], "1");
    assert_eq!(j["events"].as_array().map(|e| e.len()), Some(2));
    assert_eq!(j["pod_spec"]["containers"][0]["name"], "main");
    // No executor yet: the scheduler says why the job waits.
    let j = s.wait_job(&ids[0], 10, |j| j["reason"].is_string()).await;
    assert!(j["reason"].as_str().unwrap_or("").contains("no pool"), "{j}");

    let (st, v) = s.get("/v1/jobs?queue=A&job_set=set-1&limit=2").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["jobs"].as_array().map(|a| a.len()), Some(2));
    let next = v["next"].as_str().expect("a next page").to_string();
    let (_, v) = s.get(&format!("/v1/jobs?queue=A&job_set=set-1&limit=2&after={next}")).await;
    assert_eq!(v["jobs"][0]["id"].as_str(), Some(ids[2].as_str()));
    assert!(v["next"].is_null());

    let (st, v) = s.post("/v1/jobs/reprioritize", &json!({"queue": "A", "job_set": "set-1", "job_ids": [ids[0]], "priority": 7})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.job(&ids[0]).await["priority"], 7);

    let (st, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "set-1", "job_ids": [ids[1]]})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["job_ids"].as_array().map(|a| a.len()), Some(1));
    assert_eq!(s.job(&ids[1]).await["state"], "cancelled");
    let (_, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "set-1", "states": ["queued"]})).await;
    assert_eq!(v["job_ids"].as_array().map(|a| a.len()), Some(2));
    let (_, v) = s.get("/v1/jobs?queue=A&state=cancelled").await;
    assert_eq!(v["jobs"].as_array().map(|a| a.len()), Some(3));
    let (st, v) = s.get("/v1/jobs?state=lost").await;
    assert_eq!((st, v["field"].as_str()), (400, Some("state")));
    let (st, _) = s.get("/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV").await;
    assert_eq!(st, 404);
    let (st, v) = s.get("/v1/jobs/not-an-id").await;
    assert_eq!((st, v["field"].as_str()), (400, Some("id")));
}

#[tokio::test]
async fn client_id_resubmission_is_idempotent() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let mut j = job("1");
    j["client_id"] = json!("req-42");
    let first = s.submit("A", "s", vec![j.clone(), job("1")]).await;
    let again = s.submit("A", "s", vec![j]).await;
    assert_eq!(again[0], first[0]);
    let (_, v) = s.get("/v1/jobs?queue=A").await;
    assert_eq!(v["jobs"].as_array().map(|a| a.len()), Some(2));
}

async fn job_count(s: &Server) -> usize {
    let (_, v) = s.get("/v1/jobs?limit=1000").await;
    v["jobs"].as_array().map(|a| a.len()).unwrap_or(0)
}

#[tokio::test]
async fn bad_submissions_name_the_field_and_store_nothing() {
    let s = Server::start("[server]\nmax_jobs_per_request = 200\nmax_termination_grace_period = \"60s\"");
    s.ready().await;
    s.create_queue("A").await;
    // An executor with 16-cpu nodes, so jobs larger than any node can be recognised.
    let (st, v) = s.post("/v1/executors/e1/lease", &json!({"nodes": [common::node("n1", "16")], "wait_seconds": 0})).await;
    assert_eq!(st, 200, "{v}");
    let no_requests = json!({"containers": [{"name": "main", "image": "x"}]});
    let bad_quantity = json!({"containers": [{"name": "main", "resources": {"requests": {"cpu": "many"}}}]});
    let mut grace_long = pod("1", "true");
    grace_long["terminationGracePeriodSeconds"] = json!(120);
    let mut grace_fraction = pod("1", "true");
    grace_fraction["terminationGracePeriodSeconds"] = json!(0.5);
    let gang = |card: &str| json!({"pod_spec": pod("1", "true"), "annotations": {"convoy.io/gang-id": "g", "convoy.io/gang-cardinality": card}});
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"queue": "nope", "job_set": "s", "jobs": [job("1")]}), 404, "queue"),
        (json!({"queue": "A", "job_set": "s", "jobs": [job("1"), {"pod_spec": pod("1", "true"), "priority_class": "gold"}]}), 400, "jobs[1].priority_class"),
        (json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": no_requests}]}), 400, "jobs[0].pod_spec.containers[0].resources.requests"),
        (json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": bad_quantity}]}), 400, "jobs[0].pod_spec.containers[0].resources.requests.cpu"),
        (json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": {"containers": 5}}]}), 400, "jobs[0].pod_spec.containers"),
        (json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": grace_long}]}), 400, "jobs[0].pod_spec.terminationGracePeriodSeconds"),
        (json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": grace_fraction}]}), 400, "jobs[0].pod_spec.terminationGracePeriodSeconds"),
        (json!({"queue": "A", "job_set": "s", "jobs": [job("64")]}), 400, "jobs[0].pod_spec.resources.cpu"),
        (json!({"queue": "A", "job_set": "s", "jobs": [gang("3"), gang("3")]}), 400, "jobs[0].annotations"),
        (json!({"queue": "A", "job_set": "s", "jobs": []}), 400, "jobs"),
        (json!({"queue": "A", "job_set": "bad set", "jobs": [job("1")]}), 400, "job_set"),
        (json!({"queue": "A", "job_set": "s", "jobs": [job("1")], "extra": 1}), 400, "extra"),
    ];
    for (body, status, field) in cases {
        let (st, v) = s.post("/v1/jobs", &body).await;
        assert_eq!(st, status, "{body}: {v}");
        let named = v["field"].as_str().unwrap_or("").to_string() + " " + v["detail"].as_str().unwrap_or("");
        assert!(named.contains(field), "{field} not named for {body}: {v}");
        assert!(v["detail"].is_string() && v["title"].is_string(), "{v}");
    }
    // A batch of 100 with one bad job stores nothing and names the bad one.
    let mut jobs: Vec<Value> = (0..100).map(|_| job("1")).collect();
    jobs[57] = json!({"pod_spec": {"containers": [{"name": "x"}]}});
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": jobs})).await;
    assert_eq!(st, 400);
    assert_eq!(v["field"].as_str(), Some("jobs[57].pod_spec.containers[0].resources.requests"), "{v}");
    let too_many: Vec<Value> = (0..201).map(|_| job("1")).collect();
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": too_many})).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("jobs")));
    assert_eq!(job_count(&s).await, 0);
    // Not JSON at all.
    let r = s.client.post(format!("{}/v1/jobs", s.url)).header("content-type", "application/json").body("{not json").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/problem+json"));
    assert_eq!(job_count(&s).await, 0);
}

#[tokio::test]
async fn unknown_endpoints_and_methods_are_problems() {
    let s = Server::start("");
    s.ready().await;
    let (st, v) = s.get("/v1/nothing").await;
    assert_eq!((st, v["status"].as_u64()), (404, Some(404)));
    let (st, _) = s.delete("/v1/jobs").await;
    assert_eq!(st, 405);
    let (st, v) = s.get("/healthz").await;
    assert_eq!((st, v["status"].as_str()), (200, Some("ok")));
    let r = s.client.get(format!("{}/metrics", s.url)).send().await.unwrap();
    assert!(r.text().await.unwrap().contains("convoy_leader 1"));
    let r = s.client.get(format!("{}/healthz", s.url)).send().await.unwrap();
    assert!(r.headers().get("x-request-id").is_some());
}
