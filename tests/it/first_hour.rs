//! The first hour of a new user, end to end against `convoy up`: `convoy run`, strict pod specs,
//! whole output, `convoy logs -f` that waits instead of spinning, `convoy jobs` newest first with
//! paging, `convoy watch` that fails at once or ends with the set, cancel by id, standard input
//! and armadactl's files, and errors placed in the user's own file.

use crate::common::procs::free_port;
use crate::common::up::{ReapOnDrop, Up};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const WAIT: Duration = Duration::from_secs(30);

/// `convoy --server URL <args>` in `dir`.
async fn convoy_in(dir: &Path, url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .arg("--server")
        .arg(url)
        .args(args)
        .current_dir(dir)
        .env_remove("CONVOY_TOKEN")
        .output()
        .await
        .expect("convoy runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a verb that must succeed; its standard output and standard error.
async fn ok(dir: &Path, url: &str, args: &[&str]) -> (String, String) {
    let out = convoy_in(dir, url, args).await;
    assert!(out.status.success(), "convoy {args:?} failed: {}", text(&out.stderr));
    (text(&out.stdout), text(&out.stderr))
}

/// Runs a verb that must fail; its standard error.
async fn refused(dir: &Path, url: &str, args: &[&str]) -> String {
    let out = convoy_in(dir, url, args).await;
    assert!(!out.status.success(), "convoy {args:?} should fail: {}", text(&out.stdout));
    text(&out.stderr)
}

fn started(tmp: &Path) -> (Up, ReapOnDrop) {
    crate::common::install_crypto();
    let reap = ReapOnDrop(tmp.join("data").join("agent"));
    (Up::start(tmp, free_port(), 1), reap)
}

fn sh(script: &str) -> Value {
    json!({"containers": [{"name": "main", "command": ["sh", "-c", script],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convoy_run_streams_the_output_and_ends_with_the_jobs_exit_code() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (up, _reap) = started(tmp.path());
    let work = tempfile::tempdir().expect("work dir");
    let out = convoy_in(work.path(), &up.url, &["run", "--", "sh", "-c", "echo hi; echo warn >&2; exit 3"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\n");
    let err = text(&out.stderr);
    assert!(err.contains("warn\n") && err.contains("submitted to queue default"), "{err}");
    assert_eq!(std::fs::read_dir(work.path()).expect("work dir").count(), 0, "no file written");

    // Whole output, not its last 100 lines; each stream alone.
    let script = "for i in $(seq 1 300); do echo line $i; done; echo oops >&2";
    let out =
        convoy_in(work.path(), &up.url, &["run", "--cpu", "200m", "--memory", "32Mi", "--", "sh", "-c", script]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<String> = (1..=300).map(|i| format!("line {i}")).collect();
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), lines);
    let jobs = up.all_jobs("queue=default").await;
    let job = jobs.iter().find(|j| j["requests"]["cpu"] == "200m").expect("the job").clone();
    let id = job["id"].as_str().expect("id").to_string();
    let (stdout, note) = ok(work.path(), &up.url, &["logs", &id]).await;
    assert_eq!(stdout.lines().collect::<Vec<_>>(), lines);
    assert!(note.contains("the whole output, from the agent"), "{note}");
    assert_eq!(ok(work.path(), &up.url, &["logs", "--stderr", &id]).await.0, "oops\n");
    // The agent no longer has it: the tail the server kept, each stream alone, and said so (a
    // job nobody read yet: the leader keeps what it was sent for a minute).
    let id = up.submit("default", "unread", vec![json!({"pod_spec": sh(script)})]).await.remove(0);
    let job = up.wait_job(&id, WAIT, "succeeded", |j| j["state"] == "succeeded").await;
    let run_id = job["runs"][0]["run_id"].as_str().expect("run id");
    std::fs::remove_dir_all(tmp.path().join("data/agent/runs").join(run_id)).expect("remove the run's directory");
    let (stdout, note) = ok(work.path(), &up.url, &["logs", &id]).await;
    assert_eq!(stdout.lines().collect::<Vec<_>>(), lines, "300 short lines fit the 64 KiB kept");
    assert!(note.contains("the server kept"), "{note}");
    assert_eq!(ok(work.path(), &up.url, &["logs", "--stderr", &id]).await.0, "oops\n");

    // What a run used, as sacct tells: CPU time and peak memory, in the API and `convoy job`.
    let burn = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
    let out = convoy_in(work.path(), &up.url, &["run", "--job-set", "burn", "--", "sh", "-c", burn]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let burnt = up.all_jobs("queue=default&job_set=burn").await.remove(0);
    let usage = &burnt["runs"][0]["usage"];
    assert!(usage["cpu_ms"].as_u64().is_some_and(|c| c > 0), "{burnt:#}");
    assert!(usage["peak_memory_bytes"].as_u64().is_some_and(|m| m > 0), "{burnt:#}");
    let (summary, _) = ok(work.path(), &up.url, &["job", burnt["id"].as_str().expect("id")]).await;
    let run_line = summary.lines().find(|l| l.contains(" succeeded ")).unwrap_or_default();
    assert!(summary.contains("MAX MEM") && run_line.contains("B "), "{summary}");

    // --detach: the id, at once; --env reaches the job.
    let args =
        ["run", "--detach", "--env", "GREETING=hello there", "--", "sh", "-c", "test \"$GREETING\" = 'hello there'"];
    let (id, _) = ok(work.path(), &up.url, &args).await;
    let id = id.trim().to_string();
    assert_eq!(id.len(), 26, "{id}");
    up.wait_job(&id, WAIT, "succeeded", |j| j["state"] == "succeeded").await;

    // Ctrl-C cancels the job; the command ends as interrupted.
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["--server", &up.url, "run", "--job-set", "interrupted", "--", "sh", "-c", "echo started; sleep 60"])
        .current_dir(work.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convoy run");
    let deadline = tokio::time::Instant::now() + WAIT;
    let id = loop {
        let running = up.all_jobs("queue=default&job_set=interrupted&state=running").await;
        if let Some(j) = running.first() {
            break j["id"].as_str().expect("id").to_string();
        }
        assert!(tokio::time::Instant::now() < deadline, "the job never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(child.id().expect("pid") as i32, libc::SIGINT);
    }
    let out = tokio::time::timeout(WAIT, child.wait_with_output()).await.expect("convoy run ends").expect("output");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("cancelling job {id}")), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "started\n");
    let j = up.job(&id).await;
    assert_eq!(j["state"], "cancelled", "{j:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_are_strict_and_errors_point_into_the_users_file() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (up, _reap) = started(tmp.path());
    let dir = tmp.path();
    let refuse = |spec: Value| {
        let up = &up;
        async move {
            let (s, v) =
                up.post("/v1/jobs", &json!({"queue": "default", "job_set": "s", "jobs": [{"pod_spec": spec}]})).await;
            assert_eq!(s, 400, "{v}");
            (v["field"].as_str().unwrap_or_default().to_string(), v["detail"].as_str().unwrap_or_default().to_string())
        }
    };
    // Misspelt fields inside the pod spec: the full path and the nearest name.
    let mut spec = sh("true");
    spec["containers"][0]["comand"] = spec["containers"][0]["command"].take();
    spec["containers"][0].as_object_mut().expect("container").remove("command");
    let (field, detail) = refuse(spec).await;
    assert_eq!(field, "jobs[0].pod_spec.containers[0].comand");
    assert!(detail.contains("did you mean \"command\""), "{detail}");
    let mut spec = sh("true");
    spec["containers"][0]["resources"] = json!({"request": {"cpu": "1"}});
    let (field, detail) = refuse(spec).await;
    assert_eq!(field, "jobs[0].pod_spec.containers[0].resources.request");
    assert!(detail.contains("did you mean \"requests\""), "{detail}");
    // A resource no node has and no setting names.
    let mut spec = sh("true");
    spec["containers"][0]["resources"] = json!({"requests": {"cpus": "1"}});
    let (field, detail) = refuse(spec).await;
    assert_eq!(field, "jobs[0].pod_spec.containers[0].resources.requests.cpus");
    assert!(detail.contains("did you mean \"cpu\"") && !detail.contains("reject_jobs_larger"), "{detail}");
    // No command, and every node runs processes: refused now, not failed later.
    let (field, detail) = refuse(json!({"containers": [{"name": "main", "image": "busybox",
        "resources": {"requests": {"cpu": "100m"}}}]}))
    .await;
    assert_eq!(field, "jobs[0].pod_spec.containers[0].command");
    assert!(detail.contains("runs jobs as processes"), "{detail}");
    assert_eq!(up.count_jobs("limit=1000").await, 0, "nothing refused was stored");

    // The CLI places errors in the file as the user wrote it.
    let file = dir.join("jobs.yaml");
    std::fs::write(
        &file,
        "job_set: s\njobs:\n  - pod_spec:\n      containers:\n        - name: main\n          command: [\"true\"]\n          resources:\n            requests:\n              cpu: many\n",
    )
    .expect("file");
    let err = refused(dir, &up.url, &["submit", "jobs.yaml"]).await;
    assert!(err.contains("jobs[0].pod_spec.containers[0].resources.requests.cpu"), "{err}");
    assert!(err.contains("jobs.yaml line 9, column 20") && !err.contains("line 1 column"), "{err}");
    std::fs::write(&file, "job_set: s\njobs:\n  - priority: high\n    pod_spec: {}\n").expect("file");
    let err = refused(dir, &up.url, &["submit", "jobs.yaml"]).await;
    assert!(err.contains("jobs[0].priority") && err.contains("(line 3, column 15)"), "{err}");

    // Standard input, the default queue, and the ids as the answer.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["--server", &up.url, "submit", "-", "--job-set", "piped"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convoy submit -");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(serde_yaml_ng::to_string(&sh("echo piped")).expect("YAML").as_bytes()).await.expect("write");
    drop(stdin);
    let out = child.wait_with_output().await.expect("output");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("submitted 1 job to queue default, job set piped"), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    up.wait_job(&id, WAIT, "succeeded", |j| j["state"] == "succeeded").await;

    // armadactl's own file, unchanged: jobSetId, podSpec, quantities as numbers.
    let armada = "queue: default\njobSetId: from-armada\njobs:\n  - priority: 0\n    podSpec:\n      restartPolicy: Never\n      containers:\n        - name: sleep\n          image: alpine:latest\n          command: [sh, -c]\n          args: [echo armada]\n          ports: [{containerPort: 8080}]\n          resources:\n            limits: {memory: 64Mi, cpu: 0.2}\n            requests: {memory: 64Mi, cpu: 0.2}\n    services:\n      - type: NodePort\n        ports: [8080]\n";
    std::fs::write(dir.join("armada.yaml"), armada).expect("file");
    let (stdout, _) = ok(dir, &up.url, &["submit", "armada.yaml"]).await;
    let id = stdout.trim().to_string();
    let j = up.wait_job(&id, WAIT, "over", |j| j["state"] == "succeeded" || j["state"] == "failed").await;
    assert_eq!(
        (&j["state"], &j["job_set"], &j["requests"]["cpu"]),
        (&json!("succeeded"), &json!("from-armada"), &json!("200m")),
        "{j:#}"
    );
    assert_eq!(up.logs(&id).await, "armada\n");
    // `-o json` gives the API's answer.
    let (stdout, _) = ok(dir, &up.url, &["submit", "armada.yaml", "-o", "json"]).await;
    let v: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["job_ids"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_wait_quietly_jobs_page_newest_first_and_watch_ends_with_the_set() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (up, _reap) = started(tmp.path());
    let dir = tmp.path();
    // A job that cannot start yet: its queue is cordoned.
    up.create_queue("held").await;
    let (s, v) = up.post("/v1/queues/held/cordon", &json!({})).await;
    assert!(s == 200 || s == 204, "{s} {v}");
    let held = up.submit("held", "h", vec![json!({"pod_spec": sh("echo finally")})]).await.remove(0);
    // The API waits for the job to start instead of answering at once.
    let began = std::time::Instant::now();
    let (s, page) = up.get(&format!("/v1/jobs/{held}/output?wait=2")).await;
    assert_eq!(s, 200, "{page}");
    assert!(began.elapsed() >= Duration::from_millis(1900), "answered after {:?}", began.elapsed());
    assert_eq!((&page["done"], &page["note"]), (&json!(false), &json!("the job has not started yet")));
    // `convoy logs -f` says so once, waits, then follows the job when it starts.
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["--server", &up.url, "logs", "-f", &held])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convoy logs -f");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (s, v) = up.post("/v1/queues/held/uncordon", &json!({})).await;
    assert!(s == 200 || s == 204, "{s} {v}");
    let out = tokio::time::timeout(WAIT, child.wait_with_output()).await.expect("logs -f ends").expect("output");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "finally
"
    );
    let notes = text(&out.stderr);
    assert!(notes.matches("not started").count() <= 1, "said once at most: {notes}");

    // `convoy jobs`: newest first, a page at a time, saying when there are more.
    let ids = up
        .submit("default", "many", (0..5).map(|i| json!({"pod_spec": sh(&format!("exit {}", i % 2))})).collect())
        .await;
    for id in &ids {
        up.wait_job(id, WAIT, "over", |j| j["state"] == "succeeded" || j["state"] == "failed").await;
    }
    let (table, note) = ok(dir, &up.url, &["jobs", "--queue", "default", "--limit", "2"]).await;
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with(&ids[4]) && rows[1].starts_with(&ids[3]), "newest first: {table}");
    assert!(table.lines().next().is_some_and(|h| h.contains("SUBMITTED") && h.contains("NODE") && h.contains("EXIT")));
    assert!(rows[1].contains(" 1 ") && rows[0].contains(" 0 "), "exit codes: {table}");
    let next = note.split("--after ").nth(1).and_then(|r| r.split_whitespace().next()).expect("says there are more");
    let (rest, _) = ok(dir, &up.url, &["jobs", "--queue", "default", "--job-set", "many", "--after", next]).await;
    let rest: Vec<&str> = rest.lines().skip(1).map(|l| &l[..26]).collect();
    assert_eq!(rest, [ids[2].as_str(), &ids[1], &ids[0]]);
    let (all, note) =
        ok(dir, &up.url, &["jobs", "--all", "--queue", "default", "--job-set", "many", "--state", "failed"]).await;
    assert_eq!(all.lines().count(), 3, "{all}");
    assert!(!note.contains("more jobs"), "{note}");
    let err = refused(dir, &up.url, &["jobs", "--queue", "nosuch"]).await;
    assert!(err.contains("404") && err.contains("queue nosuch does not exist"), "{err}");

    // `convoy watch`: what is missing fails at once; --until-done ends with the set.
    let err = tokio::time::timeout(Duration::from_secs(10), refused(dir, &up.url, &["watch", "nosuch", "s"]))
        .await
        .expect("at once");
    assert!(err.contains("queue nosuch does not exist"), "{err}");
    let err = tokio::time::timeout(Duration::from_secs(10), refused(dir, &up.url, &["watch", "default", "nosuch"]))
        .await
        .expect("at once");
    assert!(err.contains("job set nosuch of queue default has no jobs"), "{err}");
    let out = tokio::time::timeout(WAIT, convoy_in(dir, &up.url, &["watch", "default", "many", "--until-done"]))
        .await
        .expect("ends");
    assert!(!out.status.success(), "two jobs failed");
    let err = text(&out.stderr);
    assert!(err.contains("2 failed, 3 succeeded") && err.contains("2 job(s) of job set many failed"), "{err}");
    assert_eq!(text(&out.stdout).matches(" succeeded ").count(), 3, "{}", text(&out.stdout));
    let (_, note) = ok(dir, &up.url, &["watch", "held", "h", "--until-done"]).await;
    assert!(note.contains("1 succeeded"), "{note}");

    // Cancel by id alone, and a job's summary.
    let waiting = up.submit("default", "sleepy", vec![json!({"pod_spec": sh("sleep 60")})]).await.remove(0);
    up.wait_job(&waiting, WAIT, "running", |j| j["state"] == "running").await;
    let (cancelled, _) = ok(dir, &up.url, &["cancel", &waiting]).await;
    assert_eq!(cancelled.trim(), waiting);
    up.wait_job(&waiting, WAIT, "cancelled", |j| j["state"] == "cancelled").await;
    let (summary, _) = ok(dir, &up.url, &["job", &ids[1]]).await;
    assert!(
        summary.contains("State:      failed") && summary.contains("Runs:") && summary.contains("Events:"),
        "{summary}"
    );
    let (json_text, _) = ok(dir, &up.url, &["job", &ids[1], "-o", "json"]).await;
    let j: Value = serde_json::from_str(&json_text).expect("JSON");
    assert_eq!(j["id"], json!(ids[1]));
}
