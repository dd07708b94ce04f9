//! The public API of a real `convoy server`: queues, submissions, job control, bad input.

use crate::common::{Server, job, node, pod};
use crate::server_auth::{ADMIN, ALICE, start_with_auth};
use serde_json::{Value, json};
use std::time::Duration;

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
    let (st, v) =
        s.put("/v1/queues/team-a", &json!({"name": "team-a", "priority_factor": 3.0, "cordoned": true})).await;
    assert_eq!(st, 200, "{v}");
    let (_, v) = s.get("/v1/queues/team-a").await;
    assert_eq!((v["priority_factor"].as_f64(), v["cordoned"].as_bool()), (Some(3.0), Some(true)));
    // Cordoned queues take submissions (as Armada's); the jobs wait for the queue's uncordon.
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "team-a", "job_set": "s", "jobs": [job("1")]})).await;
    assert_eq!(st, 200, "{v}");
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
    let j = s.wait_job(&ids[0], Duration::from_secs(10), "waiting with a reason", |j| j["reason"].is_string()).await;
    assert!(j["reason"].as_str().unwrap_or("").contains("no pool"), "{j}");

    let (st, v) = s.get("/v1/jobs?queue=A&job_set=set-1&limit=2").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["jobs"].as_array().map(|a| a.len()), Some(2));
    let next = v["next"].as_str().expect("a next page").to_string();
    let (_, v) = s.get(&format!("/v1/jobs?queue=A&job_set=set-1&limit=2&after={next}")).await;
    assert_eq!(v["jobs"][0]["id"].as_str(), Some(ids[2].as_str()));
    assert!(v["next"].is_null());

    let (st, v) = s
        .post("/v1/jobs/reprioritize", &json!({"queue": "A", "job_set": "set-1", "job_ids": [ids[0]], "priority": 7}))
        .await;
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

#[tokio::test]
async fn bad_submissions_name_the_field_and_store_nothing() {
    let s = Server::start("[server]\nmax_jobs_per_request = 200\nmax_termination_grace_period = \"60s\"");
    s.ready().await;
    s.create_queue("A").await;
    // An executor with 16-cpu nodes, so jobs larger than any node can be recognised.
    s.poll("e1", &[node("n1", "16")], &[], 0.0).await;
    let no_requests = json!({"containers": [{"name": "main", "image": "x"}]});
    let bad_quantity = json!({"containers": [{"name": "main", "resources": {"requests": {"cpu": "many"}}}]});
    let mut grace_long = pod("1", "true");
    grace_long["terminationGracePeriodSeconds"] = json!(120);
    let mut grace_fraction = pod("1", "true");
    grace_fraction["terminationGracePeriodSeconds"] = json!(0.5);
    let gang = |card: &str| json!({"pod_spec": pod("1", "true"), "annotations": {"convoy.io/gang-id": "g", "convoy.io/gang-cardinality": card}});
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"queue": "nope", "job_set": "s", "jobs": [job("1")]}), 404, "queue"),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [job("1"), {"pod_spec": pod("1", "true"), "priority_class": "gold"}]}),
            400,
            "jobs[1].priority_class",
        ),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": no_requests}]}),
            400,
            "jobs[0].pod_spec.containers[0].resources.requests",
        ),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": bad_quantity}]}),
            400,
            "jobs[0].pod_spec.containers[0].resources.requests.cpu",
        ),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": {"containers": 5}}]}),
            400,
            "jobs[0].pod_spec.containers",
        ),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": grace_long}]}),
            400,
            "jobs[0].pod_spec.terminationGracePeriodSeconds",
        ),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [{"pod_spec": grace_fraction}]}),
            400,
            "jobs[0].pod_spec.terminationGracePeriodSeconds",
        ),
        (
            json!({"queue": "A", "job_set": "s", "jobs": [job("64")]}),
            400,
            "jobs[0].pod_spec.containers[0].resources.requests.cpu",
        ),
        (json!({"queue": "A", "job_set": "s", "jobs": [gang("3"), gang("3")]}), 400, "jobs[0].annotations"),
        (json!({"queue": "A", "job_set": "s", "jobs": []}), 400, "jobs"),
        (json!({"queue": "A", "job_set": "bad\tset", "jobs": [job("1")]}), 400, "job_set"),
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
    assert_eq!(s.count_jobs("limit=1000").await, 0);
    // Not JSON at all.
    let r = s
        .client
        .post(format!("{}/v1/jobs", s.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/problem+json"));
    assert_eq!(s.count_jobs("limit=1000").await, 0);
}

/// Submission errors name real paths of the submitted document: the container that asks for
/// too much, the malformed service or ingress (or the field inside it).
#[tokio::test]
async fn submission_errors_name_real_document_paths() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let (st, v) = s.post("/v1/executors/e1/lease", &json!({"nodes": [node("n1", "16")], "wait_seconds": 0})).await;
    assert_eq!(st, 200, "{v}");
    let container = |cpu: &str| json!({"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}});
    let good = json!({"containers": [container("1")]});
    let cases = [
        (
            json!({"pod_spec": {"containers": [container("1"), container("32")]}}),
            "jobs[0].pod_spec.containers[1].resources.requests.cpu",
        ),
        (
            json!({"pod_spec": {"containers": [container("1")], "initContainers": [container("20")]}}),
            "jobs[0].pod_spec.initContainers[0].resources.requests.cpu",
        ),
        (json!({"pod_spec": good, "services": [{"spec": {}}, "nope"]}), "jobs[0].services[1]"),
        (
            json!({"pod_spec": good, "services": [{"spec": {"ports": [{"port": "http"}]}}]}),
            "jobs[0].services[0].spec.ports[0].port",
        ),
        (json!({"pod_spec": good, "ingresses": [7]}), "jobs[0].ingresses[0]"),
    ];
    for (job, field) in cases {
        let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": [job]})).await;
        assert_eq!((st, v["field"].as_str()), (400, Some(field)), "{job}: {v}");
    }
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
    assert!(s.text("/metrics").await.1.contains("convoy_leader 1"));
    let r = s.client.get(format!("{}/healthz", s.url)).send().await.unwrap();
    assert!(r.headers().get("x-request-id").is_some());
}

/// Every problem body names the request id of its answer: handler errors, extractor rejections
/// (token, body) and fallbacks alike, and the client's own id when it sent one.
#[tokio::test]
async fn problem_bodies_carry_the_request_id() {
    let (s, _tmp) = start_with_auth();
    s.ready().await;
    use reqwest::Method as M;
    // (method, path, token, content type, body, status)
    type Case = (M, &'static str, Option<&'static str>, &'static str, &'static str, u16);
    let cases: Vec<Case> = vec![
        (M::GET, "/v1/queues", None, "", "", 401),
        (M::GET, "/v1/queues", Some("not-a-valid-token"), "", "", 401),
        (M::GET, "/v1/queues/nope", Some(ADMIN), "", "", 404),
        (M::GET, "/v1/nowhere", Some(ADMIN), "", "", 404),
        (M::PATCH, "/v1/queues", Some(ADMIN), "", "", 405),
        (M::POST, "/v1/queues", Some(ADMIN), "application/json", "{not json", 400),
        (M::POST, "/v1/queues", Some(ADMIN), "text/plain", "x", 415),
        (M::POST, "/v1/jobs", Some(ALICE), "application/json", r#"{"queue": "A", "job_set": "s", "jobs": []}"#, 404),
        (M::POST, "/v1/executors/e1/lease", Some(ALICE), "application/json", "{}", 403),
    ];
    for (i, (method, path, token, ct, body, status)) in cases.into_iter().enumerate() {
        let what = format!("{method} {path}");
        for client_id in [None, Some(format!("client-id-{i}"))] {
            let mut r = s.client.request(method.clone(), format!("{}{path}", s.url));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            if !ct.is_empty() {
                r = r.header("content-type", ct).body(body.to_string());
            }
            if let Some(c) = &client_id {
                r = r.header("x-request-id", c);
            }
            let resp = r.send().await.expect("request");
            assert_eq!(resp.status().as_u16(), status, "{what}");
            let header = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_string);
            let v: Value = resp.json().await.expect("a JSON problem body");
            let header = header.expect("every answer has an x-request-id");
            if let Some(c) = &client_id {
                assert_eq!(&header, c, "{what}: the client's id is kept");
            }
            assert_eq!(v["request_id"].as_str(), Some(header.as_str()), "{what}: {v}");
        }
    }
}

/// The schema of the answer `status` of `method path` in the document, for `content_type`.
fn response_schema<'a>(doc: &'a Value, method: &str, path: &str, status: u16, content_type: &str) -> &'a Value {
    let s = &doc["paths"][path][method]["responses"][status.to_string()]["content"][content_type]["schema"];
    assert!(s.is_object(), "{method} {path} documents no {status} {content_type} answer");
    s
}

/// Checks a real answer against the document.
fn conforms(doc: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let ct = if status >= 400 { "application/problem+json" } else { "application/json" };
    if let Err(e) = convoy::api::check_value(doc, response_schema(doc, method, path, status, ct), body) {
        panic!("{method} {path} {status}: {e}\n{body:#}");
    }
}

#[tokio::test]
async fn openapi_document_describes_the_real_server() {
    let s = Server::start("");
    s.ready().await;
    let r = s.client.get(format!("{}/openapi.json", s.url)).send().await.expect("request");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/json"));
    let doc: Value = r.json().await.expect("JSON");
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", doc["openapi"]);
    assert_eq!(doc["info"]["title"], "Convoy");
    assert!(doc["paths"]["/v1/jobs"]["post"]["requestBody"].is_object());
    assert!(doc["paths"]["/v1/jobs"]["post"]["responses"]["200"].is_object());

    // Real answers conform to their documented schemas.
    let (st, v) =
        s.post("/v1/queues", &json!({"name": "A", "owners": ["alice"], "resource_limits": {"cpu": 0.5}})).await;
    assert_eq!(st, 201, "{v}");
    conforms(&doc, "post", "/v1/queues", 201, &v);
    let (st, v) = s.post("/v1/queues", &json!({"name": "A"})).await;
    conforms(&doc, "post", "/v1/queues", st, &v);
    let (st, v) = s.post("/v1/queues", &json!({"name": "B", "colour": "blue"})).await;
    assert_eq!(st, 400);
    conforms(&doc, "post", "/v1/queues", st, &v);
    let (st, v) = s.get("/v1/queues").await;
    conforms(&doc, "get", "/v1/queues", st, &v);
    let (st, v) = s.get("/v1/queues/nope").await;
    assert_eq!(st, 404);
    conforms(&doc, "get", "/v1/queues/{queue}", st, &v);
    let ids = s
        .submit(
            "A",
            "s",
            vec![job("1"), json!({"pod_spec": pod("1", "true"), "client_id": "c1", "labels": {"x": "y"}})],
        )
        .await;
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": [job("1")]})).await;
    conforms(&doc, "post", "/v1/jobs", st, &v);
    // Lease the jobs to a fake executor and report one running, so jobs have runs and events.
    let (st, v) = s.post("/v1/executors/e1/lease", &json!({"nodes": [node("n1", "4")], "wait_seconds": 10})).await;
    assert_eq!(st, 200, "{v}");
    conforms(&doc, "post", "/v1/executors/{executor}/lease", st, &v);
    let leases = v["leases"].as_array().cloned().unwrap_or_default();
    assert!(!leases.is_empty(), "{v}");
    let events: Vec<Value> =
        leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "kind": "running"})).collect();
    let (st, v) = s.post("/v1/executors/e1/events", &json!({ "events": events })).await;
    conforms(&doc, "post", "/v1/executors/{executor}/events", st, &v);
    let (st, v) = s.get(&format!("/v1/jobs/{}", ids[0])).await;
    conforms(&doc, "get", "/v1/jobs/{id}", st, &v);
    let (st, v) = s.get("/v1/jobs?queue=A&limit=2").await;
    assert!(v["next"].is_string(), "{v}");
    conforms(&doc, "get", "/v1/jobs", st, &v);
    let (st, v) = s.get("/v1/jobs?limit=0").await;
    assert_eq!(st, 400);
    conforms(&doc, "get", "/v1/jobs", st, &v);
    let (st, v) = s.post("/v1/jobs/reprioritize", &json!({"queue": "A", "job_set": "s", "priority": 2})).await;
    conforms(&doc, "post", "/v1/jobs/reprioritize", st, &v);
    let (st, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s", "job_ids": [ids[1]]})).await;
    conforms(&doc, "post", "/v1/jobs/cancel", st, &v);
    let (st, v) = s.get("/v1/queues/A/report").await;
    conforms(&doc, "get", "/v1/queues/{queue}/report", st, &v);
    let (st, v) = s.get("/v1/cluster").await;
    conforms(&doc, "get", "/v1/cluster", st, &v);
    let (st, v) = s.get("/v1/cluster/digest").await;
    conforms(&doc, "get", "/v1/cluster/digest", st, &v);
    let (st, v) = s.get("/v1/cluster/nodes").await;
    assert_eq!((st, v["nodes"][0]["name"].as_str()), (200, Some("n1")), "{v}");
    conforms(&doc, "get", "/v1/cluster/nodes", st, &v);
    let (st, v) = s.delete("/v1/cluster/nodes/e1/n1/quarantine").await;
    assert_eq!(st, 404, "{v}");
    conforms(&doc, "delete", "/v1/cluster/nodes/{executor}/{node}/quarantine", st, &v);
    let (st, v) = s.get("/healthz").await;
    conforms(&doc, "get", "/healthz", st, &v);
    let (st, v) = s.get("/readyz").await;
    conforms(&doc, "get", "/readyz", st, &v);
    for (path, ct) in [("/metrics", "text/plain"), ("/v1/jobs/nope/logs", "application/problem+json")] {
        let r = s.client.get(format!("{}{path}", s.url)).send().await.expect("request");
        let got = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        assert!(got.starts_with(ct), "{path}: {got}");
    }
    // The event stream: text/event-stream whose data are EventViews.
    let r =
        s.client.get(format!("{}/v1/queues/A/job-sets/s/events?follow=false", s.url)).send().await.expect("request");
    assert_eq!(r.status(), 200);
    let got = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert!(got.starts_with("text/event-stream"), "{got}");
    assert!(
        response_schema(&doc, "get", "/v1/queues/{queue}/job-sets/{job_set}/events", 200, "text/event-stream")
            .is_object()
    );
    let text = r.text().await.expect("the stream ends");
    let data: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).expect("JSON data"))
        .collect();
    assert!(data.len() >= 3, "{text}");
    for d in &data {
        convoy::api::check_value(&doc, &json!({"$ref": "#/components/schemas/EventView"}), d)
            .unwrap_or_else(|e| panic!("{e}: {d}"));
    }

    // Every documented method of every documented path is served, and no other method is.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let concrete = path
            .replace("{queue}", "q")
            .replace("{job_set}", "s")
            .replace("{id}", "01J9Z8Q6M3X2V7N5K4H1G0F9E8")
            .replace("{run_id}", "01J9Z8Q6M3X2V7N5K4H1G0F9E8")
            .replace("{executor}", "e9")
            .replace("{node}", "n9");
        assert!(!concrete.contains('{'), "{path} has a parameter this test does not know");
        let concrete = if path.ends_with("/events") && path.starts_with("/v1/queues") {
            format!("{concrete}?follow=false")
        } else {
            concrete
        };
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let r = s.client.request(m, format!("{}{concrete}", s.url)).send().await.expect("request");
            let documented = item.get(method.to_lowercase()).is_some();
            assert_eq!(r.status() != 405, documented, "{method} {path}: {}", r.status());
        }
    }
}

#[tokio::test]
async fn oversized_requests_are_refused() {
    let s = Server::start("max_request_bytes = 4096");
    s.ready().await;
    s.create_queue("A").await;
    let jobs: Vec<Value> = (0..50).map(|_| job("1")).collect();
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": jobs})).await;
    assert_eq!(st, 413, "{v}");
    assert_eq!(v["status"], 413);
    let (_, v) = s.get("/v1/jobs?queue=A").await;
    assert_eq!(v["jobs"].as_array().map(|a| a.len()), Some(0));
}

/// Armada's gang annotations, spelled as Armada's clients send them, make a gang: all of it or
/// nothing is leased. The kebab-case `armadaproject.io/gang-*` keys are refused, naming the right
/// spelling.
#[tokio::test]
async fn armada_gang_annotations_form_a_gang() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let two = [node("n1", "4"), node("n2", "4")];
    s.poll("e1", &two, &[], 0.0).await;
    let member = json!({"pod_spec": pod("3", "true"), "annotations": {
        "armadaproject.io/gangId": "g",
        "armadaproject.io/gangCardinality": "3",
    }});
    let ids = s.submit("A", "s", vec![member.clone(), member.clone(), member]).await;
    // Two of three would fit as plain jobs; as a gang none is leased, and the reason says why.
    let j = s
        .wait_job(&ids[0], Duration::from_secs(20), "waiting for the gang", |j| {
            j["reason"].as_str().is_some_and(|r| r.contains("gang g"))
        })
        .await;
    assert!(j["reason"].as_str().unwrap_or("").starts_with("gang g: 2 of 3 members fit"), "{j}");
    for id in &ids {
        assert_eq!(s.job(id).await["state"], "queued");
    }
    // A third node: the whole gang is leased at once.
    let three = [node("n1", "4"), node("n2", "4"), node("n3", "4")];
    let mut leased = Vec::new();
    for _ in 0..20 {
        let held: Vec<Value> = leased
            .iter()
            .map(|l: &Value| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "pending"}))
            .collect();
        let v = s.poll("e1", &three, &held, 2.0).await;
        leased.extend(v["leases"].as_array().cloned().unwrap_or_default());
        if leased.len() == 3 {
            break;
        }
    }
    let mut nodes: Vec<&str> = leased.iter().filter_map(|l| l["node"].as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3"]);

    // The old kebab-case spelling is not Armada's: refused, naming the key and the right one.
    let bad = json!({"pod_spec": pod("1", "true"), "annotations": {"armadaproject.io/gang-id": "h"}});
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": [bad]})).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["field"], "jobs[0].annotations.armadaproject.io/gang-id");
    assert!(v["detail"].as_str().unwrap_or("").contains("armadaproject.io/gangId"), "{v}");
    // Both spellings with different values: refused, naming Armada's key.
    let both = json!({"pod_spec": pod("1", "true"), "annotations": {
        "convoy.io/gang-id": "h", "armadaproject.io/gangId": "i"}});
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": [both]})).await;
    assert_eq!((st, v["field"].as_str()), (400, Some("jobs[0].annotations.armadaproject.io/gangId")), "{v}");
}
