//! Retry policies of queues (a job without its own takes its queue's, or the nearest ancestor's,
//! as the queues are when the failure is applied) and reservation events: exact outcomes.

use super::*;
use crate::model::api::JobRetryPolicy;
use crate::record::job::GangRecord;
use crate::record::{ReservationRecord, ReservedNodeRecord, RetryRecord, SubmitPoliciesRecord};

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

fn policy(max_attempts: u32, codes: &[i32], backoff_seconds: u64) -> JobRetryPolicy {
    JobRetryPolicy {
        max_attempts,
        on_exit_codes: codes.to_vec(),
        on_oom: false,
        on_node_failure: false,
        backoff_seconds,
    }
}

/// Creates (or replaces) queue `name` under `parent` with `retry`.
fn put_queue(s: &mut State, name: &str, parent: Option<&str>, retry: Option<JobRetryPolicy>, create: bool) {
    let queue = Queue { parent: parent.map(q), retry, ..Queue::new(q(name), 1.0) };
    let cmd = if create { Command::create_queue(queue) } else { Command::update_queue(queue) };
    assert_eq!(s.apply(cmd, ApplyContext::default()).response, Some(Response::Ok));
}

/// Submits job `n` to `queue`, with its own retry policy if given.
fn submit_in(s: &mut State, queue: &str, n: u128, own: Option<RetryRecord>, gang: bool) {
    let mut job = new_job(n, None, "1");
    if gang {
        job.gang = Some(GangRecord { id: "g".into(), cardinality: 1, min_cardinality: 1, node_uniformity_label: None });
    }
    let jobs = vec![PolicyJob {
        job: NamespacedJob::from(job),
        policies: SubmitPoliciesRecord { depends_on: vec![], retry: own },
    }];
    let cmd = Command::Submit { queue: q(queue), job_set: set("s"), at_ms: 10, owner: None, jobs };
    assert_eq!(s.apply(cmd, ApplyContext::default()).response, Some(Response::JobIds(vec![id(n)])));
}

/// Leases job `job` as run `run`, then fails the run with `exit` at `at_ms`; the events it made.
fn lease_and_fail(s: &mut State, job: u128, run: u128, exit: i32, at_ms: i64) -> Vec<(EventKind, String)> {
    lease(s, job, run, 0, 0);
    let report = RunReport {
        run_id: RunId::from_u128(run),
        job_id: id(job),
        kind: RunEventKind::Failed,
        time_ms: None,
        exit_code: Some(exit),
        reason: None,
        message: None,
        log_tail: None,
    };
    let cmd = CommandRecord::RunEvents { executor: exec("e1"), at_ms, events: vec![report], max_attempted_runs: 10 };
    messages(&s.apply(Command::from(cmd), ApplyContext::default()))
}

fn messages(a: &Applied) -> Vec<(EventKind, String)> {
    a.changes
        .iter()
        .filter_map(|c| match c {
            Change::AppendEvent { event, .. } => {
                Some((EventKind::from(event.kind), event.message.clone().unwrap_or_default()))
            }
            _ => None,
        })
        .collect()
}

fn requeued(text: &str) -> Vec<(EventKind, String)> {
    vec![(EventKind::Requeued, text.to_string())]
}

#[test]
fn a_queue_policy_retries_jobs_without_their_own_until_its_attempts_are_spent() {
    let mut s = state();
    put_queue(&mut s, "physics", None, Some(policy(3, &[75], 30)), true);
    submit_in(&mut s, "physics", 1, None, false);
    assert_eq!(
        lease_and_fail(&mut s, 1, 100, 75, 1_000),
        requeued("retry 2 of 3 after exit code 75 (queue physics's retry policy), not before 1970-01-01T00:00:31Z")
    );
    assert_eq!(job_state(&s, 1), Some(JobState::Queued));
    // The back-off is kept with the job, which had no policies of its own.
    assert_eq!(s.jobs[&id(1)].info.not_before_ms, Some(31_000));
    let own = s.jobs[&id(1)].record.policies.as_ref().map(|p| p.retry.clone());
    assert_eq!(own, Some(None), "the queue's policy is not copied into the job");
    assert_eq!(
        lease_and_fail(&mut s, 1, 101, 75, 40_000),
        requeued("retry 3 of 3 after exit code 75 (queue physics's retry policy), not before 1970-01-01T00:01:40Z")
    );
    let last = lease_and_fail(&mut s, 1, 102, 75, 200_000);
    assert_eq!(last.iter().map(|(k, _)| *k).collect::<Vec<_>>(), vec![EventKind::Failed]);
    assert_eq!(job_state(&s, 1), None, "its attempts are spent: failed");
    assert_eq!(s.policy_counts.retries.get("exit_code"), Some(&2));
    // An exit code the policy does not name fails the job at once.
    submit_in(&mut s, "physics", 2, None, false);
    lease_and_fail(&mut s, 2, 200, 1, 300_000);
    assert_eq!(job_state(&s, 2), None);
}

#[test]
fn a_job_policy_wins_whole_over_its_queue_policy() {
    let mut s = state();
    put_queue(&mut s, "physics", None, Some(policy(5, &[75, 76], 0)), true);
    let own =
        RetryRecord { max_attempts: 2, on_exit_codes: vec![76], on_oom: false, on_node_failure: false, backoff_ms: 0 };
    submit_in(&mut s, "physics", 1, Some(own.clone()), false);
    // 75 is the queue's, not the job's: not retried.
    lease_and_fail(&mut s, 1, 100, 75, 1_000);
    assert_eq!(job_state(&s, 1), None);
    // 76 is retried by the job's own policy, named as before, with its own attempts.
    submit_in(&mut s, "physics", 2, Some(own), false);
    assert_eq!(lease_and_fail(&mut s, 2, 200, 76, 1_000), requeued("retry 2 of 2 after exit code 76"));
    lease_and_fail(&mut s, 2, 201, 76, 2_000);
    assert_eq!(job_state(&s, 2), None, "the job's two attempts, not the queue's five");
}

#[test]
fn the_queue_policy_at_the_time_of_the_failure_applies() {
    let mut s = state();
    put_queue(&mut s, "physics", None, Some(policy(3, &[75], 0)), true);
    submit_in(&mut s, "physics", 1, None, false);
    assert_eq!(
        lease_and_fail(&mut s, 1, 100, 75, 1_000),
        requeued("retry 2 of 3 after exit code 75 (queue physics's retry policy)")
    );
    // Now on 76 only, with two attempts: the second failure is judged by it.
    put_queue(&mut s, "physics", None, Some(policy(2, &[76], 0)), false);
    lease_and_fail(&mut s, 1, 101, 75, 2_000);
    assert_eq!(job_state(&s, 1), None, "75 is no longer retried");
    submit_in(&mut s, "physics", 2, None, false);
    assert_eq!(
        lease_and_fail(&mut s, 2, 200, 76, 3_000),
        requeued("retry 2 of 2 after exit code 76 (queue physics's retry policy)")
    );
    // Removed: the next failure ends the job.
    put_queue(&mut s, "physics", None, None, false);
    lease_and_fail(&mut s, 2, 201, 76, 4_000);
    assert_eq!(job_state(&s, 2), None);
}

#[test]
fn a_leaf_without_a_policy_takes_the_nearest_ancestors_and_gangs_take_none() {
    let mut s = state();
    put_queue(&mut s, "science", None, Some(policy(2, &[75], 0)), true);
    put_queue(&mut s, "physics", Some("science"), Some(policy(4, &[75], 0)), true);
    put_queue(&mut s, "particles", Some("physics"), None, true);
    put_queue(&mut s, "biology", Some("science"), None, true);
    submit_in(&mut s, "particles", 1, None, false);
    submit_in(&mut s, "biology", 2, None, false);
    assert_eq!(
        lease_and_fail(&mut s, 1, 100, 75, 1_000),
        requeued("retry 2 of 4 after exit code 75 (queue physics's retry policy)")
    );
    assert_eq!(
        lease_and_fail(&mut s, 2, 200, 75, 1_000),
        requeued("retry 2 of 2 after exit code 75 (queue science's retry policy)")
    );
    // A gang member is not retried by its queue's policy: a gang is placed whole.
    submit_in(&mut s, "particles", 3, None, true);
    lease_and_fail(&mut s, 3, 300, 75, 1_000);
    assert_eq!(job_state(&s, 3), None);
}

#[test]
fn queue_retry_policies_are_stored_in_the_queue_policies_row() {
    let mut s = state();
    let a = s.apply(
        Command::create_queue(Queue { retry: Some(policy(3, &[75], 30)), ..Queue::new(q("physics"), 1.0) }),
        ApplyContext::default(),
    );
    let rows: Vec<_> = a
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::PutQueuePolicies(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(rows.len(), 1);
    let stored = &rows[0].queues[&q("physics")];
    assert_eq!(
        stored.retry,
        Some(RetryRecord {
            max_attempts: 3,
            on_exit_codes: vec![75],
            on_oom: false,
            on_node_failure: false,
            backoff_ms: 30_000
        })
    );
    // A queue without any policy writes no row.
    let a = s.apply(Command::create_queue(Queue::new(q("plain"), 1.0)), ApplyContext::default());
    assert!(!a.changes.iter().any(|c| matches!(c, Change::PutQueuePolicies(_))));
}

fn reservation(jobs: &[u128], nodes: &[&str], start: Option<i64>) -> ReservationRecord {
    ReservationRecord {
        jobs: jobs.iter().map(|j| id(*j)).collect(),
        pool: PoolName::default_pool(),
        nodes: nodes
            .iter()
            .map(|n| ReservedNodeRecord { executor: exec("e1"), node: NodeName::new(n).unwrap() })
            .collect(),
        expected_start_ms: start,
    }
}

#[test]
fn reservation_changes_become_events_of_the_queued_jobs() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "1")]);
    lease(&mut s, 2, 200, 0, 0);
    let cmd = Command::RecordReservations {
        term: 4,
        at_ms: 50,
        reserved: vec![reservation(&[1, 2], &["n1", "n2"], Some(1_764_000_000_000))],
        released: vec![],
    };
    assert!(matches!(s.apply(cmd.clone(), ApplyContext { term: 5 }).response, Some(Response::Rejected(_))));
    let a = s.apply(cmd, ApplyContext { term: 4 });
    assert_eq!(a.response, Some(Response::Ok));
    // Job 2 was leased since: only job 1 gets the event.
    let events: Vec<_> = a
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::AppendEvent { event, .. } => Some((event.job_id, event.at_ms, event.message.clone())),
            _ => None,
        })
        .collect();
    let text = "reserved nodes n1, n2 in pool default (expected start 2025-11-24T16:00:00Z)";
    assert_eq!(events, vec![(id(1), 50, Some(text.to_string()))]);
    assert_eq!(s.jobs[&id(1)].record.event_seqs.len(), 3, "submitted, queued, reserved");
    let a = s.apply(
        Command::RecordReservations {
            term: 4,
            at_ms: 60,
            reserved: vec![],
            released: vec![reservation(&[1], &["n1"], None)],
        },
        ApplyContext { term: 4 },
    );
    assert_eq!(
        messages(&a),
        vec![(EventKind::Queued, "reservation of node n1 in pool default ended before the job started".to_string())]
    );
}
