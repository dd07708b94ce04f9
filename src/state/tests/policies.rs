//! Dependencies and retry policies: exact outcomes, and the property that no dependent starts
//! before the job it waits for has ended as it asks.

use super::*;
use crate::model::DependencyCondition;
use crate::record::{
    DependencyConditionRecord as Cond, JobStateRecord, RetryRecord, SubmitDependencyRecord, SubmitPoliciesRecord,
};
use proptest::prelude::*;
use std::collections::HashMap;

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

fn dep(on: u128, cond: Cond) -> SubmitDependencyRecord {
    SubmitDependencyRecord { job_id: id(on), on: cond, ended: None }
}

fn with(job: NewJob, depends_on: Vec<SubmitDependencyRecord>, retry: Option<RetryRecord>) -> PolicyJob {
    PolicyJob { job: NamespacedJob::from(job), policies: SubmitPoliciesRecord { depends_on, retry } }
}

fn submit_to(s: &mut State, job_set: &str, jobs: Vec<PolicyJob>) -> Applied {
    let cmd = Command::Submit { queue: q("A"), job_set: set(job_set), at_ms: 10, owner: None, jobs };
    s.apply(cmd, ApplyContext::default())
}

fn queued_ids(s: &State) -> Vec<JobId> {
    s.queues[&q("A")].queued.values().map(|j| j.id).collect()
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

fn stored_reason(a: &Applied, job: u128) -> Option<String> {
    a.changes.iter().find_map(|c| match c {
        Change::PutJob { record, .. } if record.id == id(job) => record.state_reason.clone(),
        _ => None,
    })
}

#[test]
fn a_dependent_waits_out_of_its_queue_until_its_job_succeeds() {
    let mut s = state();
    let a = submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(1, None, "1"), vec![], None),
            with(new_job(2, None, "1"), vec![dep(1, Cond::Succeeded)], None),
        ],
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![id(1), id(2)])));
    assert_eq!(queued_ids(&s), vec![id(1)], "the dependent is not offered to the scheduler");
    assert_eq!(s.queues[&q("A")].demand.get("cpu"), 1000);
    assert_eq!(job_state(&s, 2), Some(JobState::Queued));
    assert!(messages(&a).contains(&(EventKind::Queued, format!("waiting for {} to succeed", id(1)))));
    assert!(a.changes.iter().any(|c| matches!(c, Change::PutPolicies { job, .. } if *job == id(2))));
    lease(&mut s, 1, 100, 0, 0);
    report(&mut s, 100, 1, RunEventKind::Running, None);
    assert_eq!(queued_ids(&s), Vec::<JobId>::new());
    let a = report(&mut s, 100, 1, RunEventKind::Succeeded, Some(0));
    assert_eq!(queued_ids(&s), vec![id(2)], "released when its job succeeded");
    let released = format!("dependency {} ended succeeded: dependencies met", id(1));
    assert_eq!(messages(&a), vec![(EventKind::Succeeded, String::new()), (EventKind::Queued, released)]);
    assert!(s.dependents.is_empty());
}

#[test]
fn a_failed_job_fails_its_afterok_dependent_naming_it_and_releases_the_afternotok_one() {
    let mut s = state();
    submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(1, None, "1"), vec![], None),
            with(new_job(2, None, "1"), vec![dep(1, Cond::Succeeded)], None),
            with(new_job(3, None, "1"), vec![dep(1, Cond::Failed)], None),
            with(new_job(4, None, "1"), vec![dep(2, Cond::Ended)], None),
        ],
    );
    lease(&mut s, 1, 100, 0, 0);
    let a = report(&mut s, 100, 1, RunEventKind::Failed, Some(3));
    let reason = format!("dependency {} ended failed; it had to succeed", id(1));
    assert_eq!(stored_reason(&a, 2), Some(reason.clone()));
    assert_eq!(job_state(&s, 2), None, "failed and out of memory");
    // 4 waited for 2 to end in any way: released in the same command.
    assert_eq!(queued_ids(&s), vec![id(3), id(4)]);
    assert!(messages(&a).contains(&(EventKind::Failed, reason)));
    assert_eq!(s.policy_counts.dependency_failures, 1);
}

#[test]
fn cancelling_a_job_set_cancels_dependents_waiting_on_it_in_other_job_sets() {
    let mut s = state();
    submit_to(&mut s, "parents", vec![with(new_job(1, None, "1"), vec![], None)]);
    submit_to(&mut s, "children", vec![with(new_job(2, None, "1"), vec![dep(1, Cond::Succeeded)], None)]);
    let a = s.apply(
        Command::Cancel {
            queue: q("A"),
            job_set: set("parents"),
            job_ids: None,
            states: None,
            reason: "by alice".into(),
            at_ms: 40,
        },
        ApplyContext::default(),
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![id(1)])));
    assert_eq!(stored_reason(&a, 2), Some(format!("dependency {} was cancelled", id(1))));
    assert!(s.jobs.is_empty());
}

#[test]
fn a_dependency_on_an_ended_job_is_judged_at_once_and_an_unknown_one_refused() {
    let mut s = state();
    let ended = |n, state| SubmitDependencyRecord { job_id: id(n), on: Cond::Succeeded, ended: Some(state) };
    let a = submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(2, None, "1"), vec![ended(90, JobStateRecord::Succeeded)], None),
            with(new_job(3, None, "1"), vec![ended(91, JobStateRecord::Failed)], None),
        ],
    );
    assert_eq!(queued_ids(&s), vec![id(2)]);
    assert_eq!(stored_reason(&a, 3), Some(format!("dependency {} ended failed; it had to succeed", id(91))));
    // A job neither live, nor of the command, nor known to have ended: nothing is stored.
    let a = submit_to(
        &mut s,
        "s",
        vec![with(new_job(4, None, "1"), vec![], None), with(new_job(5, None, "1"), vec![dep(92, Cond::Ended)], None)],
    );
    let Some(Response::Rejected(r)) = &a.response else { panic!("{:?}", a.response) };
    assert_eq!(r.field.as_deref(), Some("jobs[1].depends_on[0].job_id"));
    assert!(a.changes.is_empty());
}

#[test]
fn a_job_of_the_same_command_that_ends_at_once_is_judged_for_its_dependents() {
    // Job 6 can never start (its job failed), so job 7, waiting on 6 in the same request, fails too.
    let mut s = state();
    let ended = SubmitDependencyRecord { job_id: id(93), on: Cond::Succeeded, ended: Some(JobStateRecord::Failed) };
    let a = submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(6, None, "1"), vec![ended], None),
            with(new_job(7, None, "1"), vec![dep(6, Cond::Succeeded)], None),
            with(new_job(8, None, "1"), vec![dep(6, Cond::Failed)], None),
        ],
    );
    assert_eq!(stored_reason(&a, 7), Some(format!("dependency {} ended failed; it had to succeed", id(6))));
    assert_eq!(queued_ids(&s), vec![id(8)], "the afternotok job is released at once");
}

fn fail_run(s: &mut State, run: u128, job: u128, exit: i32, reason: Option<&str>, at_ms: i64) -> Applied {
    let report = RunReport {
        run_id: RunId::from_u128(run),
        job_id: id(job),
        kind: RunEventKind::Failed,
        time_ms: None,
        exit_code: Some(exit),
        reason: reason.map(str::to_string),
        message: None,
        log_tail: None,
    };
    s.apply(
        Command::from(CommandRecord::RunEvents {
            executor: exec("e1"),
            at_ms,
            events: vec![report],
            max_attempted_runs: 10,
        }),
        ApplyContext::default(),
    )
}

fn retry(max_attempts: u32, backoff_ms: u64) -> RetryRecord {
    RetryRecord { max_attempts, on_exit_codes: vec![75], on_oom: false, on_node_failure: true, backoff_ms }
}

#[test]
fn a_retried_job_keeps_its_id_until_its_attempts_are_spent() {
    let mut s = state();
    submit_to(&mut s, "s", vec![with(new_job(1, None, "1"), vec![], Some(retry(3, 0)))]);
    lease(&mut s, 1, 100, 0, 0);
    let a = fail_run(&mut s, 100, 1, 75, None, 30);
    assert_eq!(job_state(&s, 1), Some(JobState::Queued));
    assert_eq!(queued_ids(&s), vec![id(1)]);
    assert_eq!(messages(&a), vec![(EventKind::Requeued, "retry 2 of 3 after exit code 75".to_string())]);
    lease(&mut s, 1, 101, 0, 0);
    let a = fail_run(&mut s, 101, 1, 75, None, 31);
    assert_eq!(messages(&a), vec![(EventKind::Requeued, "retry 3 of 3 after exit code 75".to_string())]);
    lease(&mut s, 1, 102, 0, 0);
    let a = fail_run(&mut s, 102, 1, 75, None, 32);
    assert_eq!(job_state(&s, 1), None, "its attempts are spent: failed");
    let Some(Change::PutJob { record, .. }) = a.changes.iter().find(|c| matches!(c, Change::PutJob { .. })) else {
        panic!("no PutJob")
    };
    assert_eq!(record.state, JobStateRecord::Failed);
    assert_eq!(record.runs.len(), 3);
    assert_eq!(s.policy_counts.retries.get("exit_code"), Some(&2));
}

#[test]
fn only_the_named_failures_are_retried_and_back_off_holds_the_job() {
    let mut s = state();
    submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(1, None, "1"), vec![], Some(retry(3, 60_000))),
            with(new_job(2, None, "1"), vec![], Some(retry(3, 0))),
        ],
    );
    lease(&mut s, 1, 100, 0, 0);
    lease(&mut s, 2, 200, 0, 0);
    let a = fail_run(&mut s, 100, 1, 75, None, 1_000);
    assert_eq!(
        messages(&a),
        vec![(EventKind::Requeued, "retry 2 of 3 after exit code 75, not before 1970-01-01T00:01:01Z".to_string())]
    );
    assert_eq!(s.jobs[&id(1)].info.not_before_ms, Some(61_000), "the scheduler sees the back-off");
    // An OOM kill the policy does not name fails the job at once.
    fail_run(&mut s, 200, 2, 137, Some("OOMKilled"), 1_000);
    assert_eq!(job_state(&s, 2), None);
}

/// One step of the property below.
#[derive(Debug, Clone)]
enum Step {
    /// Lease every job the scheduler would be offered.
    LeaseAll,
    /// End the active run of the n-th job (mod the jobs), succeeded or failed.
    End(usize, bool),
    /// Cancel the n-th job.
    Cancel(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::LeaseAll),
        (0usize..8, any::<bool>()).prop_map(|(n, ok)| Step::End(n, ok)),
        (0usize..8).prop_map(Step::Cancel),
    ]
}

fn condition() -> impl Strategy<Value = Cond> {
    prop_oneof![Just(Cond::Succeeded), Just(Cond::Failed), Just(Cond::Ended)]
}

proptest! {
    /// No dependent starts before the job it waits for has ended as it asks.
    #[test]
    fn no_dependent_starts_before_its_job_ends_as_asked(
        deps in proptest::collection::vec(proptest::option::of((0usize..8, condition())), 1..8),
        steps in proptest::collection::vec(step(), 1..30),
    ) {
        let mut s = state();
        let n = deps.len();
        let jobs: Vec<PolicyJob> = deps
            .iter()
            .enumerate()
            .map(|(i, d)| {
                // Only an earlier job may be waited for.
                let d = d.filter(|_| i > 0).map(|(p, c)| dep(1 + (p % i) as u128, c));
                with(new_job(1 + i as u128, None, "1"), d.into_iter().collect(), None)
            })
            .collect();
        let mut ended: HashMap<JobId, JobState> = HashMap::new();
        let note = |a: &Applied, ended: &mut HashMap<JobId, JobState>| {
            for c in &a.changes {
                if let Change::PutJob { record, live: false } = c {
                    ended.insert(record.id, record.state.into());
                }
            }
        };
        note(&submit_to(&mut s, "s", jobs), &mut ended);
        let mut run = 1000u128;
        for st in steps {
            match st {
                Step::LeaseAll => {
                    for j in queued_ids(&s) {
                        let record = &s.jobs[&j].record;
                        for d in record.policies.iter().flat_map(|p| p.depends_on.iter()) {
                            let end = ended.get(&d.job_id).copied();
                            let ok = end.is_some_and(|e| DependencyCondition::verdict(d.on, e) == crate::model::DependencyVerdict::Met);
                            prop_assert!(ok, "{j} offered while {} is {:?}", d.job_id, end);
                        }
                        run += 1;
                        note(&lease(&mut s, j.as_u128(), run, 0, 0), &mut ended);
                    }
                }
                Step::End(k, ok) => {
                    let j = 1 + (k % n) as u128;
                    let Some(r) = s.jobs.get(&id(j)).and_then(|l| l.record.active_run()).map(|r| r.run_id) else { continue };
                    let kind = if ok { RunEventKind::Succeeded } else { RunEventKind::Failed };
                    note(&report(&mut s, r.as_u128(), j, kind, Some(if ok { 0 } else { 1 })), &mut ended);
                }
                Step::Cancel(k) => {
                    let j = id(1 + (k % n) as u128);
                    let cancel = Command::Cancel {
                        queue: q("A"),
                        job_set: set("s"),
                        job_ids: Some(vec![j]),
                        states: None,
                        reason: "x".into(),
                        at_ms: 50,
                    };
                    note(&s.apply(cancel, ApplyContext::default()), &mut ended);
                }
            }
        }
    }
}

#[test]
fn a_dependency_on_a_job_the_command_does_not_create_is_refused() {
    let mut s = state();
    submit_to(&mut s, "s", vec![with(new_job(1, Some("c"), "1"), vec![], None)]);
    // 5 is an earlier submission's job again (client id c): 6 cannot wait for the id 5.
    let a = submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(5, Some("c"), "1"), vec![], None),
            with(new_job(6, None, "1"), vec![dep(5, Cond::Ended)], None),
        ],
    );
    let Some(Response::Rejected(r)) = &a.response else { panic!("{:?}", a.response) };
    assert_eq!(r.field.as_deref(), Some("jobs[1].depends_on[0].job_id"));
    assert!(a.changes.is_empty());
    // Waiting for the job the client id names is fine.
    let a = submit_to(
        &mut s,
        "s",
        vec![
            with(new_job(5, Some("c"), "1"), vec![], None),
            with(new_job(6, None, "1"), vec![dep(1, Cond::Ended)], None),
        ],
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![id(1), id(6)])));
}
