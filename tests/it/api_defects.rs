//! Regression tests for defects found in review of the HTTP API, each against a real server.

use crate::common::{self, Server, config};
use serde_json::{Value, json};

const ADMIN: &str = "admin-token-0123456789abcdef";
const ALICE: &str = "alice-token-0123456789abcdef";
const EXEC: &str = "executor-token-0123456789ab";

/// A server with auth on: an admin, a submitter whose name has capitals, an executor.
fn start_with_auth() -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let text = config(tmp.path(), "").replace(
        "[auth]\nenabled = false\n",
        &format!(
            r#"[auth]
enabled = true
tokens = [
  {{ token = "{ADMIN}", principal = "root", roles = ["admin"] }},
  {{ token = "{ALICE}", principal = "Alice-CI", roles = ["submitter"] }},
  {{ token = "{EXEC}", principal = "cluster-a", roles = ["executor"] }},
]
"#
        ),
    );
    assert!(text.contains("enabled = true"), "the auth section was not replaced:\n{text}");
    (Server::start_in(tmp.path(), &text), tmp)
}

/// Sends `body` as raw text with `content_type` and the bearer `token`; returns the status, the
/// content type and the body (JSON if it parses).
async fn send(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    body: &str,
) -> (u16, String, Value) {
    let mut r = s.client.request(method, format!("{}{path}", s.url)).header("content-type", content_type);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.body(body.to_string()).send().await.expect("request");
    let status = resp.status().as_u16();
    let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let text = resp.text().await.unwrap_or_default();
    (status, ct, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The executor API checks the role before it reads the body: a submitter learns nothing about
/// the body's shape (no 400 naming a field, no 415), only that it may not call it.
#[tokio::test]
async fn executor_api_refuses_other_roles_before_reading_the_body() {
    let (s, _tmp) = start_with_auth();
    s.ready().await;
    use reqwest::Method as M;
    let malformed = [
        ("application/json", r#"{"nodes": "not a list", "wait_seconds": "soon"}"#),
        ("application/json", "{not json"),
        ("text/plain", "hello"),
    ];
    for path in ["/v1/executors/e1/lease", "/v1/executors/e1/events"] {
        for (ct, body) in malformed {
            let (st, rct, v) = send(&s, M::POST, path, Some(ALICE), ct, body).await;
            assert_eq!(st, 403, "{path} {body:?}: {v}");
            assert_eq!(rct, "application/problem+json", "{path}: {v}");
            assert_eq!(v["detail"], "Alice-CI lacks the executor role", "{path}: {v}");
            assert!(v.get("field").is_none(), "a refused caller must not learn a field name: {v}");
            // Without a token: 401, also before the body.
            let (st, _, v) = send(&s, M::POST, path, None, ct, body).await;
            assert_eq!(st, 401, "{path} {body:?}: {v}");
        }
        // The executor itself still gets the body checked.
        let (st, _, v) = send(&s, M::POST, path, Some(EXEC), "application/json", r#"{"nodes": 5, "events": 5}"#).await;
        assert_eq!(st, 400, "{path}: {v}");
        assert!(v["field"].is_string(), "{v}");
    }
    let (st, _, v) = send(
        &s,
        M::POST,
        "/v1/executors/e1/lease",
        Some(EXEC),
        "application/json",
        &json!({"nodes": [], "wait_seconds": 0}).to_string(),
    )
    .await;
    assert_eq!(st, 200, "{v}");
}

/// The admin-only queue writes check the role before the body too.
#[tokio::test]
async fn queue_writes_refuse_non_admins_before_reading_the_body() {
    let (s, _tmp) = start_with_auth();
    s.ready().await;
    use reqwest::Method as M;
    for (method, path) in [(M::POST, "/v1/queues"), (M::PUT, "/v1/queues/physics")] {
        for (ct, body) in [("application/json", r#"{"name": 5, "priority_factor": "high"}"#), ("text/plain", "x")] {
            let (st, rct, v) = send(&s, method.clone(), path, Some(ALICE), ct, body).await;
            assert_eq!((st, rct.as_str()), (403, "application/problem+json"), "{method} {path} {body:?}: {v}");
            assert_eq!(v["detail"], "Alice-CI lacks the admin role", "{v}");
        }
        let (st, _, v) = send(&s, method.clone(), path, Some(ADMIN), "application/json", r#"{"name": 5}"#).await;
        assert_eq!((st, v["field"].as_str()), (400, Some("name")), "{method} {path}: {v}");
    }
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

/// Submission errors name real paths of the submitted document: the container that asks for
/// too much, the malformed service or ingress (or the field inside it).
#[tokio::test]
async fn submission_errors_name_real_document_paths() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let (st, v) =
        s.post("/v1/executors/e1/lease", &json!({"nodes": [common::node("n1", "16")], "wait_seconds": 0})).await;
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

/// Checks the Prometheus text format: `# HELP` then `# TYPE` per family, each family's samples in
/// one block right after them, no family twice. Answers the family names.
fn exposition_families(text: &str) -> Result<Vec<String>, String> {
    let mut families: Vec<String> = Vec::new();
    let mut typed = false;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["#", "HELP", name, ..] = words.as_slice() {
            if families.iter().any(|f| f == name) {
                return Err(format!("family {name} appears twice"));
            }
            families.push(name.to_string());
            typed = false;
        } else if let ["#", "TYPE", name, _] = words.as_slice() {
            if families.last().map(String::as_str) != Some(*name) || typed {
                return Err(format!("TYPE of {name} does not follow its HELP"));
            }
            typed = true;
        } else {
            let full = line.split(['{', ' ']).next().unwrap_or("");
            // A histogram's samples are its name with _bucket, _sum or _count.
            let last = families.last().map(String::as_str);
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| full.strip_suffix(suffix).filter(|base| last == Some(*base)))
                .unwrap_or(full);
            if !typed || families.last().map(String::as_str) != Some(name) {
                return Err(format!("sample outside its family's block, or without HELP and TYPE: {line}"));
            }
        }
    }
    Ok(families)
}

/// Every family on /metrics has HELP and TYPE and one block of samples, also once the
/// scheduler has reported per-queue shares.
#[tokio::test]
async fn metrics_families_are_whole_blocks() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    let (st, v) =
        s.post("/v1/executors/e1/lease", &json!({"nodes": [common::node("n1", "16")], "wait_seconds": 0})).await;
    assert_eq!(st, 200, "{v}");
    s.submit("A", "s", vec![common::job("1")]).await;
    s.submit("B", "s", vec![common::job("1")]).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = s.client.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
        if text.lines().filter(|l| l.starts_with("convoy_queue_share{")).count() >= 2 {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "no per-queue shares reported:\n{text}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let families = exposition_families(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for f in ["convoy_jobs", "convoy_queue_fair_share", "convoy_queue_share", "convoy_leader"] {
        assert!(families.iter().any(|x| x == f), "{f} missing:\n{text}");
    }
    // Requests are timed by route template, not by raw path.
    let submits = "convoy_api_request_duration_seconds_count{route=\"/v1/jobs\",method=\"POST\",status=\"2xx\"} 2";
    assert!(text.lines().any(|l| l == submits), "{text}");
    assert!(text.contains("route=\"/v1/executors/{executor}/lease\""), "{text}");
    assert!(!text.contains("/v1/executors/e1"), "{text}");
    promtool_accepts(&text);
}

/// Fails unless `promtool check metrics` (Debian package `prometheus`) accepts `text`; skips
/// with a message only when promtool is absent and CONVOY_REQUIRE_PROMTOOL is not 1.
fn promtool_accepts(text: &str) {
    use std::io::Write as _;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && !crate::common::root::required("CONVOY_REQUIRE_PROMTOOL") =>
        {
            eprintln!("SKIPPED promtool check: promtool is not installed (Debian package `prometheus`)");
            return;
        }
        Err(e) => panic!("promtool could not be started: {e}"),
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}
