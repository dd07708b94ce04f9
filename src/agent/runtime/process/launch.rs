//! Starting the job's process from its supervisor.
//!
//! A job that runs unconfined needs nothing done in its process between the clone and the exec
//! but what `posix_spawn` does itself (its outputs, working directory, process group, signal
//! mask). glibc's `posix_spawn` starts the child in the supervisor's memory (`CLONE_VM |
//! CLONE_VFORK`) instead of copying its page tables, which a fork copies and the exec throws
//! away, and looks the program up once instead of trying an exec per `PATH` entry. A confined
//! job's child must also join the cgroup and switch user before the exec ([`super::confine`]):
//! it is started the same way by [`super::spawn_confined`]. Measured in docs/benchmarks.md
//! ("The process runtime on disk").
//!
//! What the job sees is the same either way: the supervisor's environment with the job's
//! variables over it, the program found along the job's `PATH`, no signal blocked, `SIGPIPE`
//! and `SIGCHLD` at their defaults, a process group of its own.

use super::confine::Prepared;
use super::spawn_confined;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
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
    let job = Job::of(&l)?;
    let found = &job.programs[0];
    if !confined.needs_the_child() {
        return match job.posix_spawn(&found.path, &job.argv, &l) {
            Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => job.posix_spawn(c"/bin/sh", &found.sh_argv, &l),
            other => other,
        };
    }
    let (argv, envp) = (pointers(&job.argv), pointers(&job.envp));
    let sh_argvs: Vec<_> = job.programs.iter().map(|p| pointers(&p.sh_argv)).collect();
    let programs: Vec<_> = job
        .programs
        .iter()
        .zip(&sh_argvs)
        .map(|(p, sh_argv)| spawn_confined::Program { path: &p.path, sh_argv })
        .collect();
    let exec = spawn_confined::Exec {
        programs: &programs,
        argv: &argv,
        envp: &envp,
        cwd: &job.cwd,
        stdio: [l.stdin.as_raw_fd(), l.stdout.as_raw_fd(), l.stderr.as_raw_fd()],
    };
    spawn_confined::spawn(&exec, &confined)
}

/// The job as C strings: the programs to try (see [`Job::of`]), its argv, its environment and
/// working directory.
struct Job {
    programs: Vec<ProgramFile>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

/// A file to execute, and the argv that runs it with `/bin/sh` (for a file the kernel has no
/// interpreter for, as `execvp` does).
struct ProgramFile {
    path: CString,
    sh_argv: Vec<CString>,
}

impl Job {
    /// The program found along the job's `PATH` first, then the files of the same name further
    /// along it: a job that switches user may not be allowed to run the first (found as the
    /// supervisor's user), and then tries the next, as `execvp` would as that user.
    fn of(l: &Launch) -> io::Result<Job> {
        let env = environment(l.env);
        // Relative to the supervisor's directory, as the child's chdir would take it.
        let cwd = std::path::absolute(l.cwd)?;
        let search = env.get(OsStr::new("PATH")).map(OsString::as_os_str);
        let found = resolve(l.program, search, &cwd)?;
        let args = || l.args.iter().map(|a| c_string(a.as_bytes().to_vec()));
        let argv = std::iter::once(c_string(l.program.as_bytes().to_vec())).chain(args()).collect::<io::Result<_>>()?;
        let programs = std::iter::once(found.clone())
            .chain(further_along(l.program, search, &cwd, &found))
            .map(|path| {
                let path = c_string(path.into_os_string().into_vec())?;
                let sh_argv = [Ok(c"/bin/sh".to_owned()), Ok(path.clone())]
                    .into_iter()
                    .chain(args())
                    .collect::<io::Result<_>>()?;
                Ok(ProgramFile { path, sh_argv })
            })
            .collect::<io::Result<_>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend(v.as_bytes());
                c_string(kv)
            })
            .collect::<io::Result<_>>()?;
        Ok(Job { programs, argv, envp, cwd: c_string(cwd.into_os_string().into_vec())? })
    }
}

/// The paths `program` has along `path` after `found` (none for a program given as a path).
fn further_along(program: &str, path: Option<&OsStr>, cwd: &Path, found: &Path) -> Vec<PathBuf> {
    if program.contains('/') {
        return Vec::new();
    }
    let all: Vec<PathBuf> = search_path(path).map(|dir| cwd.join(dir).join(program)).collect();
    let after = all.iter().position(|p| p == found).map_or(all.len(), |i| i + 1);
    all[after..].to_vec()
}

/// The directories of a `PATH` value in order (the default when there is none; an empty entry
/// is the working directory).
fn search_path(path: Option<&OsStr>) -> impl Iterator<Item = &Path> {
    path.unwrap_or(OsStr::new(DEFAULT_PATH))
        .as_bytes()
        .split(|b| *b == b':')
        .map(|dir| if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) })
}

/// A C string list for `execve` and `posix_spawn`: the strings' pointers, then a null pointer.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
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
    let mut denied = false;
    for dir in search_path(path) {
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

impl Job {
    /// `posix_spawn` of the executable `path` with `argv`, the job's environment and working
    /// directory, and `l`'s files.
    fn posix_spawn(&self, path: &CStr, argv: &[CString], l: &Launch) -> io::Result<i32> {
        let argv_ptrs = pointers(argv);
        let envp_ptrs = pointers(&self.envp);
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
            check(libc::posix_spawn_file_actions_addchdir_np(&mut actions.0, self.cwd.as_ptr()))?;
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
                argv_ptrs.as_ptr().cast(),
                envp_ptrs.as_ptr().cast(),
            ))?;
            Ok(pid)
        }
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

    /// How a test starts its job: as an unconfined job (`posix_spawn`), or as a confined one
    /// whose child writes into `joined` as it would into `cgroup.procs`, and switches to `user`.
    enum Way<'a> {
        Unconfined,
        Confined { joined: &'a Path, user: Option<super::super::confine::user::UnixUser> },
    }

    fn start_as(l: Launch, way: &Way) -> io::Result<i32> {
        let prepared = match way {
            Way::Unconfined => Prepared::for_test(Vec::new(), None).without_join(),
            Way::Confined { joined, user } => {
                let file = File::create(joined).expect("join file");
                Prepared::for_test(vec![file.into()], user.clone())
            }
        };
        start(l, prepared)
    }

    /// nobody's ids, for a confined child that switches user (as root).
    fn nobody() -> super::super::confine::user::UnixUser {
        super::super::confine::user::UnixUser {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
            home: PathBuf::from("/"),
        }
    }

    fn wait(pid: i32) -> ExitStatus {
        loop {
            if let Some((st, _)) = try_wait(pid).expect("wait") {
                break st;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_started_job_has_its_files_directory_group_and_no_blocked_signal_either_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        let joined = dir.path().join("cgroup.procs");
        // As root, the confined child also becomes another user (nobody's ids).
        // SAFETY: geteuid reads the caller's effective uid.
        let root = unsafe { libc::geteuid() } == 0;
        let confined = Way::Confined { joined: &joined, user: root.then(nobody) };
        for way in [Way::Unconfined, confined] {
            let out_path = dir.path().join("out");
            let _ = std::fs::remove_file(&out_path);
            let script = "pwd; echo \"$GREETING\"; grep -E '^Sig(Blk|Ign)' /proc/self/status; cut -d' ' -f5 /proc/$$/stat; id -u";
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
            let started = start_as(launch("sh"), &way);
            super::super::os::unblock_all_signals().expect("unblock");
            let pid = started.expect("started");
            assert_eq!(wait(pid).code(), Some(0), "{:?}", std::fs::read_to_string(dir.path().join("err")));
            let out = std::fs::read_to_string(&out_path).expect("read");
            let lines: Vec<&str> = out.lines().collect();
            let cwd = std::fs::canonicalize(dir.path()).expect("canonical");
            assert_eq!(lines.len(), 6, "{out}");
            assert_eq!(lines[0], cwd.to_string_lossy());
            assert_eq!(lines[1], "hello");
            assert_eq!(lines[2], "SigBlk:\t0000000000000000", "{out}");
            let ignored =
                lines[3].strip_prefix("SigIgn:\t").and_then(|h| u64::from_str_radix(h, 16).ok()).expect("SigIgn");
            let bit = |sig: i32| 1u64 << (sig - 1);
            assert_eq!(
                ignored & (bit(libc::SIGPIPE) | bit(libc::SIGCHLD)),
                0,
                "SIGPIPE and SIGCHLD at their defaults: {out}"
            );
            assert_eq!(lines[4], pid.to_string(), "a process group of its own: {out}");
            // SAFETY: getuid reads the caller's uid.
            let own = unsafe { libc::getuid() };
            if let Way::Confined { joined, user } = &way {
                assert_eq!(std::fs::read_to_string(joined).expect("joined"), "0", "the child joined before its exec");
                assert_eq!(lines[5], user.as_ref().map_or(own, |u| u.uid).to_string(), "its user: {out}");
            } else {
                assert_eq!(lines[5], own.to_string());
            }
            let e = start_as(launch("no-such-program-here"), &way).expect_err("not found");
            assert_eq!(e.kind(), io::ErrorKind::NotFound);
        }
    }

    #[test]
    fn the_files_further_along_the_path_follow_the_one_found() {
        let cwd = Path::new("/work");
        let path = OsStr::new("/a:rel::/c");
        let found = Path::new("/a/tool");
        assert_eq!(
            further_along("tool", Some(path), cwd, found),
            vec![PathBuf::from("/work/rel/tool"), PathBuf::from("/work/./tool"), PathBuf::from("/c/tool")]
        );
        assert_eq!(further_along("tool", Some(path), cwd, Path::new("/c/tool")), Vec::<PathBuf>::new());
        assert!(further_along("./tool", Some(path), cwd, Path::new("/work/./tool")).is_empty(), "a path is no search");
    }

    #[test]
    fn a_job_run_as_another_user_runs_the_first_program_along_its_path_that_user_may_run() {
        // SAFETY: geteuid reads the caller's effective uid.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: switching user needs root");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path(), open.clone()).expect("chmod");
        for (sub, mode) in [("a", 0o700), ("b", 0o755)] {
            let d = dir.path().join(sub);
            std::fs::create_dir(&d).expect("mkdir");
            std::fs::set_permissions(&d, open.clone()).expect("chmod");
            std::fs::write(d.join("tool"), format!("#!/bin/sh\necho {sub}\n")).expect("tool");
            std::fs::set_permissions(d.join("tool"), std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let env = vec![("PATH".to_string(), "a:b:/bin:/usr/bin".to_string())];
        let out_path = dir.path().join("out");
        let joined = dir.path().join("cgroup.procs");
        for (way, want) in [(Way::Unconfined, "a\n"), (Way::Confined { joined: &joined, user: Some(nobody()) }, "b\n")]
        {
            let pid = start_as(
                Launch {
                    program: "tool",
                    args: &[],
                    env: &env,
                    cwd: dir.path(),
                    stdin: File::open("/dev/null").expect("null"),
                    stdout: File::create(&out_path).expect("out"),
                    stderr: File::create(dir.path().join("err")).expect("err"),
                },
                &way,
            )
            .expect("started");
            assert_eq!(wait(pid).code(), Some(0), "{:?}", std::fs::read_to_string(dir.path().join("err")));
            assert_eq!(std::fs::read_to_string(&out_path).expect("out"), want, "as execvp finds it for the job's user");
        }
    }

    #[test]
    fn a_confined_child_that_cannot_join_starts_nothing_and_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A read-only descriptor: the child's write fails with EBADF before the exec.
        let read_only = File::open("/dev/null").expect("null");
        let marker = dir.path().join("ran");
        let args = vec!["-c".to_string(), format!("touch {}", marker.display())];
        let e = start(
            Launch {
                program: "sh",
                args: &args,
                env: &[],
                cwd: dir.path(),
                stdin: File::open("/dev/null").expect("null"),
                stdout: File::create(dir.path().join("out")).expect("out"),
                stderr: File::create(dir.path().join("err")).expect("err"),
            },
            Prepared::for_test(vec![read_only.into()], None),
        )
        .expect_err("the join fails");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
        assert!(!marker.exists(), "the job never ran");
    }

    #[test]
    fn a_script_without_an_interpreter_line_is_run_by_the_shell_either_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("plain");
        std::fs::write(&script, "echo \"plain script: $1\"\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let joined = dir.path().join("cgroup.procs");
        for way in [Way::Unconfined, Way::Confined { joined: &joined, user: None }] {
            let out_path = dir.path().join("out");
            let stdout = File::create(&out_path).expect("out");
            let args = vec!["first".to_string()];
            let pid = start_as(
                Launch {
                    program: "./plain",
                    args: &args,
                    env: &[],
                    cwd: dir.path(),
                    stdin: File::open("/dev/null").expect("null"),
                    stderr: stdout.try_clone().expect("dup"),
                    stdout,
                },
                &way,
            )
            .expect("started");
            assert_eq!(wait(pid).code(), Some(0));
            assert_eq!(std::fs::read_to_string(&out_path).expect("read"), "plain script: first\n");
        }
    }
}
