//! The supervisor host: one process per agent pipeline (`convoy agent-supervise --host`) that
//! supervises the agent's unconfined jobs on a thread each, where the spawner
//! ([`super::spawner`]) forks a supervisor process per job.
//!
//! A supervisor process per job cost more than the job: its fork, its page faults and its exit
//! were about half the machine's CPU in `convoy bench processes` (docs/benchmarks.md, "The
//! process runtime on disk"). A thread costs a fraction of that. What a host keeps of the
//! supervisor's contract:
//! - it leaves the agent's session and outlives the agent: when its stdin closes (the agent
//!   ended), it takes no more runs and exits once its runs ended, their exit records written;
//! - each run's directory is locked by that run's thread for as long as it supervises it, so
//!   the agent judges each run's supervisor by the lock, as before;
//! - the run's `supervisor` file names the host (`pid start_time host`): the agent's stop
//!   orders then send SIGUSR1 ("read your kill files"), since SIGTERM to a host stops every
//!   run it holds, as it would stop a supervisor's one run (at a machine's shutdown, say);
//! - each job is waited for through its own pidfd, so no thread takes another's SIGCHLD, and
//!   reaped with `wait4`, which gives each job's own usage;
//! - the jobs inherit the agent's limits: a host does not raise its limit on open files, and
//!   takes no more runs than that limit allows ([`FULL`]); the agent gives the others a
//!   supervisor process.
//!
//! What it gives up: the runs of one host share its fate. A host killed (`kill -9`, the OOM
//! killer) leaves all its runs without a supervisor, which the agent then records as lost, where
//! a supervisor killed cost one run. Confined jobs go to the spawner ([`super::spawner`]):
//! those in a cgroup slot are supervised by its holder, which is inside the slot's cgroups as a
//! thread of a host cannot be; the others (run as another user without cgroups, or a slot that
//! can have no holder) by a supervisor process each.

use super::os::{self, ProcStamp};
use super::spawner::{SpawnRequest, answer_requests};
use super::supervise::{self, Locking, Sleep, Woken};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How a host that was told to stop answers a request: the agent then starts another host.
pub const STOPPING: &str = "the supervisor host is stopping";

/// How a host that holds as many runs as its descriptors allow answers a request: the agent
/// then gives the run a supervisor process.
pub const FULL: &str = "the supervisor host is full";

/// Descriptors a host keeps for itself (its pipes, the signal thread's, a run starting or
/// ending opens a few more for a moment).
const OWN_FDS: u64 = 64;

/// Descriptors a run holds while it runs (its directory's lock, its job's pidfd), with room for
/// the files its thread opens for a moment (outputs, exit record).
const FDS_PER_RUN: u64 = 3;

/// Runs a host may hold with `open_files` descriptors allowed.
fn capacity(open_files: u64) -> usize {
    usize::try_from(open_files.saturating_sub(OWN_FDS) / FDS_PER_RUN).unwrap_or(usize::MAX)
}

/// Stack of a run's thread: it holds a few paths and JSON records, nothing deep.
const RUN_STACK_BYTES: usize = 256 * 1024;

/// How long a sleep may last without a pidfd to wake it (kernels before 5.3).
const WITHOUT_PIDFD: Duration = Duration::from_millis(20);

/// Serves the agent's requests on stdin until it closes, then waits for the runs it holds to
/// end (blocks).
pub fn serve() -> std::io::Result<()> {
    // It outlives the agent: it must not keep what the agent had open without close-on-exec
    // (a lock, a socket) held after the agent is gone.
    os::close_other_fds(&[])?;
    // Not fatal: without a session of its own the host still works, it just shares the agent's
    // terminal signals.
    let _ = os::new_session();
    // Blocked before any thread starts, so every thread inherits the mask and only the signal
    // thread takes them.
    let signals = os::SignalSet::block(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1])?;
    // The limit is not raised: the jobs would inherit it.
    let capacity = capacity(os::open_files_limit()?);
    let host = Arc::new(Host { nudge: Nudge::new()?, running: Mutex::new(0), idle: Condvar::new(), capacity });
    let stamp = ProcStamp::current().map(|s| ProcStamp { host: true, ..s });
    let on_signal = host.clone();
    std::thread::Builder::new().name("signals".into()).spawn(move || on_signal.take_signals(signals))?;
    answer_requests(std::io::stdin().lock(), std::io::stdout().lock(), |req| host.start(req, stamp), |()| {})?;
    // The agent is gone: nobody reads its pipes, which whoever started it may wait to see
    // closed. What the runs' threads have to say goes to their run directories.
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = os::redirect(&null, 1);
        let _ = os::redirect(&null, 2);
    }
    host.wait_idle();
    Ok(())
}

/// What the host's threads share.
struct Host {
    nudge: Nudge,
    /// Runs whose thread has not finished.
    running: Mutex<usize>,
    /// Told when `running` falls to 0.
    idle: Condvar,
    /// Most runs at once ([`capacity`]).
    capacity: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Host {
    /// Takes the run and starts its thread; returns once the run is held (or was already).
    fn start(self: &Arc<Self>, req: SpawnRequest, stamp: Option<ProcStamp>) -> std::io::Result<()> {
        if let Some(who) = self.nudge.current().1 {
            return Err(std::io::Error::other(format!("{STOPPING}: it received {who}")));
        }
        let held_now = *lock(&self.running);
        if held_now >= self.capacity {
            return Err(std::io::Error::other(format!("{FULL}: it holds {held_now} runs")));
        }
        let Some(held) = supervise::claim(req, stamp, Locking::Try).map_err(std::io::Error::other)? else {
            return Ok(());
        };
        let running = Running::count(self.clone());
        let started = std::thread::Builder::new().name("run".into()).stack_size(RUN_STACK_BYTES).spawn(move || {
            let mut sleep = RunSleep { nudge: &running.0.nudge, pidfd: None, stop_seen: false };
            supervise::run_to_end(held, &mut sleep);
        });
        // A thread that could not start dropped the run (its lock, its count) with its closure.
        started.map(drop)
    }

    fn wait_idle(&self) {
        let mut running = lock(&self.running);
        while *running > 0 {
            running = self.idle.wait(running).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The signal thread: SIGUSR1 has every run read its kill file; SIGTERM and SIGINT stop
    /// every run, after which the host takes no more and exits once they ended.
    fn take_signals(&self, signals: os::SignalSet) {
        loop {
            let who = match signals.wait(Duration::from_secs(3600)) {
                Ok(Some(libc::SIGUSR1)) => None,
                Ok(Some(libc::SIGTERM)) => Some("SIGTERM"),
                Ok(Some(libc::SIGINT)) => Some("SIGINT"),
                Ok(_) => continue,
                // Cannot take signals: stop orders still arrive through the kill-file polls.
                Err(_) => return,
            };
            if self.nudge.fire(who).is_err() {
                // No descriptor for a new round: the runs see orders at their next poll.
                continue;
            }
            if who.is_some() {
                self.wait_idle();
                std::process::exit(0);
            }
        }
    }
}

/// One run's place in [`Host::running`], given back when dropped: also when its thread panics
/// (the run's lock goes with the unwinding too, and the agent takes the run over), so the host
/// still exits once its other runs ended.
struct Running(Arc<Host>);

impl Running {
    fn count(host: Arc<Host>) -> Running {
        *lock(&host.running) += 1;
        Running(host)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = lock(&self.0.running);
        *running = running.saturating_sub(1);
        if *running == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// Wakes every sleeping run at once: each sleeps on the read end of the current pipe, and a
/// nudge replaces the pipe and closes the old write end, which every reader sees hung up.
struct Nudge {
    round: Mutex<Round>,
}

struct Round {
    read: Arc<OwnedFd>,
    write: OwnedFd,
    /// Set for good by SIGTERM or SIGINT.
    stop: Option<&'static str>,
}

impl Nudge {
    fn new() -> std::io::Result<Nudge> {
        let (read, write) = os::pipe()?;
        Ok(Nudge { round: Mutex::new(Round { read: Arc::new(read), write, stop: None }) })
    }

    /// The pipe end of this round, and the stop, if one came.
    fn current(&self) -> (Arc<OwnedFd>, Option<&'static str>) {
        let r = lock(&self.round);
        (r.read.clone(), r.stop)
    }

    /// Wakes every run; `stop` (once set, kept) has them stop their jobs.
    fn fire(&self, stop: Option<&'static str>) -> std::io::Result<()> {
        let (read, write) = os::pipe()?;
        let mut r = lock(&self.round);
        r.stop = r.stop.or(stop);
        r.read = Arc::new(read);
        // Dropping the old write end is the wake-up.
        drop(std::mem::replace(&mut r.write, write));
        Ok(())
    }
}

/// How a run's thread sleeps: on its job's pidfd and the host's nudge.
struct RunSleep<'a> {
    nudge: &'a Nudge,
    /// Opened on the first sleep (the job's pid is known then); none when the kernel has no
    /// pidfds.
    pidfd: Option<Option<OwnedFd>>,
    /// The host's stop was passed on already.
    stop_seen: bool,
}

impl RunSleep<'_> {
    fn stop_once(&mut self, stop: Option<&'static str>) -> Option<Woken> {
        let who = stop.filter(|_| !self.stop_seen)?;
        self.stop_seen = true;
        Some(Woken::Stop(who))
    }
}

impl Sleep for RunSleep<'_> {
    fn sleep(&mut self, pid: i32, timeout: Duration) -> std::io::Result<Woken> {
        let pidfd = self.pidfd.get_or_insert_with(|| os::pidfd_open(pid).ok());
        let pidfd_raw = pidfd.as_ref().map(|fd| fd.as_raw_fd());
        let (round, stop) = self.nudge.current();
        if let Some(w) = self.stop_once(stop) {
            return Ok(w);
        }
        let woke = match pidfd_raw {
            Some(p) => os::poll_readable(&[round.as_raw_fd(), p], timeout)?,
            None => os::poll_readable(&[round.as_raw_fd()], timeout.min(WITHOUT_PIDFD))?,
        };
        if !woke.first().copied().unwrap_or(false) {
            return Ok(Woken::Nothing);
        }
        Ok(self.stop_once(self.nudge.current().1).unwrap_or(Woken::Look))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_holds_as_many_runs_as_its_descriptors_allow() {
        // A systemd service's default soft limit.
        assert_eq!(capacity(1024), 320);
        assert_eq!(capacity(64), 0);
        assert_eq!(capacity(10), 0);
        assert_eq!(capacity(524_288), 174_741);
    }
}
