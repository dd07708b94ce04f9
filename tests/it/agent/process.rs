//! The process runtime end to end: a fake control plane, `convoy::agent::run` (or the real
//! binary) and real child processes under `convoy agent-supervise`.

use super::control_plane::ControlPlane;
use super::harness::{InProcessAgent, config, init_tracing, shell_lease};
use crate::common::procs::live_group_members;
use crate::common::wait::{file_contains, wait_for};
use convoy::agent::RuntimeKind;
use convoy::model::api::RunEventKind;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_succeeds_with_output_in_log_tail() {
    init_tracing();
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let l = shell_lease("node-1", "echo hello from $CONVOY_JOB_ID; echo oops >&2");
    let (run_id, job_id) = (l.run_id, l.job_id);
    cp.push_lease(l);
    let fin = cp.wait_final(run_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Succeeded, "{fin:?}");
    assert_eq!(fin.exit_code, Some(0));
    let tail = fin.log_tail.expect("log tail");
    assert!(tail.contains(&format!("hello from {job_id}")), "{tail}");
    assert!(tail.contains("oops"), "{tail}");
    let kinds: Vec<_> = cp.events_of(run_id).iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [RunEventKind::Pending, RunEventKind::Running, RunEventKind::Succeeded]);
    // The first poll reports this machine as the node.
    let node = cp.script().polls.front().expect("a poll").nodes[0].clone();
    assert_eq!(node.name.as_str(), "node-1");
    assert!(node.allocatable.get("cpu") >= 1000 && node.allocatable.get("memory") > 0, "{node:?}");
    // Acknowledged: the run leaves the polls and its directory is marked reported.
    let run_dir = dir.path().join("runs").join(run_id.to_string());
    wait_for(T, "reported marker", || run_dir.join("reported").exists().then_some(())).await;
    wait_for(T, "a poll without the run", || cp.last_poll().filter(|p| p.runs.iter().all(|r| r.run_id != run_id)))
        .await;
    assert_eq!(std::fs::read_to_string(run_dir.join("stdout")).expect("stdout"), format!("hello from {job_id}\n"));
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_zero_exit_fails_with_the_code() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let l = shell_lease("node-1", "echo about to fail; exit 3");
    let run_id = l.run_id;
    cp.push_lease(l);
    let fin = cp.wait_final(run_id, T).await;
    assert_eq!((fin.kind, fin.exit_code, fin.reason.as_deref()), (RunEventKind::Failed, Some(3), None), "{fin:?}");
    assert!(fin.log_tail.is_some_and(|t| t.contains("about to fail")));
    // A job without a command cannot run here: failed as invalid, not started.
    let bad =
        super::harness::lease("node-1", serde_json::json!({"containers": [{"name": "main", "image": "busybox"}]}));
    let bad_id = bad.run_id;
    cp.push_lease(bad);
    let fin = cp.wait_final(bad_id, T).await;
    assert_eq!((fin.kind, fin.reason.as_deref()), (RunEventKind::Failed, Some("invalid job")), "{fin:?}");
    // A lease for another node goes back to the queue.
    let elsewhere = shell_lease("node-2", "true");
    let elsewhere_id = elsewhere.run_id;
    cp.push_lease(elsewhere);
    assert_eq!(cp.wait_final(elsewhere_id, T).await.kind, RunEventKind::Returned);
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_honouring_sigterm_ends_within_the_grace_period() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let l = shell_lease("node-1", "trap 'echo got TERM; exit 0' TERM; echo started; while true; do sleep 0.1; done");
    let (run_id, job_id) = (l.run_id, l.job_id);
    cp.push_lease(l);
    cp.wait_kind(run_id, RunEventKind::Running, T).await;
    wait_for_output(dir.path(), run_id, "started").await;
    let began = Instant::now();
    cp.push_kill(run_id, job_id, 20.0, "cancelled by user");
    let fin = cp.wait_final(run_id, T).await;
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "a job that honours SIGTERM stops at once, took {:?}",
        began.elapsed()
    );
    assert_eq!(
        (fin.kind, fin.reason.as_deref(), fin.exit_code),
        (RunEventKind::Failed, Some("killed"), Some(0)),
        "{fin:?}"
    );
    assert_eq!(fin.message.as_deref(), Some("cancelled by user"));
    assert!(fin.log_tail.is_some_and(|t| t.contains("got TERM")));
    agent.stop().await.expect("clean stop");
}

/// The runs of a supervisor host share its fate: killed with SIGKILL, it leaves each of its runs
/// without a supervisor, and the agent stops each job and records it lost (the node's fault, not
/// the job's); the next job gets a new host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_supervisor_host_costs_each_of_its_runs_and_the_next_job_gets_a_new_one() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(unconfined(config(vec![cp.url()], RuntimeKind::Process, dir.path())));
    let mut runs = Vec::new();
    for _ in 0..2 {
        let l = shell_lease("node-1", "echo started; while true; do sleep 0.1; done");
        runs.push(l.run_id);
        cp.push_lease(l);
    }
    for run_id in &runs {
        cp.wait_kind(*run_id, RunEventKind::Running, T).await;
        wait_for_output(dir.path(), *run_id, "started").await;
    }
    let stamp = |run_id| run_file(dir.path(), run_id, "supervisor");
    let hosts: std::collections::BTreeSet<String> = runs.iter().map(|r| stamp(*r)).collect();
    let pids: Vec<i32> = runs.iter().map(|r| stamp_pid(&run_file(dir.path(), *r, "pid"))).collect();
    for host in &hosts {
        assert!(host.trim_end().ends_with(" host"), "{host}");
        // SAFETY: signalling a host this test's agent started.
        assert_eq!(unsafe { libc::kill(stamp_pid(host), libc::SIGKILL) }, 0);
    }
    for (run_id, pid) in runs.iter().zip(&pids) {
        let fin = cp.wait_final(*run_id, T).await;
        assert_eq!((fin.kind, fin.reason.as_deref()), (RunEventKind::Failed, Some("supervisor lost")), "{fin:?}");
        wait_for(T, "the orphaned job's end", || live_group_members(*pid).is_empty().then_some(())).await;
    }
    let next = shell_lease("node-1", "echo after");
    let next_id = next.run_id;
    cp.push_lease(next);
    assert_eq!(cp.wait_final(next_id, T).await.kind, RunEventKind::Succeeded);
    assert!(!hosts.contains(&stamp(next_id)), "a new host: {}", stamp(next_id));
    agent.stop().await.expect("clean stop");
}

/// A host told to stop (SIGTERM) stops its runs and refuses new ones until it exits; the agent
/// starts the next job under another host instead of failing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_started_while_its_host_is_stopping_goes_to_a_new_host() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(unconfined(config(vec![cp.url()], RuntimeKind::Process, dir.path())));
    let stamp = |run_id| run_file(dir.path(), run_id, "supervisor");
    // Two runs, so that both of the agent's hosts hold one; they ignore SIGTERM, so their
    // hosts live on, stopping, through the grace period.
    let mut stubborn = shell_lease("node-1", "trap '' TERM; echo started; while true; do sleep 0.1; done");
    let mut other = shell_lease("node-1", "trap '' TERM; echo started; while true; do sleep 0.1; done");
    stubborn.termination_grace_period_seconds = 4.0;
    other.termination_grace_period_seconds = 4.0;
    let runs = [stubborn.run_id, other.run_id];
    cp.push_lease(stubborn);
    cp.push_lease(other);
    for run_id in runs {
        wait_for_output(dir.path(), run_id, "started").await;
    }
    let hosts: std::collections::BTreeSet<String> = runs.iter().map(|r| stamp(*r)).collect();
    for host in &hosts {
        // SAFETY: signalling a host this test's agent started.
        assert_eq!(unsafe { libc::kill(stamp_pid(host), libc::SIGTERM) }, 0);
    }
    // Within the runs' grace period every host is alive and stopping.
    let next = shell_lease("node-1", "echo after");
    let next_id = next.run_id;
    cp.push_lease(next);
    let fin = cp.wait_final(next_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Succeeded, "{fin:?}");
    assert!(!hosts.contains(&stamp(next_id)), "a new host: {}", stamp(next_id));
    let began = Instant::now();
    for run_id in runs {
        let fin = cp.wait_final(run_id, T).await;
        assert_eq!((fin.kind, fin.reason.as_deref()), (RunEventKind::Failed, Some("killed")), "{fin:?}");
        assert_eq!(fin.message.as_deref(), Some("the supervisor received SIGTERM"), "{fin:?}");
    }
    assert!(began.elapsed() > Duration::from_secs(1), "the next job was done within the grace period");
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_ignoring_sigterm_is_killed_after_the_grace_period() {
    ignoring_sigterm_killed_after_grace(true).await;
}

/// The same stop order to an unconfined job, whose supervisor is a thread of a host: the agent
/// nudges the host with SIGUSR1, and only that run stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfined_job_ignoring_sigterm_is_killed_after_the_grace_period_by_its_host() {
    ignoring_sigterm_killed_after_grace(false).await;
}

async fn ignoring_sigterm_killed_after_grace(limits: bool) {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config(vec![cp.url()], RuntimeKind::Process, dir.path());
    c.process.limits.enabled = limits;
    let agent = InProcessAgent::start(c);
    // A run beside it, in the same host when unconfined: the stop order is not for it.
    let bystander = shell_lease("node-1", "echo bystander; while true; do sleep 0.1; done");
    let bystander_id = bystander.run_id;
    cp.push_lease(bystander);
    let l = shell_lease("node-1", "trap '' TERM; echo stubborn; while true; do sleep 0.1; done");
    let (run_id, job_id) = (l.run_id, l.job_id);
    cp.push_lease(l);
    cp.wait_kind(run_id, RunEventKind::Running, T).await;
    wait_for_output(dir.path(), run_id, "stubborn").await;
    let began = Instant::now();
    cp.push_kill(run_id, job_id, 1.5, "preempted");
    let fin = cp.wait_final(run_id, T).await;
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(1400), "SIGKILL only after the grace period, took {took:?}");
    assert!(took < Duration::from_secs(6), "SIGKILL soon after the grace period, took {took:?}");
    assert_eq!(
        (fin.kind, fin.reason.as_deref(), fin.exit_code),
        (RunEventKind::Failed, Some("killed"), Some(137)),
        "{fin:?}"
    );
    // Nothing of the job survives.
    let pid: i32 = std::fs::read_to_string(dir.path().join("runs").join(run_id.to_string()).join("pid"))
        .expect("pid file")
        .split_whitespace()
        .next()
        .expect("pid")
        .parse()
        .expect("number");
    assert_eq!(live_group_members(pid), Vec::<i32>::new(), "the job's process group is gone");
    wait_for_output(dir.path(), bystander_id, "bystander").await;
    let kinds: Vec<_> = cp.events_of(bystander_id).iter().map(|e| e.kind).collect();
    assert_eq!(kinds.last(), Some(&RunEventKind::Running), "the other run goes on: {kinds:?}");
    agent.stop().await.expect("clean stop");
    crate::common::procs::reap_runs(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_exceeded_fails_the_run() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let mut l = shell_lease("node-1", "sleep 30");
    l.active_deadline_seconds = 1;
    let run_id = l.run_id;
    cp.push_lease(l);
    let began = Instant::now();
    let fin = cp.wait_final(run_id, T).await;
    assert!(began.elapsed() < Duration::from_secs(8), "took {:?}", began.elapsed());
    assert_eq!((fin.kind, fin.reason.as_deref()), (RunEventKind::Failed, Some("deadline exceeded")), "{fin:?}");
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_retried_until_acknowledged() {
    let cp = ControlPlane::start(None);
    cp.script().fail_events = 4;
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let l = shell_lease("node-1", "echo done");
    let run_id = l.run_id;
    cp.push_lease(l);
    let fin = cp.wait_final(run_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Succeeded);
    {
        let s = cp.script();
        assert_eq!(s.fail_events, 0, "the failing requests were made");
        let kinds: Vec<_> = s.events.iter().filter(|e| e.run_id == run_id).map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [RunEventKind::Pending, RunEventKind::Running, RunEventKind::Succeeded],
            "each event once, in order"
        );
    }
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_loses_no_events() {
    let mut cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let l = shell_lease("node-1", "sleep 1; echo finished while the server was down");
    let run_id = l.run_id;
    cp.push_lease(l);
    cp.wait_kind(run_id, RunEventKind::Running, T).await;
    cp.stop();
    // The job ends while nobody listens (its exit is recorded in its run directory); the agent
    // keeps the event and retries.
    let exit = dir.path().join("runs").join(run_id.to_string()).join("exit");
    crate::common::wait::until(T, "the job's end recorded while the server is down", || exit.exists()).await;
    assert!(cp.final_event(run_id).is_none());
    cp.restart();
    let fin = cp.wait_final(run_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Succeeded);
    assert!(fin.log_tail.is_some_and(|t| t.contains("finished while the server was down")));
    agent.stop().await.expect("clean stop");
}

/// A child process killed when the test ends, even by a panic.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A job that records its start, then waits (at most 20 s) for the file `go-<name>` and exits 0.
fn gated_script(marks: &std::path::Path, name: &str) -> String {
    let m = marks.display();
    format!(
        "echo start >> {m}/{name}; for i in $(seq 200); do [ -e {m}/go-{name} ] && break; sleep 0.1; done; echo {name} done"
    )
}

/// A real `convoy agent` process, killed with SIGKILL while its jobs run, then started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_killed_and_restarted_reports_results_without_duplicate_starts() {
    agent_killed_and_restarted(true).await;
}

/// The same with unconfined jobs: their supervisor host outlives the killed agent, records the
/// end that came meanwhile, and goes on supervising the run the new agent adopts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_killed_and_restarted_leaves_the_supervisor_host_its_runs() {
    agent_killed_and_restarted(false).await;
}

async fn agent_killed_and_restarted(limits: bool) {
    let cp = ControlPlane::start(Some("s3cret"));
    let dir = tempfile::tempdir().expect("tempdir");
    let marks = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut cfg = config(vec![cp.url()], RuntimeKind::Process, &data);
    cfg.token = Some("s3cret".into());
    cfg.process.limits.enabled = limits;
    let cfg_path = dir.path().join("agent.toml");
    std::fs::write(&cfg_path, toml::to_string(&cfg).expect("config as TOML")).expect("write config");
    let spawn_agent = || {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["agent", "--config"])
            .arg(&cfg_path)
            .arg("--log-json")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("convoy agent starts");
        ChildGuard(child)
    };
    let quick = shell_lease("node-1", &gated_script(marks.path(), "quick"));
    let slow = shell_lease("node-1", &gated_script(marks.path(), "slow"));
    let mut first = spawn_agent();
    cp.push_lease(quick.clone());
    cp.push_lease(slow.clone());
    cp.wait_kind(quick.run_id, RunEventKind::Running, T).await;
    cp.wait_kind(slow.run_id, RunEventKind::Running, T).await;
    let supervisors: Vec<i32> =
        [&quick, &slow].iter().map(|l| stamp_pid(&run_file(&data, l.run_id, "supervisor"))).collect();
    if !limits {
        let stamp = run_file(&data, slow.run_id, "supervisor");
        assert!(stamp.trim_end().ends_with(" host"), "a host supervises unconfined jobs");
    }
    first.0.kill().expect("SIGKILL the agent");
    let _ = first.0.wait();
    // `quick` ends while no agent runs; its supervisor records the result.
    std::fs::write(marks.path().join("go-quick"), "").expect("go");
    let quick_exit = data.join("runs").join(quick.run_id.to_string()).join("exit");
    wait_for(T, "quick's exit record", || quick_exit.exists().then_some(())).await;
    assert!(cp.final_event(quick.run_id).is_none());
    // The server hands the same leases out again: they must not start twice.
    cp.repeat_lease(quick.clone());
    cp.repeat_lease(slow.clone());
    let mut second = spawn_agent();
    let fin_quick = cp.wait_final(quick.run_id, T).await;
    assert_eq!(fin_quick.kind, RunEventKind::Succeeded, "{fin_quick:?}");
    assert!(fin_quick.log_tail.as_deref().is_some_and(|t| t.contains("quick done")));
    // `slow` was adopted: it still runs, and its end is reported by the new agent.
    wait_for(T, "the repeated leases acknowledged", || cp.script().unacked.is_empty().then_some(())).await;
    assert!(cp.final_event(slow.run_id).is_none());
    std::fs::write(marks.path().join("go-slow"), "").expect("go");
    let fin_slow = cp.wait_final(slow.run_id, T).await;
    assert_eq!(fin_slow.kind, RunEventKind::Succeeded, "{fin_slow:?}");
    assert!(fin_slow.log_tail.as_deref().is_some_and(|t| t.contains("slow done")));
    for name in ["quick", "slow"] {
        let starts = std::fs::read_to_string(marks.path().join(name)).expect("marks");
        assert_eq!(starts.lines().count(), 1, "{name} started once");
    }
    // The first agent's supervisors (hosts, or the slots' holders) end once their runs ended:
    // nobody would give them another.
    for pid in supervisors {
        let gone = || stat_fields(pid).is_none_or(|f| f.first().is_some_and(|state| state == "Z"));
        wait_for(T, "the first agent's supervisor to exit", || gone().then_some(())).await;
    }
    // Every request carried the token.
    assert_eq!(cp.script().unauthorized, 0);
    // SIGTERM stops the agent cleanly.
    // SAFETY: kill(2) with our child's pid.
    unsafe { libc::kill(second.0.id() as i32, libc::SIGTERM) };
    let status = tokio::task::spawn_blocking(move || second.0.wait()).await.expect("join").expect("wait");
    assert!(status.success(), "{status:?}");
}

/// A host holds a few descriptors per run and takes no more runs than its limit on open files
/// allows (the limit is not raised: jobs would inherit it). Past that, the agent gives a run a
/// supervisor process, and every job runs and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_what_the_hosts_descriptors_allow_get_supervisor_processes() {
    use std::os::unix::process::CommandExt;
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let marks = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let cfg = unconfined(config(vec![cp.url()], RuntimeKind::Process, &data));
    let cfg_path = dir.path().join("agent.toml");
    std::fs::write(&cfg_path, toml::to_string(&cfg).expect("config as TOML")).expect("write config");
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"));
    agent.args(["agent", "--config"]).arg(&cfg_path).stdout(std::process::Stdio::null());
    agent.stderr(std::process::Stdio::null());
    // 100 descriptors: each of the agent's two hosts takes (100 - 64) / 3 = 12 runs.
    // SAFETY: setrlimit(2) is async-signal-safe and touches only the struct on this stack.
    unsafe {
        agent.pre_exec(|| {
            let rl = libc::rlimit { rlim_cur: 100, rlim_max: 100 };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let _agent = ChildGuard(agent.spawn().expect("convoy agent starts"));
    let leases: Vec<_> = (0..30).map(|_| shell_lease("node-1", &gated_script(marks.path(), "all"))).collect();
    for l in &leases {
        cp.push_lease(l.clone());
    }
    for l in &leases {
        cp.wait_kind(l.run_id, RunEventKind::Running, T).await;
    }
    let hosted: Vec<String> = leases
        .iter()
        .map(|l| run_file(&data, l.run_id, "supervisor"))
        .filter(|s| s.trim_end().ends_with(" host"))
        .collect();
    assert!((1..=24).contains(&hosted.len()), "at most 12 runs a host: {} of 30", hosted.len());
    let hosts: std::collections::BTreeSet<&String> = hosted.iter().collect();
    assert!(hosts.len() <= 2, "{hosts:?}");
    std::fs::write(marks.path().join("go-all"), "").expect("go");
    for l in &leases {
        let fin = cp.wait_final(l.run_id, T).await;
        assert_eq!(fin.kind, RunEventKind::Succeeded, "{fin:?}");
    }
}

/// The real binary with a wrong token: it names the server and the token in its error and keeps
/// retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_is_reported_clearly_and_retried() {
    let cp = ControlPlane::start(Some("right"));
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("agent.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["agent", "--runtime", "fake", "--executor", "e1", "--server", &cp.url()])
        .arg("--data-dir")
        .arg(dir.path())
        .env("CONVOY_EXECUTOR_TOKEN", "wrong")
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("convoy agent starts");
    // The fake runtime needs nodes; without a config file it refuses to start with a clear error.
    let status = tokio::task::spawn_blocking(move || child.wait()).await.expect("join").expect("wait");
    assert!(!status.success());
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("fake.node_groups"), "{text}");

    let cfg_path = dir.path().join("agent.toml");
    std::fs::write(&cfg_path, "runtime = \"fake\"\n[[fake.node_groups]]\ncount = 1\nallocatable = { cpu = \"1\" }\n")
        .expect("config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["agent", "--executor", "e1", "--server", &cp.url(), "--config"])
        .arg(&cfg_path)
        .env("CONVOY_EXECUTOR_TOKEN", "wrong")
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("convoy agent starts");
    wait_for(T, "two refused polls", || (cp.script().unauthorized >= 2).then_some(())).await;
    child.kill().expect("kill");
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("refused this executor's token") && text.contains(&cp.url()), "{text}");
}

/// Waits until the run's stdout holds `text` (the job got that far).
async fn wait_for_output(data_dir: &std::path::Path, run_id: convoy::model::RunId, text: &str) {
    file_contains(T, &data_dir.join("runs").join(run_id.to_string()).join("stdout"), text).await;
}

/// The file `name` of a run's directory under the agent's `data_dir`, as text.
fn run_file(data_dir: &std::path::Path, run_id: convoy::model::RunId, name: &str) -> String {
    let path = data_dir.join("runs").join(run_id.to_string()).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The pid a stamp (`pid start_time [host]`) begins with.
fn stamp_pid(stamp: &str) -> i32 {
    stamp.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no pid in {stamp:?}"))
}

/// The test agent's config with jobs unconfined (no cgroups), so that a supervisor host
/// supervises them; confined jobs get a supervisor process each, inside their cgroup.
fn unconfined(mut c: convoy::agent::AgentConfig) -> convoy::agent::AgentConfig {
    c.process.limits.enabled = false;
    c
}

/// A graceful stop leaves jobs running; the next agent adopts them, and kills the ones the server
/// orders killed (orphans it does not know).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_agent_adopts_runs_and_kills_orphans_on_order() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(vec![cp.url()], RuntimeKind::Process, dir.path());
    let first = InProcessAgent::start(cfg.clone());
    let keep = shell_lease("node-1", "sleep 1; echo kept");
    let orphan = shell_lease("node-1", "echo orphan; sleep 30");
    cp.push_lease(keep.clone());
    cp.push_lease(orphan.clone());
    cp.wait_kind(keep.run_id, RunEventKind::Running, T).await;
    cp.wait_kind(orphan.run_id, RunEventKind::Running, T).await;
    first.stop().await.expect("clean stop");
    cp.script().polls.clear();
    let second = InProcessAgent::start(cfg);
    // The first poll of the new agent holds both runs again.
    let poll = wait_for(T, "a poll with both runs", || {
        cp.script()
            .polls
            .iter()
            .rev()
            .find(|p| {
                p.runs.iter().any(|r| r.run_id == orphan.run_id) && p.runs.iter().any(|r| r.run_id == keep.run_id)
            })
            .cloned()
    })
    .await;
    assert!(
        poll.runs
            .iter()
            .all(|r| r.state == convoy::model::RunState::Running || r.state == convoy::model::RunState::Succeeded),
        "{poll:?}"
    );
    cp.push_kill(orphan.run_id, orphan.job_id, 1.0, "unknown run");
    let fin = cp.wait_final(orphan.run_id, T).await;
    assert_eq!((fin.kind, fin.reason.as_deref()), (RunEventKind::Failed, Some("killed")), "{fin:?}");
    let fin = cp.wait_final(keep.run_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Succeeded);
    assert!(fin.log_tail.is_some_and(|t| t.contains("kept")));
    second.stop().await.expect("clean stop");
}

/// A kill order for a run whose lease never reached the agent (cancelled in between): nothing
/// starts, and the run is reported stopped once, so the server can let it (and its resources) go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_order_for_a_lease_never_received_reports_the_run_stopped() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let never = shell_lease("node-1", "echo must not run");
    cp.push_kill(never.run_id, never.job_id, 5.0, "cancelled by user");
    let fin = cp.wait_final(never.run_id, T).await;
    assert_eq!(
        (fin.kind, fin.exit_code, fin.reason.as_deref(), fin.message.as_deref()),
        (RunEventKind::Failed, None, Some("killed"), Some("stopped before it started: cancelled by user")),
        "{fin:?}"
    );
    assert_eq!(fin.job_id, never.job_id);
    // Acknowledged: it leaves the polls; reported once, and nothing ran.
    wait_for(T, "a poll without the run", || {
        cp.last_poll().filter(|p| p.runs.iter().all(|r| r.run_id != never.run_id))
    })
    .await;
    assert_eq!(cp.events_of(never.run_id).len(), 1);
    assert!(!dir.path().join("runs").join(never.run_id.to_string()).exists());
    agent.stop().await.expect("clean stop");
}

/// A run that started and ended while no agent ran (its directory has a pid and an exit record;
/// the agent before may have died before reporting even `pending`): the next agent reports it
/// running, then over, so its history never skips `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_that_ran_and_ended_unreported_is_reported_running_then_over() {
    use convoy::agent::runtime::process::rundir::{self, ExitRecord, RunDir};
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let l = shell_lease("node-1", "echo ran");
    let run = RunDir::new(dir.path().join("runs").join(l.run_id.to_string()));
    std::fs::create_dir_all(&run.path).expect("run dir");
    run.write_atomic(rundir::LEASE, &serde_json::to_vec(&l).expect("lease JSON")).expect("lease");
    run.write_atomic(rundir::PID, b"999999 1\n").expect("pid");
    std::fs::write(run.file(rundir::STDOUT), "ran\n").expect("stdout");
    let rec =
        ExitRecord { exit_code: Some(0), signal: None, reason: None, message: None, finished_at_ms: 1, usage: None };
    assert!(run.write_exit_once(&rec).expect("exit"));
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let fin = cp.wait_final(l.run_id, T).await;
    assert_eq!(
        (fin.kind, fin.exit_code, fin.log_tail.as_deref()),
        (RunEventKind::Succeeded, Some(0), Some("ran\n")),
        "{fin:?}"
    );
    let kinds: Vec<_> = cp.events_of(l.run_id).iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [RunEventKind::Running, RunEventKind::Succeeded]);
    agent.stop().await.expect("clean stop");
}

/// The spawner forks each supervisor away from itself (init or a subreaper adopts it), answers
/// only once the supervisor holds the run directory, says why when it cannot, and the job runs
/// on after the spawner is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_supervisors_belong_to_neither_the_spawner_nor_the_agent_and_outlive_them() {
    use convoy::agent::runtime::process::spawner::{Serving, SpawnRequest, SpawnerClient};
    let dir = tempfile::tempdir().expect("tempdir");
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).expect("run dir");
    let go = dir.path().join("go");
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_convoy"));
    let mut spawner = SpawnerClient::start(exe, Serving::Spawner).expect("spawner starts");
    let req = gated_request(&run_dir, &go, "hello from a forked supervisor");
    spawner.spawn(&req).await.expect("spawned");
    // Answered only once the supervisor holds the lock.
    let sup = std::fs::read_to_string(run_dir.join("supervisor")).expect("the supervisor wrote its stamp");
    let ppid: u32 = stat_fields(stamp_pid(&sup)).expect("the supervisor runs")[1].parse().expect("ppid");
    assert_ne!(ppid, std::process::id(), "the supervisor is not the test's child");
    let missing = SpawnRequest { run_dir: dir.path().join("no-such-run"), ..req.clone() };
    let e = spawner.spawn(&missing).await.expect_err("no run directory");
    assert!(e.to_string().contains("supervisor"), "{e}");
    drop(spawner);
    std::fs::write(&go, b"").expect("go");
    wait_for(T, "the exit record", || run_dir.join("exit").exists().then_some(())).await;
    let exit = std::fs::read_to_string(run_dir.join("exit")).expect("exit");
    assert!(exit.contains("\"exit_code\":0"), "{exit}");
    assert_eq!(std::fs::read_to_string(run_dir.join("stdout")).expect("stdout"), "hello from a forked supervisor\n");
}

/// Fields of `/proc/<pid>/stat` after the command: state, ppid, pgrp, session, …
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_string).collect())
}

/// A gated job for a supervisor test: waits for `go`, then prints `$GREETING`.
fn gated_request(
    run_dir: &std::path::Path,
    go: &std::path::Path,
    greeting: &str,
) -> convoy::agent::runtime::process::spawner::SpawnRequest {
    convoy::agent::runtime::process::spawner::SpawnRequest {
        run_dir: run_dir.to_path_buf(),
        grace_seconds: 1.0,
        deadline_seconds: None,
        workdir: None,
        command: vec![
            "sh".into(),
            "-c".into(),
            format!("while [ ! -e '{}' ]; do sleep 0.02; done; echo \"$GREETING\"", go.display()),
        ],
        env: vec![("GREETING".into(), greeting.into())],
        confine: Default::default(),
        ended_socket: None,
    }
}

/// A supervisor host holds several runs at once, each locked by its own thread: its stamp says
/// `host`; a kill order with SIGUSR1 stops only the run it names; once its stdin closed (the
/// agent gone) it takes no more runs but supervises the ones it has to their end, each with its
/// own exit record and usage, and then exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_host_holds_runs_apart_and_outlives_its_agent() {
    use convoy::agent::runtime::process::spawner::{Serving, SpawnerClient};
    let dir = tempfile::tempdir().expect("tempdir");
    let (kept, stopped) = (dir.path().join("kept"), dir.path().join("stopped"));
    std::fs::create_dir(&kept).expect("run dir");
    std::fs::create_dir(&stopped).expect("run dir");
    let go = dir.path().join("go");
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_convoy"));
    let mut host = SpawnerClient::start(exe, Serving::Host).expect("host starts");
    host.spawn(&gated_request(&kept, &go, "kept")).await.expect("held");
    host.spawn(&gated_request(&stopped, &go, "stopped")).await.expect("held");
    let stamp = std::fs::read_to_string(kept.join("supervisor")).expect("stamp");
    let words: Vec<&str> = stamp.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{stamp}");
    assert_eq!(words[2], "host", "{stamp}");
    assert_eq!(std::fs::read_to_string(stopped.join("supervisor")).expect("stamp"), stamp, "one host, one stamp");
    let pid: i32 = words[0].parse().expect("pid");
    let fields = stat_fields(pid).expect("the host runs");
    let own_session = stat_fields(std::process::id() as i32).expect("own stat")[3].clone();
    assert_ne!(fields[3], own_session, "the host left the agent's session");
    // Both runs are held: the agent's probe finds each directory locked.
    for run in [&kept, &stopped] {
        let f = std::fs::File::open(run).expect("open");
        // SAFETY: flock(2) on a descriptor this test owns.
        assert_ne!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    }
    // A kill order for one run, and the nudge the agent sends a host.
    std::fs::write(stopped.join("kill"), br#"{"grace_seconds":1.0,"reason":"asked to stop"}"#).expect("kill");
    // SAFETY: signalling the host this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    wait_for(Duration::from_secs(3), "the stopped run's exit record", || stopped.join("exit").exists().then_some(()))
        .await;
    let exit = std::fs::read_to_string(stopped.join("exit")).expect("exit");
    assert!(exit.contains("\"reason\":\"killed\"") && exit.contains("asked to stop"), "{exit}");
    assert!(!kept.join("exit").exists(), "the other run goes on");
    // The agent goes: the host takes no more runs, and keeps the one it has.
    drop(host);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(stat_fields(pid).is_some_and(|f| f[0] != "Z"), "the host outlives its agent while it holds a run");
    std::fs::write(&go, b"").expect("go");
    wait_for(T, "the kept run's exit record", || kept.join("exit").exists().then_some(())).await;
    let exit = std::fs::read_to_string(kept.join("exit")).expect("exit");
    assert!(exit.contains("\"exit_code\":0") && exit.contains("\"usage\""), "{exit}");
    assert_eq!(std::fs::read_to_string(kept.join("stdout")).expect("stdout"), "kept\n");
    wait_for(T, "the host's exit", || stat_fields(pid).is_none_or(|f| f[0] == "Z").then_some(())).await;
}

/// SIGTERM to a host stops every run it holds, as it stops a supervisor's one run (at a
/// machine's shutdown, say), and the host exits once they ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_a_supervisor_host_stops_each_run_with_a_record() {
    use convoy::agent::runtime::process::spawner::{Serving, SpawnerClient};
    let dir = tempfile::tempdir().expect("tempdir");
    let runs = [dir.path().join("a"), dir.path().join("b")];
    let never = dir.path().join("never");
    let mut host =
        SpawnerClient::start(std::path::Path::new(env!("CARGO_BIN_EXE_convoy")), Serving::Host).expect("host starts");
    for run in &runs {
        std::fs::create_dir(run).expect("run dir");
        host.spawn(&gated_request(run, &never, "never")).await.expect("held");
    }
    let stamp = std::fs::read_to_string(runs[0].join("supervisor")).expect("stamp");
    let pid = stamp_pid(&stamp);
    // SAFETY: signalling the host this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    for run in &runs {
        wait_for(Duration::from_secs(5), "an exit record", || run.join("exit").exists().then_some(())).await;
        let exit = std::fs::read_to_string(run.join("exit")).expect("exit");
        assert!(exit.contains("the supervisor received SIGTERM"), "{exit}");
    }
    wait_for(T, "the host's exit", || stat_fields(pid).is_none_or(|f| f[0] == "Z").then_some(())).await;
}

/// A run directory in the layout of agents before the directory itself was locked: its
/// supervisor (here, the test) holds the file `lock`. A new agent takes it for alive, so it
/// adopts the run instead of stopping the job, and reports the end that supervisor records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_supervisor_holds_the_earlier_lock_file_is_adopted_not_taken_over() {
    use convoy::agent::runtime::process::rundir::{self, ExitRecord, RunDir};
    use std::os::fd::AsRawFd;
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let l = shell_lease("node-1", "sleep 30");
    let run = RunDir::new(dir.path().join("runs").join(l.run_id.to_string()));
    std::fs::create_dir_all(&run.path).expect("run dir");
    run.write_atomic(rundir::LEASE, &serde_json::to_vec(&l).expect("lease JSON")).expect("lease");
    let lock = std::fs::File::create(run.file(rundir::LEGACY_LOCK)).expect("lock file");
    // SAFETY: flock(2) on a descriptor the test owns; closing it releases the lock.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0, "locked");
    // The "job": a live process, so an agent that took the supervisor for gone would kill it.
    let job = ChildGuard(std::process::Command::new("sleep").arg("30").spawn().expect("sleep"));
    let pid = job.0.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let start: u64 =
        stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(19)?.parse().ok()).expect("start time");
    std::fs::write(run.file(rundir::PID), format!("{pid} {start}\n")).expect("pid");
    std::fs::write(run.file(rundir::STDOUT), "adopted\n").expect("stdout");

    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    wait_for(T, "the run reported running", || {
        cp.events_of(l.run_id).iter().any(|e| e.kind == RunEventKind::Running).then_some(())
    })
    .await;
    // Several of the agent's checks go by: the run stays with its supervisor.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(run.read_exit().expect("read").is_none(), "the agent wrote an exit record: it took the run over");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "the job was stopped");

    let rec =
        ExitRecord { exit_code: Some(0), signal: None, reason: None, message: None, finished_at_ms: 1, usage: None };
    assert!(run.write_exit_once(&rec).expect("exit"));
    drop(lock);
    let fin = cp.wait_final(l.run_id, T).await;
    assert_eq!(
        (fin.kind, fin.exit_code, fin.log_tail.as_deref()),
        (RunEventKind::Succeeded, Some(0), Some("adopted\n")),
        "{fin:?}"
    );
    agent.stop().await.expect("clean stop");
}

/// A job's program is found along the `PATH` its own environment sets, from its working
/// directory; one that is not there fails with 127, one that may not be executed with 126, each
/// naming the program, as a shell would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_are_found_along_the_jobs_own_path_and_missing_ones_fail_with_127() {
    use std::os::unix::fs::PermissionsExt;
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let tool = bin.join("greet");
    std::fs::write(&tool, "#!/bin/sh\necho \"greetings from $(pwd)\"\n").expect("tool");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(bin.join("locked"), "#!/bin/sh\necho never\n").expect("locked");
    let agent = InProcessAgent::start(config(vec![cp.url()], RuntimeKind::Process, dir.path()));
    let job = |command: &str| {
        super::harness::lease(
            "node-1",
            serde_json::json!({"containers": [{"name": "main", "image": "x", "command": [command],
                "workingDir": bin.to_string_lossy(),
                "env": [{"name": "PATH", "value": format!("/nowhere:{}:/usr/bin:/bin", bin.display())}]}]}),
        )
    };
    let found = job("greet");
    let found_id = found.run_id;
    cp.push_lease(found);
    let fin = cp.wait_final(found_id, T).await;
    let expected = format!("greetings from {}\n", std::fs::canonicalize(&bin).expect("canonical").display());
    assert_eq!((fin.kind, fin.log_tail.as_deref()), (RunEventKind::Succeeded, Some(expected.as_str())), "{fin:?}");
    for (command, code, says) in [("no-such-program", 127, "No such file"), ("locked", 126, "Permission denied")] {
        let l = job(command);
        let run_id = l.run_id;
        cp.push_lease(l);
        let fin = cp.wait_final(run_id, T).await;
        assert_eq!(
            (fin.kind, fin.exit_code, fin.reason.as_deref()),
            (RunEventKind::Failed, Some(code), Some("failed to start")),
            "{fin:?}"
        );
        let message = fin.message.unwrap_or_default();
        assert!(message.starts_with(&format!("{command}: ")) && message.contains(says), "{message}");
    }
    agent.stop().await.expect("clean stop");
}
