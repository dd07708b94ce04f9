//! The supervisor: what owns one job of the process runtime, as a small process (forked by the
//! agent's spawner, [`super::spawner`], or run as `convoy agent-supervise`) or as a thread of a
//! supervisor host ([`super::host`]). Plain blocking code: no runtime to start, so a supervisor
//! process costs a fork, not an exec of the binary, and a host's costs a thread.
//!
//! Either kind lives in a session of its own, away from the agent's. It takes the run
//! ([`claim`]): the run directory's lock for its whole life (so a second supervisor for the
//! same run finds the job already started or held), and its stamp in the `supervisor` file.
//! Then ([`run`]) it starts the job in a process group of its own, enforces the deadline and
//! stop orders (SIGTERM to the group, SIGKILL after the grace period) and writes the exit status
//! atomically. It outlives the agent, so jobs keep running and their results stay on disk while
//! the agent restarts. How it sleeps between checks is the one thing the two kinds do
//! differently ([`Sleep`]).

use super::confine::{self, Confinement};
use super::launch;
use super::os::{self, ProcStamp};
use super::rundir::{self, ExitRecord, RunDir};
use crate::agent::runtime::now_ms;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the supervisor looks for a `kill` file (signals make it react sooner).
const KILL_POLL: Duration = Duration::from_millis(200);

/// What to supervise; also the spawner's request, one JSON line each (see [`super::spawner`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SuperviseArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Grace period between SIGTERM and SIGKILL when no `kill` file says otherwise.
    pub grace_seconds: f64,
    /// Stop the job after this many seconds (0 or none: no deadline).
    pub deadline_seconds: Option<u64>,
    /// Working directory of the job (default: the run directory).
    pub workdir: Option<PathBuf>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Environment variables the job gets besides the supervisor's own.
    pub env: Vec<(String, String)>,
    /// The job's cgroup and user (see [`super::confine`]); default: none.
    #[serde(default)]
    pub confine: Confinement,
    /// The agent's run-end socket (`ended`), told once the exit record is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_socket: Option<PathBuf>,
}

/// Why supervising failed before an exit status could be recorded.
#[derive(Debug, thiserror::Error)]
#[error("supervising {run_dir}: {context}: {source}")]
pub struct SuperviseError {
    /// The run directory being supervised.
    pub run_dir: PathBuf,
    /// What the supervisor was doing, e.g. `writing the pid file`.
    pub context: &'static str,
    /// The I/O error.
    pub source: std::io::Error,
}

/// Runs the supervisor to the end (blocks). `ready`, if given, gets one byte once the run
/// directory's lock is held and the supervisor's stamp written, and is closed: the spawner answers the agent only then, so the agent
/// never takes a starting supervisor for a dead one.
pub fn supervise(args: SuperviseArgs, ready: Option<std::os::fd::OwnedFd>) -> Result<(), SuperviseError> {
    let (socket, run_dir) = (args.ended_socket.clone(), args.run_dir.clone());
    let result = supervise_run(args, ready);
    if let Some(socket) = socket {
        super::ended::send(&socket, &run_dir);
    }
    result
}

/// [`supervise`], without the run-end notice.
fn supervise_run(args: SuperviseArgs, ready: Option<std::os::fd::OwnedFd>) -> Result<(), SuperviseError> {
    // Not fatal: without a session of its own the supervisor still works, it just shares the
    // agent's terminal signals.
    let _ = os::new_session();
    // Taken synchronously from here on: a SIGTERM is a stop order, not the supervisor's death,
    // and SIGCHLD wakes the wait as soon as the job ends.
    let signals = os::SignalSet::block(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD])
        .map_err(|source| SuperviseError { run_dir: args.run_dir.clone(), context: "blocking signals", source })?;
    let claim = claim(args, ProcStamp::current(), Locking::Wait)?;
    if let Some(fd) = ready {
        // The spawner may have gone meanwhile; the job still runs.
        let _ = std::io::Write::write_all(&mut std::fs::File::from(fd), b"1");
    }
    match claim {
        Some(held) => run(held, &mut &signals),
        None => Ok(()),
    }
}

/// A run directory its supervisor holds: locked, stamped, its job not yet started.
pub(crate) struct Held {
    args: SuperviseArgs,
    dir: RunDir,
    /// The directory itself, locked for as long as this lives.
    lock: std::fs::File,
}

/// How to take a run directory's lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locking {
    /// Wait while another supervisor holds it (a supervisor of its own run has nothing else to
    /// do), then find the job started.
    Wait,
    /// Do not wait: a host's other runs must not stall on this one (a supervisor holding it
    /// supervises it).
    Try,
}

/// Takes the run in `args.run_dir`: locks the directory, and unless a supervisor started the
/// job already, adds `stamp` (the supervisor's) to the `supervisor` file. The agent's stop
/// orders read that stamp, so it is written before anybody learns that the run is held. None
/// when another supervisor holds the run, or held it and started its job: nothing to do.
pub(crate) fn claim(
    args: SuperviseArgs,
    stamp: Option<ProcStamp>,
    locking: Locking,
) -> Result<Option<Held>, SuperviseError> {
    let err = |context: &'static str| {
        let run_dir = args.run_dir.clone();
        move |source| SuperviseError { run_dir, context, source }
    };
    let dir = RunDir::new(args.run_dir.clone());
    // The directory itself is the lock: a lock file would be one more inode per job.
    let lock = std::fs::File::open(&dir.path).map_err(err("opening the run directory"))?;
    match locking {
        Locking::Wait => os::lock_exclusive(&lock).map_err(err("locking the run directory"))?,
        Locking::Try => {
            if !os::try_lock_exclusive(&lock).map_err(err("locking the run directory"))? {
                return Ok(None);
            }
        }
    }
    if dir.has(rundir::EXIT) || dir.has(rundir::PID) {
        // Another supervisor started this job already.
        return Ok(None);
    }
    if let Some(me) = stamp {
        dir.add_supervisor_stamp(&me).map_err(err("writing the supervisor file"))?;
    }
    Ok(Some(Held { args, dir, lock }))
}

/// What woke a sleeping supervisor, besides its job's end (which it checks itself).
pub(crate) enum Woken {
    /// Stop the job (the supervisor's SIGTERM or SIGINT, named), with the kill file's reason if
    /// there is one.
    Stop(&'static str),
    /// Read the kill file now.
    Look,
    /// Nothing to act on: a timeout, the job's end, a signal that means nothing here.
    Nothing,
}

/// How a supervisor sleeps until its job `pid` may have ended or an order may have come.
pub(crate) trait Sleep {
    /// Sleeps up to `timeout`; what woke it.
    fn sleep(&mut self, pid: i32, timeout: Duration) -> std::io::Result<Woken>;
}

/// A supervisor of one run takes its signals synchronously: SIGCHLD when the job ends, SIGTERM
/// and SIGINT as stop orders, SIGUSR1 (a slot's holder, whose stamp says `host`) as "read the
/// kill file".
impl Sleep for &os::SignalSet {
    fn sleep(&mut self, _pid: i32, timeout: Duration) -> std::io::Result<Woken> {
        Ok(match self.wait(timeout)? {
            Some(libc::SIGTERM) => Woken::Stop("SIGTERM"),
            Some(libc::SIGINT) => Woken::Stop("SIGINT"),
            Some(libc::SIGUSR1) => Woken::Look,
            _ => Woken::Nothing,
        })
    }
}

/// [`run`] for a supervisor that outlives the agent's pipes (a host's thread, a slot's holder):
/// what went wrong goes to the run directory's `supervisor` file, where nobody else would hear
/// it, and the run-end notice follows.
pub(crate) fn run_to_end(held: Held, sleep: &mut dyn Sleep) {
    let (socket, run_dir) = (held.args.ended_socket.clone(), held.args.run_dir.clone());
    if let Err(e) = run(held, sleep) {
        let _ = RunDir::new(run_dir.clone()).add_supervisor_words(&e.to_string());
    }
    if let Some(socket) = socket {
        super::ended::send(&socket, &run_dir);
    }
}

/// Runs a held run's job to its end and records how it ended (blocks); the lock goes last.
pub(crate) fn run(held: Held, sleep: &mut dyn Sleep) -> Result<(), SuperviseError> {
    let Held { args, dir, lock } = held;
    let run_dir = args.run_dir.clone();
    let err = |context: &'static str| {
        let run_dir = run_dir.clone();
        move |source| SuperviseError { run_dir, context, source }
    };
    let record = |exit_code, signal, reason: Option<&str>, message: Option<String>| ExitRecord {
        exit_code,
        signal,
        reason: reason.map(str::to_string),
        message,
        finished_at_ms: now_ms(),
        usage: None,
    };
    if let Some(k) = dir.read_kill().map_err(err("reading the kill file"))? {
        let rec =
            record(None, None, Some(rundir::REASON_KILLED), Some(format!("stopped before it started: {}", k.reason)));
        dir.write_exit_once(&rec).map_err(err("writing the exit file"))?;
        return Ok(());
    }
    let Some((program, program_args)) = args.command.split_first() else {
        let rec = record(None, None, Some("invalid job"), Some("no command to run".into()));
        dir.write_exit_once(&rec).map_err(err("writing the exit file"))?;
        return Ok(());
    };
    let open_out = |name| std::fs::OpenOptions::new().create(true).append(true).open(dir.file(name));
    let stdout = open_out(rundir::STDOUT).map_err(err("opening stdout"))?;
    let stderr = open_out(rundir::STDERR).map_err(err("opening stderr"))?;
    let confined = match args.confine.prepare(&dir.path, &[dir.file(rundir::STDOUT), dir.file(rundir::STDERR)]) {
        Ok(p) => p,
        Err(e) => {
            release_cgroup(&args.confine, &dir);
            let rec = record(None, None, Some(confine::REASON_CONFINE_FAILED), Some(e.to_string()));
            dir.write_exit_once(&rec).map_err(err("writing the exit file"))?;
            return Ok(());
        }
    };
    // A slot counts the OOM kills of every job it held.
    let oom_before = args.confine.oom_kills();
    let cwd = args.workdir.as_deref().unwrap_or(&dir.path);
    // Without its standard input the job cannot start: recorded like any failed start.
    let started = std::fs::File::open("/dev/null").and_then(|stdin| {
        let l = launch::Launch { program, args: program_args, env: &args.env, cwd, stdin, stdout, stderr };
        launch::start(l, confined)
    });
    let pid = match started {
        Ok(pid) => pid,
        Err(e) => {
            release_cgroup(&args.confine, &dir);
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            let rec = record(Some(code), None, Some("failed to start"), Some(format!("{program}: {e}")));
            dir.write_exit_once(&rec).map_err(err("writing the exit file"))?;
            return Ok(());
        }
    };
    // From here the job runs: if it cannot be supervised, it is stopped rather than left running
    // unwatched (a supervisor started again would start it a second time) and, under a slot's
    // holder, unreaped.
    let abandon = |context: &'static str, source: std::io::Error| {
        let _ = os::signal_group(pid, libc::SIGKILL);
        os::reap(pid);
        err(context)(source)
    };
    let stamp = ProcStamp::of(pid).unwrap_or(ProcStamp { pid, start_time: 0, host: false });
    if let Err(e) = dir.write_volatile(rundir::PID, stamp.encode().as_bytes()) {
        return Err(abandon("writing the pid file", e));
    }

    let Ended { status, usage, stopping } =
        wait_out(pid, &dir, &args, sleep).map_err(|(context, source)| abandon(context, source))?;
    // Whatever the job left in its group goes with it.
    let _ = os::signal_group(pid, libc::SIGKILL);
    let (exit_code, sig) = match (status.code(), status.signal()) {
        (Some(c), _) => (c, None),
        (None, Some(s)) => (128 + s, Some(s)),
        (None, None) => (255, None),
    };
    // Read before the cgroup goes (then whatever left the process group goes too), and only
    // for a job that failed: the OOM killer's victims end with SIGKILL, or their shell with 137.
    let oom = if exit_code != 0 { args.confine.oom_killed(oom_before) } else { None };
    release_cgroup(&args.confine, &dir);
    let rec = match stopping {
        Some((reason, message, _)) => record(Some(exit_code), sig, Some(reason), message),
        None if exit_code != 0
            && let Some((reason, message)) = oom =>
        {
            record(Some(exit_code), sig, Some(reason), Some(message))
        }
        None => record(Some(exit_code), sig, None, sig.map(|s| format!("terminated by signal {s}"))),
    };
    let rec = ExitRecord { usage: Some(usage), ..rec };
    dir.write_exit_once(&rec.judged_for_disk(&dir)).map_err(err("writing the exit file"))?;
    drop(lock);
    Ok(())
}

/// How a stop of the job began: the reason, the message, and when SIGKILL follows SIGTERM.
type Stopping = Option<(&'static str, Option<String>, Instant)>;

/// How the job ended, once reaped.
struct Ended {
    status: std::process::ExitStatus,
    /// What it (and the descendants it waited for) used.
    usage: crate::model::RunUsage,
    /// The stop that ended it, if one did.
    stopping: Stopping,
}

/// Waits for the job `pid` (also its process group) to end, stopping it on a kill order in `dir`,
/// a stop of the supervisor ([`Woken::Stop`]), or its deadline: SIGTERM to its group, then
/// SIGKILL after the grace period. Its exit status, what it used, and the stop that ended it if
/// one did; on failure, what was being done.
fn wait_out(
    pid: i32,
    dir: &RunDir,
    args: &SuperviseArgs,
    sleep: &mut dyn Sleep,
) -> Result<Ended, (&'static str, std::io::Error)> {
    let deadline = args.deadline_seconds.filter(|d| *d > 0).map(|d| Instant::now() + Duration::from_secs(d));
    let default_grace = Duration::try_from_secs_f64(args.grace_seconds).unwrap_or(Duration::from_secs(1));
    // (reason, message, SIGKILL time) once a stop began.
    let mut stopping: Stopping = None;
    let mut forced = false;
    let mut next_poll = Instant::now() + KILL_POLL;
    let begin_stop = |reason: &'static str, message: Option<String>, grace: Duration| {
        let _ = os::signal_group(pid, libc::SIGTERM);
        (reason, message, Instant::now() + grace)
    };
    let kill_order = |dir: &RunDir| -> Option<(Option<String>, Duration)> {
        let k = dir.read_kill().ok().flatten()?;
        Some((Some(k.reason), Duration::try_from_secs_f64(k.grace_seconds).unwrap_or(default_grace)))
    };
    loop {
        if let Some((status, (cpu_ms, peak_memory_bytes))) =
            launch::try_wait(pid).map_err(|e| ("waiting for the job", e))?
        {
            return Ok(Ended { status, usage: crate::model::RunUsage { cpu_ms, peak_memory_bytes }, stopping });
        }
        let now = Instant::now();
        if stopping.is_none() {
            if deadline.is_some_and(|d| now >= d) {
                let msg = format!("ran longer than activeDeadlineSeconds ({}s)", args.deadline_seconds.unwrap_or(0));
                stopping = Some(begin_stop(rundir::REASON_DEADLINE, Some(msg), default_grace));
            } else if now >= next_poll {
                next_poll = now + KILL_POLL;
                if let Some((msg, grace)) = kill_order(dir) {
                    stopping = Some(begin_stop(rundir::REASON_KILLED, msg, grace));
                }
            }
        }
        if let Some((_, _, force_at)) = &stopping
            && !forced
            && now >= *force_at
        {
            let _ = os::signal_group(pid, libc::SIGKILL);
            forced = true;
        }
        // Sleep until a signal or the next thing to check, whichever is first.
        let mut wake = next_poll;
        if let Some(d) = deadline.filter(|_| stopping.is_none()) {
            wake = wake.min(d);
        }
        if let Some((_, _, force_at)) = stopping.as_ref().filter(|_| !forced) {
            wake = wake.min(*force_at);
        }
        match sleep.sleep(pid, wake.saturating_duration_since(Instant::now())).map_err(|e| ("waiting", e))? {
            Woken::Stop(who) if stopping.is_none() => {
                let (msg, grace) =
                    kill_order(dir).unwrap_or((Some(format!("the supervisor received {who}")), default_grace));
                stopping = Some(begin_stop(rundir::REASON_KILLED, msg, grace));
            }
            // The kill file is read at the loop's next turn.
            Woken::Look => next_poll = Instant::now(),
            // The job's end: the loop reaps; repeated stops: nothing to do.
            _ => {}
        }
    }
}

/// Empties the job's cgroup slot (or removes its cgroups); when a process would not leave, says
/// so in the run directory before the exit record, so the agent never gives that slot again.
fn release_cgroup(confine: &Confinement, dir: &RunDir) {
    if !confine.release()
        && let Err(e) = std::fs::write(dir.file(confine::CGROUP_STUCK_FILE), b"")
    {
        tracing::error!(error = %e, "cannot record that the job's cgroup slot is stuck");
    }
}
