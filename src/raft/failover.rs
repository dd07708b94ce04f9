//! Elections: when a member starts one, and whether the others would vote for it.
//!
//! openraft 0.9's own election timer is off (`enable_elect = false`) because of two faults:
//! - a follower that knows a leader waits the leader's lease (`election_timeout_max`) *plus* a
//!   random election timeout after the leader's last word, although the other followers would
//!   grant their votes as soon as the lease is over;
//! - it starts an election without asking first. A member that only lost touch with the leader —
//!   cut off by a partition, or busy installing a snapshot while the leader's replication stream
//!   waits for it — raises the term, and the healthy leader steps down as soon as it sees the
//!   higher term in an append answer. Under load a lagging member deposed the leader again and
//!   again this way.
//!
//! So elections are driven here. A follower starts one once the leader's lease is over, the
//! survivors in node-id order a heartbeat apart (the dead leader left out); with no leader known,
//! an election timeout after it started or after its last attempt, with jitter. Before it does, it
//! asks the other voters for a pre-vote (the Raft thesis, §9.6): a voter says yes only if it has
//! not heard from a leader within the lease itself, does not lead with a recent majority, and the
//! candidate's log is at least as up to date as its own. Only with a majority of yeses does it ask
//! openraft for the election, which then raises the term and asks for the real votes.

use super::network::NetworkFactory;
use super::pre_vote::{Elections, PreVoteRequest, Timing};
use super::types::{NodeId, Raft};
use openraft::ServerState;
use rand_core::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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

/// How long a member that knows no leader waits (after it started, or after its last attempt)
/// before it tries: an election timeout, then one heartbeat per voter with a smaller id.
pub(super) fn delay_without_leader(
    me: NodeId,
    voters: &[NodeId],
    election_min: Duration,
    heartbeat: Duration,
) -> Duration {
    let rank = voters.iter().filter(|v| **v < me).count() as u32;
    election_min + heartbeat * rank
}

/// When member `me` (in `state`, knowing `leader`) may start an election: a lease and its turn
/// after the last word from its leader; with no leader known (a start, or an election under
/// way), an election timeout and its turn after the latest of its last word from a leader, its
/// start and the last change of term, so that a candidate gets time to win before others stand.
#[allow(clippy::too_many_arguments)]
pub(super) fn election_due(
    me: NodeId,
    state: ServerState,
    leader: Option<NodeId>,
    contact: Option<Instant>,
    started: Instant,
    term_changed_at: Option<Instant>,
    voters: &[NodeId],
    timing: Timing,
) -> Instant {
    match (leader, contact) {
        (Some(l), Some(last)) if l != me && state == ServerState::Follower => {
            last + delay(me, l, voters, timing.lease, timing.heartbeat)
        }
        // Attempts after the first are paced by the watch's `not_before`.
        (_, last) => {
            let quiet_since = [last, Some(started), term_changed_at].into_iter().flatten().max().unwrap_or(started);
            quiet_since + delay_without_leader(me, voters, timing.election_min, timing.heartbeat)
        }
    }
}

/// Drives this member's elections until Raft stops.
pub(super) async fn watch(raft: Raft, me: NodeId, elections: Elections, network: NetworkFactory) {
    let timing = elections.timing;
    let mut metrics = raft.metrics();
    let started = Instant::now();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        ^ me.rotate_left(32);
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    // After an attempt, the next waits until then (a random election timeout later).
    let mut not_before: Option<Instant> = None;
    // Whether the last pre-vote lost, so a long silence logs once rather than every attempt.
    let mut lost_before = false;
    // The term last seen and when it changed: a member that asked for votes raised it, and gets
    // an election timeout to win before this one stands too (else candidates depose each other).
    let mut term_seen = 0;
    let mut term_changed_at: Option<Instant> = None;
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        if metrics.has_changed().is_err() {
            return;
        }
        let (state, leader, voters, term) = {
            let m = metrics.borrow_and_update();
            let voters: BTreeMap<NodeId, String> = m
                .membership_config
                .membership()
                .voter_ids()
                .filter_map(|id| m.membership_config.membership().get_node(&id).map(|n| (id, n.addr.clone())))
                .collect();
            (m.state, m.current_leader, voters, m.current_term)
        };
        if term != term_seen {
            term_changed_at = (term_seen != 0).then(Instant::now);
            term_seen = term;
        }
        if state == ServerState::Leader || !voters.contains_key(&me) || !elections.may_stand() {
            not_before = None;
            lost_before = false;
            continue;
        }
        let ids: Vec<NodeId> = voters.keys().copied().collect();
        let now = Instant::now();
        if not_before.is_some_and(|t| now < t) {
            continue;
        }
        let due = election_due(me, state, leader, elections.contact.last(), started, term_changed_at, &ids, timing);
        if now < due {
            continue;
        }
        let jitter = timing.election_max.saturating_sub(timing.election_min).as_millis() as u64;
        not_before = Some(now + timing.election_min + Duration::from_millis(rng.next_u64() % (jitter + 1)));
        let contact = elections.contact.last();
        let silent_ms = contact.map(|l| l.elapsed().as_millis() as u64);
        if ids.len() > 1 {
            let (won, refusals) = pre_vote(&elections, &network, me, &voters).await;
            if !won {
                if !lost_before {
                    tracing::info!(?leader, ?silent_ms, ?refusals, "pre-vote lost; not starting an election");
                }
                lost_before = true;
                continue;
            }
            // Another member may have won an election while the pre-vote was out: starting one
            // now would depose it.
            let term_now = metrics.borrow().current_term;
            if term_now != term || elections.contact.last() != contact {
                tracing::debug!(term, term_now, "a leader appeared during the pre-vote; not starting an election");
                continue;
            }
        }
        lost_before = false;
        tracing::info!(?leader, ?silent_ms, "no word from a leader and a majority would vote; starting an election");
        if let Err(e) = raft.trigger().elect().await {
            tracing::warn!(error = %e, "could not start an election");
            return;
        }
    }
}

/// Asks the other voters for a pre-vote, until a majority (counting this member's own yes) said
/// yes or can no longer: whether it did, and the refusals by voter.
async fn pre_vote(
    elections: &Elections,
    network: &NetworkFactory,
    me: NodeId,
    voters: &BTreeMap<NodeId, String>,
) -> (bool, BTreeMap<NodeId, String>) {
    use futures::StreamExt;
    let mut refusals = BTreeMap::new();
    let last_log_id = match elections.log.last_log_id() {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the log's last entry; not standing for election");
            return (false, refusals);
        }
    };
    let req = PreVoteRequest { candidate: me, last_log_id };
    let mut asks: futures::stream::FuturesUnordered<_> = voters
        .iter()
        .filter(|(id, _)| **id != me)
        .map(|(id, addr)| {
            let req = req.clone();
            async move { (*id, network.pre_vote(*id, addr, &req, elections.timing.election_min).await) }
        })
        .collect();
    let majority = voters.len() / 2 + 1;
    let mut granted = 1;
    while granted < majority && granted + asks.len() >= majority {
        let Some((id, answer)) = asks.next().await else { break };
        match answer {
            Ok(a) if a.granted => granted += 1,
            Ok(a) => {
                refusals.insert(id, a.reason.unwrap_or_default());
            }
            Err(e) => {
                refusals.insert(id, e.to_string());
            }
        }
    }
    (granted >= majority, refusals)
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
        // No leader known: everyone in id order after an election timeout.
        let min = Duration::from_millis(400);
        assert_eq!(delay_without_leader(1, &voters, min, hb), min);
        assert_eq!(delay_without_leader(3, &voters, min, hb), min + hb * 2);
    }

    #[test]
    fn a_member_that_sees_the_term_change_gives_the_candidate_an_election_timeout() {
        let timing = Timing {
            lease: Duration::from_millis(800),
            election_min: Duration::from_millis(400),
            election_max: Duration::from_millis(800),
            heartbeat: Duration::from_millis(100),
        };
        let voters = [1, 2, 3, 4, 5];
        let t0 = Instant::now();
        let contact = Some(t0);
        // Following leader 1: its lease, then member 3's turn (second after 2).
        let due = election_due(3, ServerState::Follower, Some(1), contact, t0, None, &voters, timing);
        assert_eq!(due, t0 + timing.lease + MARGIN + timing.heartbeat);
        // Member 2 asked for votes a second later: no leader known, and 3 waits an election
        // timeout and its turn from then, not from its last word from the old leader.
        let asked = t0 + Duration::from_secs(1);
        let due = election_due(3, ServerState::Follower, None, contact, t0, Some(asked), &voters, timing);
        assert_eq!(due, asked + timing.election_min + timing.heartbeat * 2);
        // Without a change of term it would have stood at once.
        let due = election_due(3, ServerState::Follower, None, contact, t0, None, &voters, timing);
        assert!(due < asked, "{due:?}");
    }
}
