//! What this member knows of the leadership, published as it changes: who leads in which term,
//! whether this member may still commit, and whether the leader it follows has gone silent.
//!
//! Requests that wait on the leader — writes relayed from a follower, writes being committed,
//! consistent reads — watch it so that they stop waiting on a leader that is gone (killed,
//! paused, cut off) as soon as the cluster has moved on, instead of until a timeout.

use super::types::{NodeId, Raft};
use openraft::ServerState;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// This member's view of the leadership at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Leadership {
    /// The leader this member knows of.
    pub leader: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// This member leads, and a majority acknowledged it within the leader lease (or it is the
    /// only voter): a write it takes may still be committed.
    pub committing: bool,
    /// This member follows `leader` but has heard nothing from it for longer than the silence
    /// limit: whatever was sent to the leader is stuck there.
    pub leader_silent: bool,
    /// Raft has stopped on this member (shut down, or a fatal storage error).
    pub stopped: bool,
}

impl Leadership {
    /// True if `self` names another leader or term than `seen`, or the leader has gone silent
    /// since, or Raft stopped: a request sent to the leader of `seen` may never be answered.
    pub(crate) fn moved_on_from(&self, seen: &Leadership) -> bool {
        self.leader != seen.leader
            || self.term != seen.term
            || (self.leader_silent && !seen.leader_silent)
            || (self.stopped && !seen.stopped)
    }
}

/// Timings the view is judged by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// A leader whose last majority acknowledgement is older than this may no longer commit:
    /// the other members may have elected another by then (`election_timeout_max`).
    pub lease: Duration,
    /// A leader silent for longer than this is taken as gone from this member's side.
    pub silence: Duration,
}

/// How often the view is recomputed when nothing else changes (silence and acknowledgement
/// ages grow without a metrics update).
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Computes the view of member `me` from Raft's metrics, the instant a majority last
/// acknowledged it as leader, and the instant it last heard from a leader.
pub(super) fn view(
    m: &openraft::RaftMetrics<NodeId, super::types::Node>,
    me: NodeId,
    quorum_ack: Option<Instant>,
    leader_contact: Option<Instant>,
    limits: Limits,
) -> Leadership {
    let stopped = m.running_state.is_err() || m.state == ServerState::Shutdown;
    let leads = m.state == ServerState::Leader && m.current_leader == Some(me);
    let voters = m.membership_config.membership().voter_ids().count();
    let committing = !stopped && leads && (voters <= 1 || quorum_ack.is_some_and(|at| at.elapsed() <= limits.lease));
    let leader_silent = !stopped
        && m.current_leader.is_some_and(|l| l != me)
        && leader_contact.is_some_and(|at| at.elapsed() > limits.silence);
    Leadership { leader: m.current_leader, term: m.current_term, committing, leader_silent, stopped }
}

/// Keeps `tx` at the current view until Raft's metrics end.
pub(super) async fn publish(
    raft: Raft,
    me: NodeId,
    quorum_ack: super::pre_vote::QuorumAck,
    contact: super::pre_vote::Elections,
    limits: Limits,
    tx: watch::Sender<Leadership>,
) {
    let mut metrics = raft.metrics();
    loop {
        let now = {
            let m = metrics.borrow_and_update();
            let ack = *quorum_ack.lock().unwrap_or_else(|p| p.into_inner());
            view(&m, me, ack, contact.last_contact(), limits)
        };
        tx.send_if_modified(|v| {
            let changed = *v != now;
            *v = now;
            changed
        });
        if now.stopped {
            return;
        }
        tokio::select! {
            changed = metrics.changed() => {
                if changed.is_err() {
                    tx.send_modify(|v| v.stopped = true);
                    return;
                }
            }
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Waits until the view in `rx` has moved on from `seen` (see [`Leadership::moved_on_from`]);
/// true if it did within `within`.
pub(crate) async fn moved_on(rx: &mut watch::Receiver<Leadership>, seen: &Leadership, within: Duration) -> bool {
    matches!(tokio::time::timeout(within, rx.wait_for(|now| now.moved_on_from(seen))).await, Ok(Ok(_)))
}

/// Waits until the leader of `seen`, silent then, is heard from again (or the leadership moved
/// on); true if that happened within `within`. A server that was itself stopped (SIGSTOP, a
/// frozen VM) finds its leader silent when it wakes, until the next heartbeat arrives.
pub(crate) async fn heard_again(rx: &mut watch::Receiver<Leadership>, seen: &Leadership, within: Duration) -> bool {
    let again = |now: &Leadership| !now.leader_silent || now.leader != seen.leader || now.term != seen.term;
    matches!(tokio::time::timeout(within, rx.wait_for(again)).await, Ok(Ok(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_leader_another_term_silence_or_a_stop_is_moving_on() {
        let seen = Leadership { leader: Some(1), term: 3, committing: false, leader_silent: false, stopped: false };
        assert!(!seen.moved_on_from(&seen));
        // Acknowledgements coming and going on a follower's view are not a change of leader.
        assert!(!Leadership { committing: true, ..seen }.moved_on_from(&seen));
        assert!(Leadership { leader: Some(2), ..seen }.moved_on_from(&seen));
        assert!(Leadership { leader: None, term: 4, ..seen }.moved_on_from(&seen));
        assert!(Leadership { term: 4, ..seen }.moved_on_from(&seen));
        assert!(Leadership { leader_silent: true, ..seen }.moved_on_from(&seen));
        assert!(Leadership { stopped: true, ..seen }.moved_on_from(&seen));
        // Silence already seen is not news.
        let silent = Leadership { leader_silent: true, ..seen };
        assert!(!silent.moved_on_from(&silent));
    }

    #[tokio::test]
    async fn waiting_for_a_change_ends_with_it_or_with_the_time_given() {
        let seen = Leadership { leader: Some(1), term: 3, ..Leadership::default() };
        let (tx, mut rx) = watch::channel(seen);
        assert!(!moved_on(&mut rx, &seen, Duration::from_millis(30)).await);
        let t = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send_replace(Leadership { leader: Some(2), term: 4, ..seen });
            tx
        });
        assert!(moved_on(&mut rx, &seen, Duration::from_secs(5)).await);
        drop(t.await);
    }
}
