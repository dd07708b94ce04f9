//! What the leader tells the state of its cycles' node reservations: only their changes. A
//! reservation is recomputed every cycle; the loop keeps the previous cycle's, and a cycle that
//! reserves nodes for a job that had none, or other nodes, or that no longer holds the previous
//! reservation of a job that did not start, proposes [`Command::RecordReservations`], which
//! becomes the jobs' events. A new leader starts with none kept, so it records its first
//! reservations again.

use crate::model::JobId;
use crate::record::{ReservationRecord, ReservedNodeRecord};
use crate::scheduler::{Decisions, Reservation};
use crate::state::Command;
use std::collections::{BTreeMap, HashSet};

/// The reservations of the last cycle whose changes were committed, by the job they are for.
pub(super) type KeptReservations = BTreeMap<JobId, ReservationRecord>;

/// A reservation as recorded: its jobs, pool, nodes (sorted) and expected start.
fn record_of(r: &Reservation) -> ReservationRecord {
    let mut nodes: Vec<ReservedNodeRecord> =
        r.nodes.iter().map(|n| ReservedNodeRecord { executor: n.executor.clone(), node: n.node.clone() }).collect();
    nodes.sort();
    ReservationRecord { jobs: r.jobs.clone(), pool: r.pool.clone(), nodes, expected_start_ms: r.expected_start_ms }
}

/// The command recording how `decisions` changed the reservations `kept` (none when nothing
/// changed), and the reservations to keep once it is committed. A reservation whose job was
/// leased by these decisions ended because the job started: it is not "released".
pub(super) fn changes(
    kept: &KeptReservations,
    decisions: &Decisions,
    term: u64,
    at_ms: i64,
) -> (Option<Command>, KeptReservations) {
    if kept.is_empty() && decisions.reservations.is_empty() {
        return (None, KeptReservations::new());
    }
    let now: KeptReservations = decisions.reservations.iter().map(|r| (r.job_id, record_of(r))).collect();
    // Only the pool and nodes say whether a reservation moved: its expected start shifts as the
    // running jobs' ends do, which is not news.
    let moved = |id: &JobId, r: &ReservationRecord| {
        kept.get(id).is_none_or(|before| before.nodes != r.nodes || before.pool != r.pool)
    };
    let reserved: Vec<ReservationRecord> = now.iter().filter(|(id, r)| moved(id, r)).map(|(_, r)| r.clone()).collect();
    let leased: HashSet<JobId> = decisions.leases.iter().map(|l| l.job_id).collect();
    let released: Vec<ReservationRecord> = kept
        .iter()
        .filter(|(id, r)| !now.contains_key(id) && !r.jobs.iter().any(|j| leased.contains(j)))
        .map(|(_, r)| r.clone())
        .collect();
    if reserved.is_empty() && released.is_empty() {
        return (None, now);
    }
    (Some(Command::RecordReservations { term, at_ms, reserved, released }), now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutorName, NodeName, PoolName, QueueName};
    use crate::scheduler::ReservedNode;

    fn reservation(job: u128, nodes: &[&str], start: Option<i64>) -> Reservation {
        Reservation {
            job_id: JobId::from_u128(job),
            jobs: vec![JobId::from_u128(job)],
            gang: None,
            queue: QueueName::new("a").unwrap(),
            pool: PoolName::new("default").unwrap(),
            nodes: nodes
                .iter()
                .map(|n| ReservedNode { executor: ExecutorName::new("e1").unwrap(), node: NodeName::new(n).unwrap() })
                .collect(),
            expected_start_ms: start,
            queued_since_ms: 0,
            kept_off: 0,
        }
    }

    fn decisions(reservations: Vec<Reservation>) -> Decisions {
        Decisions { reservations, ..Decisions::default() }
    }

    fn recorded(cmd: Option<Command>) -> (Vec<(u128, Vec<String>)>, Vec<u128>) {
        let Some(Command::RecordReservations { reserved, released, term: 3, at_ms: 10 }) = cmd else {
            return (vec![], vec![]);
        };
        let reserved = reserved
            .iter()
            .map(|r| (r.jobs[0].as_u128(), r.nodes.iter().map(|n| n.node.to_string()).collect()))
            .collect();
        (reserved, released.iter().map(|r| r.jobs[0].as_u128()).collect())
    }

    #[test]
    fn only_new_moved_and_given_up_reservations_are_recorded() {
        // Nothing before or now: nothing, at no cost.
        let (cmd, kept) = changes(&KeptReservations::new(), &decisions(vec![]), 3, 10);
        assert!(cmd.is_none() && kept.is_empty());
        // A first reservation is recorded.
        let (cmd, kept) = changes(&kept, &decisions(vec![reservation(1, &["n2", "n1"], Some(5))]), 3, 10);
        assert_eq!(recorded(cmd), (vec![(1, vec!["n1".to_string(), "n2".to_string()])], vec![]));
        // The same nodes again (the expected start moved): nothing.
        let (cmd, kept) = changes(&kept, &decisions(vec![reservation(1, &["n1", "n2"], Some(9))]), 3, 10);
        assert!(cmd.is_none());
        // Other nodes: recorded again; a second job's reservation is new.
        let (cmd, kept) =
            changes(&kept, &decisions(vec![reservation(1, &["n3"], None), reservation(2, &["n1"], None)]), 3, 10);
        assert_eq!(recorded(cmd), (vec![(1, vec!["n3".to_string()]), (2, vec!["n1".to_string()])], vec![]));
        // Job 1 was leased (its reservation ended as it started), job 2's was given up.
        let mut d = decisions(vec![]);
        d.leases.push(crate::scheduler::Lease {
            job_id: JobId::from_u128(1),
            queue: QueueName::new("a").unwrap(),
            pool: PoolName::new("default").unwrap(),
            executor: ExecutorName::new("e1").unwrap(),
            node: NodeName::new("n3").unwrap(),
        });
        let (cmd, kept) = changes(&kept, &d, 3, 10);
        assert_eq!(recorded(cmd), (vec![], vec![2]));
        assert!(kept.is_empty());
    }
}
