//! The spawner: one small single-threaded process per agent (`convoy agent-supervise
//! --spawner`) that takes the runs of confined jobs (and of every job with `[process]
//! supervisors = "per-job"`; unconfined jobs otherwise go to a supervisor host,
//! [`super::host`], which speaks the same protocol). A job with a cgroup slot goes to the
//! slot's holder (below), which supervises it; any other gets a supervisor process forked for
//! it.
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
//!
//! A confined job's cgroup slot gets a *holder*: a process the spawner forks once per slot,
//! which moves itself into the slot's cgroups and then supervises the jobs that run there
//! itself, one at a time (a slot holds one run), over the same protocol (on a socket). Their
//! jobs are then in the slot from their first instruction, no process is moved between cgroups
//! per job (on cgroup v1 each move, one per hierarchy, cost about as much CPU as the rest of
//! starting a job), and no process is forked per job but the job: a supervisor process forked
//! per confined job, its page faults and its exit cost more than a third of the machine in
//! `bench processes --limits`. The holder counts in the slot's pids limit (the agent adds
//! [`super::confine::cgroup::SLOT_OWN_PIDS`]). It stays out of the job's memory cgroup on v1
//! (the job's child joins that one alone); on v2, where there is one cgroup, the OOM killer
//! spares it (`oom_score_adj` -1000, which the job's child sets back to 0), and a holder that
//! cannot have that (no `CAP_SYS_RESOURCE`) is not kept: a supervisor is forked outside per
//! job, as for jobs without a slot. A holder ends when its spawner does (once the run it
//! supervises ended), or when the agent removes its idle slot (killing what is in it).

use super::os::{self, Forked, ProcStamp};
use super::supervise::{self, Locking, SuperviseArgs, supervise};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
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
    let mut holders = HashMap::new();
    // SAFETY: the caller guarantees a single thread.
    answer_requests(
        std::io::stdin().lock(),
        std::io::stdout().lock(),
        |req| unsafe { spawn_in_slot(&mut holders, req) },
        |()| {},
    )
}

/// The protocol's loop, for the spawner, holders and hosts ([`super::host`]): one answer per
/// request line, until `input` ends. `start` takes a request; what it made of one it took goes
/// to `then` once the answer is written (even if writing it failed: the run is held).
pub(super) fn answer_requests<T>(
    input: impl BufRead,
    mut out: impl Write,
    mut start: impl FnMut(SpawnRequest) -> std::io::Result<T>,
    mut then: impl FnMut(T),
) -> std::io::Result<()> {
    for line in input.lines() {
        let (error, started) = match serde_json::from_str::<SpawnRequest>(&line?) {
            Ok(req) => match start(req) {
                Ok(t) => (None, Some(t)),
                Err(e) => (Some(e.to_string()), None),
            },
            Err(e) => (Some(format!("unreadable request: {e}")), None),
        };
        let written = write_answer(&mut out, &SpawnAnswer { error });
        if let Some(t) = started {
            then(t);
        }
        written?;
    }
    Ok(())
}

/// Writes one answer line with one write: on a holder's socket, which has no buffer, each piece
/// the serializer writes would be a message of its own, waking the reader for each.
fn write_answer(out: &mut impl Write, answer: &SpawnAnswer) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(answer).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// A slot seen from the spawner: its holder, or none because none could be made (asked once
/// per slot, not per job).
enum Slot {
    Held(Holder),
    Unheld,
}

/// A slot's holder, seen from the spawner.
struct Holder {
    pid: i32,
    to: UnixStream,
    from: std::io::BufReader<UnixStream>,
}

/// Forks the supervisor for `req` through its slot's holder (started on first use), or itself
/// when the job has no slot or the slot can have no holder.
///
/// # Safety
/// As [`serve`].
unsafe fn spawn_in_slot(holders: &mut HashMap<PathBuf, Slot>, req: SpawnRequest) -> std::io::Result<()> {
    let slot = req.confine.cgroup.as_ref().filter(|p| p.reused && p.holder.is_none()).and_then(|p| p.dirs.first());
    let Some(slot) = slot.cloned() else {
        // SAFETY: as this function's.
        return unsafe { spawn(req) };
    };
    // A holder found dead (its slot was removed while idle, or it was killed) is replaced once.
    for _ in 0..2 {
        if !holders.contains_key(&slot) {
            // SAFETY: as this function's.
            let made = match unsafe { Holder::start(&req) } {
                Ok(h) => Slot::Held(h),
                Err(e) => {
                    // No tracing in the spawner: its stderr is the agent's.
                    eprintln!(
                        "convoy spawner: no holder for the cgroup slot {}: {e}; its jobs join it",
                        slot.display()
                    );
                    Slot::Unheld
                }
            };
            holders.insert(slot.clone(), made);
        }
        let Some(Slot::Held(h)) = holders.get_mut(&slot) else { break };
        match h.ask(&req) {
            Ok(answer) => return answer.error.map_or(Ok(()), |e| Err(std::io::Error::other(e))),
            Err(_) => {
                holders.remove(&slot);
            }
        }
    }
    // SAFETY: as this function's.
    unsafe { spawn(req) }
}

impl Holder {
    /// Forks the holder of `req`'s slot and waits until it is in the slot (or says why not).
    ///
    /// # Safety
    /// As [`serve`].
    unsafe fn start(req: &SpawnRequest) -> std::io::Result<Holder> {
        let plan = req.confine.cgroup.clone().unwrap_or_default();
        let (ours, theirs) = UnixStream::pair()?;
        // SAFETY: single-threaded, by the caller's guarantee.
        match unsafe { os::fork() }? {
            Forked::Child => {
                drop(ours);
                // SAFETY: this child is single-threaded too.
                let code = match unsafe { hold(plan, theirs) } {
                    Ok(()) => 0,
                    Err(_) => 1,
                };
                // SAFETY: as in `spawn`.
                unsafe { libc::_exit(code) }
            }
            Forked::Parent(pid) => {
                drop(theirs);
                let mut h = Holder { pid, to: ours.try_clone()?, from: std::io::BufReader::new(ours) };
                match h.answer()?.error {
                    None => Ok(h),
                    Some(e) => Err(std::io::Error::other(e)),
                }
            }
        }
    }

    /// Sends one request and reads its answer.
    fn ask(&mut self, req: &SpawnRequest) -> std::io::Result<SpawnAnswer> {
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.to.write_all(&line)?;
        self.answer()
    }

    fn answer(&mut self) -> std::io::Result<SpawnAnswer> {
        let mut line = String::new();
        if self.from.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other(format!("the holder (pid {}) ended", self.pid)));
        }
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }
}

/// The holder's life: into the slot, then it supervises each run the spawner sends, one at a
/// time (a slot holds one run), until the spawner goes.
///
/// It supervises as a supervisor process does, with no process of the run's own: out of the
/// agent's session, signals taken synchronously, its job waited for by SIGCHLD. Its stamp in
/// the run directory says `host`, as a supervisor host's does: every run it supervises has the
/// same stamp, so the agent's stop orders come as SIGUSR1 ("read the kill file"), and an order
/// for a run that ended just before only makes the next run read a kill file it does not have.
/// SIGTERM or SIGINT stop the run, as they stop a supervisor process's. It answers the spawner
/// once it holds the run, then supervises it to its end before it reads the next request; the
/// agent gives the slot to another run only after this one's exit record. When the spawner goes
/// (the agent ended), a run in progress is supervised to its end first.
///
/// # Safety
/// As [`serve`].
unsafe fn hold(plan: super::confine::cgroup::CgroupPlan, stream: UnixStream) -> std::io::Result<()> {
    os::close_other_fds(&[stream.as_raw_fd()])?;
    // Not the agent's pipes: the spawner alone answers on those.
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    os::redirect(&null, 0)?;
    os::redirect(&null, 1)?;
    drop(null);
    let mut to = stream.try_clone()?;
    let entered = plan.enter_as_holder();
    write_answer(&mut to, &SpawnAnswer { error: entered.as_ref().err().map(|e| e.to_string()) })?;
    entered.map_err(std::io::Error::other)?;
    // Not fatal: without a session of its own it still works, it just shares the agent's
    // terminal signals.
    let _ = os::new_session();
    // Blocked for good: a signal that comes after its run ended is dropped before the next run,
    // where an idle holder would die of it.
    let signals = os::SignalSet::block(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD, libc::SIGUSR1])?;
    // The spawner ignores SIGCHLD; the holder waits for its jobs.
    os::set_sigchld_ignored(false)?;
    let me = std::process::id() as i32;
    let stamp = ProcStamp::current().map(|s| ProcStamp { host: true, ..s });
    let take = |mut req: SpawnRequest| {
        if let Some(c) = req.confine.cgroup.as_mut() {
            c.holder = Some(me);
        }
        signals.drain();
        // A job whose supervising failed was stopped; it may be waiting to be reaped.
        os::reap_ended_children();
        // Not waiting for the lock: a run somebody holds is supervised already.
        supervise::claim(req, stamp, Locking::Try).map_err(std::io::Error::other)
    };
    // A held run is supervised to its end before the next request is read (a slot holds one).
    let run_held = |held: Option<supervise::Held>| {
        if let Some(held) = held {
            supervise::run_to_end(held, &mut &signals);
        }
    };
    answer_requests(std::io::BufReader::new(stream), to, take, run_held)
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
            // The supervisor waits for its job: SIGCHLD as usual again. It keeps none of the
            // spawner's or holder's sockets, whose ends must see them close when those go.
            let ok = os::close_other_fds(&[ready_w.as_raw_fd()]).is_ok()
                && os::set_sigchld_ignored(false).is_ok()
                && become_supervisor(req, ready_w).is_ok();
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
                    "the supervisor (pid {pid}) ended before it held the run directory (see the file `supervisor` there)"
                ))),
                Err(e) => Err(e),
            }
        }
    }
}

/// In the forked supervisor: its output to the run directory's `supervisor` file (after its
/// stamp, which it adds once it holds the directory), away from the spawner's pipes, then
/// supervises.
fn become_supervisor(req: SpawnRequest, ready: std::os::fd::OwnedFd) -> std::io::Result<()> {
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(req.run_dir.join(super::rundir::SUPERVISOR))?;
    os::redirect(&log, 1)?;
    os::redirect(&log, 2)?;
    let null = std::fs::File::open("/dev/null")?;
    os::redirect(&null, 0)?;
    supervise(req, Some(ready)).map_err(|e| {
        let _ = writeln!(std::io::stderr(), "{e}");
        std::io::Error::other(e.to_string())
    })
}

/// Which process serves the agent's spawn requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// `agent-supervise --spawner`: forks a supervisor process per job.
    Spawner,
    /// `agent-supervise --host`: supervises each job on a thread ([`super::host`]).
    Host,
}

/// The agent's end: a running spawner or host and its pipes. Requests are answered in order,
/// one at a time.
pub struct SpawnerClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl SpawnerClient {
    /// Starts `exe agent-supervise --spawner` or `--host`.
    pub fn start(exe: &std::path::Path, serving: Serving) -> std::io::Result<SpawnerClient> {
        let flag = match serving {
            Serving::Spawner => "--spawner",
            Serving::Host => "--host",
        };
        let mut child = tokio::process::Command::new(exe)
            .args(["agent-supervise", flag])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            // The supervisors a spawner forked do not depend on it; it ends when its stdin
            // closes. A host supervises its runs itself: it outlives the agent, and ends once
            // its stdin closed and its runs ended.
            .kill_on_drop(serving == Serving::Spawner)
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
