//! The indexes against what the live jobs' records say they should hold, after every step of
//! random command sequences: applying a change moves a job only in the indexes whose part of it
//! changed (`state::reindex`), so a part it forgot to compare would leave an index stale.

use super::*;
use crate::record::{
    DependencyConditionRecord as Cond, NamespacedJob, PolicyJob, RetryRecord, SubmitDependencyRecord,
    SubmitPoliciesRecord,
};
use crate::state::machine::QueueKey;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

type ByExecutor = BTreeMap<ExecutorName, BTreeMap<JobId, (NodeName, i64, bool)>>;
/// A queue's order (as job ids), demand and counts per state.
type QueueIndexes = (Vec<JobId>, Vec<(String, i64)>, BTreeMap<JobState, u64>);

/// What the indexes hold, in a form that compares: empty sets and zero counts left out (an
/// index may keep an emptied entry), scheduler views checked to be the live job's own.
#[derive(Debug, PartialEq, Default)]
struct Indexed {
    runs: BTreeMap<RunId, JobId>,
    by_executor: ByExecutor,
    unacked: BTreeMap<ExecutorName, BTreeMap<JobId, RunId>>,
    killing: BTreeMap<ExecutorName, BTreeSet<JobId>>,
    job_sets: BTreeMap<(QueueName, JobSetName), BTreeSet<JobId>>,
    dependents: BTreeMap<JobId, BTreeSet<JobId>>,
    queues: BTreeMap<QueueName, QueueIndexes>,
}

fn demand(r: &Resources) -> Vec<(String, i64)> {
    r.iter().filter(|(_, v)| *v != 0).map(|(k, v)| (k.to_string(), v)).collect()
}

/// What the state's indexes hold.
fn held(s: &State) -> Indexed {
    let own_view =
        |id: &JobId, info: &Arc<crate::scheduler::JobInfo>| s.jobs.get(id).is_some_and(|j| Arc::ptr_eq(&j.info, info));
    let mut out = Indexed { runs: s.runs.iter().map(|(r, j)| (*r, *j)).collect(), ..Default::default() };
    for (e, jobs) in &s.by_executor {
        for (id, v) in jobs {
            assert!(own_view(id, &v.info), "the executor index holds a stale view of {id}");
            out.by_executor.entry(e.clone()).or_default().insert(*id, (v.node.clone(), v.leased_at_ms, v.stopping));
        }
    }
    for (e, jobs) in s.unacked.iter().filter(|(_, j)| !j.is_empty()) {
        out.unacked.insert(e.clone(), jobs.clone());
    }
    for (e, jobs) in s.killing.iter().filter(|(_, j)| !j.is_empty()) {
        out.killing.insert(e.clone(), jobs.clone());
    }
    for (k, jobs) in s.job_sets.iter().filter(|(_, j)| !j.is_empty()) {
        out.job_sets.insert(k.clone(), jobs.clone());
    }
    for (k, jobs) in s.dependents.iter().filter(|(_, j)| !j.is_empty()) {
        out.dependents.insert(*k, jobs.clone());
    }
    for (name, qs) in &s.queues {
        for (key, info) in &qs.queued {
            assert!(own_view(&info.id, info), "the queue order holds a stale view of {}", info.id);
            assert_eq!(*key, s.queue_key(&s.jobs.get(&info.id).expect("queued job is live").record));
        }
        let order = qs.queued.values().map(|i| i.id).collect();
        let counts = qs.counts.iter().filter(|(_, c)| **c > 0).map(|(k, c)| (*k, *c)).collect();
        out.queues.insert(name.clone(), (order, demand(&qs.demand), counts));
    }
    out
}

/// What the indexes should hold, read from the live jobs' records alone.
fn expected(s: &State) -> Indexed {
    let mut out = Indexed::default();
    let mut order: BTreeMap<QueueName, Vec<(QueueKey, JobId)>> = BTreeMap::new();
    let mut demands: BTreeMap<QueueName, Resources> = BTreeMap::new();
    let mut counts: BTreeMap<QueueName, BTreeMap<JobState, u64>> = BTreeMap::new();
    for j in s.jobs.values() {
        let r = &j.record;
        out.job_sets.entry((r.queue.clone(), r.job_set.clone())).or_default().insert(r.id);
        *counts.entry(r.queue.clone()).or_default().entry(r.state).or_default() += 1;
        if let Some(run) = r.active_run() {
            out.runs.insert(run.run_id, r.id);
            out.by_executor
                .entry(run.executor.clone())
                .or_default()
                .insert(r.id, (run.node.clone(), run.leased_at_ms, run.kill.is_some()));
            if run.kill.is_some() {
                out.killing.entry(run.executor.clone()).or_default().insert(r.id);
            } else if run.state == RunState::Leased {
                out.unacked.entry(run.executor.clone()).or_default().insert(r.id, run.run_id);
            }
        }
        if r.state == JobState::Queued {
            let unmet: Vec<JobId> =
                r.policies.iter().flat_map(|p| p.depends_on.iter()).filter(|d| !d.met).map(|d| d.job_id).collect();
            for d in &unmet {
                out.dependents.entry(*d).or_default().insert(r.id);
            }
            if unmet.is_empty() {
                order.entry(r.queue.clone()).or_default().push((s.queue_key(r), r.id));
                demands.entry(r.queue.clone()).or_default().add(&j.info.requirements.requests);
            }
        }
    }
    for name in s.queues.keys() {
        let mut o = order.remove(name).unwrap_or_default();
        o.sort_by_key(|a| a.0);
        let d = demands.remove(name).map(|d| demand(&d)).unwrap_or_default();
        out.queues.insert(
            name.clone(),
            (o.into_iter().map(|(_, id)| id).collect(), d, counts.remove(name).unwrap_or_default()),
        );
    }
    out
}

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

/// One step of the property below; job numbers are taken modulo the jobs submitted.
#[derive(Debug, Clone)]
enum Step {
    /// Lease every queued job the scheduler would be offered.
    LeaseAll,
    /// The executor reports the job's active run at this stage.
    Report(usize, RunEventKind, i32),
    Cancel(usize),
    Preempt(usize),
    Reprioritize(usize, u32),
    /// The executor goes away: its runs are requeued (or failed).
    ExecutorLost,
}

fn step() -> impl Strategy<Value = Step> {
    let kind = prop_oneof![
        Just(RunEventKind::Pending),
        Just(RunEventKind::Running),
        Just(RunEventKind::Succeeded),
        Just(RunEventKind::Failed),
    ];
    prop_oneof![
        3 => Just(Step::LeaseAll),
        6 => (0usize..8, kind, prop_oneof![Just(0), Just(1), Just(75)]).prop_map(|(j, k, e)| Step::Report(j, k, e)),
        1 => (0usize..8).prop_map(Step::Cancel),
        1 => (0usize..8).prop_map(Step::Preempt),
        1 => (0usize..8, 0u32..4).prop_map(|(j, p)| Step::Reprioritize(j, p)),
        1 => Just(Step::ExecutorLost),
    ]
}

/// Job `i` (from 1) waits for an earlier job when `dep` says so, and retries exit code 75.
fn job(i: usize, dep: Option<(usize, u8)>, priority: u32) -> PolicyJob {
    let depends_on = dep
        .filter(|_| i > 1)
        .map(|(p, c)| SubmitDependencyRecord {
            job_id: id(1 + (p % (i - 1)) as u128),
            on: [Cond::Succeeded, Cond::Failed, Cond::Ended][c as usize % 3],
            ended: None,
        })
        .into_iter()
        .collect();
    let retry = Some(RetryRecord {
        max_attempts: 3,
        on_exit_codes: vec![75],
        on_oom: false,
        on_node_failure: true,
        backoff_ms: 0,
    });
    let new = NewJob { priority, ..new_job(i as u128, None, "1") };
    PolicyJob { job: NamespacedJob::from(new), policies: SubmitPoliciesRecord { depends_on, retry } }
}

proptest! {
    #[test]
    fn the_indexes_hold_what_the_records_say_after_every_command(
        jobs in proptest::collection::vec((proptest::option::of((0usize..8, 0u8..3)), 0u32..4), 1..8),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let mut s = state();
        let n = jobs.len();
        let submitted: Vec<PolicyJob> = jobs.iter().enumerate().map(|(i, (d, p))| job(i + 1, *d, *p)).collect();
        s.apply(Command::Submit { queue: q("A"), job_set: set("s"), at_ms: 10, owner: None, jobs: submitted }, ApplyContext::default());
        prop_assert_eq!(held(&s), expected(&s));
        let mut run = 1000u128;
        for st in steps {
            let nth = |k: usize| 1 + (k % n) as u128;
            let active = |s: &State, j: u128| s.jobs.get(&id(j)).and_then(|l| l.record.active_run()).map(|r| r.run_id);
            match st {
                Step::LeaseAll => {
                    let queued: Vec<JobId> = s.queues[&q("A")].queued.values().map(|j| j.id).collect();
                    for j in queued {
                        run += 1;
                        lease(&mut s, j.as_u128(), run, 0, 0);
                    }
                }
                Step::Report(k, kind, exit) => {
                    let j = nth(k);
                    let Some(r) = active(&s, j) else { continue };
                    report(&mut s, r.as_u128(), j, kind, Some(exit));
                }
                Step::Cancel(k) => {
                    let cmd = Command::Cancel {
                        queue: q("A"),
                        job_set: set("s"),
                        job_ids: Some(vec![id(nth(k))]),
                        states: None,
                        reason: "test".into(),
                        at_ms: 40,
                    };
                    s.apply(cmd, ApplyContext::default());
                }
                Step::Preempt(k) => {
                    preempt(&mut s, nth(k));
                }
                Step::Reprioritize(k, p) => {
                    let cmd = Command::Reprioritize {
                        queue: q("A"),
                        job_set: set("s"),
                        job_ids: Some(vec![id(nth(k))]),
                        priority: p,
                        at_ms: 40,
                    };
                    s.apply(cmd, ApplyContext::default());
                }
                Step::ExecutorLost => {
                    s.apply(Command::ExecutorLost { executor: exec("e1"), at_ms: 50, max_attempted_runs: 5 }, ApplyContext::default());
                    // Back, with its node, for the next leases.
                    let fresh = state();
                    let nodes: Vec<NodeRecord> = fresh.executors.values().flat_map(|e| e.nodes().iter().cloned().map(NodeRecord::from)).collect();
                    s.apply(Command::UpsertExecutor { executor: exec("e1"), nodes, at_ms: 60 }, ApplyContext::default());
                }
            }
            prop_assert_eq!(held(&s), expected(&s), "after {:?}", st);
        }
    }
}
