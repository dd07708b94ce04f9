//! Jobs of the process runtime confined to what they asked for, with real processes on this
//! machine: memory (OOM kills reported as `OOMKilled`), CPU quota, pids limit, GPUs given out
//! disjointly and kept across an agent restart, and the Unix user a job runs as. Tests that need
//! a cgroup hierarchy, or root, say so and pass without one, unless `CONVOY_REQUIRE_CGROUPS=1`
//! or `CONVOY_REQUIRE_ROOT=1` says they must run (CI sets both); the cgroup code itself is also
//! tested on faked v1 and v2 file systems in `src/agent/confine/cgroup.rs`.

use crate::cli_client::ok;
use crate::common::procs::{Agent, reap_runs};
use crate::common::root::{required, root_or_skip};
use crate::common::wait::{file_contains, until};
use crate::common::{Server, config};
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

const QUEUE: &str = "confine";
const WAIT: Duration = Duration::from_secs(30);

/// A server and a process agent with `agent_toml`.
struct Node {
    agent: Option<Agent>,
    server: Server,
    dir: PathBuf,
    toml: String,
    _tmp: tempfile::TempDir,
}

impl Node {
    async fn start(agent_toml: &str, queues: &[&str]) -> Node {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let server = Server::start_in(&dir, &config(&dir, ""));
        server.ready().await;
        for q in std::iter::once(&QUEUE).chain(queues) {
            server.create_queue(q).await;
        }
        let toml = format!("max_backoff = 1\n{agent_toml}");
        let mut n = Node { agent: None, server, dir, toml, _tmp: tmp };
        n.start_agent();
        until(WAIT, "the agent looked for cgroups", || n.log().contains("confined") || n.log().contains("unconfined"))
            .await;
        n
    }

    fn start_agent(&mut self) {
        let url = self.server.url.clone();
        self.agent =
            Some(Agent::start(&url, "confine-ex", &self.dir.join("agent"), &self.toml, &self.dir.join("agent.log")));
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// True if the agent confines jobs in cgroups; says why the test skips otherwise (and fails
    /// instead when `CONVOY_REQUIRE_CGROUPS=1`).
    fn confined(&self, test: &str) -> bool {
        let log = self.log();
        let yes = log.contains("jobs are confined in cgroups");
        if !yes {
            assert!(
                !required("CONVOY_REQUIRE_CGROUPS"),
                "{test}: jobs run unconfined, and CONVOY_REQUIRE_CGROUPS=1: {log}"
            );
            eprintln!("{test}: skipped, jobs run unconfined on this machine: {log}");
        }
        yes
    }

    /// The cgroup version the agent confines jobs with (`v1` or `v2`).
    fn cgroup_version(&self) -> &'static str {
        if self.log().contains("version=\"cgroup-v2\"") { "v2" } else { "v1" }
    }

    async fn submit(&self, queue: &str, jobs: Vec<Value>) -> Vec<String> {
        self.server.submit(queue, "s", jobs).await
    }

    async fn wait_over(&self, id: &str) -> Value {
        self.server
            .wait_job(id, WAIT, "over", |j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
            .await
    }

    async fn wait_running(&self, id: &str) -> Value {
        self.server.wait_job(id, WAIT, "running", |j| j["state"] == "running").await
    }

    fn run_dir(&self, job: &Value) -> PathBuf {
        let run = &job["runs"][0]["run_id"];
        self.dir.join("agent/runs").join(run.as_str().expect("run id"))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("===== agent log =====\n{}", self.log());
        }
        self.agent = None;
        reap_runs(&self.dir.join("agent"));
    }
}

/// A shell script that prints the job's memory cgroup, then its memory limit: on v1 the memory
/// hierarchy's `memory.limit_in_bytes` (a huge number: none), on v2 the one cgroup's `memory.max`
/// (`max`: none).
fn own_memory_limit(version: &str) -> String {
    let cg = match version {
        "v2" => "$(sed -n 's/^0:://p' /proc/self/cgroup)",
        _ => "$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)",
    };
    match version {
        "v2" => format!("echo {cg}; cat /sys/fs/cgroup{cg}/memory.max"),
        _ => format!("echo {cg}; cat /sys/fs/cgroup/memory{cg}/memory.limit_in_bytes"),
    }
}

/// A job running `sh -c script` with `resources`.
fn sh(script: &str, resources: Value) -> Value {
    json!({"pod_spec": {"containers": [{"name": "main", "image": "none", "command": ["sh", "-c", script], "resources": resources}]}})
}

/// A job that allocates past its memory limit is killed by the kernel and fails with reason
/// `OOMKilled`, in its run, its events and `convoy why`. Its cgroup slot then serves the next jobs
/// with their own limits and OOM count, and goes when the agent stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_memory_limit_is_oom_killed_and_reported_so() {
    let mut n = Node::start("", &[]).await;
    if !n.confined("oom") {
        return;
    }
    // tail keeps a line that never ends: /dev/zero fills its memory.
    let id = &n
        .submit(QUEUE, vec![sh("echo start; exec tail /dev/zero", json!({"limits": {"cpu": "1", "memory": "32Mi"}}))])
        .await[0];
    let j = n.wait_over(id).await;
    assert_eq!(j["state"], "failed", "{j:#}");
    let run = &j["runs"][0];
    assert_eq!((&run["reason"], &run["exit_code"]), (&json!("OOMKilled"), &json!(137)), "{run:#}");
    assert!(run["message"].as_str().is_some_and(|m| m.contains("33554432 bytes")), "{run:#}");
    let failed = j["events"].as_array().and_then(|e| e.last()).expect("events");
    assert!(failed.to_string().contains("OOMKilled"), "{failed}");
    let why = ok(&n.server.url, &["why", id]).await;
    assert!(why.contains("OOMKilled"), "{why}");
    // The job's cgroup slot stays, empty, for the next job, which gets its own limits (here
    // raised past the memory+swap limit the first job left) and whose run does not count the
    // first job's OOM kill as its own; then one without a memory limit gets none.
    let own_limit = own_memory_limit(n.cgroup_version());
    let mut seen = Vec::new();
    for memory in [Some("256Mi"), None] {
        let limits = match memory {
            Some(m) => json!({"limits": {"cpu": "1", "memory": m}}),
            None => json!({"limits": {"cpu": "1"}}),
        };
        let id = &n.submit(QUEUE, vec![sh(&format!("{own_limit}; exit 3"), limits)]).await[0];
        let j = n.wait_over(id).await;
        let run = &j["runs"][0];
        assert_eq!(
            (&j["state"], &run["exit_code"], &run["reason"]),
            (&json!("failed"), &json!(3), &Value::Null),
            "{j:#}"
        );
        seen.push(n.server.logs(id).await);
    }
    let (cgroup, limit) = seen[0].trim().split_once('\n').expect("two lines");
    assert!(cgroup.contains("/convoy/slot-") && cgroup.ends_with("-0"), "{seen:?}");
    assert_eq!(limit, "268435456", "{seen:?}");
    let (cgroup, limit) = seen[1].trim().split_once('\n').expect("two lines");
    assert!(cgroup.contains("/convoy/slot-") && cgroup.ends_with("-0"), "{seen:?}");
    let unlimited = match n.cgroup_version() {
        "v2" => limit == "max",
        _ => limit.parse::<u64>().is_ok_and(|l| l > 1 << 60),
    };
    assert!(unlimited, "no limit: {seen:?}");
    // An agent that stops removes its free slots.
    let slot = match n.cgroup_version() {
        "v2" => PathBuf::from(format!("/sys/fs/cgroup{cgroup}")),
        _ => PathBuf::from(format!("/sys/fs/cgroup/memory{cgroup}")),
    };
    assert!(slot.is_dir(), "{} is there while the agent runs", slot.display());
    assert_eq!(n.agent.as_mut().expect("agent").terminate(), Some(0));
    assert!(!slot.exists(), "{} is left after the agent stopped", slot.display());
}

/// Two busy loops for 3 s in a job with half a core get about 1.5 s of CPU, not 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_spinning_on_every_core_is_held_to_its_cpu_quota() {
    let n = Node::start("", &[]).await;
    if !n.confined("cpu") {
        return;
    }
    let spin = "timeout 3 sh -c 'while :; do :; done'";
    let script = format!("{spin} & {spin} & {spin} & wait; times");
    let id = &n.submit(QUEUE, vec![sh(&script, json!({"limits": {"cpu": "500m", "memory": "64Mi"}}))]).await[0];
    let j = n.wait_over(id).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let out = n.server.logs(id).await;
    // `times`: the shell's user and system time, then its children's.
    let secs = |t: &str| -> f64 {
        let (m, s) = t.trim_end_matches('s').split_once('m').expect("NmS.SSSs");
        m.parse::<f64>().expect("minutes") * 60.0 + s.parse::<f64>().expect("seconds")
    };
    let children: f64 = out.lines().nth(1).expect("children's times").split_whitespace().map(secs).sum();
    assert!(children > 0.1 && children < 2.3, "CPU time of the spinners: {children}s ({out})");
}

/// A job starts inside its slot: the slot's holder (on v1 in the cpu and pids cgroups, not in
/// the memory one, which the job joins alone) supervises it itself, with no process of the
/// job's own in between, and the next job given the same slot has the same holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_start_inside_their_slot_supervised_by_its_holder() {
    let n = Node::start("", &[]).await;
    if !n.confined("holder") {
        return;
    }
    let script = "holder=$PPID; echo \"holder=$holder\"; sed 's/^/job /' /proc/self/cgroup; \
                  sed 's/^/holder /' /proc/$holder/cgroup";
    let mut holders = Vec::new();
    for _ in 0..2 {
        let id = &n.submit(QUEUE, vec![sh(script, json!({"limits": {"cpu": "1", "memory": "64Mi"}}))]).await[0];
        let j = n.wait_over(id).await;
        assert_eq!(j["state"], "succeeded", "{j:#}");
        let out = n.server.logs(id).await;
        // `who ctl` → the cgroup path of that process in that hierarchy.
        let path = |who: &str, ctl: &str| -> String {
            out.lines()
                .filter_map(|l| l.strip_prefix(who)?.strip_prefix(' '))
                .find_map(|l| {
                    let mut p = l.splitn(3, ':');
                    let (_, ctls, path) = (p.next()?, p.next()?, p.next()?);
                    ctls.split(',').any(|c| c == ctl).then(|| path.to_string())
                })
                .unwrap_or_else(|| panic!("no {ctl} cgroup of the {who} in: {out}"))
        };
        let holder = out.lines().find_map(|l| l.strip_prefix("holder=")).expect("holder pid").to_string();
        // The run's supervisor is its parent, the holder: the stamp names it.
        let stamp = std::fs::read_to_string(n.run_dir(&j).join("supervisor")).expect("supervisor file");
        let stamped = stamp.lines().next().and_then(|l| l.split_whitespace().next()).unwrap_or_default();
        assert_eq!(stamped, holder, "the job's supervisor is its parent: {stamp}");
        assert!(stamp.lines().next().is_some_and(|l| l.ends_with(" host")), "stop orders come as SIGUSR1: {stamp}");
        if out.lines().any(|l| l.starts_with("job 0::")) {
            eprintln!("holder cgroups: skipped, the v1 layout is what this checks (v2 here): {out}");
            return;
        }
        for ctl in ["memory", "cpu", "pids"] {
            assert!(path("job", ctl).contains("/slot-"), "the job is in its slot's {ctl} cgroup: {out}");
        }
        for ctl in ["cpu", "pids"] {
            assert_eq!(path("holder", ctl), path("job", ctl), "the holder is in the slot: {out}");
        }
        assert!(!path("holder", "memory").contains("/slot-"), "the holder is not in the job's memory cgroup: {out}");
        holders.push((holder, path("job", "cpu")));
    }
    assert_eq!(holders[0], holders[1], "the second job had the same slot and holder");
}

/// An idle holder takes no harm from signals that came after its run ended (a stop order sent
/// as the run was ending, SIGUSR1; a SIGTERM from outside): it lives on, and the next run in its
/// slot takes neither for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_sigterm_to_an_idle_holder_stops_neither_it_nor_its_next_run() {
    let n = Node::start("", &[]).await;
    if !n.confined("stray SIGTERM") {
        return;
    }
    let limits = json!({"limits": {"cpu": "1", "memory": "64Mi"}});
    let holder_of = |j: &Value| -> i32 {
        let stamp = std::fs::read_to_string(n.run_dir(j).join("supervisor")).expect("supervisor file");
        stamp.split_whitespace().next().and_then(|p| p.parse().ok()).expect("stamp pid")
    };
    let first = &n.submit(QUEUE, vec![sh("echo first", limits.clone())]).await[0];
    let j = n.wait_over(first).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let holder = holder_of(&j);
    for sig in [libc::SIGUSR1, libc::SIGTERM] {
        // SAFETY: kill(2) with the pid of a process this test's agent started.
        assert_eq!(unsafe { libc::kill(holder, sig) }, 0, "the holder {holder} is alive");
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let second = &n.submit(QUEUE, vec![sh("sleep 0.3; echo second", limits)]).await[0];
    let j = n.wait_over(second).await;
    assert_eq!(j["state"], "succeeded", "the order was not taken for this run's: {j:#}");
    assert_eq!(holder_of(&j), holder, "the same holder, alive, supervised the next run in its slot");
    assert!(n.server.logs(second).await.contains("second"));
}

/// A fork bomb stops at the pids limit: at most `pids_max` processes of the job at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stops_at_the_pids_limit() {
    let n = Node::start("[process.limits]\npids_max = 12\n", &[]).await;
    if !n.confined("pids") {
        return;
    }
    // Each child leaves a marker, then becomes a sleep: one process each. The shell waits for
    // the marker (with builtins only) before it forks the next, so the markers count the forks.
    let script = "for i in $(seq 40); do (: > m.$i; exec sleep 30) & while [ ! -e m.$i ]; do :; done; done; echo done";
    let id = &n.submit(QUEUE, vec![sh(script, json!({"limits": {"cpu": "1", "memory": "64Mi"}}))]).await[0];
    let j = n.wait_over(id).await;
    let dir = n.run_dir(&j);
    let markers = std::fs::read_dir(&dir)
        .expect("run dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("m."))
        .count();
    let err = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    // The shell itself is one of the 12.
    assert_eq!(markers, 11, "children started ({err}): {j:#}");
    assert_eq!(j["state"], "failed", "the shell gave up: {j:#}");
    assert!(err.to_lowercase().contains("fork"), "the shell says it could not fork: {err}");
}

/// GPU jobs get disjoint `CUDA_VISIBLE_DEVICES`, a job without GPUs none; after an agent restart
/// mid-job the running jobs keep their GPUs and limits and a new job gets a free GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_jobs_see_disjoint_devices_and_keep_them_and_their_limits_across_an_agent_restart() {
    let mut n = Node::start("[process]\ngpus = [\"0\", \"1\", \"2\"]\n", &[]).await;
    let go = n.dir.join("go");
    let confined = n.confined("gpu limits");
    let script = format!(
        "echo \"gpus=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES\"; while [ ! -e '{}' ]; do sleep 0.05; done; \
         ({}) 2>/dev/null | tail -n 1",
        go.display(),
        own_memory_limit(n.cgroup_version())
    );
    let gpu = json!({"limits": {"cpu": "100m", "memory": "48Mi", "nvidia.com/gpu": "1"}});
    let ids = n
        .submit(
            QUEUE,
            vec![
                sh(&script, gpu.clone()),
                sh(&script, gpu.clone()),
                sh(&script, json!({"requests": {"cpu": "100m", "memory": "48Mi"}})),
            ],
        )
        .await;
    let mut seen = Vec::new();
    for id in &ids {
        let j = n.wait_running(id).await;
        let out = n.run_dir(&j).join("stdout");
        file_contains(WAIT, &out, "gpus=").await;
        seen.push(std::fs::read_to_string(&out).expect("stdout"));
    }
    let gpu_of = |s: &str| s.split_whitespace().next().and_then(|g| g.strip_prefix("gpus=")).unwrap_or("").to_string();
    let (a, b) = (gpu_of(&seen[0]), gpu_of(&seen[1]));
    assert!(["0", "1", "2"].contains(&a.as_str()) && ["0", "1", "2"].contains(&b.as_str()) && a != b, "{seen:?}");
    assert!(seen[0].contains(&format!("nvidia={a}")), "{seen:?}");
    assert_eq!(seen[2].trim(), "gpus= nvidia=void", "a job without GPUs sees none");

    n.agent.as_mut().expect("agent").kill9();
    n.start_agent();
    until(WAIT, "the new agent adopted the runs", || {
        n.log().matches("adopted a run from an earlier agent").count() == 3
    })
    .await;
    let late = &n.submit(QUEUE, vec![sh(&script, gpu)]).await[0];
    let j = n.wait_running(late).await;
    let out = n.run_dir(&j).join("stdout");
    file_contains(WAIT, &out, "gpus=").await;
    let c = gpu_of(&std::fs::read_to_string(&out).expect("stdout"));
    let free: Vec<&str> = ["0", "1", "2"].into_iter().filter(|g| *g != a && *g != b).collect();
    assert_eq!(vec![c.as_str()], free, "the new job gets the GPU the running ones do not hold");

    std::fs::write(&go, b"").expect("go");
    for id in ids.iter().chain([late]) {
        let j = n.wait_over(id).await;
        assert_eq!(j["state"], "succeeded", "{j:#}");
        let limit = n.server.logs(id).await.lines().nth(1).unwrap_or("").to_string();
        if confined {
            assert_eq!(limit, (48u64 << 20).to_string(), "the limit holds after the restart");
        }
    }
}

/// `run_as` maps queues to users: the job runs as its queue's user and owns its run directory
/// and logs; an unknown user or root (without `allow_root`) fails the run with a clear reason,
/// and the node takes further jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_as_the_user_their_queue_maps_to_and_never_as_root() {
    if !root_or_skip("run_as (creating test users)") {
        return;
    }
    let user = "convoy-it-batch";
    let st = std::process::Command::new("useradd").args(["-M", "-s", "/bin/sh", user]).status();
    match st {
        // 9: the user exists already (an earlier run).
        Ok(s) if s.success() || s.code() == Some(9) => {}
        other => {
            assert!(!required("CONVOY_REQUIRE_ROOT"), "run_as: useradd failed: {other:?}");
            eprintln!("run_as: skipped, useradd failed: {other:?}");
            return;
        }
    }
    let toml = format!(
        "[process]\nrun_as = [{{ queue = \"{QUEUE}\", user = \"{user}\" }}, {{ queue = \"ghost\", user = \"convoy-no-such-user\" }}, {{ queue = \"rooty\", user = \"root\" }}]\n"
    );
    let n = Node::start(&toml, &["ghost", "rooty", "unmapped"]).await;
    let small = json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
    let id = &n.submit(QUEUE, vec![sh("id -un; echo \"$HOME $USER\"; echo x > mine", small.clone())]).await[0];
    let j = n.wait_over(id).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let out = n.server.logs(id).await;
    assert!(out.starts_with(&format!("{user}\n")) && out.contains(&format!(" {user}")), "{out}");
    let dir = n.run_dir(&j);
    let uid = |p: PathBuf| std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).uid();
    let want = uid(dir.join("mine"));
    assert_ne!(want, 0, "the job's file is not root's");
    assert_eq!((uid(dir.clone()), uid(dir.join("stdout")), uid(dir.join("stderr"))), (want, want, want));

    for (queue, says) in [
        ("ghost", "process.run_as: no Unix user \"convoy-no-such-user\" on this node"),
        ("rooty", "is root, and process.allow_root is not set"),
        ("unmapped", "maps no user for queue unmapped"),
    ] {
        let id = &n.submit(queue, vec![sh("echo ran", small.clone())]).await[0];
        let j = n.wait_over(id).await;
        assert_eq!(j["state"], "failed", "{j:#}");
        let run = &j["runs"][0];
        assert_eq!(run["reason"], "invalid job", "{queue}: {j:#}");
        assert!(run["message"].as_str().is_some_and(|m| m.contains(says)), "{queue}: {j:#}");
    }
    // Still taking jobs.
    let id = &n.submit(QUEUE, vec![sh("echo again", small)]).await[0];
    assert_eq!(n.wait_over(id).await["state"], "succeeded");
}

/// `run_as = "principal"`: each job runs as the Unix account named like the principal that
/// submitted it (its owner, which the server records and shows); a principal without an account
/// fails its run with a clear reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_as_their_owners_own_account() {
    if !root_or_skip("run_as principal (creating test users)") {
        return;
    }
    let users = ["convoy-it-ann", "convoy-it-ben"];
    for user in users {
        match std::process::Command::new("useradd").args(["-M", "-s", "/bin/sh", user]).status() {
            // 9: the user exists already (an earlier run).
            Ok(s) if s.success() || s.code() == Some(9) => {}
            other => {
                assert!(!required("CONVOY_REQUIRE_ROOT"), "run_as principal: useradd failed: {other:?}");
                eprintln!("run_as principal: skipped, useradd failed: {other:?}");
                return;
            }
        }
    }
    let (admin, exec) = ("principal-admin-token-0123456789", "principal-exec-token-0123456789");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().to_path_buf();
    let tokens = format!(
        "[auth]\nenabled = true\ntokens = [\n  {{ token = \"{admin}\", principal = \"convoy-it-nobody\", roles = [\"admin\"] }},\n  \
         {{ token = \"{exec}\", principal = \"node-a\", roles = [\"executor\"] }},\n  \
         {{ token = \"ann-token-0123456789abcdef\", principal = \"{}\", roles = [\"submitter\"] }},\n  \
         {{ token = \"ben-token-0123456789abcdef\", principal = \"{}\", roles = [\"submitter\"] }},\n]\n",
        users[0], users[1]
    );
    let server = Server::start_in(&dir, &config(&dir, "").replace("[auth]\nenabled = false\n", &tokens));
    server.ready().await;
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: String, token: &'static str, body: Option<Value>| {
        let (http, url) = (http.clone(), format!("{}{path}", server.url));
        async move {
            let mut r = http.request(method, url).bearer_auth(token);
            if let Some(b) = body {
                r = r.json(&b);
            }
            let r = r.send().await.expect("request");
            let status = r.status().as_u16();
            (status, r.text().await.expect("text"))
        }
    };
    let (st, body) = call(
        reqwest::Method::POST,
        "/v1/queues".into(),
        admin,
        Some(json!({"name": QUEUE, "owners": [users[0], users[1]]})),
    )
    .await;
    assert_eq!(st, 201, "{body}");
    let toml = format!("max_backoff = 1\ntoken = \"{exec}\"\n[process]\nrun_as = \"principal\"\n");
    let agent = Agent::start(&server.url, "owners-ex", &dir.join("agent"), &toml, &dir.join("agent.log"));
    let small = json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
    let mut jobs = Vec::new();
    for token in ["ann-token-0123456789abcdef", "ben-token-0123456789abcdef", admin] {
        let body = json!({"queue": QUEUE, "job_set": "s", "jobs": [sh("id -un", small.clone())]});
        let (st, r) = call(reqwest::Method::POST, "/v1/jobs".into(), token, Some(body)).await;
        assert_eq!(st, 200, "{r}");
        let v: Value = serde_json::from_str(&r).expect("json");
        jobs.push(v["job_ids"][0].as_str().expect("id").to_string());
    }
    let agent_log = dir.join("agent.log");
    let over = |id: String| {
        let (call, agent_log) = (&call, &agent_log);
        async move {
            let deadline = std::time::Instant::now() + WAIT;
            loop {
                let (_, body) = call(reqwest::Method::GET, format!("/v1/jobs/{id}"), admin, None).await;
                let j: Value = serde_json::from_str(&body).expect("json");
                if matches!(j["state"].as_str(), Some("succeeded" | "failed")) {
                    return j;
                }
                let log = std::fs::read_to_string(agent_log).unwrap_or_default();
                assert!(std::time::Instant::now() < deadline, "not over: {j:#}\n{log}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    for (id, user) in jobs.iter().zip(users) {
        let j = over(id.clone()).await;
        assert_eq!((&j["state"], &j["owner"]), (&json!("succeeded"), &json!(user)), "{j:#}");
        let (_, out) = call(reqwest::Method::GET, format!("/v1/jobs/{id}/logs"), admin, None).await;
        assert_eq!(out, format!("{user}\n"));
    }
    let j = over(jobs[2].clone()).await;
    assert_eq!((&j["state"], &j["owner"]), (&json!("failed"), &json!("convoy-it-nobody")), "{j:#}");
    assert!(j["runs"][0]["message"].as_str().is_some_and(|m| m.contains("no Unix user \"convoy-it-nobody\"")), "{j:#}");
    drop(agent);
    reap_runs(&dir.join("agent"));
}

/// Without a usable cgroup hierarchy the agent says jobs run unconfined, the node carries
/// `convoy.io/confinement=none` (a node selector finds it), and jobs run without limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cgroups_jobs_run_unconfined_and_the_node_says_so() {
    let empty = tempfile::tempdir().expect("tempdir");
    let n = Node::start(&format!("[process.limits]\ncgroup_root = \"{}\"\n", empty.path().display()), &[]).await;
    assert!(n.log().contains("no usable cgroup hierarchy: jobs run unconfined"), "{}", n.log());
    let mut job =
        sh("cat /proc/self/cgroup | grep -c /convoy/ || true", json!({"limits": {"cpu": "100m", "memory": "1Mi"}}));
    job["pod_spec"]["nodeSelector"] = json!({"convoy.io/confinement": "none"});
    let id = &n.submit(QUEUE, vec![job]).await[0];
    let j = n.wait_over(id).await;
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert_eq!(n.server.logs(id).await, "0\n", "the job is in no cgroup of the agent's");
}

/// A cgroup that cannot be set up is the node's fault: the run goes back to the queue with
/// reason `confinement failed`. Here the cgroup file system is faked with plain directories, so
/// the job's cgroup has no `cgroup.procs` to join through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cgroup_that_cannot_be_set_up_returns_the_run() {
    let fake = tempfile::tempdir().expect("tempdir");
    for ctl in ["memory", "cpu", "pids"] {
        std::fs::create_dir(fake.path().join(ctl)).expect("mkdir");
        std::fs::write(fake.path().join(ctl).join("cgroup.procs"), "").expect("write");
    }
    let n = Node::start(&format!("[process.limits]\ncgroup_root = \"{}\"\n", fake.path().display()), &[]).await;
    assert!(n.log().contains("version=\"cgroup-v1\""), "{}", n.log());
    let id = &n.submit(QUEUE, vec![sh("echo ran", json!({"limits": {"cpu": "100m", "memory": "64Mi"}}))]).await[0];
    let j = n
        .server
        .wait_job(id, WAIT, "a run that failed to confine", |j| {
            j["runs"].as_array().is_some_and(|r| r.iter().any(|r| r["reason"] == "confinement failed"))
        })
        .await;
    let run = j["runs"].as_array().and_then(|r| r.iter().find(|r| r["reason"] == "confinement failed")).expect("run");
    // Back to the queue, not the job's failure.
    assert_eq!(run["state"], "lost", "{j:#}");
    assert!(j.to_string().contains("run lost: confinement failed"), "{j:#}");
    let dir = n.run_dir(&json!({"runs": [run]}));
    let exit = std::fs::read_to_string(dir.join("exit")).expect("exit record");
    assert!(exit.contains("cgroup.procs"), "the record names what failed: {exit}");
    assert_eq!(std::fs::read_to_string(dir.join("stdout")).unwrap_or_default(), "", "the job never ran");
    // The job was given one of the agent's slots (`slot-<agent>-<n>`), which it could not join;
    // no cgroup of the run's own was made (slots replaced them).
    let own = std::fs::read_to_string("/proc/self/cgroup").expect("cgroup");
    let mem = own.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.trim_start_matches('/').to_string()));
    let parent = fake.path().join("memory").join(mem.unwrap_or_default()).join("convoy");
    assert!(parent.is_dir(), "{}", parent.display());
    assert!(!parent.join(run["run_id"].as_str().expect("run id")).exists(), "a cgroup of the run's own");
    let agent_id = std::fs::read_to_string(
        n.dir.join("agent").join(convoy::agent::runtime::process::confine::slots::SLOT_ID_FILE),
    )
    .expect("the agent's slot id");
    let slot = parent.join(format!("slot-{}-0", agent_id.trim()));
    assert!(slot.is_dir(), "the agent's first slot: {:?}", walk(&parent));
}

/// With `cpuset = true`, jobs that ask for whole cores get cores of their own; a job asking for
/// part of a core may use every core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_asking_for_whole_cores_are_pinned_to_cores_of_their_own() {
    let n = Node::start(
        "[process]\nallocatable = { cpu = \"2\", memory = \"4Gi\" }\n[process.limits]\ncpuset = true\n",
        &[],
    )
    .await;
    if !n.confined("cpuset") {
        return;
    }
    let go = n.dir.join("go");
    let script =
        format!("grep Cpus_allowed_list /proc/self/status; while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let core = json!({"limits": {"cpu": "1", "memory": "32Mi"}});
    let part = json!({"limits": {"cpu": "10m", "memory": "32Mi"}, "requests": {"cpu": "0"}});
    let ids = n.submit(QUEUE, vec![sh(&script, core.clone()), sh(&script, core), sh(&script, part)]).await;
    let mut cpus = Vec::new();
    for id in &ids {
        let j = n.wait_running(id).await;
        let out = n.run_dir(&j).join("stdout");
        file_contains(WAIT, &out, "Cpus_allowed_list").await;
        let text = std::fs::read_to_string(&out).expect("stdout");
        cpus.push(text.split_whitespace().nth(1).unwrap_or("").to_string());
    }
    std::fs::write(&go, b"").expect("go");
    let mut pinned = cpus[..2].to_vec();
    pinned.sort();
    assert_eq!(pinned, ["0", "1"], "one core each: {cpus:?}");
    assert_eq!(cpus[2], "0-1", "a part of a core may run anywhere: {cpus:?}");
    for id in &ids {
        assert_eq!(n.wait_over(id).await["state"], "succeeded");
    }
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path().display().to_string());
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}
