//! `convoy up` as a child process, for the tests that run what a new user runs.

use super::Api;
use super::procs::{reap_runs, signal_and_wait, spawn_listening};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `convoy up` as a child process in `dir` (its data in `dir/data`); its API helpers through
/// `Deref`.
pub(crate) struct Up {
    pub child: std::process::Child,
    pub api: Api,
    pub log: PathBuf,
}

impl std::ops::Deref for Up {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Up {
    pub(crate) fn start(dir: &Path, port: u16, n: u32) -> Up {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoy"));
        cmd.args(["up", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"]).arg(dir.join("data")).current_dir(dir);
        let log = dir.join(format!("up.{n}.log"));
        let (child, url) = spawn_listening(cmd, &log);
        Up { child, api: Api::new(url), log }
    }

    /// Ctrl-C; the exit code.
    pub(crate) fn interrupt(&mut self) -> Option<i32> {
        signal_and_wait(&mut self.child, libc::SIGINT, 20)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("E2E_LOGS").is_some() {
            eprintln!("===== {} =====\n{}", self.log.display(), std::fs::read_to_string(&self.log).unwrap_or_default());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills the jobs `convoy up`'s agent left, when the test ends however it ends.
pub(crate) struct ReapOnDrop(pub PathBuf);

impl Drop for ReapOnDrop {
    fn drop(&mut self) {
        reap_runs(&self.0);
    }
}

impl Up {
    /// Sends SIGINT without waiting.
    pub(crate) fn send_interrupt(&self) {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
    }

    /// What it wrote to standard error so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
