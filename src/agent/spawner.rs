//! The spawner: one small single-threaded process per agent (`convoy agent-supervise
//! --spawner`) that forks a supervisor for each job the agent starts.
//!
//! Starting each job's supervisor by executing the whole `convoy` binary cost about 8 ms of CPU
//! (loading and relocating a large executable, then a runtime); forking a small process that
//! already runs the supervisor's code costs a fraction of that. The agent itself cannot fork:
//! it is multi-threaded, and a forked child of a multi-threaded process may only call
//! async-signal-safe functions.
//!
//! Each supervisor is forked once, into a session of its own, and outlives the spawner and the
//! agent: when they end (an agent restart starts a new spawner) init or the nearest subreaper
//! adopts it. The spawner ignores SIGCHLD, so the kernel reaps the supervisors that end while it
//! runs and it never waits for them (an intermediate process that exits at once, the classic
//! double fork, cost a fork and an exit per job). The spawner answers a
//! request only once the new supervisor holds its run directory's lock, so the agent can judge a
//! supervisor's life by that lock alone.
//!
//! The protocol is one JSON line per request on the spawner's stdin ([`SpawnRequest`]) and one
//! JSON line per answer on its stdout ([`SpawnAnswer`]), in order.

use super::os::{self, Forked};
use super::supervise::{SuperviseArgs, supervise};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read, Write};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// One supervisor to start: the supervisor's own arguments (the run directory's lease is
/// already there).
pub type SpawnRequest = SuperviseArgs;

/// The spawner's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnAnswer {
    /// Why no supervisor holds the run now; none once one does.
    pub error: Option<String>,
}

/// The spawner's loop (blocks until stdin closes, i.e. the agent is gone).
///
/// # Safety
/// Must run in a single-threaded process: it forks, and the children run ordinary Rust.
pub unsafe fn serve() -> std::io::Result<()> {
    // Supervisors that end are reaped by the kernel, not left as zombies of the spawner.
    os::set_sigchld_ignored(true)?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        let answer = match serde_json::from_str::<SpawnRequest>(&line) {
            // SAFETY: the caller guarantees a single thread.
            Ok(req) => SpawnAnswer { error: unsafe { spawn(req) }.err().map(|e| e.to_string()) },
            Err(e) => SpawnAnswer { error: Some(format!("unreadable request: {e}")) },
        };
        serde_json::to_writer(&mut out, &answer)?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    Ok(())
}

/// Forks a supervisor for `req` and waits until it holds the run's lock.
///
/// # Safety
/// As [`serve`].
unsafe fn spawn(req: SpawnRequest) -> std::io::Result<()> {
    let (ready_r, ready_w) = os::pipe()?;
    // SAFETY: single-threaded, by the caller's guarantee.
    match unsafe { os::fork() }? {
        Forked::Child => {
            drop(ready_r);
            // The supervisor waits for its job: SIGCHLD as usual again.
            let ok = os::set_sigchld_ignored(false).is_ok() && become_supervisor(req, ready_w).is_ok();
            // SAFETY: ends this process without running the spawner's exit handlers or
            // flushing buffers it shares with the spawner.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        Forked::Parent(pid) => {
            drop(ready_w);
            let mut file = std::fs::File::from(ready_r);
            let mut byte = [0u8; 1];
            match file.read(&mut byte) {
                Ok(1) => Ok(()),
                Ok(_) => Err(std::io::Error::other(format!(
                    "the supervisor (pid {pid}) ended before it held the run directory (see supervisor.log there)"
                ))),
                Err(e) => Err(e),
            }
        }
    }
}

/// In the forked supervisor: its output to `supervisor.log`, away from the spawner's pipes,
/// then supervises.
fn become_supervisor(req: SpawnRequest, ready: std::os::fd::OwnedFd) -> std::io::Result<()> {
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(req.run_dir.join(super::rundir::SUPERVISOR_LOG))?;
    os::redirect(&log, 1)?;
    os::redirect(&log, 2)?;
    let null = std::fs::File::open("/dev/null")?;
    os::redirect(&null, 0)?;
    supervise(req, Some(ready)).map_err(|e| {
        let _ = writeln!(std::io::stderr(), "{e}");
        std::io::Error::other(e.to_string())
    })
}

/// The agent's end: a running spawner and its pipes. Requests are answered in order, one at a
/// time.
pub struct SpawnerClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl SpawnerClient {
    /// Starts `exe agent-supervise --spawner`.
    pub fn start(exe: &std::path::Path) -> std::io::Result<SpawnerClient> {
        let mut child = tokio::process::Command::new(exe)
            .args(["agent-supervise", "--spawner"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            // The supervisors it forked do not depend on it; it ends when its stdin closes.
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("the spawner has no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("the spawner has no stdout"))?;
        Ok(SpawnerClient { child, stdin, stdout: tokio::io::BufReader::new(stdout).lines() })
    }

    /// True while the spawner process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks for a supervisor; returns once it holds the run's lock, or why it does not.
    pub async fn spawn(&mut self, req: &SpawnRequest) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        let answer = self
            .stdout
            .next_line()
            .await?
            .ok_or_else(|| std::io::Error::other("the spawner exited without answering"))?;
        let answer: SpawnAnswer = serde_json::from_str(&answer).map_err(std::io::Error::other)?;
        match answer.error {
            None => Ok(()),
            Some(e) => Err(std::io::Error::other(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_round_trip_as_json_lines() {
        let req = SpawnRequest {
            run_dir: "/var/lib/convoy/runs/01J".into(),
            grace_seconds: 2.5,
            deadline_seconds: Some(60),
            workdir: None,
            command: vec!["sh".into(), "-c".into(), "echo \"hi\"\nexit 3".into()],
            env: vec![("CONVOY_RUN_ID".into(), "01J".into())],
            confine: Default::default(),
            ended_socket: Some("/var/lib/convoy/ended.sock".into()),
        };
        let line = serde_json::to_string(&req).expect("encode");
        assert!(!line.contains('\n'), "one request per line: {line}");
        assert_eq!(serde_json::from_str::<SpawnRequest>(&line).expect("decode"), req);
        let a = SpawnAnswer { error: Some("no such directory".into()) };
        assert_eq!(
            serde_json::from_str::<SpawnAnswer>(&serde_json::to_string(&a).expect("encode")).expect("decode"),
            a
        );
    }
}
