//! Thin wrappers over the Linux facilities the process runtime needs: `/proc` (machine size,
//! process start times), signals and `flock`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// A process identified by pid and start time (clock ticks since boot), so a reused pid is never
/// mistaken for the original process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStamp {
    pub pid: i32,
    pub start_time: u64,
    /// A supervisor host ([`super::host`]), which supervises several runs: SIGUSR1 makes it read
    /// their kill files, where SIGTERM would stop all of them. Written as a third word, `host`.
    pub host: bool,
}

impl ProcStamp {
    /// The stamp of a live process, if it exists.
    pub fn of(pid: i32) -> Option<ProcStamp> {
        let (_, start_time) = stat(pid)?;
        Some(ProcStamp { pid, start_time, host: false })
    }

    /// The stamp of this process.
    pub fn current() -> Option<ProcStamp> {
        Self::of(std::process::id() as i32)
    }

    /// True if the process still runs (same pid, same start time, not a zombie).
    pub fn is_alive(&self) -> bool {
        matches!(stat(self.pid), Some((state, start)) if start == self.start_time && state != 'Z' && state != 'X')
    }

    /// `pid start_time`, and ` host` for a supervisor host, as stored in run directories.
    pub fn encode(&self) -> String {
        let host = if self.host { " host" } else { "" };
        format!("{} {}{host}\n", self.pid, self.start_time)
    }

    /// Parses one line of [`ProcStamp::encode`]'s format: two numbers, perhaps `host`, and
    /// nothing else, so a line of text beside the stamps is never taken for one.
    pub fn decode_line(line: &str) -> Option<ProcStamp> {
        let mut it = line.split_whitespace();
        let pid = it.next()?.parse().ok()?;
        let start_time = it.next()?.parse().ok()?;
        let host = match it.next() {
            None => false,
            Some("host") => true,
            Some(_) => return None,
        };
        (pid > 0 && it.next().is_none()).then_some(ProcStamp { pid, start_time, host })
    }

    /// Asks the supervisor this stamp names to look at a run's kill file now (it also polls):
    /// SIGTERM for a supervisor of one run, SIGUSR1 for a host.
    pub fn nudge(&self) -> io::Result<()> {
        signal_process(self.pid, if self.host { libc::SIGUSR1 } else { libc::SIGTERM })
    }
}

/// State letter and start time of `pid` from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; field 22 (starttime) is fields[19].
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// CPU time (user and system) in ms, and the largest resident set in bytes, of an `rusage`.
pub(crate) fn usage_of(ru: &libc::rusage) -> (u64, u64) {
    let ms = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1000 + (t.tv_usec.max(0) as u64) / 1000;
    // ru_maxrss is in KiB on Linux.
    (ms(ru.ru_utime) + ms(ru.ru_stime), (ru.ru_maxrss.max(0) as u64) * 1024)
}

/// A descriptor that becomes readable when the child `pid` ends (`pidfd_open(2)`), so a thread
/// can wait for its own job beside other descriptors, where SIGCHLD would wake one thread of
/// many.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes plain integers; on success the descriptor is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Waits up to `timeout` for any of `fds` to become readable or hung up; which ones did.
pub(crate) fn poll_readable(fds: &[i32], timeout: std::time::Duration) -> io::Result<Vec<bool>> {
    let mut polled: Vec<libc::pollfd> =
        fds.iter().map(|fd| libc::pollfd { fd: *fd, events: libc::POLLIN, revents: 0 }).collect();
    let ms = i32::try_from(timeout.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
    // SAFETY: a valid array of pollfd of the length given, alive across the call.
    let rc = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(vec![false; fds.len()]) } else { Err(e) };
    }
    Ok(polled.iter().map(|p| p.revents != 0).collect())
}

/// The soft limit on open descriptors of this process (`RLIMIT_NOFILE`).
pub(crate) fn open_files_limit() -> io::Result<u64> {
    // SAFETY: getrlimit writes the struct it is given; a zeroed rlimit is a valid value.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rlimit this function owns.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rl.rlim_cur)
}

/// Number of CPUs this process may use.
pub(crate) fn cpu_count() -> u64 {
    std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1)
}

/// Total memory of the machine in bytes, from `/proc/meminfo`.
pub(crate) fn mem_total_bytes() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no MemTotal line in /proc/meminfo"))
}

/// Sends `sig` to one process. A process that is gone is not an error.
pub(crate) fn signal_process(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, sig) };
    check_signal(rc)
}

/// Sends `sig` to every process of the group `pgid`. A group that is gone is not an error.
pub(crate) fn signal_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("refusing to signal process group {pgid}")));
    }
    // SAFETY: as above; a negative pid addresses the process group.
    let rc = unsafe { libc::kill(-pgid, sig) };
    check_signal(rc)
}

fn check_signal(rc: i32) -> io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) { Ok(()) } else { Err(e) }
}

/// Takes an exclusive `flock` on `file`, waiting for it.
pub(crate) fn lock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: flock(2) on a descriptor we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Takes an exclusive `flock` on `file` if nobody holds one; false when somebody does.
pub(crate) fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock(2) on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(false) } else { Err(e) }
}

/// True if some process holds a `flock` on the file at `path`: probes with a non-blocking lock
/// that is dropped at once.
pub(crate) fn is_locked(path: &std::path::Path) -> io::Result<bool> {
    Ok(!try_lock_exclusive(&File::open(path)?)?)
}

/// Leaves the agent's session so terminal hang-ups and Ctrl-C do not reach the process.
pub(crate) fn new_session() -> io::Result<()> {
    // SAFETY: setsid(2) has no memory effects.
    let rc = unsafe { libc::setsid() };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A set of signals this thread takes synchronously ([`SignalSet::wait`]) instead of by
/// handler: blocked here, so they queue until waited for. Children inherit the mask through
/// exec: unblock in their `pre_exec` ([`unblock_all_signals`]).
pub(crate) struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// Blocks `signals` in the calling thread and returns them as a set to wait on.
    pub(crate) fn block(signals: &[i32]) -> io::Result<SignalSet> {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before any other use;
        // pthread_sigmask only changes this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in signals {
                libc::sigaddset(&mut set, *s);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(SignalSet(set))
        }
    }

    /// Takes every one of the set's signals that is pending, without waiting.
    pub(crate) fn drain(&self) {
        while let Ok(Some(_)) = self.wait(std::time::Duration::ZERO) {}
    }

    /// Waits up to `timeout` for one of the set's signals; the signal, or none on timeout.
    pub(crate) fn wait(&self, timeout: std::time::Duration) -> io::Result<Option<i32>> {
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
        };
        // SAFETY: the set and the timespec live across the call; no siginfo is asked for.
        let rc = unsafe { libc::sigtimedwait(&self.0, std::ptr::null_mut(), &ts) };
        if rc >= 0 {
            return Ok(Some(rc));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        }
    }
}

/// Unblocks every signal of the calling thread: a job must not inherit the mask its supervisor
/// takes signals with ([`SignalSet`]); exec keeps the mask. Async-signal-safe, for `pre_exec`.
pub(crate) fn unblock_all_signals() -> io::Result<()> {
    // SAFETY: as in SignalSet::block.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Waits for child `pid` to end (it was sent SIGKILL), retrying on EINTR.
pub(crate) fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waits for our own child into a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

/// Reaps every child that has ended, without waiting for the others.
pub(crate) fn reap_ended_children() {
    let mut status = 0;
    // SAFETY: as in `reap`.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}

/// Where a [`fork`] returns.
pub(crate) enum Forked {
    /// In the parent, with the child's pid.
    Parent(i32),
    /// In the child.
    Child,
}

/// fork(2).
///
/// # Safety
/// The calling process must have one thread: a child of a multi-threaded process may only call
/// async-signal-safe functions, and the code after this is ordinary Rust.
pub(crate) unsafe fn fork() -> io::Result<Forked> {
    // SAFETY: the caller guarantees a single-threaded process.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Ignores SIGCHLD (the kernel then reaps this process's children as they end, and nothing can
/// wait for them), or restores its default.
pub(crate) fn set_sigchld_ignored(ignored: bool) -> io::Result<()> {
    let handler = if ignored { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: installs one of the two built-in dispositions; no handler code runs.
    if unsafe { libc::signal(libc::SIGCHLD, handler) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A pipe whose both ends close on exec: (read end, write end).
pub(crate) fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors, which we then own.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1])) })
}

/// Closes every descriptor from 3 up except those in `keep`: a forked child must not hold its
/// parent's pipes and sockets open (their other ends would never see them close).
pub(crate) fn close_other_fds(keep: &[i32]) -> io::Result<()> {
    let mut keep: Vec<u32> = keep.iter().filter_map(|k| u32::try_from(*k).ok()).filter(|k| *k >= 3).collect();
    keep.sort_unstable();
    let mut from = 3u32;
    for k in keep.into_iter().chain(std::iter::once(u32::MAX)) {
        if k > from {
            // SAFETY: closes descriptors this process owns; none is used afterwards.
            if unsafe { libc::close_range(from, k - 1, 0) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        from = k.saturating_add(1);
    }
    Ok(())
}

/// Points descriptor `target` (0, 1 or 2) at `file`.
pub(crate) fn redirect(file: &impl AsRawFd, target: i32) -> io::Result<()> {
    // SAFETY: dup2(2) on descriptors we own; `target` is replaced atomically.
    let rc = unsafe { libc::dup2(file.as_raw_fd(), target) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stamp_is_alive_and_round_trips() {
        let me = ProcStamp::current().expect("/proc is readable");
        assert!(me.is_alive());
        assert_eq!(ProcStamp::decode_line(me.encode().trim_end()), Some(me));
        assert_eq!(ProcStamp::decode_line("12 34 opening the lease"), None);
        let host = ProcStamp { host: true, ..me };
        assert_eq!(host.encode(), format!("{} {} host\n", me.pid, me.start_time));
        assert_eq!(ProcStamp::decode_line(host.encode().trim_end()), Some(host));
        assert_eq!(ProcStamp::decode_line("12 34 host and more"), None);
        let reused = ProcStamp { start_time: me.start_time + 1, ..me };
        assert!(!reused.is_alive(), "a different start time means a different process");
        assert!(mem_total_bytes().expect("meminfo") > 0);
    }

    #[test]
    fn flock_probe_sees_a_held_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let f = File::create(&path).expect("create");
        assert!(!is_locked(&path).expect("probe"));
        lock_exclusive(&f).expect("lock");
        assert!(is_locked(&path).expect("probe"));
        drop(f);
        assert!(!is_locked(&path).expect("probe"));
    }
}
