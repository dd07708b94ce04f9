//! Run-end notices: a supervisor that recorded its run's end says so in one datagram on a
//! socket in the agent's data directory, so the agent notices the end at once instead of at
//! its next look at the run directory, and frees the run's cgroup slot and the node's room for
//! the next job. Notices are hints: a lost one (the agent restarting, its queue full) only
//! means the end is noticed at the next look.

use crate::model::RunId;
use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The socket's file name in the agent's data directory.
pub(super) const SOCKET: &str = "ended.sock";

/// Sends the notice that the run in `run_dir` ended (its directory's name is its run id),
/// without waiting: errors are ignored.
pub(super) fn send(socket: &Path, run_dir: &Path) {
    let Some(name) = run_dir.file_name() else { return };
    if let Ok(s) = UnixDatagram::unbound()
        && s.set_nonblocking(true).is_ok()
    {
        let _ = s.send_to(name.as_encoded_bytes(), socket);
    }
}

/// The agent's side: who waits for which run's end.
#[derive(Default)]
pub(super) struct Notices {
    waiting: Mutex<HashMap<RunId, Arc<Notify>>>,
}

impl Notices {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds the socket at `path` (replacing one left by an earlier agent).
    pub(super) fn bind(path: &Path) -> std::io::Result<UnixDatagram> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let s = UnixDatagram::bind(path)?;
        s.set_nonblocking(true)?;
        Ok(s)
    }

    /// The signal for `run`'s end, fired by its notice (kept until [`Notices::forget`]).
    pub(super) fn watch(&self, run: RunId) -> Arc<Notify> {
        self.lock().entry(run).or_default().clone()
    }

    /// Stops waiting for `run`.
    pub(super) fn forget(&self, run: RunId) {
        self.lock().remove(&run);
    }

    /// Fires the signal of the run a notice names (a notice of a run nobody waits for is
    /// dropped; so is one that names no run).
    pub(super) fn deliver(&self, notice: &[u8]) {
        let Some(run) = std::str::from_utf8(notice).ok().and_then(|s| s.parse::<RunId>().ok()) else { return };
        if let Some(n) = self.lock().get(&run) {
            n.notify_one();
        }
    }

    /// Receives notices on `socket` until the task is aborted.
    pub(super) async fn serve(self: Arc<Self>, socket: UnixDatagram) {
        let socket = match tokio::net::UnixDatagram::from_std(socket) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for run-end notices; ends are noticed by looking");
                return;
            }
        };
        let mut buf = [0u8; 64];
        loop {
            match socket.recv(&mut buf).await {
                Ok(n) => self.deliver(&buf[..n]),
                Err(e) => {
                    tracing::warn!(error = %e, "receiving run-end notices failed; ends are noticed by looking");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_notice_wakes_the_runs_watcher_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(SOCKET);
        let notices = Arc::new(Notices::default());
        let socket = Notices::bind(&path).expect("bind");
        let server = tokio::spawn(notices.clone().serve(socket));
        let (run, other) = (RunId::from_parts(1, 1), RunId::from_parts(1, 2));
        let (mine, theirs) = (notices.watch(run), notices.watch(other));
        send(&path, &dir.path().join("runs").join(run.to_string()));
        tokio::time::timeout(std::time::Duration::from_secs(5), mine.notified()).await.expect("woken");
        // The other run's signal has no permit stored.
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), theirs.notified()).await;
        assert!(woke.is_err());
        // Garbage and unknown runs are dropped; forgotten runs are not kept.
        notices.deliver(b"not a run id");
        notices.deliver(RunId::from_parts(1, 3).to_string().as_bytes());
        notices.forget(run);
        notices.forget(other);
        assert!(notices.lock().is_empty());
        // A socket left behind is replaced; sending to a missing one does nothing.
        server.abort();
        assert!(Notices::bind(&path).is_ok());
        send(&dir.path().join("missing.sock"), &dir.path().join("x"));
    }
}
