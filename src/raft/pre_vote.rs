//! The voter's side of elections: whether this member would vote for a candidate (a pre-vote,
//! the Raft thesis §9.6), from when it last heard from a leader, when a majority last
//! acknowledged it as leader, and how up to date the candidate's log is. The candidate's side,
//! when to stand and asking the others, is [`super::failover`].

use super::log_store::LogStore;
use super::types::{LogId, NodeId};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When this member last received an append or snapshot chunk from a leader it accepted.
#[derive(Clone, Default)]
pub(super) struct LeaderContact(Arc<Mutex<Option<Instant>>>);

impl LeaderContact {
    /// Records an append received now.
    pub(super) fn heard(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    pub(super) fn last(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// When a majority last acknowledged this member as leader (kept by the metrics watch).
pub(super) type QuorumAck = Arc<Mutex<Option<Instant>>>;

/// Body of `POST /raft/pre-vote`: would the receiver vote for `candidate`?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PreVoteRequest {
    /// The member that wants to start an election.
    pub candidate: NodeId,
    /// The id of its last log entry.
    pub last_log_id: Option<LogId>,
}

/// Answer to a [`PreVoteRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PreVoteAnswer {
    /// True if the receiver would grant its vote now.
    pub granted: bool,
    /// Why not, for the candidate's log.
    pub reason: Option<String>,
}

/// Why a voter would not vote for a candidate now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refusal {
    /// The receiver leads, and a majority acknowledged it recently.
    #[error("it leads, acknowledged by a majority {0} ms ago")]
    Leading(u64),
    /// The receiver heard from a leader within the lease.
    #[error("it heard from the leader {0} ms ago")]
    LeaderAlive(u64),
    /// The candidate's log lacks entries the receiver holds.
    #[error("the candidate's last log entry {theirs:?} is behind its own {mine:?}")]
    LogBehind {
        /// The candidate's last log id.
        theirs: Option<LogId>,
        /// The receiver's.
        mine: Option<LogId>,
    },
    /// The receiver cannot read its own log.
    #[error("it cannot read its log: {0}")]
    Storage(String),
}

/// What a voter knows when it judges a pre-vote.
#[derive(Debug, Clone)]
pub(super) struct VoterView {
    /// Since when a majority acknowledged this voter as leader, if it leads.
    pub quorum_ack_age: Option<Duration>,
    /// Since the last append or snapshot chunk from a leader.
    pub leader_contact_age: Option<Duration>,
    /// The voter's last log id.
    pub last_log_id: Option<LogId>,
}

/// Whether a voter in `view` would vote for the candidate of `req`, given the leader `lease`.
pub(super) fn judge(view: &VoterView, req: &PreVoteRequest, lease: Duration) -> Result<(), Refusal> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if let Some(age) = view.quorum_ack_age.filter(|a| *a <= lease) {
        return Err(Refusal::Leading(ms(age)));
    }
    if let Some(age) = view.leader_contact_age.filter(|a| *a <= lease) {
        return Err(Refusal::LeaderAlive(ms(age)));
    }
    // `LogId` orders by leader (term first) and then index, as Raft compares logs.
    if req.last_log_id < view.last_log_id {
        return Err(Refusal::LogBehind { theirs: req.last_log_id, mine: view.last_log_id });
    }
    Ok(())
}

/// This member's side of elections: what it heard from leaders and how it answers pre-votes.
#[derive(Clone)]
pub(crate) struct Elections {
    pub(super) contact: LeaderContact,
    /// False while this member must not stand for election (its disk is nearly full).
    may_stand: Arc<std::sync::atomic::AtomicBool>,
    quorum_ack: QuorumAck,
    pub(super) log: LogStore,
    pub(super) timing: Timing,
}

/// The timings elections follow.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// How long a leader's word holds off elections: `election_timeout_max`, openraft's lease.
    pub lease: Duration,
    /// The shortest election timeout: the wait with no leader known.
    pub election_min: Duration,
    /// The longest election timeout.
    pub election_max: Duration,
    /// The heartbeat interval: the gap between survivors' turns.
    pub heartbeat: Duration,
}

impl Elections {
    pub(super) fn new(log: LogStore, quorum_ack: QuorumAck, timing: Timing) -> Self {
        Self {
            contact: LeaderContact::default(),
            may_stand: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            quorum_ack,
            log,
            timing,
        }
    }

    /// Records word from the leader (an append or snapshot chunk it accepted) received now.
    pub(crate) fn heard(&self) {
        self.contact.heard();
    }

    /// Whether this member may stand for election (see [`super::RaftNode::set_may_lead`]).
    pub(super) fn set_may_stand(&self, yes: bool) {
        self.may_stand.store(yes, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn may_stand(&self) -> bool {
        self.may_stand.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// When this member last heard from a leader.
    pub(super) fn last_contact(&self) -> Option<Instant> {
        self.contact.last()
    }

    /// Answers a candidate's pre-vote.
    pub(super) fn answer(&self, req: &PreVoteRequest) -> PreVoteAnswer {
        let view = match self.log.last_log_id() {
            Ok(last_log_id) => VoterView {
                quorum_ack_age: self.quorum_ack.lock().unwrap_or_else(|p| p.into_inner()).map(|at| at.elapsed()),
                leader_contact_age: self.contact.last().map(|at| at.elapsed()),
                last_log_id,
            },
            Err(e) => {
                let reason = Refusal::Storage(e.to_string()).to_string();
                return PreVoteAnswer { granted: false, reason: Some(reason) };
            }
        };
        match judge(&view, req, self.timing.lease) {
            Ok(()) => PreVoteAnswer { granted: true, reason: None },
            Err(refusal) => {
                tracing::debug!(candidate = req.candidate, %refusal, "pre-vote refused");
                PreVoteAnswer { granted: false, reason: Some(refusal.to_string()) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn view(quorum_ms: Option<u64>, contact_ms: Option<u64>, last: Option<LogId>) -> VoterView {
        VoterView {
            quorum_ack_age: quorum_ms.map(Duration::from_millis),
            leader_contact_age: contact_ms.map(Duration::from_millis),
            last_log_id: last,
        }
    }

    #[test]
    fn a_voter_that_hears_from_a_leader_refuses() {
        let lease = Duration::from_millis(800);
        let req = PreVoteRequest { candidate: 2, last_log_id: log_id(3, 100) };
        assert_eq!(judge(&view(None, Some(120), log_id(3, 100)), &req, lease), Err(Refusal::LeaderAlive(120)));
        assert_eq!(judge(&view(Some(50), None, log_id(3, 100)), &req, lease), Err(Refusal::Leading(50)));
        // Past the lease, or never heard: yes.
        assert_eq!(judge(&view(None, Some(801), log_id(3, 100)), &req, lease), Ok(()));
        assert_eq!(judge(&view(Some(900), None, log_id(3, 100)), &req, lease), Ok(()));
        assert_eq!(judge(&view(None, None, None), &req, lease), Ok(()));
    }

    #[test]
    fn a_candidate_with_less_log_is_refused() {
        let lease = Duration::from_millis(800);
        let silent = |last| view(None, Some(5_000), last);
        let behind = PreVoteRequest { candidate: 2, last_log_id: log_id(3, 99) };
        assert!(matches!(judge(&silent(log_id(3, 100)), &behind, lease), Err(Refusal::LogBehind { .. })));
        // A later term wins over a longer log of an earlier term.
        let later_term = PreVoteRequest { candidate: 2, last_log_id: log_id(4, 10) };
        assert_eq!(judge(&silent(log_id(3, 100)), &later_term, lease), Ok(()));
        let earlier_term = PreVoteRequest { candidate: 2, last_log_id: log_id(2, 500) };
        assert!(judge(&silent(log_id(3, 100)), &earlier_term, lease).is_err());
        let empty = PreVoteRequest { candidate: 2, last_log_id: None };
        assert!(judge(&silent(log_id(1, 1)), &empty, lease).is_err());
        assert_eq!(judge(&silent(None), &empty, lease), Ok(()));
    }
}
