//! Node quarantine in the state machine: which failures count against a node, at which times,
//! the quarantine they lead to, lifting it, and what the scheduler's snapshot sees.

use super::*;
use crate::model::NodeFault;
use crate::record::CommandRecord;
use crate::record::{NodeFailureRecord, NodeFaultRecord, NodeHealthRecord, QuarantineRecord};

/// Two failures within a minute quarantine a node for two minutes.
const POLICY: QuarantinePolicyRecord =
    QuarantinePolicyRecord { max_failures: 2, window_ms: 60_000, duration_ms: 120_000 };

fn n1() -> NodeName {
    NodeName::new("n1").unwrap()
}

/// Reports one final event of `run` at `at_ms`, with `fault`, under `policy`.
fn end_run(
    s: &mut State,
    run: u128,
    job: u128,
    kind: RunEventKind,
    fault: Option<NodeFaultRecord>,
    at_ms: i64,
    policy: QuarantinePolicyRecord,
) -> Applied {
    let report = RunReport {
        run_id: RunId::from_u128(run),
        job_id: JobId::from_u128(job),
        kind,
        time_ms: None,
        exit_code: (kind == RunEventKind::Failed).then_some(1),
        reason: None,
        message: None,
        log_tail: None,
    };
    s.apply(
        Command::from(CommandRecord::RunEventsWithFaults {
            executor: exec("e1"),
            at_ms,
            events: vec![FaultedRunReport { report, node_fault: fault }],
            max_attempted_runs: 5,
            quarantine: policy,
        }),
        ApplyContext::default(),
    )
}

fn health_changes(a: &Applied) -> Vec<Change> {
    a.changes
        .iter()
        .filter(|c| matches!(c, Change::PutNodeHealth(_) | Change::DeleteNodeHealth { .. }))
        .cloned()
        .collect()
}

fn lift(s: &mut State, at_ms: i64) -> Applied {
    s.apply(Command::LiftQuarantine { executor: exec("e1"), node: n1(), at_ms }, ApplyContext::default())
}

#[test]
fn node_faults_within_the_window_quarantine_the_node_from_the_command_time() {
    let mut s = state();
    submit(&mut s, (1..=4).map(|i| new_job(i, None, "1")).collect());
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 101, 1, 1);

    // An image pull failure at t=1000: counted, with its time, fault and job.
    let a = end_run(&mut s, 100, 1, RunEventKind::Failed, Some(NodeFaultRecord::ImagePull), 1_000, POLICY);
    assert_eq!(
        health_changes(&a),
        vec![Change::PutNodeHealth(NodeHealthRecord {
            executor: exec("e1"),
            node: n1(),
            failures: vec![NodeFailureRecord {
                at_ms: 1_000,
                fault: NodeFaultRecord::ImagePull,
                job_id: JobId::from_u128(1)
            }],
            quarantine: None,
        })]
    );
    assert!(s.scheduling_snapshot(0, Default::default()).quarantined.is_empty());

    // The run of job 2 never started, at t=60_999: within a minute of the first (the window is
    // (t - 60_000, t]), so the node is quarantined from 60_999 to 180_999, and the count starts
    // afresh. The job goes back to the
    // queue as before.
    let a = end_run(&mut s, 101, 2, RunEventKind::Returned, Some(NodeFaultRecord::NotStarted), 60_999, POLICY);
    assert_eq!(events(&a), vec![EventKind::Requeued]);
    assert_eq!(job_state(&s, 2), Some(JobState::Queued));
    assert!(a.effects.schedule);
    let reason = format!(
        "2 failures of the node within 1m: not_started ×1, image_pull ×1; the last one: job {}",
        JobId::from_u128(2)
    );
    assert_eq!(
        health_changes(&a),
        vec![Change::PutNodeHealth(NodeHealthRecord {
            executor: exec("e1"),
            node: n1(),
            failures: vec![],
            quarantine: Some(QuarantineRecord { since_ms: 60_999, until_ms: 180_999, reason: reason.clone() }),
        })]
    );
    let h = &s.node_health[&(exec("e1"), n1())];
    assert_eq!(h.quarantined_at(180_998).map(|q| q.reason.as_str()), Some(reason.as_str()));
    assert!(h.quarantined_at(180_999).is_none());
    let snap = s.scheduling_snapshot(0, Default::default());
    assert_eq!(snap.quarantined.into_iter().collect::<Vec<_>>(), vec![((exec("e1"), n1()), 180_999)]);

    // During the quarantine, further failures are not counted.
    lease(&mut s, 3, 102, 1, 1);
    let a = end_run(&mut s, 102, 3, RunEventKind::Failed, Some(NodeFaultRecord::NodeLost), 62_000, POLICY);
    assert_eq!(
        health_changes(&a),
        vec![Change::PutNodeHealth(NodeHealthRecord {
            executor: exec("e1"),
            node: n1(),
            failures: vec![],
            quarantine: Some(QuarantineRecord { since_ms: 60_999, until_ms: 180_999, reason }),
        })]
    );
}

#[test]
fn failures_a_window_apart_do_not_add_up() {
    let mut s = state();
    submit(&mut s, (1..=2).map(|i| new_job(i, None, "1")).collect());
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 101, 1, 1);
    end_run(&mut s, 100, 1, RunEventKind::Failed, Some(NodeFaultRecord::NodePressure), 1_000, POLICY);
    // Exactly one window later: the first no longer counts.
    end_run(&mut s, 101, 2, RunEventKind::Failed, Some(NodeFaultRecord::NodePressure), 61_000, POLICY);
    let h = &s.node_health[&(exec("e1"), n1())];
    assert!(h.quarantine.is_none());
    assert_eq!(h.failures.iter().map(|f| f.at_ms).collect::<Vec<_>>(), vec![61_000]);
}

#[test]
fn the_jobs_own_failures_stopped_runs_old_entries_and_a_policy_off_count_nothing() {
    let mut s = state();
    submit(&mut s, (1..=5).map(|i| new_job(i, None, "1")).collect());
    for (job, run) in [(1, 100), (2, 101), (3, 102), (4, 103), (5, 104)] {
        lease(&mut s, job, run, 1, 1);
    }
    // A non-zero exit without a fault: the job's own failure.
    let a = end_run(&mut s, 100, 1, RunEventKind::Failed, None, 1_000, POLICY);
    assert!(health_changes(&a).is_empty());
    // A fault on a success means nothing.
    let a = end_run(&mut s, 101, 2, RunEventKind::Succeeded, Some(NodeFaultRecord::NodeLost), 1_000, POLICY);
    assert!(health_changes(&a).is_empty());
    // A run being stopped (cancelled) ends as the stop made it, whatever the agent says.
    s.apply(
        Command::Cancel {
            queue: q("A"),
            job_set: set("s"),
            job_ids: Some(vec![JobId::from_u128(3)]),
            states: None,
            reason: "user".into(),
            at_ms: 1_500,
        },
        ApplyContext::default(),
    );
    let a = end_run(&mut s, 102, 3, RunEventKind::Failed, Some(NodeFaultRecord::NodeLost), 2_000, POLICY);
    assert_eq!(events(&a), vec![EventKind::Cancelled]);
    assert!(health_changes(&a).is_empty());
    // Quarantine off: nothing is counted.
    let off = QuarantinePolicyRecord { max_failures: 0, ..POLICY };
    let a = end_run(&mut s, 103, 4, RunEventKind::Returned, Some(NodeFaultRecord::NotStarted), 3_000, off);
    assert_eq!(events(&a), vec![EventKind::Requeued]);
    assert!(health_changes(&a).is_empty());
    // Run events of logs from before node faults count nothing either.
    let a = report(&mut s, 104, 5, RunEventKind::Returned, None);
    assert_eq!(events(&a), vec![EventKind::Requeued]);
    assert!(health_changes(&a).is_empty());
    assert!(s.node_health.is_empty());
}

#[test]
fn an_admin_lifts_a_quarantine_which_forgets_the_node() {
    let mut s = state();
    submit(&mut s, (1..=2).map(|i| new_job(i, None, "1")).collect());
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 101, 1, 1);
    // Nothing to lift yet.
    let a = lift(&mut s, 500);
    let Some(Response::Rejected(r)) = a.response else { panic!("{:?}", a.response) };
    assert_eq!((r.kind, r.message.as_str()), (RejectKind::NotFound, "node n1 of executor e1 is not quarantined"));
    assert!(a.changes.is_empty());
    end_run(&mut s, 100, 1, RunEventKind::Failed, Some(NodeFaultRecord::ImagePull), 1_000, POLICY);
    end_run(&mut s, 101, 2, RunEventKind::Failed, Some(NodeFaultRecord::ImagePull), 2_000, POLICY);
    assert!(s.node_health[&(exec("e1"), n1())].quarantined_at(2_000).is_some());
    let a = lift(&mut s, 3_000);
    assert_eq!(a.response, Some(Response::Ok));
    assert_eq!(a.changes, vec![Change::DeleteNodeHealth { executor: exec("e1"), node: n1() }]);
    assert!(a.effects.schedule);
    assert!(s.node_health.is_empty());
    assert!(s.scheduling_snapshot(0, Default::default()).quarantined.is_empty());
    // Lifting twice: the second is refused.
    let a = lift(&mut s, 3_001);
    assert!(matches!(a.response, Some(Response::Rejected(_))));
}

#[test]
fn an_expired_quarantine_cannot_be_lifted_and_the_executor_going_away_keeps_it() {
    let mut s = state();
    submit(&mut s, (1..=2).map(|i| new_job(i, None, "1")).collect());
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 101, 1, 1);
    end_run(&mut s, 100, 1, RunEventKind::Failed, Some(NodeFaultRecord::NodeLost), 1_000, POLICY);
    end_run(&mut s, 101, 2, RunEventKind::Failed, Some(NodeFaultRecord::NodeLost), 2_000, POLICY);
    s.apply(
        Command::ExecutorLost { executor: exec("e1"), at_ms: 3_000, max_attempted_runs: 5 },
        ApplyContext::default(),
    );
    assert!(s.executors.is_empty());
    assert_eq!(s.node_health[&(exec("e1"), n1())].quarantined_at(3_000).map(|q| q.until_ms), Some(122_000));
    let a = lift(&mut s, 122_000);
    assert!(matches!(a.response, Some(Response::Rejected(Rejection { kind: RejectKind::NotFound, .. }))));
}

#[test]
fn counting_is_deterministic() {
    let run = || {
        let mut s = state();
        submit(&mut s, (1..=3).map(|i| new_job(i, None, "1")).collect());
        let mut changes = Vec::new();
        for (job, run, at, fault) in [
            (1, 100, 1_000, NodeFault::ImagePull),
            (2, 101, 5_000, NodeFault::NotStarted),
            (3, 102, 9_000, NodeFault::NodePressure),
        ] {
            lease(&mut s, job, run, 1, 1);
            let a = end_run(&mut s, run, job, RunEventKind::Failed, Some(fault.into()), at, POLICY);
            changes.extend(health_changes(&a));
        }
        (s.node_health, changes)
    };
    assert_eq!(run(), run());
}
