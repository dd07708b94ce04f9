//! Starting an election as soon as one can succeed.
//!
//! openraft 0.9 lets a follower that knows a leader start an election only after the leader's
//! lease (`election_timeout_max`) *plus* a random election timeout have passed without word from
//! it: with the default timings 1.5–2.2 s after a leader dies, although the other followers would
//! grant their votes as soon as the lease is over. So each follower watches when it last heard
//! from the leader, and once the lease is over it asks Raft for an election itself. To keep two
//! followers from splitting the vote, they go in the order of their node ids, a heartbeat apart
//! (the dead leader left out); openraft's own timer remains the fallback.

use super::types::{NodeId, Raft};
use openraft::ServerState;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When this member last received an append (entries or heartbeat) from a leader.
#[derive(Clone, Default)]
pub struct LeaderContact(Arc<Mutex<Option<Instant>>>);

impl LeaderContact {
    /// Records an append received now.
    pub fn heard(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn last(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How often the watch looks.
const LOOK_EVERY: Duration = Duration::from_millis(20);
/// Margin past the lease, for clocks that tick a little apart.
const MARGIN: Duration = Duration::from_millis(30);

/// How long after the last word from leader `leader` member `me` starts an election: the lease,
/// then one heartbeat per voter with a smaller id than `me` (the leader left out).
pub(super) fn delay(me: NodeId, leader: NodeId, voters: &[NodeId], lease: Duration, heartbeat: Duration) -> Duration {
    let rank = voters.iter().filter(|v| **v != leader && **v < me).count() as u32;
    lease + MARGIN + heartbeat * rank
}

/// Watches until Raft stops.
pub(super) async fn watch(raft: Raft, me: NodeId, contact: LeaderContact, lease: Duration, heartbeat: Duration) {
    let mut metrics = raft.metrics();
    // The contact an election was already asked for, so it is asked once per silence.
    let mut asked_for: Option<Instant> = None;
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        if metrics.has_changed().is_err() {
            return;
        }
        let (state, leader, voters) = {
            let m = metrics.borrow_and_update();
            let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
            (m.state, m.current_leader, voters)
        };
        let (Some(leader), Some(last)) = (leader, contact.last()) else { continue };
        if state != ServerState::Follower || leader == me || !voters.contains(&me) || asked_for == Some(last) {
            continue;
        }
        if last.elapsed() < delay(me, leader, &voters, lease, heartbeat) {
            continue;
        }
        asked_for = Some(last);
        tracing::info!(
            leader,
            silent_ms = last.elapsed().as_millis() as u64,
            "no word from the leader since its lease ended; starting an election"
        );
        if let Err(e) = raft.trigger().elect().await {
            tracing::warn!(error = %e, "could not start an election");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_go_in_id_order_without_the_leader() {
        let (lease, hb) = (Duration::from_millis(800), Duration::from_millis(100));
        let voters = [1, 2, 3];
        // Leader 1 dies: 2 goes first, 3 a heartbeat later.
        assert_eq!(delay(2, 1, &voters, lease, hb), lease + MARGIN);
        assert_eq!(delay(3, 1, &voters, lease, hb), lease + MARGIN + hb);
        // Leader 2 dies: 1 first, then 3.
        assert_eq!(delay(1, 2, &voters, lease, hb), lease + MARGIN);
        assert_eq!(delay(3, 2, &voters, lease, hb), lease + MARGIN + hb);
    }
}
