//! Retention: on the serving leader, finished jobs older than `job_retention` are deleted from the
//! replicated state, oldest first, a batch per command (`Command::PurgeFinished`), until none is
//! due. Between batches the loop waits as long as the batch took, so that purging a backlog (after
//! an upgrade, or a shorter retention) takes at most about half of the log and the state's time.

use crate::control::{Control, now_ms};
use crate::model::duration::format_duration;
use crate::state::{Command, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most jobs one purge names: 0.1–0.3 s of applying on the 2-core build machine (`convoy bench
/// recovery --finished`, `purge_batch_ms_max`), during which other applies wait, and a log entry
/// of about 450 KB (with 36-character client ids).
pub const PURGE_BATCH: usize = 5_000;

/// Longest wait between two looks for due jobs, so a job goes at most about this long after its
/// retention ran out. Not configurable: it only bounds how late a deletion may be.
const CHECK_EVERY_MAX: Duration = Duration::from_secs(60);

/// Shortest pause between two batches, however quick the last one was.
const PAUSE_MIN: Duration = Duration::from_millis(100);

/// Stale plans (another purge applied since the plan was read) tolerated in one round before
/// the round gives up until the next look.
const STALE_PLANS_MAX: u32 = 3;

/// Runs until `shutdown` turns true.
pub(super) async fn run(app: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let retention = app.config.server.job_retention;
    // A short retention (tests, demos) is looked at more often, or jobs would stay up to a minute
    // longer than asked.
    let every = (retention / 2).clamp(Duration::from_millis(500), CHECK_EVERY_MAX);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        // Only the leader a majority follows proposes: the others' purges would only be refused.
        if !app.cluster.serving() {
            continue;
        }
        purge_due(&app, retention, &shutdown).await;
    }
}

/// Purges batch after batch until no job finished more than `retention` ago, leadership is lost,
/// or the server stops.
async fn purge_due(app: &Control, retention: Duration, shutdown: &watch::Receiver<bool>) {
    // One cutoff per round: jobs that come due meanwhile wait for the next look.
    let before_ms = now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
    let mut stale = 0;
    while app.cluster.serving() && !*shutdown.borrow() {
        let store = app.store.clone();
        let plan = match tokio::task::spawn_blocking(move || store.purge_plan(before_ms, PURGE_BATCH)).await {
            Ok(Ok(plan)) => plan,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the finished jobs due for purging");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "the purge planning task failed");
                return;
            }
        };
        if plan.orphans > 0 {
            tracing::warn!(rows = plan.orphans, "finished-jobs index rows without a job record passed over");
        }
        let Some(oldest) = plan.jobs.first().map(|j| j.finished_ms) else { return };
        let full = plan.jobs.len() >= PURGE_BATCH;
        for j in &plan.jobs {
            tracing::debug!(job_id = %j.job_id, queue = %j.queue, job_set = %j.job_set, finished_ms = j.finished_ms, "purging");
        }
        let started = Instant::now();
        let cmd = Command::PurgeFinished { purges: plan.purges, before_ms, jobs: plan.jobs };
        match app.propose(cmd).await {
            Ok(Response::JobIds(ids)) => {
                tracing::info!(
                    purged = ids.len(),
                    oldest_finished_ms = oldest,
                    before_ms,
                    retention = %format_duration(retention),
                    took_ms = started.elapsed().as_millis() as u64,
                    "finished jobs purged"
                );
            }
            Ok(Response::Rejected(r)) => {
                // Another purge applied between reading and applying (a previous leader's, late):
                // read again.
                stale += 1;
                tracing::debug!(reason = %r.message, "purge plan out of date");
                if stale >= STALE_PLANS_MAX {
                    return;
                }
                continue;
            }
            Ok(other) => {
                tracing::warn!(response = ?other, "unexpected answer to a purge");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "purge not committed");
                return;
            }
        }
        if !full {
            return;
        }
        // Leave the log and the state to other writes for as long as this batch held them.
        let pause = started.elapsed().max(PAUSE_MIN);
        let mut stop = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => {}
        }
    }
}
