//! More real processes for end-to-end tests: `convoy agent` and `convoy up` as child processes,
//! free loopback ports, and clean-up of the jobs that `convoy agent-supervise` leaves running.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port for a server a test starts a moment later, claimed for this test process.
///
/// Ports come from below the kernel's ephemeral range: a port handed out by binding port 0 is
/// in that range, and between letting it go and the server binding it, an outgoing connection
/// of any other test may take it as its local port ("Address already in use"). Below that
/// range only listeners compete, and test processes claim a port with a lock on a file first.
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    let high = ephemeral_low().clamp(LOW + 1_000, 32_768);
    let span = high - LOW;
    let dir = std::env::temp_dir().join("convoy-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761).wrapping_add(nanos);
    for _ in 0..span {
        let port = (LOW + seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(7_919)) % span) as u16;
        if !claim(&dir, port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below {high}");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

/// Claims `port` for this process: an exclusive lock on its lock file, held until the process
/// exits (the kernel lets go of it then, so a killed test run leaves no claim behind).
fn claim(dir: &Path, port: u16) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(port.to_string()))
    else {
        return false;
    };
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return false;
    }
    std::mem::forget(file);
    true
}

/// [`super::config`], listening on `127.0.0.1:<port>` instead of port 0.
pub(crate) fn config_on_port(dir: &Path, port: u16, server_extra: &str) -> String {
    super::config(dir, server_extra).replacen("listen = \"127.0.0.1:0\"", &format!("listen = \"127.0.0.1:{port}\""), 1)
}

/// Spawns `cmd` with stderr to `log` and waits for the "convoy server listening on URL" line on
/// its stdout; stdout keeps being drained afterwards.
pub(crate) fn spawn_listening(mut cmd: Command, log: &Path) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(log).expect("log file")))
        .spawn()
        .expect("convoy starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(u) = line.strip_prefix("convoy server listening on ") {
                    break u.trim().to_string();
                }
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("convoy exited before listening:\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, url)
}

/// Sends `sig` to the child and waits up to `secs` for it to exit; its exit code (None: killed
/// by a signal, or did not stop in time and was killed).
pub(crate) fn signal_and_wait(child: &mut Child, sig: i32, secs: u64) -> Option<i32> {
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `convoy agent --runtime process` child process. Dropping it kills the agent (not its jobs:
/// they run under supervisors that outlive it; see [`reap_runs`]).
pub(crate) struct Agent {
    pub child: Child,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
}

impl Agent {
    /// Starts `convoy agent --runtime process --server URL --executor NAME --data-dir DIR
    /// --config FILE`; `config_toml` is the agent file (tuning such as `max_backoff`). Its stderr
    /// goes to `log_path` (appended, so restarts keep the earlier agents' logs).
    pub(crate) fn start(
        server_url: &str,
        executor: &str,
        data_dir: &Path,
        config_toml: &str,
        log_path: &Path,
    ) -> Agent {
        std::fs::create_dir_all(data_dir).expect("agent data dir");
        let cfg = data_dir.with_extension("toml");
        std::fs::write(&cfg, config_toml).expect("write agent config");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log_path).expect("agent log");
        let child = Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["agent", "--runtime", "process", "--server", server_url, "--executor", executor, "--data-dir"])
            .arg(data_dir)
            .arg("--config")
            .arg(&cfg)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("convoy agent starts");
        Agent { child, data_dir: data_dir.to_path_buf(), log_path: log_path.to_path_buf() }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The directory of a run (`<data_dir>/runs/<run_id>`).
    pub(crate) fn run_dir(&self, run_id: &str) -> PathBuf {
        self.data_dir.join("runs").join(run_id)
    }

    /// True while the process has not exited.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// kill -9, and reap it.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for exit; the exit code.
    pub(crate) fn terminate(&mut self) -> Option<i32> {
        signal_and_wait(&mut self.child, libc::SIGTERM, 20)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGKILLs every job process group and supervisor recorded under `<agent_data_dir>/runs`, and
/// removes the agent's cgroup slots, so no test leaves jobs or cgroups behind.
pub(crate) fn reap_runs(agent_data_dir: &Path) {
    kill_runs(agent_data_dir);
    use convoy::agent::runtime::process::confine::{LimitsConfig, cgroup, slots};
    if let Ok(id) = std::fs::read_to_string(agent_data_dir.join(slots::SLOT_ID_FILE)) {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let limits = LimitsConfig::default();
        cgroup::remove_agent_slots(&limits.cgroup_root, &own, &limits.cgroup_name, id.trim());
    }
}

fn kill_runs(agent_data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(agent_data_dir.join("runs")) else { return };
    for entry in entries.flatten() {
        for (file, group) in [("pid", true), ("supervisor", false)] {
            let Ok(text) = std::fs::read_to_string(entry.path().join(file)) else { continue };
            // "<pid> <start time>": only signal the process if it is still the same one.
            let mut parts = text.split_whitespace();
            let (Some(Ok(pid)), start) = (parts.next().map(str::parse::<i32>), parts.next()) else { continue };
            if pid <= 1 || !same_process(pid, start) {
                continue;
            }
            // SAFETY: signalling a process (group) this test's agent started.
            unsafe {
                libc::kill(if group { -pid } else { pid }, libc::SIGKILL);
            }
        }
    }
}

/// True if `pid` is alive and (when the stamp has one) started at `start` (field 22 of
/// `/proc/<pid>/stat`, as `convoy`'s stamps record it).
fn same_process(pid: i32, start: Option<&str>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let Some(start) = start.filter(|s| *s != "0") else { return true };
    // Fields after the command (which is in parentheses and may hold spaces).
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    after.split_whitespace().nth(19) == Some(start)
}

/// Processes of group `pgid` that are alive (not zombies: those may wait for a reaper that never
/// comes in a container).
pub(crate) fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // After the command in parentheses: state, ppid, pgrp, ...
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && fields.first() != Some(&"Z") {
            live.push(pid);
        }
    }
    live
}
