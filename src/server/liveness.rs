//! Executor liveness: on the serving leader, an executor that has not polled for `executor_timeout` is
//! declared lost (its nodes leave the pool, its runs are requeued as lost attempts).

use crate::control::{Control, now_ms};
use crate::state::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Runs until `shutdown` turns true.
pub(super) async fn run(app: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let timeout = app.config.server.executor_timeout;
    let tick = (timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
    // The term this server last served in: a new term means polls went elsewhere meanwhile.
    let mut leading: Option<u64> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        // Only a leader a majority follows judges executors: one cut off from the others does not
        // see the polls that now go to the new leader.
        if !app.cluster.serving() {
            leading = None;
            continue;
        }
        let term = app.cluster.term();
        if leading != Some(term) {
            // Polls went to another server (or to this one when it could not act on them): every
            // executor gets a full timeout from now.
            app.liveness.reset();
            leading = Some(term);
        }
        let now = Instant::now();
        let executors: Vec<_> = app.state().executors().map(|e| e.name.clone()).collect();
        for e in executors {
            let seen = app.liveness.last_seen(&e, now);
            if now.duration_since(seen) <= timeout {
                continue;
            }
            tracing::warn!(executor = %e, silent_for_s = now.duration_since(seen).as_secs(), "executor lost");
            let cmd = Command::ExecutorLost {
                executor: e.clone(),
                at_ms: now_ms(),
                max_attempted_runs: app.config.server.max_attempted_runs,
            };
            if let Err(err) = app.propose(cmd).await {
                tracing::warn!(executor = %e, error = %err, "could not record a lost executor");
            }
        }
    }
}
