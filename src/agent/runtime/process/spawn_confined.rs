//! Starting a confined job without copying its supervisor's memory.
//!
//! A confined job's child must act between the clone and the exec: join the job's cgroups,
//! give up the OOM killer's protection, switch user ([`super::confine::Prepared`]), which
//! `posix_spawn` cannot do. A fork copies the supervisor's page tables, which the exec throws
//! away: in `bench processes --limits` the job's fork was the largest single cost of the
//! supervisor, and in a process with many threads it grows with their stacks. So the child is
//! started as `posix_spawn` starts one, with `CLONE_VM | CLONE_VFORK`: it runs on a stack of
//! its own in the supervisor's memory, the calling thread waits until it has exec'd or exited,
//! and it makes only system calls on memory prepared before the clone (no allocation, no lock,
//! nothing shared written but its error slot and the waiting thread's `errno`).
//!
//! Signals: the calling thread blocks all of them across the clone, so no handler of the
//! supervisor runs in the child on the shared memory. The child sets every signal that has a
//! handler (and `SIGPIPE`, `SIGCHLD`) to its default, then unblocks all and execs: the job
//! gets what the unconfined one gets from `posix_spawn`.

use super::confine::Prepared;
use std::ffi::{CStr, c_int, c_void};
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

/// The child's stack. It only makes system calls, through a few shallow functions.
const STACK_BYTES: usize = 64 * 1024;

/// What the child needs, all prepared by the caller: C strings and pointer arrays ending in a
/// null pointer.
pub(super) struct Exec<'a> {
    /// The files to execute, tried in order as `execvp` tries them along `PATH`: the next when
    /// the last does not exist or may not be run by the job's user.
    pub programs: &'a [Program<'a>],
    /// The job's argv.
    pub argv: &'a [*const libc::c_char],
    /// The environment.
    pub envp: &'a [*const libc::c_char],
    /// The working directory, absolute.
    pub cwd: &'a CStr,
    /// The descriptors to become 0, 1 and 2.
    pub stdio: [c_int; 3],
}

/// One file to execute.
pub(super) struct Program<'a> {
    /// Its path.
    pub path: &'a CStr,
    /// `/bin/sh` and the path, then the arguments: run when the kernel finds no interpreter for
    /// the file (`ENOEXEC`), as `execvp` does.
    pub sh_argv: &'a [*const libc::c_char],
}

/// The child's whole input, and where it leaves the error that kept it from exec'ing.
struct Child<'a> {
    exec: &'a Exec<'a>,
    confined: &'a Prepared,
    /// Signals to set to their default before unblocking.
    resets: &'a [c_int],
    /// The errno of the step that failed; 0 if it exec'd.
    errno: AtomicI32,
}

/// Starts the job: its pid, which is also its process group. An error is the errno of the step
/// that failed in the child (joining the cgroup, switching user, the exec); the child is reaped.
pub(super) fn spawn(exec: &Exec, confined: &Prepared) -> io::Result<i32> {
    if exec.programs.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    for list in [exec.argv, exec.envp].into_iter().chain(exec.programs.iter().map(|p| p.sh_argv)) {
        if list.last().is_none_or(|p| !p.is_null()) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an argument list must end with a null pointer"));
        }
    }
    let resets = signals_to_reset();
    let child = Child { exec, confined, resets: &resets, errno: AtomicI32::new(0) };
    let stack = Stack::new()?;
    let pid = {
        let _blocked = BlockedSignals::all()?;
        // SAFETY: `child_main` runs on `stack` (its own, of STACK_BYTES) in this process's memory
        // while this thread waits (CLONE_VFORK), so `child` outlives every access; it makes only
        // system calls and writes nothing shared but `child.errno`. SIGCHLD makes it an ordinary
        // child, reaped by wait4.
        unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::from_ref(&child).cast_mut().cast::<c_void>(),
            )
        }
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    match child.errno.load(Ordering::Acquire) {
        0 => Ok(pid),
        errno => {
            super::os::reap(pid);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// The child: runs on its own stack in the supervisor's memory until it execs.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Child` that `spawn` keeps alive until this process execs or exits.
    let child = unsafe { &*arg.cast::<Child>() };
    let errno = match prepare_and_exec(child) {
        Ok(never) => match never {},
        Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
    };
    child.errno.store(errno, Ordering::Release);
    // SAFETY: ends this process at once, without running anything of the supervisor's.
    unsafe { libc::_exit(127) }
}

/// Everything the child does; returns only on failure. Async-signal-safe and allocation-free:
/// `io::Error`s made from an errno hold no allocation.
fn prepare_and_exec(child: &Child) -> io::Result<std::convert::Infallible> {
    let e = child.exec;
    // SAFETY: plain system calls on memory prepared before the clone.
    unsafe {
        for &sig in child.resets {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            if libc::sigaction(sig, &dfl, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        for (target, &fd) in e.stdio.iter().enumerate() {
            let target = target as c_int;
            let rc = if fd == target { libc::fcntl(fd, libc::F_SETFD, 0) } else { libc::dup2(fd, target) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if libc::chdir(e.cwd.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    child.confined.apply_in_child()?;
    super::os::unblock_all_signals()?;
    // SAFETY: as above; the lists end with a null pointer (checked by `spawn`).
    unsafe {
        let mut denied = false;
        for p in e.programs {
            libc::execve(p.path.as_ptr(), e.argv.as_ptr(), e.envp.as_ptr());
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ENOEXEC) => {
                    libc::execve(c"/bin/sh".as_ptr(), p.sh_argv.as_ptr(), e.envp.as_ptr());
                    return Err(io::Error::last_os_error());
                }
                Some(libc::EACCES) => denied = true,
                Some(libc::ENOENT | libc::ENOTDIR) => {}
                _ => return Err(err),
            }
        }
        Err(io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT }))
    }
}

/// The signals the child must set to their default: those with a handler (which would run in
/// the supervisor's memory if one came before the exec), and `SIGPIPE` and `SIGCHLD`, which
/// Rust and the spawner ignore and a job gets at their defaults. glibc's own (32, 33) are left
/// alone, as `posix_spawn` leaves them.
fn signals_to_reset() -> Vec<c_int> {
    let mut out = Vec::new();
    for sig in 1..=64 {
        if sig == 32 || sig == 33 || sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: reads the disposition into a zeroed local.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue;
        }
        let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        if handled || sig == libc::SIGPIPE || sig == libc::SIGCHLD {
            out.push(sig);
        }
    }
    out
}

/// A stack mapped for the child, with a guard page below it.
struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        let page = page_size();
        let len = STACK_BYTES + page;
        // SAFETY: a fresh private anonymous mapping, unmapped on drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of our own mapping; the stack grows down towards it.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address: where a downward-growing stack starts.
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, which clone takes as the initial stack pointer.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer used: the child exec'd or exited before clone returned.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// All signals blocked on the calling thread until dropped, when its mask is restored.
struct BlockedSignals(libc::sigset_t);

impl BlockedSignals {
    fn all() -> io::Result<BlockedSignals> {
        // SAFETY: sigset_t values initialised by sigfillset before use.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let mut old: libc::sigset_t = std::mem::zeroed();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(BlockedSignals(old))
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `all`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}
