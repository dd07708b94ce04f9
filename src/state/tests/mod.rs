//! State machine tests: every command's effect on state, changes and events.

use super::*;
use crate::model::{
    EventKind, ExecutorName, JobId, JobPayload, JobSetName, JobState, Node, NodeName, PoolName, PriorityClassName,
    Queue, QueueName, Resources, RunId, RunState, SchedulingRequirements,
};
use crate::record::CommandRecord;
use crate::record::NodeRecord;
use crate::scheduler::SchedulerConfig;
use RunReportKind as RunEventKind;

fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}
fn set(name: &str) -> JobSetName {
    JobSetName::new(name).unwrap()
}
fn exec(name: &str) -> ExecutorName {
    ExecutorName::new(name).unwrap()
}

fn new_job(id: u128, client_id: Option<&str>, cpu: &str) -> NewJob {
    NewJob {
        id: JobId::from_u128(id),
        client_id: client_id.map(str::to_string),
        priority: 0,
        priority_class: PriorityClassName::new("default").unwrap(),
        requirements: SchedulingRequirements {
            requests: Resources::parse([("cpu", cpu)]).unwrap(),
            ..Default::default()
        }
        .into(),
        gang: None,
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_ms: 5000,
        active_deadline_seconds: 3600,
        payload: JobPayload { pod_spec: "{}".into(), services: vec![], ingresses: vec![] }.into(),
    }
}

fn state() -> State {
    let mut s = State::new(StateSettings::from_config(&SchedulerConfig::default()));
    let r = s.apply(Command::create_queue(Queue::new(q("A"), 1.0)), ApplyContext::default());
    assert_eq!(r.response, Some(Response::Ok));
    let nodes = vec![NodeRecord::from(Node {
        name: NodeName::new("n1").unwrap(),
        executor: exec("e1"),
        pool: PoolName::default_pool(),
        labels: Default::default(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "8")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    })];
    s.apply(Command::UpsertExecutor { executor: exec("e1"), nodes, at_ms: 1 }, ApplyContext::default());
    s
}

fn submit(s: &mut State, jobs: Vec<NewJob>) -> Applied {
    s.apply(
        Command::from(CommandRecord::Submit { queue: q("A"), job_set: set("s"), at_ms: 10, jobs }),
        ApplyContext::default(),
    )
}

fn lease(s: &mut State, job: u128, run: u128, term: u64, ctx_term: u64) -> Applied {
    s.apply(
        Command::Schedule {
            term,
            at_ms: 20,
            leases: vec![NewLease {
                job_id: JobId::from_u128(job),
                run_id: RunId::from_u128(run),
                executor: exec("e1"),
                node: NodeName::new("n1").unwrap(),
                pool: PoolName::default_pool(),
            }],
            preemptions: vec![],
            failures: vec![],
            inputs: None,
        },
        ApplyContext { term: ctx_term },
    )
}

fn report(s: &mut State, run: u128, job: u128, kind: RunEventKind, exit: Option<i32>) -> Applied {
    s.apply(
        Command::from(CommandRecord::RunEvents {
            executor: exec("e1"),
            at_ms: 30,
            events: vec![RunReport {
                run_id: RunId::from_u128(run),
                job_id: JobId::from_u128(job),
                kind,
                time_ms: None,
                exit_code: exit,
                reason: None,
                message: None,
                log_tail: Some("hello\n".into()),
            }],
            max_attempted_runs: 2,
        }),
        ApplyContext::default(),
    )
}

fn events(a: &Applied) -> Vec<EventKind> {
    a.changes
        .iter()
        .filter_map(|c| match c {
            Change::AppendEvent { event, .. } => Some(EventKind::from(event.kind)),
            _ => None,
        })
        .collect()
}

fn job_state(s: &State, id: u128) -> Option<JobState> {
    s.jobs.get(&JobId::from_u128(id)).map(|j| j.record.state)
}

#[test]
fn submit_queues_jobs_in_order_with_events() {
    let mut s = state();
    let a = submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "2")]);
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1), JobId::from_u128(2)])));
    assert_eq!(events(&a), vec![EventKind::Submitted, EventKind::Queued, EventKind::Submitted, EventKind::Queued]);
    let qs = &s.queues[&q("A")];
    assert_eq!(qs.queued.values().map(|j| j.id).collect::<Vec<_>>(), vec![JobId::from_u128(1), JobId::from_u128(2)]);
    assert_eq!(qs.demand.get("cpu"), 3000);
    assert!(a.effects.schedule);
    // Event sequence numbers are dense per job set.
    let seqs: Vec<u64> = a
        .changes
        .iter()
        .filter_map(|c| if let Change::AppendEvent { event, .. } = c { Some(event.seq) } else { None })
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
}

#[test]
fn client_id_makes_resubmission_idempotent() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, Some("c1"), "1")]);
    let a = submit(&mut s, vec![new_job(99, Some("c1"), "1"), new_job(2, Some("c2"), "1")]);
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1), JobId::from_u128(2)])));
    assert!(!s.jobs.contains_key(&JobId::from_u128(99)));
}

#[test]
fn submit_to_missing_queue_is_refused_and_to_a_cordoned_one_taken() {
    let mut s = state();
    let a = s.apply(
        Command::from(CommandRecord::Submit {
            queue: q("Z"),
            job_set: set("s"),
            at_ms: 1,
            jobs: vec![new_job(1, None, "1")],
        }),
        ApplyContext::default(),
    );
    assert!(matches!(a.response, Some(Response::Rejected(Rejection { kind: RejectKind::NotFound, .. }))));
    assert!(a.changes.is_empty());
    let mut cordoned = Queue::new(q("A"), 1.0);
    cordoned.cordoned = true;
    s.apply(Command::update_queue(cordoned), ApplyContext::default());
    let a = submit(&mut s, vec![new_job(1, None, "1")]);
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1)])));
    assert_eq!(job_state(&s, 1), Some(JobState::Queued));
}

#[test]
fn lease_run_and_succeed() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    let a = lease(&mut s, 1, 100, 3, 3);
    assert_eq!(a.response, Some(Response::Scheduled { leased: 1, preempted: 0, failed: 0 }));
    assert!(a.effects.executors.contains(&exec("e1")));
    assert_eq!(job_state(&s, 1), Some(JobState::Leased));
    assert!(s.queues[&q("A")].queued.is_empty());
    assert_eq!(s.queues[&q("A")].demand.get("cpu"), 0);
    report(&mut s, 100, 1, RunEventKind::Pending, None);
    assert_eq!(job_state(&s, 1), Some(JobState::Pending));
    report(&mut s, 100, 1, RunEventKind::Running, None);
    assert_eq!(job_state(&s, 1), Some(JobState::Running));
    let a = report(&mut s, 100, 1, RunEventKind::Succeeded, Some(0));
    assert_eq!(events(&a), vec![EventKind::Succeeded]);
    // Over: out of memory, stored as not live with the output tail.
    assert!(!s.jobs.contains_key(&JobId::from_u128(1)));
    assert!(s.runs.is_empty());
    let Some(Change::PutJob { record, live }) = a.changes.iter().find(|c| matches!(c, Change::PutJob { .. })) else {
        panic!("no PutJob")
    };
    assert!(!live);
    assert_eq!(record.state, JobState::Succeeded.into());
    assert_eq!(record.runs[0].state, RunState::Succeeded.into());
    assert_eq!(record.runs[0].log_tail.as_deref(), Some("hello\n"));
}

#[test]
fn decisions_of_a_stale_term_are_refused() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    let a = lease(&mut s, 1, 100, 2, 3);
    assert!(matches!(a.response, Some(Response::Rejected(Rejection { kind: RejectKind::Conflict, .. }))));
    assert_eq!(job_state(&s, 1), Some(JobState::Queued));
}

#[test]
fn events_from_other_executors_or_unknown_runs_are_ignored() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    lease(&mut s, 1, 100, 1, 1);
    let a = report(&mut s, 999, 1, RunEventKind::Running, None);
    assert_eq!(a.response, Some(Response::Accepted(0)));
    let a = s.apply(
        Command::from(CommandRecord::RunEvents {
            executor: exec("other"),
            at_ms: 1,
            events: vec![RunReport {
                run_id: RunId::from_u128(100),
                job_id: JobId::from_u128(1),
                kind: RunEventKind::Running,
                time_ms: None,
                exit_code: None,
                reason: None,
                message: None,
                log_tail: None,
            }],
            max_attempted_runs: 5,
        }),
        ApplyContext::default(),
    );
    assert_eq!(a.response, Some(Response::Accepted(0)));
    assert_eq!(job_state(&s, 1), Some(JobState::Leased));
}

#[test]
fn cancel_queued_and_running() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "1")]);
    lease(&mut s, 2, 200, 1, 1);
    let a = s.apply(
        Command::Cancel {
            queue: q("A"),
            job_set: set("s"),
            job_ids: None,
            states: None,
            reason: "user".into(),
            at_ms: 40,
        },
        ApplyContext::default(),
    );
    let Some(Response::JobIds(ids)) = a.response else { panic!() };
    assert_eq!(ids.len(), 2);
    // The queued job is gone; the leased one is cancelled but kept until its run is over.
    assert_eq!(job_state(&s, 1), None);
    assert_eq!(job_state(&s, 2), Some(JobState::Cancelled));
    let run = s.jobs[&JobId::from_u128(2)].record.active_run().cloned().unwrap();
    assert_eq!(run.kill.as_ref().map(|k| k.grace_period_ms), Some(5000));
    assert!(a.effects.executors.contains(&exec("e1")));
    // The agent reports the kill: the run ends as cancelled and the job leaves memory.
    let a = report(&mut s, 200, 2, RunEventKind::Failed, Some(143));
    assert_eq!(events(&a), vec![EventKind::Cancelled]);
    assert!(s.jobs.is_empty());
}

#[test]
fn cancel_filtered_by_state() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "1")]);
    lease(&mut s, 2, 200, 1, 1);
    let a = s.apply(
        Command::Cancel {
            queue: q("A"),
            job_set: set("s"),
            job_ids: None,
            states: Some(vec![JobState::Queued.into()]),
            reason: "x".into(),
            at_ms: 1,
        },
        ApplyContext::default(),
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1)])));
    assert_eq!(job_state(&s, 2), Some(JobState::Leased));
}

#[test]
fn lost_runs_requeue_until_the_attempt_limit() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    lease(&mut s, 1, 100, 1, 1);
    let a = report(&mut s, 100, 1, RunEventKind::Returned, None);
    assert_eq!(events(&a), vec![EventKind::Requeued]);
    assert_eq!(job_state(&s, 1), Some(JobState::Queued));
    assert_eq!(s.queues[&q("A")].queued.len(), 1);
    // Second run lost: max_attempted_runs is 2, so the job fails.
    lease(&mut s, 1, 101, 1, 1);
    let a = report(&mut s, 101, 1, RunEventKind::Returned, None);
    assert_eq!(events(&a), vec![EventKind::Failed]);
    assert_eq!(job_state(&s, 1), None);
}

#[test]
fn a_fail_fast_job_fails_when_its_first_run_is_lost() {
    let mut s = state();
    let mut job = new_job(1, None, "1");
    job.annotations.insert("armadaproject.io/failFast".into(), "true".into());
    let mut plain = new_job(2, None, "1");
    plain.annotations.insert("armadaproject.io/failFast".into(), "false".into());
    submit(&mut s, vec![job, plain]);
    lease(&mut s, 1, 100, 1, 1);
    let a = report(&mut s, 100, 1, RunEventKind::Returned, None);
    assert_eq!(events(&a), vec![EventKind::Failed]);
    // Over, and gone from memory; its record says why.
    assert_eq!(job_state(&s, 1), None);
    let failed = a
        .changes
        .iter()
        .find_map(|c| match c {
            Change::PutJob { record, live: false } if record.id == JobId::from_u128(1) => Some(record.clone()),
            _ => None,
        })
        .expect("the failed job is written");
    assert_eq!(failed.state, crate::record::JobStateRecord::Failed);
    assert_eq!(
        failed.state_reason.as_deref(),
        Some("the run never started on its node; not retried: the job is fail-fast (armadaproject.io/failFast)")
    );
    // failFast = false is the default: requeued.
    lease(&mut s, 2, 101, 1, 1);
    let a = report(&mut s, 101, 2, RunEventKind::Returned, None);
    assert_eq!(events(&a), vec![EventKind::Requeued]);
    assert_eq!(job_state(&s, 2), Some(JobState::Queued));
}

#[test]
fn executor_lost_requeues_its_runs_and_removes_its_nodes() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    lease(&mut s, 1, 100, 1, 1);
    let a = s.apply(
        Command::ExecutorLost { executor: exec("e1"), at_ms: 50, max_attempted_runs: 5 },
        ApplyContext::default(),
    );
    assert_eq!(job_state(&s, 1), Some(JobState::Queued));
    assert!(s.executors.is_empty());
    assert!(a.changes.contains(&Change::DeleteExecutor(exec("e1"))));
    assert!(s.by_executor.get(&exec("e1")).is_none_or(|x| x.is_empty()));
    let snap = s.scheduling_snapshot(0, Default::default());
    assert!(snap.nodes.is_empty() && snap.running.is_empty());
    assert_eq!(snap.queues[0].queued.len(), 1);
}

#[test]
fn reprioritize_reorders_the_queue() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "1")]);
    let a = s.apply(
        Command::Reprioritize {
            queue: q("A"),
            job_set: set("s"),
            job_ids: Some(vec![JobId::from_u128(1)]),
            priority: 5,
            at_ms: 1,
        },
        ApplyContext::default(),
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1)])));
    let order: Vec<JobId> = s.queues[&q("A")].queued.values().map(|j| j.id).collect();
    assert_eq!(order, vec![JobId::from_u128(2), JobId::from_u128(1)]);
    assert_eq!(s.jobs[&JobId::from_u128(1)].info.priority, 5);
    // The queue holds each job's current view, the one the reprioritized job was given.
    for info in s.queues[&q("A")].queued.values() {
        assert!(std::sync::Arc::ptr_eq(info, &s.jobs[&info.id].info), "job {} has a stale view in its queue", info.id);
    }
    let snap = s.scheduling_snapshot(0, Default::default());
    assert_eq!(
        snap.queues[0].queued.iter().map(|j| (j.id.as_u128(), j.priority)).collect::<Vec<_>>(),
        vec![(2, 0), (1, 5)]
    );
}

#[test]
fn delete_queue_refuses_live_jobs_unless_forced() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    let a = s.apply(Command::DeleteQueue { name: q("A"), force: false, at_ms: 1 }, ApplyContext::default());
    assert!(matches!(a.response, Some(Response::Rejected(Rejection { kind: RejectKind::Conflict, .. }))));
    let a = s.apply(Command::DeleteQueue { name: q("A"), force: true, at_ms: 1 }, ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));
    assert!(s.queues.is_empty() && s.jobs.is_empty());
}

/// An admin's preemption of job `job` of queue A.
fn preempt(s: &mut State, job: u128) -> Applied {
    s.apply(
        Command::Preempt {
            queue: q("A"),
            job_set: set("s"),
            job_ids: vec![JobId::from_u128(job)],
            reason: "admin".into(),
            at_ms: 5,
        },
        ApplyContext::default(),
    )
}

#[test]
fn snapshot_counts_stopping_runs_as_used_by_others() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "2"), new_job(2, None, "3")]);
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 200, 1, 1);
    preempt(&mut s, 2);
    let snap = s.scheduling_snapshot(0, Default::default());
    assert_eq!(snap.running.len(), 1);
    assert_eq!(snap.running[0].job.id, JobId::from_u128(1));
    assert_eq!(snap.nodes[0].unallocatable.get("cpu"), 3000);
    assert_eq!(job_state(&s, 2), Some(JobState::Preempted));
}

#[test]
fn stopping_runs_hold_only_the_room_their_replacements_left() {
    // Node n1 has 8 cpu. Job 2 (6) is being stopped and jobs 1 (2) and 3 (5) run there, as after a
    // cycle that evicted job 2 to place job 3: 7 of 8 cpu are held by running jobs, so the
    // stopping run holds the 1 left and not its 6 (which would leave job 3 without room).
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "2"), new_job(2, None, "6"), new_job(3, None, "5")]);
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 200, 1, 1);
    preempt(&mut s, 2);
    // Before the replacement: the stopping run holds all it uses.
    let snap = s.scheduling_snapshot(0, Default::default());
    assert_eq!(snap.nodes[0].unallocatable.get("cpu"), 6000);
    lease(&mut s, 3, 300, 1, 1);
    let snap = s.scheduling_snapshot(0, Default::default());
    assert_eq!(snap.running.len(), 2);
    assert_eq!(snap.nodes[0].unallocatable.get("cpu"), 1000);
    // The running jobs fit the node beside it: nothing is over-committed.
    let used: i64 = snap.running.iter().map(|r| r.job.requirements.requests.get("cpu")).sum();
    assert_eq!(used + snap.nodes[0].unallocatable.get("cpu"), snap.nodes[0].allocatable.get("cpu"));
    // The snapshot read the runs from the executor's index: it holds each run as its record has it.
    let mut indexed = 0;
    for (executor, runs) in &s.by_executor {
        for (id, view) in runs {
            let run = s.jobs[id].record.active_run().expect("an indexed job has an active run");
            let want = (&run.executor, &run.node, run.leased_at_ms, run.kill.is_some());
            assert_eq!(want, (executor, &view.node, view.leased_at_ms, view.stopping), "job {id}");
            assert!(std::sync::Arc::ptr_eq(&view.info, &s.jobs[id].info), "job {id} has a stale view");
            indexed += 1;
        }
    }
    assert_eq!(indexed, 3);
}

#[test]
fn batches_answer_each_command() {
    let mut s = state();
    let a = s.apply(
        Command::Batch(vec![
            Command::from(CommandRecord::Submit {
                queue: q("A"),
                job_set: set("s"),
                at_ms: 1,
                jobs: vec![new_job(1, None, "1")],
            }),
            Command::from(CommandRecord::Submit {
                queue: q("Z"),
                job_set: set("s"),
                at_ms: 1,
                jobs: vec![new_job(2, None, "1")],
            }),
        ]),
        ApplyContext::default(),
    );
    let Some(Response::Batch(rs)) = a.response else { panic!() };
    assert_eq!(rs[0], Response::JobIds(vec![JobId::from_u128(1)]));
    assert!(matches!(rs[1], Response::Rejected(_)));
}

#[test]
fn apply_is_deterministic() {
    let run = || {
        let mut s = state();
        let mut all = Vec::new();
        all.extend(
            submit(&mut s, vec![new_job(1, Some("a"), "1"), new_job(2, None, "2"), new_job(3, None, "3")]).changes,
        );
        all.extend(lease(&mut s, 2, 200, 1, 1).changes);
        all.extend(report(&mut s, 200, 2, RunEventKind::Failed, Some(1)).changes);
        all.extend(
            s.apply(
                Command::ExecutorLost { executor: exec("e1"), at_ms: 9, max_attempted_runs: 3 },
                ApplyContext::default(),
            )
            .changes,
        );
        format!("{all:?}")
    };
    assert_eq!(run(), run());
}

#[test]
fn apply_weight_counts_what_a_command_touches() {
    let submit = |n: u128| {
        Command::from(CommandRecord::Submit {
            queue: q("a"),
            job_set: set("s"),
            at_ms: 0,
            jobs: (0..n).map(|i| new_job(i, None, "1")).collect(),
        })
    };
    assert_eq!(submit(3).apply_weight(), 3);
    assert_eq!(Command::Batch(vec![submit(3), submit(4)]).apply_weight(), 7);
    let lost = Command::ExecutorLost { executor: exec("e"), at_ms: 0, max_attempted_runs: 1 };
    assert_eq!(lost.apply_weight(), UNBOUNDED_WEIGHT);
    // Sums saturate rather than wrap around to a small weight.
    assert!(Command::Batch(vec![lost.clone(), lost.clone(), lost]).apply_weight() >= UNBOUNDED_WEIGHT);
    let cancel_set = Command::Cancel {
        queue: q("a"),
        job_set: set("s"),
        job_ids: None,
        states: None,
        reason: String::new(),
        at_ms: 0,
    };
    assert_eq!(cancel_set.apply_weight(), UNBOUNDED_WEIGHT);
}

#[test]
fn requirement_sets_of_finished_jobs_are_dropped() {
    let mut s = state();
    let batch = |from: u128| (from..from + 1000).map(|i| new_job(i, None, &format!("{i}m"))).collect::<Vec<_>>();
    submit(&mut s, batch(1));
    assert_eq!(s.interned_requirements(), 1000);
    let cancel = Command::Cancel {
        queue: q("A"),
        job_set: set("s"),
        job_ids: None,
        states: None,
        reason: "done".into(),
        at_ms: 40,
    };
    s.apply(cancel, ApplyContext::default());
    assert_eq!(s.live_jobs(), 0);
    // A thousand new shapes: the table is trimmed on the way, keeping only what live jobs use.
    submit(&mut s, batch(5001));
    assert_eq!(s.live_jobs(), 1000);
    assert_eq!(s.interned_requirements(), 1000, "the cancelled jobs' sets are gone");
}

mod indexes;
mod policies;
mod quarantine;
mod queue_retry;
mod queue_select;
mod queue_tree;
mod retention;

fn pod_report(run: u128, job: u128, kind: RunEventKind, pod: Option<crate::record::PodRecord>) -> PodRunReport {
    PodRunReport {
        event: FaultedRunReport {
            report: RunReport {
                run_id: RunId::from_u128(run),
                job_id: JobId::from_u128(job),
                kind,
                time_ms: None,
                exit_code: None,
                reason: None,
                message: None,
                log_tail: None,
            },
            node_fault: None,
        },
        pod,
    }
}

fn with_pods(s: &mut State, events: Vec<PodRunReport>) -> Applied {
    let quarantine = QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 };
    let cmd = Command::from(CommandRecord::RunEventsWithPods {
        executor: exec("e1"),
        at_ms: 30,
        events,
        max_attempted_runs: 2,
        quarantine,
    });
    s.apply(cmd, ApplyContext::default())
}

#[test]
fn jobs_keep_their_namespace_and_runs_the_pod_their_agent_reports() {
    use crate::model::{Namespace, RunPod};
    let mut s = state();
    let ml = Namespace::new("ml").unwrap();
    let jobs = vec![
        NamespacedJob { job: new_job(1, None, "1"), namespace: Some(ml.clone()) },
        NamespacedJob { job: new_job(2, None, "1"), namespace: None },
    ];
    let a = s.apply(
        Command::from(CommandRecord::SubmitInNamespaces { queue: q("A"), job_set: set("s"), at_ms: 10, jobs }),
        ApplyContext::default(),
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1), JobId::from_u128(2)])));
    assert_eq!(s.jobs[&JobId::from_u128(1)].record.namespace, Some(ml.clone()));
    assert_eq!(s.jobs[&JobId::from_u128(2)].record.namespace, None);
    // Older logs' submissions have none.
    submit(&mut s, vec![new_job(3, None, "1")]);
    assert_eq!(s.jobs[&JobId::from_u128(3)].record.namespace, None);

    // A lease indexes its run by id, once.
    let a = lease(&mut s, 1, 100, 1, 1);
    let indexed: Vec<&Change> = a.changes.iter().filter(|c| matches!(c, Change::IndexRun { .. })).collect();
    assert_eq!(indexed, vec![&Change::IndexRun { run: RunId::from_u128(100), job: JobId::from_u128(1) }]);

    let pod = crate::record::PodRecord { name: "armada-x-0".into(), namespace: "ml".into(), uid: "u1".into() };
    let a = with_pods(&mut s, vec![pod_report(100, 1, RunEventKind::Pending, Some(pod.clone()))]);
    assert_eq!(events(&a), vec![EventKind::Pending]);
    let run = s.jobs[&JobId::from_u128(1)].record.runs[0].clone();
    assert_eq!((run.state, run.pod.clone()), (RunState::Pending, Some(RunPod::from(pod.clone()))));
    let Some(Change::PutJob { record, .. }) = a.changes.iter().rev().find(|c| matches!(c, Change::PutJob { .. }))
    else {
        panic!("no PutJob")
    };
    assert_eq!(record.runs[0].pod, Some(pod.clone()), "stored with the run");
    assert_eq!(record.namespace, Some(ml));
    // An event without a pod keeps the one reported; a new pod replaces it.
    with_pods(&mut s, vec![pod_report(100, 1, RunEventKind::Running, None)]);
    assert_eq!(s.jobs[&JobId::from_u128(1)].record.runs[0].pod, Some(RunPod::from(pod)));
    let moved = crate::record::PodRecord { name: "armada-x-0".into(), namespace: "ml".into(), uid: "u2".into() };
    let a = with_pods(&mut s, vec![pod_report(100, 1, RunEventKind::Running, Some(moved.clone()))]);
    assert_eq!(events(&a), vec![], "still running: no event");
    assert_eq!(s.jobs[&JobId::from_u128(1)].record.runs[0].pod, Some(RunPod::from(moved)));
    // Another executor's word about the run changes nothing.
    let other = Command::from(CommandRecord::RunEventsWithPods {
        executor: exec("e2"),
        at_ms: 31,
        events: vec![pod_report(
            100,
            1,
            RunEventKind::Running,
            Some(crate::record::PodRecord { name: "x".into(), namespace: "y".into(), uid: "z".into() }),
        )],
        max_attempted_runs: 2,
        quarantine: QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 },
    });
    assert_eq!(s.apply(other, ApplyContext::default()).response, Some(Response::Accepted(0)));
    assert_eq!(s.jobs[&JobId::from_u128(1)].record.runs[0].pod.as_ref().map(|p| p.uid.as_str()), Some("u2"));
}

#[test]
fn a_final_event_keeps_what_the_run_used_and_others_do_not() {
    use crate::record::RunUsageRecord;
    use crate::state::UsageRunReport;
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "1")]);
    lease(&mut s, 1, 100, 1, 1);
    lease(&mut s, 2, 200, 2, 2);
    let used = RunUsageRecord { cpu_ms: 1_500, peak_memory_bytes: 64 << 20 };
    let with_usage = |s: &mut State, run: u128, job: u128, kind, usage| {
        let quarantine = QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 };
        let events = vec![UsageRunReport { event: pod_report(run, job, kind, None), usage }];
        let cmd = Command::RunEvents { executor: exec("e1"), at_ms: 40, events, max_attempted_runs: 2, quarantine };
        s.apply(cmd, ApplyContext::default())
    };
    let usage_of = |a: &Applied| -> Vec<(RunId, RunUsageRecord)> {
        a.changes
            .iter()
            .filter_map(|c| match c {
                Change::PutRunUsage { run, usage } => Some((*run, *usage)),
                _ => None,
            })
            .collect()
    };
    // Usage with an event that does not end the run is not kept.
    let a = with_usage(&mut s, 100, 1, RunEventKind::Running, Some(used));
    assert_eq!((events(&a), usage_of(&a)), (vec![EventKind::Running], vec![]));
    let a = with_usage(&mut s, 100, 1, RunEventKind::Succeeded, Some(used));
    assert_eq!(events(&a), vec![EventKind::Succeeded]);
    assert_eq!(usage_of(&a), vec![(RunId::from_u128(100), used)]);
    // A run's second end records nothing.
    let a = with_usage(&mut s, 100, 1, RunEventKind::Failed, Some(used));
    assert_eq!((events(&a), usage_of(&a)), (vec![], vec![]));
    // An end without usage (a runtime that cannot tell) is an end all the same.
    let a = with_usage(&mut s, 200, 2, RunEventKind::Failed, None);
    assert_eq!((events(&a), usage_of(&a)), (vec![EventKind::Failed], vec![]));
}

#[test]
fn other_priority_classes_reorder_the_queued_jobs() {
    // Replay may run a cycle under a recorded configuration whose classes rank otherwise than the
    // ones the state was built with: the queue's order follows the new ranks.
    let mut s = state();
    let mut low = new_job(1, None, "1");
    low.priority_class = PriorityClassName::new("preemptible").unwrap();
    submit(&mut s, vec![low, new_job(2, None, "1")]);
    let order = |s: &State| s.queues[&q("A")].queued.values().map(|j| j.id.as_u128()).collect::<Vec<_>>();
    assert_eq!(order(&s), vec![2, 1], "default (30000) before preemptible (20000)");
    let mut cfg = SchedulerConfig::default();
    for pc in &mut cfg.priority_classes {
        pc.priority = if pc.name.as_str() == "preemptible" { 40_000 } else { 10_000 };
    }
    s.change_settings(StateSettings::from_config(&cfg));
    assert_eq!(order(&s), vec![1, 2]);
    assert_eq!(*s.settings(), StateSettings::from_config(&cfg));
}

#[test]
fn packing_the_indexes_keeps_the_queue_order_and_the_job_sets() {
    let mut s = state();
    // Priorities that put the queue order apart from the id order, over several B-tree nodes.
    let jobs: Vec<NewJob> =
        (1..=100u128).map(|i| NewJob { priority: (i % 7) as u32, ..new_job(i, None, "100m") }).collect();
    submit(&mut s, jobs);
    let order = |s: &State| s.queue(&q("A")).map(|qs| qs.queued.clone().into_iter().collect::<Vec<_>>());
    let members = |s: &State| s.job_set_jobs(&q("A"), &set("s")).map(|j| j.record.id).collect::<Vec<_>>();
    let (before, in_set) = (order(&s), members(&s));
    assert_eq!(before.as_ref().map(Vec::len), Some(100));
    s.pack_indexes();
    assert_eq!(order(&s), before);
    assert_eq!(members(&s), in_set);
    // The packed indexes keep working: a cancelled job leaves both.
    s.apply(
        Command::Cancel {
            queue: q("A"),
            job_set: set("s"),
            job_ids: Some(vec![JobId::from_u128(50)]),
            states: None,
            reason: "test".into(),
            at_ms: 20,
        },
        ApplyContext::default(),
    );
    assert_eq!(order(&s).map(|o| o.len()), Some(99));
    assert!(!members(&s).contains(&JobId::from_u128(50)));
}
