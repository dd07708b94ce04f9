//! Bearer-token authentication and roles on a real server.

use crate::common::{Server, config, job, node};
use serde_json::{Value, json};

pub(crate) const ADMIN: &str = "admin-token-0123456789abcdef";
pub(crate) const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdefgh";
const EXEC: &str = "executor-token-0123456789ab";

fn auth_config(dir: &std::path::Path) -> String {
    config(dir, "").replace(
        "[auth]\nenabled = false\n",
        &format!(
            r#"[auth]
enabled = true
tokens = [
  {{ token = "{ADMIN}", principal = "root", roles = ["admin"] }},
  {{ token = "{ALICE}", principal = "alice", groups = ["physics"], roles = ["submitter"] }},
  {{ token = "{BOB}", principal = "bob", roles = ["submitter"] }},
  {{ token = "{EXEC}", principal = "cluster-a", roles = ["executor"] }},
]
"#
        ),
    )
}

#[tokio::test]
async fn tokens_and_roles() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &auth_config(tmp.path()));
    s.ready().await;
    use reqwest::Method as M;

    // No token, or a wrong one: 401 with a problem body.
    let (st, v) = s.call(M::GET, "/v1/queues", None, None).await;
    assert_eq!(st, 401, "{v}");
    assert!(v["detail"].as_str().unwrap_or("").contains("Bearer"), "{v}");
    let (st, _) = s.call(M::GET, "/v1/queues", Some("not-a-token"), None).await;
    assert_eq!(st, 401);
    // Health stays open.
    let (st, _) = s.call(M::GET, "/healthz", None, None).await;
    assert_eq!(st, 200);

    // Only admins manage queues.
    let (st, _) = s.call(M::POST, "/v1/queues", Some(ALICE), Some(&json!({"name": "physics"}))).await;
    assert_eq!(st, 403);
    let (st, v) =
        s.call(M::POST, "/v1/queues", Some(ADMIN), Some(&json!({"name": "physics", "groups": ["physics"]}))).await;
    assert_eq!(st, 201, "{v}");
    let (st, _) = s.call(M::POST, "/v1/queues", Some(ADMIN), Some(&json!({"name": "bobs", "owners": ["bob"]}))).await;
    assert_eq!(st, 201);

    // Submitters use the queues they own or whose group they are in.
    let submit = |q: &str| json!({"queue": q, "job_set": "s", "jobs": [job("1")]});
    let (st, v) = s.call(M::POST, "/v1/jobs", Some(ALICE), Some(&submit("physics"))).await;
    assert_eq!(st, 200, "{v}");
    let alice_job = v["job_ids"][0].as_str().unwrap_or("").to_string();
    let (st, v) = s.call(M::POST, "/v1/jobs", Some(BOB), Some(&submit("physics"))).await;
    assert_eq!(st, 403, "{v}");
    assert!(v["detail"].as_str().unwrap_or("").contains("bob"), "{v}");
    let (st, _) = s.call(M::POST, "/v1/jobs", Some(BOB), Some(&submit("bobs"))).await;
    assert_eq!(st, 200);
    let (st, _) =
        s.call(M::POST, "/v1/jobs/cancel", Some(BOB), Some(&json!({"queue": "physics", "job_set": "s"}))).await;
    assert_eq!(st, 403);
    // The executor token may not submit.
    let (st, _) = s.call(M::POST, "/v1/jobs", Some(EXEC), Some(&submit("bobs"))).await;
    assert_eq!(st, 403);

    // The executor API needs the executor role.
    let lease = json!({"nodes": [node("n1", "4")], "wait_seconds": 0});
    let (st, _) = s.call(M::POST, "/v1/executors/e1/lease", Some(ALICE), Some(&lease)).await;
    assert_eq!(st, 403);
    let (st, _) = s.call(M::POST, "/v1/executors/e1/lease", None, Some(&lease)).await;
    assert_eq!(st, 401);
    let (st, v) = s.call(M::POST, "/v1/executors/e1/lease", Some(EXEC), Some(&lease)).await;
    assert_eq!(st, 200, "{v}");

    // The state digest is for admins.
    let (st, _) = s.call(M::GET, "/v1/cluster/digest", None, None).await;
    assert_eq!(st, 401);
    let (st, v) = s.call(M::GET, "/v1/cluster/digest", Some(ALICE), None).await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = s.call(M::GET, "/v1/cluster/digest", Some(ADMIN), None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["node_id"], 1, "{v}");
    assert!(v["applied_index"].as_u64() > Some(0), "{v}");
    assert_eq!(v["digest"].as_str().map(str::len), Some(64), "{v}");

    // Anyone signed in sees the nodes; only admins lift a quarantine (refused before anything
    // else is looked at).
    let (st, _) = s.call(M::GET, "/v1/cluster/nodes", None, None).await;
    assert_eq!(st, 401);
    let (st, v) = s.call(M::GET, "/v1/cluster/nodes", Some(ALICE), None).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = s.call(M::DELETE, "/v1/cluster/nodes/e1/n1/quarantine", Some(ALICE), None).await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = s.call(M::DELETE, "/v1/cluster/nodes/e1/n1/quarantine", Some(EXEC), None).await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = s.call(M::DELETE, "/v1/cluster/nodes/e1/n1/quarantine", Some(ADMIN), None).await;
    assert_eq!(st, 404, "{v}");

    // Nothing the refused calls asked for happened.
    let (_, v) = s.call(M::GET, "/v1/jobs?queue=physics", Some(ADMIN), None).await;
    let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"].as_str(), Some(alice_job.as_str()));
    assert_ne!(jobs[0]["state"], "cancelled");
}

/// A server with auth on: an admin, a submitter whose name has capitals (`Alice-CI`, where
/// `auth_config` names her `alice`), an executor.
pub(crate) fn start_with_auth() -> (Server, tempfile::TempDir) {
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
