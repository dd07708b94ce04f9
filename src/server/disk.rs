//! Watches the data directory's free space: logs when it runs low and when it recovers, and
//! makes a leader of several servers that runs low hand its leadership to another, since the
//! others can still store the writes it must refuse (see `control::disk`).

use crate::control::Control;
use crate::control::disk::DiskState;
use crate::raft::RaftNode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the free space is read.
const EVERY: Duration = Duration::from_millis(250);
/// A leader that is still leading this many election timeouts after it began to hand over gives
/// up (the others may be low on disk too) and leads on, taking what its disk state allows.
const HAND_OVER_ELECTIONS: u32 = 3;

/// Runs until `shutdown` turns true.
pub(super) async fn run(app: Arc<Control>, raft: RaftNode, mut shutdown: watch::Receiver<bool>) {
    let mut last = DiskState::Ample;
    let mut handing_over = false;
    // When this server began to hand over, and whether it gave up for this low spell.
    let mut since: Option<tokio::time::Instant> = None;
    let mut gave_up = false;
    let patience = app.config.cluster.election_timeout_max() * HAND_OVER_ELECTIONS;
    loop {
        let free = app.disk.refresh();
        let state = app.disk.state_at(free);
        if state != last {
            let (dir, reserve) = (app.disk.dir().display().to_string(), app.disk.reserve());
            match state {
                DiskState::Ample => {
                    tracing::info!(dir, free, reserve, "the data directory has room again: writes resume")
                }
                DiskState::Low => {
                    tracing::warn!(
                        dir,
                        free,
                        reserve,
                        "the data directory is below server.disk_reserve: submissions and queue changes are refused"
                    )
                }
                DiskState::Exhausted => {
                    tracing::error!(dir, free, reserve, "the data directory is nearly full: every write is refused")
                }
            }
            last = state;
        }
        if state == DiskState::Ample {
            gave_up = false;
        }
        if handing_over && raft.is_leader() && since.is_some_and(|t| t.elapsed() > patience) {
            tracing::warn!("no other server took the leadership (their disks may be low too): leading on");
            gave_up = true;
        }
        // Only a server with others to lead in its place steps aside.
        let hand_over = state != DiskState::Ample && raft.voters() > 1 && !gave_up;
        if hand_over != handing_over {
            if hand_over {
                tracing::warn!(
                    "handing the leadership over while the disk is low: no heartbeats, no writes, no elections"
                );
            }
            app.disk.set_hand_over(hand_over);
            raft.set_may_lead(!hand_over);
            handing_over = hand_over;
            since = hand_over.then(tokio::time::Instant::now);
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
