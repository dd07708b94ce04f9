//! End to end with the process runtime: a real `convoy server`, a real `convoy agent --runtime
//! process` (and `convoy up`), real jobs under `convoy agent-supervise`, observed through the
//! public API. Outcomes are exact; timings are measured twice: on the wall clock through the
//! API, and precisely from the run directory (when the stop order was written, when the job
//! was spawned, when it ended). A failing test prints the agent's and the server's logs
//! (`E2E_LOGS=1 cargo nextest run --no-capture` prints them for passing tests too).

use crate::common::procs::{Agent, config_on_port, free_port, live_group_members, reap_runs};
use crate::common::up::{ReapOnDrop, Up};
use crate::common::wait::{file_contains, until};
use crate::common::{Server, config, pod};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

const QUEUE: &str = "e2e";
const EXECUTOR: &str = "e2e-executor";
const NODE: &str = "e2e-node";
/// Longest wait for any state in these tests.
const WAIT: Duration = Duration::from_secs(20);
/// The agent file: a fixed node, and quick retries so a restarted server is found again soon.
const AGENT_TOML: &str = r#"
max_backoff = 1
[process]
node = "e2e-node"
allocatable = { cpu = "8", memory = "16Gi" }
"#;

/// A server and an agent in one temporary directory. On drop: prints both logs if the test is
/// failing, stops the agent, and kills whatever jobs are left.
struct E2e {
    agent: Option<Agent>,
    server: Option<Server>,
    dir: PathBuf,
    config: String,
    _tmp: tempfile::TempDir,
}

impl E2e {
    /// A server (on `port`, or port 0) with queue `e2e`, and an agent polling it.
    async fn start(port: Option<u16>) -> E2e {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let config = match port {
            Some(p) => config_on_port(&dir, p, ""),
            None => config(&dir, ""),
        };
        let server = Server::start_in(&dir, &config);
        let mut e = E2e { agent: None, server: Some(server), dir, config, _tmp: tmp };
        e.server().ready().await;
        e.server().create_queue(QUEUE).await;
        e.start_agent();
        e
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("the server is running")
    }

    fn agent(&mut self) -> &mut Agent {
        self.agent.as_mut().expect("the agent is running")
    }

    fn agent_dir(&self) -> PathBuf {
        self.dir.join("agent")
    }

    fn start_agent(&mut self) {
        let url = self.server().url.clone();
        self.agent = Some(Agent::start(&url, EXECUTOR, &self.agent_dir(), AGENT_TOML, &self.dir.join("agent.log")));
    }

    fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// SIGTERM to the server; its exit code. Its log is kept as `server.<n>.log`.
    fn stop_server(&mut self) -> Option<i32> {
        let mut s = self.server.take().expect("the server is running");
        let code = s.terminate();
        drop(s);
        let n = (1..).find(|n| !self.dir.join(format!("server.{n}.log")).exists()).unwrap_or(0);
        let _ = std::fs::rename(self.dir.join("server.log"), self.dir.join(format!("server.{n}.log")));
        code
    }

    /// Starts the server again on the same data directory and configuration (so the same port).
    async fn restart_server(&mut self) {
        self.server = Some(Server::start_in(&self.dir, &self.config));
        self.server().ready().await;
    }

    async fn submit(&self, job_set: &str, jobs: Vec<Value>) -> Vec<String> {
        self.server().submit(QUEUE, job_set, jobs).await
    }

    async fn job(&self, id: &str) -> Value {
        self.server().job(id).await
    }

    /// Polls until `f(job)` holds, for at most `WAIT`.
    async fn wait_job(&self, id: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        self.server().wait_job(id, WAIT, what, f).await
    }

    /// Waits until the job is in `state`.
    async fn wait_state(&self, id: &str, state: &str) -> Value {
        self.wait_job(id, state, |j| j["state"] == state).await
    }

    /// Waits until the job is over and its (only) run too; a cancelled job is over at once, its
    /// run when the agent reports it.
    async fn wait_over(&self, id: &str) -> Value {
        self.wait_job(id, "over", |j| is_terminal(&j["state"]) && runs(j).iter().all(|r| is_terminal(&r["state"])))
            .await
    }

    async fn cancel(&self, job_set: &str, id: &str, reason: &str) {
        let (s, v) = self
            .server()
            .post("/v1/jobs/cancel", &json!({"queue": QUEUE, "job_set": job_set, "job_ids": [id], "reason": reason}))
            .await;
        assert_eq!((s, &v["job_ids"]), (200, &json!([id])), "{v}");
    }

    /// `GET path` of the server, as JSON.
    async fn get_json(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.server().url);
        self.server().client.get(url).send().await.expect("get").json().await.expect("json")
    }

    /// `GET path` of the server, as text.
    async fn get_text(&self, path: &str) -> String {
        let url = format!("{}{path}", self.server().url);
        self.server().client.get(url).send().await.expect("get").text().await.expect("text")
    }

    async fn logs(&self, id: &str) -> String {
        self.server().logs(id).await
    }

    /// The directory of the job's only run.
    fn run_dir(&self, job: &Value) -> PathBuf {
        self.agent_dir().join("runs").join(only_run(job)["run_id"].as_str().expect("run id"))
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("E2E_LOGS").is_some() {
            eprintln!("===== agent log =====\n{}", self.agent_log());
            for n in 1..10 {
                if let Ok(l) = std::fs::read_to_string(self.dir.join(format!("server.{n}.log"))) {
                    eprintln!("===== server log (run {n}) =====\n{l}");
                }
            }
            eprintln!(
                "===== server log =====\n{}",
                std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
            );
        }
        self.agent = None;
        reap_runs(&self.agent_dir());
    }
}

fn is_terminal(state: &Value) -> bool {
    matches!(state.as_str(), Some("succeeded" | "failed" | "cancelled" | "preempted" | "lost"))
}

fn runs(job: &Value) -> Vec<Value> {
    job["runs"].as_array().cloned().unwrap_or_default()
}

fn only_run(job: &Value) -> Value {
    let r = runs(job);
    assert_eq!(r.len(), 1, "exactly one run: {job:#}");
    r[0].clone()
}

/// The kinds of the job's events, in order.
fn event_kinds(job: &Value) -> Vec<String> {
    job["events"].as_array().expect("events").iter().map(|e| e["kind"].as_str().expect("kind").to_string()).collect()
}

/// A job item running `sh -c script` with small requests and the given pod spec extras.
fn sh_job(script: &str, extra: Value) -> Value {
    let mut spec = json!({
        "containers": [{
            "name": "main",
            "image": "busybox",
            "command": ["sh", "-c", script],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
        }]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"pod_spec": spec})
}

fn mtime_ms(path: &Path) -> i64 {
    let t = std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    t.duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// `finished_at_ms` of the run directory's exit record.
fn exit_ms(run_dir: &Path) -> i64 {
    let text =
        std::fs::read_to_string(run_dir.join("exit")).unwrap_or_else(|e| panic!("{}/exit: {e}", run_dir.display()));
    let v: Value = serde_json::from_str(&text).expect("exit record is JSON");
    v["finished_at_ms"].as_i64().expect("finished_at_ms")
}

/// Processes of the job's process group (its pid file) that are alive.
fn job_group_members(run_dir: &Path) -> Vec<i32> {
    let text = std::fs::read_to_string(run_dir.join("pid")).expect("pid file");
    let pgid: i32 = text.split_whitespace().next().and_then(|p| p.parse().ok()).expect("pid");
    live_group_members(pgid)
}

/// Waits (briefly: SIGKILL is delivered asynchronously) until nothing of the job's process group
/// is left.
async fn assert_group_gone(run_dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let live = job_group_members(run_dir);
        if live.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes of the job are left: {live:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the run's stdout holds `text` (the job is past its set-up, e.g. its trap).
async fn wait_output(run_dir: &Path, text: &str) {
    file_contains(WAIT, &run_dir.join("stdout"), text).await;
}

const HAPPY_EVENTS: [&str; 6] = ["submitted", "queued", "leased", "pending", "running", "succeeded"];

/// `command` + `args`, `env` and `workingDir` reach the process; exit 0 is `succeeded` with the
/// output in `/logs` and the plain event history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_reports_exit_code_zero_and_output() {
    let e = E2e::start(None).await;
    let workdir = e.dir.join("work");
    std::fs::create_dir(&workdir).expect("workdir");
    let job = json!({"pod_spec": {"containers": [{
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c"],
        "args": ["echo hello; echo greeting=$GREETING; echo cwd=$(pwd); exit 0"],
        "env": [{"name": "GREETING", "value": "world"}],
        "workingDir": workdir.display().to_string(),
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
    }]}});
    let id = &e.submit("ok", vec![job]).await[0];
    let j = e.wait_over(id).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert_eq!(j["reason"], Value::Null, "{j:#}");
    let run = only_run(&j);
    assert_eq!(
        (&run["state"], &run["exit_code"], &run["reason"]),
        (&json!("succeeded"), &json!(0), &Value::Null),
        "{run:#}"
    );
    assert_eq!((&run["executor"], &run["node"]), (&json!(EXECUTOR), &json!(NODE)));
    assert_eq!(e.logs(id).await, format!("hello\ngreeting=world\ncwd={}\n", workdir.display()));
    assert_eq!(event_kinds(&j), HAPPY_EVENTS);
}

/// A running job's output, followed: through the API piece by piece while the job writes it
/// (stdout and stderr apart, the first pieces before it ends), through `convoy logs -f`, and
/// through the web UI's output pane; once it ended, its shipped last lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_output_is_followed_while_it_is_written() {
    let e = E2e::start(None).await;
    let script =
        "for i in 1 2 3 4 5 6 7 8; do echo line $i; echo oops $i >&2; sleep 0.4; done; printf 'caf\\303\\251\\n'";
    let id = e.submit("follow", vec![sh_job(script, json!({}))]).await[0].clone();
    // The CLI follows it beside the API.
    let url = e.server().url.clone();
    let cli_id = id.clone();
    let cli = tokio::spawn(async move { crate::cli_client::ok(&url, &["logs", "--follow", &cli_id]).await });
    let follow = |stream: &'static str| {
        let (client, base, id) = (e.server().client.clone(), e.server().url.clone(), id.clone());
        async move {
            let (mut text, mut from, mut before_end) = (String::new(), None::<u64>, 0);
            loop {
                let mut url = format!("{base}/v1/jobs/{id}/output?stream={stream}&wait=10");
                if let Some(f) = from {
                    url.push_str(&format!("&from={f}"));
                }
                let r = client.get(url).send().await.expect("get");
                assert_eq!(r.status().as_u16(), 200);
                let page: Value = r.json().await.expect("json");
                let data = page["data"].as_str().unwrap_or("");
                if !data.is_empty() && !page["done"].as_bool().unwrap_or(false) {
                    before_end += 1;
                }
                if let Some(f) = page["from"].as_u64().filter(|_| !data.is_empty()) {
                    assert_eq!(Some(f), from.or(Some(0)), "pieces follow on: {page}");
                }
                text.push_str(data);
                if let Some(n) = page["next"].as_u64() {
                    from = Some(n);
                }
                if page["done"] == true {
                    return (text, before_end);
                }
            }
        }
    };
    let (stdout, stderr) = tokio::join!(follow("stdout"), follow("stderr"));
    let lines: String = (1..=8).map(|i| format!("line {i}\n")).collect();
    assert_eq!(stdout.0, format!("{lines}café\n"));
    assert_eq!(stderr.0, (1..=8).map(|i| format!("oops {i}\n")).collect::<String>());
    assert!(stdout.1 >= 2 && stderr.1 >= 2, "pieces before the end: {} and {}", stdout.1, stderr.1);
    let printed = tokio::time::timeout(WAIT, cli).await.expect("convoy logs -f ends with the run").expect("task");
    assert!(printed.ends_with("line 8\ncafé\n") && printed.contains("line 1\n"), "{printed}");
    // Over: at once, what was followed (kept a while) from the API, and the last lines it
    // shipped on the UI's page.
    let j = e.wait_over(&id).await;
    assert_eq!(j["state"], "succeeded");
    let page: Value = e.get_json(&format!("/v1/jobs/{id}/output")).await;
    assert_eq!(page["done"], true, "{page}");
    assert_eq!(page["data"], format!("{lines}café\n"), "what was followed is kept a while: {page}");
    // The UI's page: the end of the stream shown as the server kept it (the page's script then
    // reads the whole of it, as the API answers), each stream alone.
    let html = e.get_text(&format!("/ui/jobs/{id}?stream=stderr")).await;
    assert!(html.contains("id=\"output\" data-replace=\"true\"") && html.contains("oops 8"), "{html}");
    assert!(!html.contains("line 8"), "stderr alone: {html}");
    // Bad requests name their field.
    let r = e
        .server()
        .client
        .get(format!("{}/v1/jobs/{id}/output?stream=stdin", e.server().url))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.expect("text").contains("stream"));
    let r = e.server().client.get(format!("{}/v1/jobs/{id}/output?wait=-1", e.server().url)).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 400);
}

/// A live job's page offers its output pane, which the UI's own output route fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_page_follows_a_live_runs_output() {
    let e = E2e::start(None).await;
    let id = e.submit("page", vec![sh_job("echo started; sleep 30", json!({}))]).await[0].clone();
    e.wait_state(&id, "running").await;
    let html = e.get_text(&format!("/ui/jobs/{id}")).await;
    assert!(html.contains(&format!("data-output=\"/ui/jobs/{id}/output?stream=stdout\"")), "{html}");
    let deadline = Instant::now() + WAIT;
    loop {
        let page: Value = e.get_json(&format!("/ui/jobs/{id}/output?stream=stdout&wait=5")).await;
        if page["data"] == "started\n" {
            assert_eq!(
                (page["from"].as_u64(), page["next"].as_u64(), &page["done"]),
                (Some(0), Some(8), &json!(false))
            );
            break;
        }
        assert!(Instant::now() < deadline, "no output: {page}");
    }
    e.cancel("page", &id, "test over").await;
    e.wait_over(&id).await;
    // Over: the whole output from the agent that keeps the run, each stream alone.
    let page: Value = e.get_json(&format!("/v1/jobs/{id}/output?stream=stderr")).await;
    assert_eq!((&page["data"], &page["done"], &page["run_over"]), (&json!(""), &json!(true), &json!(true)), "{page}");
    assert!(page["note"].as_str().is_some_and(|n| n.contains("the whole output, from the agent")), "{page}");
    let page: Value = e.get_json(&format!("/v1/jobs/{id}/output?stream=stdout")).await;
    assert_eq!((&page["data"], &page["done"]), (&json!("started\n"), &json!(true)), "{page}");
}

/// Exit 3 is `failed`, exit code 3, and the reason names the code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_zero_exit_fails_naming_the_code() {
    let e = E2e::start(None).await;
    let id = &e.submit("bad", vec![sh_job("echo about to fail; exit 3", json!({}))]).await[0];
    let j = e.wait_over(id).await;
    assert_eq!((&j["state"], &j["reason"]), (&json!("failed"), &json!("exit code 3")), "{j:#}");
    let run = only_run(&j);
    assert_eq!(
        (&run["state"], &run["exit_code"], &run["reason"]),
        (&json!("failed"), &json!(3), &Value::Null),
        "{run:#}"
    );
    assert_eq!(e.logs(id).await, "about to fail\n");
    let kinds = event_kinds(&j);
    assert_eq!(kinds, ["submitted", "queued", "leased", "pending", "running", "failed"]);
    assert_eq!(j["events"][5]["message"], "exit code 3");
}

/// Cancel with a 10 s grace period: a job that exits on SIGTERM ends at once (its background
/// child too), the job and its run `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_job_honouring_sigterm_ends_it_well_within_the_grace_period() {
    let e = E2e::start(None).await;
    let script = "trap 'echo got TERM; exit 0' TERM; echo started; sleep 60 & wait";
    let id = &e.submit("c", vec![sh_job(script, json!({"terminationGracePeriodSeconds": 10}))]).await[0];
    let j = e.wait_state(id, "running").await;
    let run_dir = e.run_dir(&j);
    wait_output(&run_dir, "started").await;

    let t0 = Instant::now();
    e.cancel("c", id, "e2e cancel").await;
    assert_eq!(e.job(id).await["state"], "cancelled", "a cancelled job is cancelled at once");
    let j = e.wait_over(id).await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(3), "the job stops at SIGTERM, not after the 10 s grace period; took {took:?}");
    // Precisely: from the stop order on disk to the job's end.
    let stop_ms = exit_ms(&run_dir) - mtime_ms(&run_dir.join("kill"));
    assert!((0..1000).contains(&stop_ms), "SIGTERM to exit took {stop_ms} ms");

    assert_eq!((&j["state"], &j["reason"]), (&json!("cancelled"), &json!("e2e cancel")), "{j:#}");
    let run = only_run(&j);
    assert_eq!(
        (&run["state"], &run["exit_code"], &run["reason"], &run["message"]),
        (&json!("cancelled"), &json!(0), &json!("killed"), &json!("e2e cancel")),
        "{run:#}"
    );
    assert_eq!(e.logs(id).await, "started\ngot TERM\n");
    assert_eq!(
        event_kinds(&j),
        ["submitted", "queued", "leased", "pending", "running", "cancel_requested", "cancelled"]
    );
    assert_group_gone(&run_dir).await;
}

/// Cancel with a 2 s grace period of a job ignoring SIGTERM: SIGKILL after 2 s, not before and
/// not much later; exit code 137, `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_job_ignoring_sigterm_kills_it_after_the_grace_period() {
    let e = E2e::start(None).await;
    let id = &e
        .submit("c", vec![sh_job("trap '' TERM; echo stubborn; sleep 60", json!({"terminationGracePeriodSeconds": 2}))])
        .await[0];
    let j = e.wait_state(id, "running").await;
    let run_dir = e.run_dir(&j);
    wait_output(&run_dir, "stubborn").await;

    let t0 = Instant::now();
    e.cancel("c", id, "e2e cancel").await;
    let j = e.wait_over(id).await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "SIGKILL ~2 s after the cancel; took {took:?}"
    );
    let stop_ms = exit_ms(&run_dir) - mtime_ms(&run_dir.join("kill"));
    assert!((1950..2800).contains(&stop_ms), "SIGTERM to SIGKILL took {stop_ms} ms, the grace period is 2000 ms");

    assert_eq!((&j["state"], &j["reason"]), (&json!("cancelled"), &json!("e2e cancel")), "{j:#}");
    let run = only_run(&j);
    assert_eq!(
        (&run["state"], &run["exit_code"], &run["reason"], &run["message"]),
        (&json!("cancelled"), &json!(137), &json!("killed"), &json!("e2e cancel")),
        "{run:#}"
    );
    assert_eq!(
        event_kinds(&j),
        ["submitted", "queued", "leased", "pending", "running", "cancel_requested", "cancelled"]
    );
    assert_group_gone(&run_dir).await;
}

/// `activeDeadlineSeconds: 2`: SIGTERM after 2 s of running, `failed` with reason `deadline
/// exceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_the_job_after_its_deadline() {
    let e = E2e::start(None).await;
    let t0 = Instant::now();
    let id = &e.submit("d", vec![sh_job("echo waiting; sleep 60", json!({"activeDeadlineSeconds": 2}))]).await[0];
    let j = e.wait_over(id).await;
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(5), "deadline of 2 s; took {took:?}");
    let run_dir = e.run_dir(&j);
    let ran_ms = exit_ms(&run_dir) - mtime_ms(&run_dir.join("pid"));
    assert!((1950..2800).contains(&ran_ms), "the job ran {ran_ms} ms, its deadline is 2000 ms");

    // `sleep` ends at the SIGTERM: 128 + 15.
    assert_eq!((&j["state"], &j["reason"]), (&json!("failed"), &json!("deadline exceeded (exit code 143)")), "{j:#}");
    let run = only_run(&j);
    assert_eq!(
        (&run["state"], &run["exit_code"], &run["reason"], &run["message"]),
        (
            &json!("failed"),
            &json!(143),
            &json!("deadline exceeded"),
            &json!("ran longer than activeDeadlineSeconds (2s)")
        ),
        "{run:#}"
    );
    assert_eq!(event_kinds(&j), ["submitted", "queued", "leased", "pending", "running", "failed"]);
    assert_eq!(e.logs(id).await, "waiting\n");
    assert_group_gone(&run_dir).await;
}

/// A job that records its start (one line with its run id in `<markers>/<job id>`) and ends
/// once `<markers>/<go>` exists.
fn marker_job(markers: &Path, go: &str) -> Value {
    let mut j = sh_job(
        &format!(
            "echo $CONVOY_RUN_ID >> \"$MARKERS/$CONVOY_JOB_ID\"; while [ ! -e \"$MARKERS/{go}\" ]; do sleep 0.05; done; echo done"
        ),
        json!({}),
    );
    j["pod_spec"]["containers"][0]["env"] = json!([{"name": "MARKERS", "value": markers.display().to_string()}]);
    j
}

/// Every job succeeded with one run, was started exactly once (its marker file holds one line: that
/// run's id), and has the plain event history (`pending` may be missing when an agent died
/// before reporting it: its successor reports the run as running).
async fn assert_each_ran_once_and_succeeded(e: &E2e, ids: &[String], markers: &Path, pending_may_be_lost: bool) {
    for id in ids {
        let j = e.wait_over(id).await;
        assert_eq!(j["state"], "succeeded", "{j:#}");
        let run = only_run(&j);
        assert_eq!((&run["state"], &run["exit_code"]), (&json!("succeeded"), &json!(0)), "{run:#}");
        let starts = std::fs::read_to_string(markers.join(id)).expect("marker file");
        assert_eq!(
            starts,
            format!("{}\n", run["run_id"].as_str().expect("run id")),
            "job {id} started once, by its one run"
        );
        let kinds = event_kinds(&j);
        let without_pending = ["submitted", "queued", "leased", "running", "succeeded"];
        assert!(
            kinds == HAPPY_EVENTS || (pending_may_be_lost && kinds == without_pending),
            "job {id}: events {kinds:?}"
        );
        assert_eq!(e.logs(id).await, "done\n");
    }
}

/// kill -9 of the agent while four jobs run; two end while no agent runs, two under the new
/// agent. Each job succeeds with its one run, started once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_kill9_and_restart_while_jobs_run_starts_nothing_twice() {
    let mut e = E2e::start(None).await;
    let markers = e.dir.join("markers");
    std::fs::create_dir(&markers).expect("markers dir");
    // Two jobs end while no agent runs, two after the new agent took over.
    let jobs = vec![
        marker_job(&markers, "go1"),
        marker_job(&markers, "go1"),
        marker_job(&markers, "go2"),
        marker_job(&markers, "go2"),
    ];
    let ids = e.submit("k", jobs).await;
    let mut dirs = Vec::new();
    for id in &ids {
        let j = e.wait_state(id, "running").await;
        dirs.push(e.run_dir(&j));
    }
    for id in &ids {
        until(WAIT, "every job recorded its start", || markers.join(id).exists()).await;
    }

    e.agent().kill9();
    std::fs::write(markers.join("go1"), b"").expect("go1");
    until(WAIT, "the first two jobs ended without an agent", || dirs[..2].iter().all(|d| d.join("exit").exists()))
        .await;
    for id in &ids {
        assert_eq!(e.job(id).await["state"], "running", "the server still sees the run");
    }

    e.start_agent();
    until(WAIT, "the new agent recovered all four runs", || {
        let log = e.agent_log();
        log.matches("found a run that ended while the agent was away").count() == 2
            && log.matches("adopted a run from an earlier agent").count() == 2
    })
    .await;
    std::fs::write(markers.join("go2"), b"").expect("go2");
    assert_each_ran_once_and_succeeded(&e, &ids, &markers, false).await;
    assert!(e.agent().alive(), "the new agent keeps running");
    // Nothing was started twice: one run directory per job.
    let run_dirs = std::fs::read_dir(e.agent_dir().join("runs")).expect("runs").count();
    assert_eq!(run_dirs, ids.len());
}

/// Like the test above, but the agent dies while it starts a batch of runs: some have their
/// directory, some a supervisor, some nothing yet. Whatever the split, nothing starts twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_kill9_while_runs_start_starts_nothing_twice() {
    let mut e = E2e::start(None).await;
    let markers = e.dir.join("markers");
    std::fs::create_dir(&markers).expect("markers dir");
    std::fs::write(markers.join("go"), b"").expect("go");
    let ids = e.submit("k", (0..8).map(|_| marker_job(&markers, "go")).collect()).await;
    let runs_dir = e.agent_dir().join("runs");
    until(WAIT, "the first run directory", || std::fs::read_dir(&runs_dir).is_ok_and(|mut d| d.next().is_some())).await;
    e.agent().kill9();
    e.start_agent();
    assert_each_ran_once_and_succeeded(&e, &ids, &markers, true).await;
}

/// SIGTERM of the server while four jobs run; two end (and fail to be reported) while it is
/// down; it restarts on the same port and data. Every final event arrives, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_while_the_agent_runs_loses_no_final_event() {
    let mut e = E2e::start(Some(free_port())).await;
    let markers = e.dir.join("markers");
    std::fs::create_dir(&markers).expect("markers dir");
    // Two jobs end while the server is down, two after it is back.
    let jobs = vec![
        marker_job(&markers, "go1"),
        marker_job(&markers, "go1"),
        marker_job(&markers, "go2"),
        marker_job(&markers, "go2"),
    ];
    let ids = e.submit("r", jobs).await;
    let mut dirs = Vec::new();
    for id in &ids {
        let j = e.wait_state(id, "running").await;
        dirs.push(e.run_dir(&j));
    }

    assert_eq!(e.stop_server(), Some(0), "SIGTERM stops the server cleanly");
    std::fs::write(markers.join("go1"), b"").expect("go1");
    until(WAIT, "the first two jobs ended while the server was down", || {
        dirs[..2].iter().all(|d| d.join("exit").exists())
    })
    .await;
    until(WAIT, "the agent tried to report them", || e.agent_log().contains("event delivery failed")).await;

    e.restart_server().await;
    std::fs::write(markers.join("go2"), b"").expect("go2");
    assert_each_ran_once_and_succeeded(&e, &ids, &markers, false).await;
    assert!(e.agent().alive(), "the agent rode out the server restart");
    // Each run was reported and acknowledged once: the agent marked its directory.
    for d in &dirs {
        until(WAIT, "the run directory marked reported", || d.join("reported").exists()).await;
    }
}

/// `convoy up` runs the README's job; Ctrl-C stops the job still running, with its grace period
/// (nothing is left running under PID 1), and convoy up with it; the next `convoy up` on the
/// same directory has both jobs as they ended. A second Ctrl-C stops at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convoy_up_runs_the_readme_job_and_ctrl_c_stops_the_running_ones() {
    crate::common::install_crypto();
    let tmp = tempfile::tempdir().expect("temp dir");
    let _reap = ReapOnDrop(tmp.path().join("data").join("agent"));
    let port = free_port();
    let mut up = Up::start(tmp.path(), port, 1);
    assert_eq!(up.url, format!("http://127.0.0.1:{port}"));
    // The README's job, as its curl line sends it.
    let body = r#"{"queue":"default","job_set":"hello","jobs":[{"pod_spec":{"containers":[{"name":"hello","image":"busybox","command":["echo","hello from convoy"],"resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}]}"#;
    let r = up
        .client
        .post(format!("{}/v1/jobs", up.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("submit");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("JSON");
    let id = v["job_ids"][0].as_str().expect("job id").to_string();

    let j = up.wait_job(&id, WAIT, "over", |j| is_terminal(&j["state"])).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert_eq!(only_run(&j)["exit_code"], 0);
    assert_eq!(up.text(&format!("/v1/jobs/{id}/logs")).await, (200, "hello from convoy\n".to_string()));

    // A job still running when convoy up stops is stopped: SIGTERM, which it takes.
    let pid_file = tmp.path().join("pid");
    let script = format!("echo $$ > '{}'; while true; do sleep 0.05; done", pid_file.display());
    let (s, v) = up
        .post(
            "/v1/jobs",
            &json!({"queue": "default", "job_set": "hello", "jobs": [{"pod_spec": pod("100m", &script)}]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let long = v["job_ids"][0].as_str().expect("job id").to_string();
    up.wait_job(&long, WAIT, "running", |j| j["state"] == "running").await;
    until(WAIT, "the job wrote its pid", || std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))).await;
    let pid: i32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("a pid");
    assert!(up.log_text().contains("running jobs are cancelled, each with its grace period"), "the banner says so");

    assert_eq!(up.interrupt(), Some(0), "Ctrl-C stops convoy up cleanly");
    assert!(live_group_members(pid).is_empty(), "the job's processes are gone");
    drop(up);

    let mut up = Up::start(tmp.path(), port, 2);
    let j = up.job(&id).await;
    assert_eq!((&j["state"], runs(&j).len()), (&json!("succeeded"), 1), "{j:#}");
    assert_eq!(up.text(&format!("/v1/jobs/{id}/logs")).await, (200, "hello from convoy\n".to_string()));
    let j = up.job(&long).await;
    assert_eq!(j["state"], "cancelled", "{j:#}");
    assert!(j["reason"].as_str().is_some_and(|r| r.contains("convoy up was stopped")), "{j:#}");
    assert!(runs(&j).iter().all(|r| is_terminal(&r["state"])), "its run ended: {j:#}");

    // A job that ignores SIGTERM and has a long grace period: a second Ctrl-C does not wait.
    let mut stubborn = pod("100m", "trap '' TERM; while true; do sleep 0.05; done");
    stubborn["terminationGracePeriodSeconds"] = json!(120);
    let (s, v) =
        up.post("/v1/jobs", &json!({"queue": "default", "job_set": "hello", "jobs": [{"pod_spec": stubborn}]})).await;
    assert_eq!(s, 200, "{v}");
    let id = v["job_ids"][0].as_str().expect("job id").to_string();
    up.wait_job(&id, WAIT, "running", |j| j["state"] == "running").await;
    up.send_interrupt();
    until(WAIT, "convoy up cancelling its jobs", || up.log_text().contains("stopping 1 running job")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(up.child.try_wait().expect("status").is_none(), "the first Ctrl-C waits for the grace period");
    let t = Instant::now();
    assert_eq!(up.interrupt(), Some(0), "the second Ctrl-C stops at once");
    assert!(t.elapsed() < Duration::from_secs(20), "stopping took {:?}", t.elapsed());
}

/// A job leased to an agent that is away, cancelled before the agent sees the lease: the run
/// ends `cancelled` once the agent is back (it never starts), and its node is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_lease_the_agent_never_received_ends_the_run_and_frees_the_node() {
    let mut e = E2e::start(None).await;
    let whole_node = |script: &str| {
        let mut j = sh_job(script, json!({}));
        j["pod_spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("8");
        j
    };
    // The agent's node is known (it ran a job), then the agent goes away.
    let warm = &e.submit("w", vec![sh_job("true", json!({}))]).await[0];
    assert_eq!(e.wait_over(warm).await["state"], "succeeded");
    e.agent().kill9();
    // Leased to the absent agent, which never sees the lease: the job is cancelled first.
    let id = &e.submit("c", vec![whole_node("echo should not run")]).await[0];
    let j = e.wait_state(id, "leased").await;
    let run_id = only_run(&j)["run_id"].as_str().expect("run id").to_string();
    e.cancel("c", id, "e2e cancel").await;
    e.start_agent();

    let j = e.wait_over(id).await;
    assert_eq!((&j["state"], &j["reason"]), (&json!("cancelled"), &json!("e2e cancel")), "{j:#}");
    let run = only_run(&j);
    assert_eq!(
        (&run["state"], &run["exit_code"], &run["reason"], &run["message"]),
        (&json!("cancelled"), &Value::Null, &json!("killed"), &json!("stopped before it started: e2e cancel")),
        "{run:#}"
    );
    assert_eq!(event_kinds(&j), ["submitted", "queued", "leased", "cancel_requested", "cancelled"]);
    assert!(!e.agent_dir().join("runs").join(&run_id).exists(), "the cancelled job never started");
    // Its resources are free again: a job needing the whole node runs.
    let next = &e.submit("c", vec![whole_node("echo next")]).await[0];
    let j = e.wait_over(next).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
}
