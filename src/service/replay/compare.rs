//! Comparing a cycle's recorded decisions with the decisions of its replay: leases by job,
//! executor, node and pool (a run id is the leader's fresh id, not a decision), preemptions and
//! failures by job and reason, each list in the order the scheduler made it.

use crate::model::JobId;
use crate::scheduler::Decisions;
use crate::state::{JobVerdict, NewLease};

/// What a cycle's log entry recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recorded {
    /// Jobs placed.
    pub leases: Vec<NewLease>,
    /// Running jobs preempted, with the reason in words.
    pub preemptions: Vec<JobVerdict>,
    /// Queued jobs failed, with the reason in words.
    pub failures: Vec<JobVerdict>,
}

/// The first difference between `recorded` and `replayed`, in words; `None` if they agree.
pub(crate) fn first_difference(recorded: &Recorded, replayed: &Decisions) -> Option<String> {
    let leases: Vec<Placed> = replayed
        .leases
        .iter()
        .map(|l| Placed { job: l.job_id, at: format!("{}/{} in pool {}", l.executor, l.node, l.pool) })
        .collect();
    let recorded_leases: Vec<Placed> = recorded
        .leases
        .iter()
        .map(|l| Placed { job: l.job_id, at: format!("{}/{} in pool {}", l.executor, l.node, l.pool) })
        .collect();
    if let Some(d) = differ("lease", &recorded_leases, &leases) {
        return Some(d);
    }
    let preemptions: Vec<Placed> =
        replayed.preemptions.iter().map(|p| Placed { job: p.job_id, at: p.reason.to_string() }).collect();
    if let Some(d) = differ("preemption", &verdicts(&recorded.preemptions), &preemptions) {
        return Some(d);
    }
    let failures: Vec<Placed> =
        replayed.failures.iter().map(|f| Placed { job: f.job_id, at: f.reason.to_string() }).collect();
    differ("failure", &verdicts(&recorded.failures), &failures)
}

/// One decision: the job, and where it went or why.
#[derive(Debug, PartialEq)]
struct Placed {
    job: JobId,
    at: String,
}

fn verdicts(v: &[JobVerdict]) -> Vec<Placed> {
    v.iter().map(|v| Placed { job: v.job_id, at: v.reason.clone() }).collect()
}

fn differ(what: &str, recorded: &[Placed], replayed: &[Placed]) -> Option<String> {
    for (i, (r, p)) in recorded.iter().zip(replayed).enumerate() {
        if r != p {
            let n = i + 1;
            return Some(if r.job == p.job {
                format!("{what} {n} of job {}: recorded {}, replayed {}", r.job, r.at, p.at)
            } else {
                format!("{what} {n}: recorded job {} ({}), replayed job {} ({})", r.job, r.at, p.job, p.at)
            });
        }
    }
    match recorded.len().cmp(&replayed.len()) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Less => {
            let extra = &replayed[recorded.len()];
            Some(format!(
                "{} recorded {what}s, {} replayed: the first extra is job {} ({})",
                recorded.len(),
                replayed.len(),
                extra.job,
                extra.at
            ))
        }
        std::cmp::Ordering::Greater => {
            let missing = &recorded[replayed.len()];
            Some(format!(
                "{} recorded {what}s, {} replayed: the first missing is job {} ({})",
                recorded.len(),
                replayed.len(),
                missing.job,
                missing.at
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutorName, NodeName, PoolName, QueueName, RunId};
    use crate::scheduler::Lease;

    fn lease(job: u128, node: &str) -> (NewLease, Lease) {
        let (executor, node, pool) =
            (ExecutorName::new("e").unwrap(), NodeName::new(node).unwrap(), PoolName::default_pool());
        (
            NewLease {
                job_id: JobId::from_u128(job),
                run_id: RunId::from_u128(job + 100),
                executor: executor.clone(),
                node: node.clone(),
                pool: pool.clone(),
            },
            Lease { job_id: JobId::from_u128(job), queue: QueueName::new("q").unwrap(), pool, executor, node },
        )
    }

    #[test]
    fn the_same_placements_agree_whatever_the_run_ids() {
        let (a, la) = lease(1, "n1");
        let (b, lb) = lease(2, "n2");
        let recorded = Recorded { leases: vec![a, b], preemptions: vec![], failures: vec![] };
        let replayed = Decisions { leases: vec![la, lb], ..Default::default() };
        assert_eq!(first_difference(&recorded, &replayed), None);
    }

    #[test]
    fn the_first_different_placement_is_named() {
        let (a, _) = lease(1, "n1");
        let (_, other_node) = lease(1, "n2");
        let (b, _) = lease(2, "n2");
        let recorded = Recorded { leases: vec![a.clone(), b], preemptions: vec![], failures: vec![] };
        let replayed = Decisions { leases: vec![other_node], ..Default::default() };
        let d = first_difference(&recorded, &replayed).unwrap();
        assert!(d.starts_with("lease 1 of job"), "{d}");
        assert!(d.contains("recorded e/n1 in pool default, replayed e/n2 in pool default"), "{d}");
        let recorded = Recorded { leases: vec![a], preemptions: vec![], failures: vec![] };
        let d = first_difference(&recorded, &Decisions::default()).unwrap();
        assert!(d.starts_with("1 recorded leases, 0 replayed: the first missing is job"), "{d}");
    }

    #[test]
    fn a_preemption_for_another_reason_differs() {
        let job = JobId::from_u128(5);
        let recorded = Recorded {
            leases: vec![],
            preemptions: vec![JobVerdict { job_id: job, reason: "preempted by job X".into() }],
            failures: vec![],
        };
        let d = first_difference(&recorded, &Decisions::default()).unwrap();
        assert!(d.contains("1 recorded preemptions, 0 replayed"), "{d}");
    }
}
