//! The client verbs as users run them: the real binary against a real server.

use crate::common::{Server, job};
use serde_json::{Value, json};
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Runs `convoy --server URL <args>`.
pub(crate) async fn convoy(server: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .arg("--server")
        .arg(server)
        .args(args)
        .env_remove("CONVOY_TOKEN")
        .output()
        .await
        .expect("convoy runs")
}

/// Runs a verb that must succeed; its standard output.
pub(crate) async fn ok(server: &str, args: &[&str]) -> String {
    let out = convoy(server, args).await;
    assert!(out.status.success(), "convoy {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs a verb that must fail; its standard error.
async fn refused(server: &str, args: &[&str]) -> String {
    let out = convoy(server, args).await;
    assert!(!out.status.success(), "convoy {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a verb that prints JSON; the JSON.
async fn ok_json(server: &str, args: &[&str]) -> Value {
    let text = ok(server, args).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("convoy {args:?} printed no JSON ({e}): {text}"))
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path.display().to_string()
}

#[tokio::test]
async fn queue_verbs_create_show_update_report_and_delete() {
    let s = Server::start("");
    s.ready().await;
    let url = &s.url;
    let q = ok_json(url, &["queue", "create", "team-a", "--priority-factor", "2", "--owner", "alice", "--group", "ml"])
        .await;
    assert_eq!(
        (&q["name"], &q["priority_factor"], &q["owners"], &q["groups"]),
        (&json!("team-a"), &json!(2.0), &json!(["alice"]), &json!(["ml"]))
    );
    assert_eq!(ok_json(url, &["queue", "list", "-o", "json"]).await.as_array().map(Vec::len), Some(1));
    let table = ok(url, &["queue", "list"]).await;
    assert!(
        table.starts_with("QUEUE ")
            && table.lines().nth(1).is_some_and(|l| l.starts_with("team-a ") && l.contains(" alice ")),
        "{table}"
    );
    assert_eq!(ok_json(url, &["queue", "get", "team-a"]).await["owners"], json!(["alice"]));

    let file = write(&s.dir, "queue.yaml", "name: team-a\npriority_factor: 3\ncordoned: true\n");
    let q = ok_json(url, &["queue", "update", "team-a", &file]).await;
    assert_eq!((&q["priority_factor"], &q["cordoned"]), (&json!(3.0), &json!(true)));
    let (_, stored) = s.get("/v1/queues/team-a").await;
    assert_eq!(stored["cordoned"], true);
    let bad = write(&s.dir, "bad-queue.yaml", "name: team-a\npriority_factor: fast\n");
    let err = refused(url, &["queue", "update", "team-a", &bad]).await;
    assert!(err.contains("bad-queue.yaml") && err.contains("priority_factor"), "{err}");

    let summary = ok(url, &["queue", "report", "team-a"]).await;
    assert!(
        summary.starts_with("Queue:   team-a (weight 0.333") && summary.contains("Jobs:    none live"),
        "{summary}"
    );
    let report = ok_json(url, &["queue", "report", "team-a", "-o", "json"]).await;
    assert_eq!(report["queue"], "team-a");
    assert_eq!(report["weight"], json!(1.0 / 3.0));

    assert_eq!(ok(url, &["queue", "delete", "team-a"]).await, "queue team-a deleted\n");
    let err = refused(url, &["queue", "get", "team-a"]).await;
    assert!(err.contains("404 Not Found") && err.contains("team-a"), "{err}");
    let err = refused(url, &["queue", "create", "bad name"]).await;
    assert!(err.contains("bad name") && err.contains("queue name"), "{err}");
}

#[tokio::test]
async fn job_verbs_submit_list_show_why_reprioritize_and_cancel() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let url = &s.url;

    let file = write(
        &s.dir,
        "jobs.yaml",
        "queue: A\njob_set: s\njobs:\n  - pod_spec:\n      containers:\n        - name: main\n          image: busybox\n          resources: {requests: {cpu: \"1\", memory: 64Mi}}\n",
    );
    let first = ok_json(url, &["submit", &file, "-o", "json"]).await;
    assert_eq!(first["job_ids"].as_array().map(Vec::len), Some(1), "{first}");
    let pod = write(
        &s.dir,
        "pod.json",
        r#"{"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}"#,
    );
    let more = ok_json(url, &["submit", &pod, "--queue", "A", "--job-set", "s", "--count", "2", "-o", "json"]).await;
    let ids: Vec<String> = [&first, &more]
        .iter()
        .flat_map(|v| v["job_ids"].as_array().cloned().unwrap_or_default())
        .map(|v| v.as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(s.count_jobs("queue=A").await, 3);

    let table = ok(url, &["jobs", "--queue", "A", "--state", "queued"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0].starts_with("ID                         QUEUE        JOB SET          STATE      SUBMITTED"),
        "{table}"
    );
    for id in &ids {
        let line = lines.iter().find(|l| l.starts_with(id.as_str())).unwrap_or_else(|| panic!("{id} in {table}"));
        assert!(line.contains(" A ") && line.contains(" queued"), "{line}");
    }
    let err = refused(url, &["jobs", "--state", "lost"]).await;
    assert!(err.contains("400 Bad Request: state:"), "{err}");

    let j = ok_json(url, &["job", &ids[0], "-o", "json"]).await;
    assert_eq!((&j["id"], &j["state"], &j["queue"]), (&json!(ids[0]), &json!("queued"), &json!("A")));
    assert!(j["events"].as_array().is_some_and(|e| e.len() == 2), "{j}");
    // No executor: the scheduler gives a reason, and `why` shows it.
    s.wait_job(&ids[0], Duration::from_secs(10), "waiting with a reason", |j| j["reason"].is_string()).await;
    let why = ok(url, &["why", &ids[0]]).await;
    assert!(why.starts_with(&format!("{} is queued: ", ids[0])) && why.contains("no pool"), "{why}");
    let err = refused(url, &["why", "not-an-id"]).await;
    assert!(err.contains("not-an-id") && err.contains("ULID"), "{err}");

    let changed = ok_json(url, &["reprioritize", "A", "s", "7", &ids[0]]).await;
    assert_eq!(changed["job_ids"], json!([ids[0]]));
    assert_eq!(s.job(&ids[0]).await["priority"], 7);
    let cancelled = ok_json(url, &["cancel", &ids[1], "-o", "json"]).await;
    assert_eq!(cancelled["job_ids"], json!([ids[1]]));
    let err = refused(url, &["cancel", "--queue", "A", "--job-set", "s", "--states", "queued,lost"]).await;
    assert!(err.contains("--states") && err.contains("lost"), "{err}");
    let cancelled =
        ok_json(url, &["cancel", "--queue", "A", "--job-set", "s", "--states", "queued", "-o", "json"]).await;
    assert_eq!(cancelled["job_ids"].as_array().map(Vec::len), Some(2), "{cancelled}");
    assert_eq!(s.count_jobs("queue=A&state=cancelled").await, 3);

    let cluster = ok_json(url, &["cluster", "status", "--json"]).await;
    assert_eq!(cluster["state"], "Leader", "{cluster}");
}

#[tokio::test]
async fn submissions_refused_name_the_field() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let url = &s.url;
    // By the server: the problem's field.
    let bad_cpu = write(
        &s.dir,
        "bad-cpu.yaml",
        "queue: A\njob_set: s\njobs:\n  - pod_spec: {containers: [{name: main, resources: {requests: {cpu: many}}}]}\n",
    );
    let err = refused(url, &["submit", &bad_cpu]).await;
    assert!(err.contains("400 Bad Request: jobs[0].pod_spec.containers[0].resources.requests.cpu:"), "{err}");
    // By the client, reading the file: the file and the field.
    let unknown = write(&s.dir, "unknown.yaml", "queue: A\njob_set: s\njobs:\n  - pod_spec: {}\n    colour: blue\n");
    let err = refused(url, &["submit", &unknown]).await;
    assert!(err.contains("unknown.yaml") && err.contains("jobs[0]") && err.contains("colour"), "{err}");
    let bare = write(&s.dir, "bare.yaml", "containers: []\n");
    // A bare pod spec goes to the default queue, which this server does not have.
    let err = refused(url, &["submit", &bare]).await;
    assert!(err.contains("queue default does not exist") && err.contains("--queue"), "{err}");
    let err = refused(url, &["submit", &bare, "--queue", "bad queue", "--job-set", "s"]).await;
    assert!(err.contains("--queue") && err.contains("bad queue"), "{err}");
    assert_eq!(s.count_jobs("limit=1000").await, 0);
    // Nobody listening.
    let err = refused("http://127.0.0.1:9", &["job", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]).await;
    assert!(err.contains("cannot reach the convoy server at http://127.0.0.1:9"), "{err}");
}

#[tokio::test]
async fn watch_prints_the_job_sets_events_as_they_happen() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let ids = s.submit("A", "s", vec![job("1")]).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["--server", &s.url, "watch", "A", "s"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("convoy watch runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("an event line in time")
            .expect("read")
            .expect("the stream stays open")
    };
    let submitted = next().await;
    let fields: Vec<&str> = submitted.split_whitespace().collect();
    assert_eq!((fields[0], fields[2], fields[3]), ("1", "submitted", ids[0].as_str()), "{submitted}");
    assert!(submitted.starts_with("     1 "), "the sequence number is right-aligned: {submitted:?}");
    assert!(next().await.contains(" queued "));
    // A new event arrives on the open stream.
    let (st, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s", "job_ids": [ids[0]]})).await;
    assert_eq!(st, 200, "{v}");
    let line = next().await;
    assert!(line.contains(" cancel_requested ") && line.contains(&ids[0]), "{line}");
    let _ = child.kill().await;
}
