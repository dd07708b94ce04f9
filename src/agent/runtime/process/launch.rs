//! Starting the job's process from its supervisor.
//!
//! A job that runs unconfined needs nothing done in its process between the fork and the exec
//! but what `posix_spawn` does itself (its outputs, working directory, process group, signal
//! mask). glibc's `posix_spawn` starts the child in the supervisor's memory (`CLONE_VM |
//! CLONE_VFORK`) instead of copying its page tables, which a fork copies and the exec throws
//! away, and looks the program up once instead of trying an exec per `PATH` entry. A confined
//! job still needs a fork: its child joins the cgroup and switches user before the exec
//! ([`super::confine`]). Measured in docs/benchmarks.md ("The process runtime on disk").
//!
//! What the job sees is the same either way: the supervisor's environment with the job's
//! variables over it, the program found along the job's `PATH`, no signal blocked, `SIGPIPE`
//! and `SIGCHLD` at their defaults, a process group of its own.

use super::confine::Prepared;
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// `execvp`'s search path when the environment has no `PATH`.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The job's command, environment and files.
pub(crate) struct Launch<'a> {
    /// The program: a path when it holds a `/`, else a name looked up along `PATH`.
    pub program: &'a str,
    /// Its arguments, after the program.
    pub args: &'a [String],
    /// Variables set over the supervisor's own environment.
    pub env: &'a [(String, String)],
    /// The working directory.
    pub cwd: &'a Path,
    /// Standard input.
    pub stdin: File,
    /// Standard output.
    pub stdout: File,
    /// Standard error.
    pub stderr: File,
}

/// Starts the job, with `posix_spawn` unless `confined` has to act in its child; its pid, which
/// is also its process group. Waited for with [`try_wait`] either way.
pub(crate) fn start(l: Launch, confined: Prepared) -> io::Result<i32> {
    if confined.needs_the_child() { fork(l, confined) } else { spawn(&l) }
}

/// Starts a confined job the classic way, since its child must join its cgroup and switch user
/// between the fork and the exec.
fn fork(l: Launch, confined: Prepared) -> io::Result<i32> {
    let mut cmd = std::process::Command::new(l.program);
    cmd.args(l.args)
        .envs(l.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(l.cwd)
        .stdin(l.stdin)
        .stdout(l.stdout)
        .stderr(l.stderr)
        .process_group(0);
    // SAFETY: the hook makes only async-signal-safe calls: write, setgroups, setgid, setuid
    // (everything they use was prepared before the fork) and pthread_sigmask.
    unsafe {
        cmd.pre_exec(move || {
            confined.apply_in_child()?;
            super::os::unblock_all_signals()
        });
    }
    // Dropping the `Child` neither waits nor kills: the supervisor reaps it by pid.
    let child = cmd.spawn()?;
    i32::try_from(child.id()).map_err(|_| io::Error::other("pid out of range"))
}

/// The environment the job gets: the supervisor's, with `overrides` set over it.
fn environment(overrides: &[(String, String)]) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in overrides {
        env.insert(OsString::from(k), OsString::from(v));
    }
    env
}

/// Where `program` is, looked up as `execvp` does: as given when it holds a `/`, else the first
/// executable file of that name along `path` (empty entries meaning the working directory, as
/// do relative ones, taken from `cwd`). NotFound, or PermissionDenied when the only files found
/// were not executable.
pub(crate) fn resolve(program: &str, path: Option<&OsStr>, cwd: &Path) -> io::Result<PathBuf> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains('/') {
        return Ok(cwd.join(program));
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut denied = false;
    for dir in path.as_bytes().split(|b| *b == b':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = cwd.join(dir).join(program);
        let Ok(meta) = std::fs::metadata(&candidate) else { continue };
        if !meta.is_file() {
            continue;
        }
        if executable(&candidate) {
            return Ok(candidate);
        }
        denied = true;
    }
    Err(io::Error::from_raw_os_error(if denied { libc::EACCES } else { libc::ENOENT }))
}

fn executable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: access(2) reads the NUL-terminated path only.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte found in provided data"))
}

/// Starts the job with `posix_spawn`; its pid, which is also its process group. A file that is
/// no program the kernel runs (a script without `#!`) is run by `/bin/sh`, as `execvp` does.
fn spawn(l: &Launch) -> io::Result<i32> {
    let env = environment(l.env);
    // Relative to the supervisor's directory, as the child's chdir would take it.
    let cwd = std::path::absolute(l.cwd)?;
    let path = resolve(l.program, env.get(OsStr::new("PATH")).map(OsString::as_os_str), &cwd)?;
    let argv = |first: &[&[u8]]| -> Vec<Vec<u8>> {
        first.iter().map(|b| b.to_vec()).chain(l.args.iter().map(|a| a.as_bytes().to_vec())).collect()
    };
    match spawn_file(path.as_os_str(), argv(&[l.program.as_bytes()]), &env, &cwd, l) {
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let sh = OsStr::new("/bin/sh");
            spawn_file(sh, argv(&[sh.as_bytes(), path.as_os_str().as_bytes()]), &env, &cwd, l)
        }
        other => other,
    }
}

/// `posix_spawn` of the executable `path` with `argv`, `env` and `cwd`, and `l`'s files.
fn spawn_file(
    path: &OsStr,
    argv: Vec<Vec<u8>>,
    env: &BTreeMap<OsString, OsString>,
    cwd: &Path,
    l: &Launch,
) -> io::Result<i32> {
    let path = c_string(path.as_bytes().to_vec())?;
    let argv: Vec<CString> = argv.into_iter().map(c_string).collect::<io::Result<_>>()?;
    let envp: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend(v.as_bytes());
            c_string(kv)
        })
        .collect::<io::Result<_>>()?;
    let cwd = c_string(cwd.as_os_str().as_bytes().to_vec())?;
    let mut argv_ptrs: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut envp_ptrs: Vec<*mut libc::c_char> = envp.iter().map(|e| e.as_ptr().cast_mut()).collect();
    envp_ptrs.push(std::ptr::null_mut());

    let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) };
    // SAFETY: the attributes and file actions are initialised before use and destroyed by the
    // guards; every pointer handed to posix_spawn (path, argv, envp, cwd, the signal sets) points
    // into values that outlive the call, and argv and envp end with a null pointer.
    unsafe {
        let mut actions = Actions(std::mem::zeroed());
        check(libc::posix_spawn_file_actions_init(&mut actions.0))?;
        let mut attrs = Attrs(std::mem::zeroed());
        check(libc::posix_spawnattr_init(&mut attrs.0))?;
        for (file, fd) in [(&l.stdin, 0), (&l.stdout, 1), (&l.stderr, 2)] {
            check(libc::posix_spawn_file_actions_adddup2(&mut actions.0, file.as_raw_fd(), fd))?;
        }
        check(libc::posix_spawn_file_actions_addchdir_np(&mut actions.0, cwd.as_ptr()))?;
        // The supervisor blocks the signals it waits for; the job starts with none blocked.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        check(libc::posix_spawnattr_setsigmask(&mut attrs.0, &none))?;
        // Rust ignores SIGPIPE and the spawner SIGCHLD; the job gets the defaults.
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        libc::sigaddset(&mut defaults, libc::SIGPIPE);
        libc::sigaddset(&mut defaults, libc::SIGCHLD);
        check(libc::posix_spawnattr_setsigdefault(&mut attrs.0, &defaults))?;
        check(libc::posix_spawnattr_setpgroup(&mut attrs.0, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        check(libc::posix_spawnattr_setflags(&mut attrs.0, flags as libc::c_short))?;
        let mut pid: libc::pid_t = 0;
        check(libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attrs.0,
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        ))?;
        Ok(pid)
    }
}

struct Actions(libc::posix_spawn_file_actions_t);

impl Drop for Actions {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawn_file_actions_init before any early return.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attrs(libc::posix_spawnattr_t);

impl Drop for Attrs {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawnattr_init before any early return.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// The exit status of child `pid` if it ended (reaping it), without waiting, with what it used
/// (it and the descendants it waited for): CPU ms and peak resident bytes. Per child, so a
/// host supervising many jobs tells each one's usage apart.
pub(crate) fn try_wait(pid: i32) -> io::Result<Option<(ExitStatus, (u64, u64))>> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4(2) writes the status and the rusage into
    // the locals.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    match unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) } {
        0 => Ok(None),
        -1 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted { Ok(None) } else { Err(e) }
        }
        _ => Ok(Some((ExitStatus::from_raw(status), super::os::usage_of(&ru)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn programs_are_found_along_the_path_as_execvp_finds_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).expect("a");
        std::fs::create_dir_all(&b).expect("b");
        let write = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        write(&a.join("tool"), 0o644);
        write(&b.join("tool"), 0o755);
        std::fs::create_dir(a.join("dir")).expect("a directory of the same name");
        let path = OsString::from(format!("{}:{}", a.display(), b.display()));
        // The first executable file wins; a non-executable one and a directory are passed over.
        assert_eq!(resolve("tool", Some(&path), Path::new("/")).expect("found"), b.join("tool"));
        let e = resolve("dir", Some(&path), Path::new("/")).expect_err("a directory is no program");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        // Only a file that may not be executed: permission denied, as execvp says.
        let only_a = OsString::from(a.as_os_str());
        let e = resolve("tool", Some(&only_a), Path::new("/")).expect_err("not executable");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        // Relative entries and paths go from the job's working directory.
        assert_eq!(resolve("tool", Some(OsStr::new("b")), dir.path()).expect("found"), dir.path().join("b/tool"));
        assert_eq!(resolve("./b/tool", None, dir.path()).expect("a path"), dir.path().join("./b/tool"));
        assert_eq!(resolve("sh", None, Path::new("/")).expect("the default path").file_name(), Some(OsStr::new("sh")));
    }

    #[test]
    fn a_spawned_job_has_its_files_directory_group_and_no_blocked_signal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out_path = dir.path().join("out");
        let script = "pwd; echo \"$GREETING\"; grep -E '^Sig(Blk|Ign)' /proc/self/status; cut -d' ' -f5 /proc/$$/stat";
        let args: Vec<String> = vec!["-c".into(), script.into()];
        let env = vec![("GREETING".to_string(), "hello".to_string())];
        let launch = |program| Launch {
            program,
            args: &args,
            env: &env,
            cwd: dir.path(),
            stdin: File::open("/dev/null").expect("null"),
            stdout: File::options().create(true).append(true).open(&out_path).expect("out"),
            stderr: File::create(dir.path().join("err")).expect("err"),
        };
        // As in a supervisor: SIGTERM blocked in the spawning thread.
        let _blocked = super::super::os::SignalSet::block(&[libc::SIGTERM]).expect("block");
        let spawned = spawn(&launch("sh"));
        super::super::os::unblock_all_signals().expect("unblock");
        let pid = spawned.expect("spawned");
        let status = loop {
            if let Some((st, _)) = try_wait(pid).expect("wait") {
                break st;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(status.code(), Some(0));
        let out = std::fs::read_to_string(&out_path).expect("read");
        let lines: Vec<&str> = out.lines().collect();
        let cwd = std::fs::canonicalize(dir.path()).expect("canonical");
        assert_eq!(lines.len(), 5, "{out}");
        assert_eq!(lines[0], cwd.to_string_lossy());
        assert_eq!(lines[1], "hello");
        assert_eq!(lines[2], "SigBlk:\t0000000000000000", "{out}");
        let ignored = lines[3].strip_prefix("SigIgn:\t").and_then(|h| u64::from_str_radix(h, 16).ok()).expect("SigIgn");
        let bit = |sig: i32| 1u64 << (sig - 1);
        assert_eq!(
            ignored & (bit(libc::SIGPIPE) | bit(libc::SIGCHLD)),
            0,
            "SIGPIPE and SIGCHLD at their defaults: {out}"
        );
        assert_eq!(lines[4], pid.to_string(), "a process group of its own: {out}");
        let e = spawn(&launch("no-such-program-here")).expect_err("not found");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_script_without_an_interpreter_line_is_run_by_the_shell() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("plain");
        std::fs::write(&script, "echo \"plain script: $1\"\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let out_path = dir.path().join("out");
        let stdout = File::create(&out_path).expect("out");
        let args = vec!["first".to_string()];
        let pid = spawn(&Launch {
            program: "./plain",
            args: &args,
            env: &[],
            cwd: dir.path(),
            stdin: File::open("/dev/null").expect("null"),
            stderr: stdout.try_clone().expect("dup"),
            stdout,
        })
        .expect("spawned");
        while try_wait(pid).expect("wait").is_none() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(std::fs::read_to_string(&out_path).expect("read"), "plain script: first\n");
    }
}
