//! The export of the policies' inputs (issue 31): waiting dependents, retry policies and their
//! progress, back-offs, the times reservations and min-runtime read, queue guarantees and fences,
//! floating resources; and the round trip: the simulated first cycle of an exported state
//! decides what the server's own cycle decides, for the same reasons.

use super::*;
use crate::model::{
    ExecutorName, GangSpec, JobPayload, NodeName, PoolName, PreemptionPolicy, PriorityClassName, PriorityPolicy, Queue,
    Resources, RunId, SchedulingRequirements,
};
use crate::record::{
    CommandRecord, DependencyConditionRecord, NodeRecord, RetryRecord, SubmitDependencyRecord, SubmitPoliciesRecord,
};
use crate::simulate::Simulation;
use crate::state::{Command, NamespacedJob, NewJob, NewLease, PolicyJob, RunReport, RunReportKind};

/// Round 0 of the scenarios below: 200 s after the state's epoch `T`.
const T: i64 = 1_760_000_000_000;
const NOW: i64 = T + 200_000;

fn id(n: u128) -> JobId {
    JobId::from_u128(1000 + n)
}

fn job(n: u128, class: &str, requests: &[(&str, &str)], gang: Option<(&str, u32)>) -> NewJob {
    NewJob {
        id: id(n),
        client_id: None,
        priority: 0,
        priority_class: PriorityClassName::new(class).expect("name"),
        requirements: SchedulingRequirements {
            requests: Resources::parse(requests.iter().copied()).expect("quantity"),
            ..Default::default()
        }
        .into(),
        gang: gang.map(|(g, c)| {
            GangSpec { id: g.into(), cardinality: c, min_cardinality: c, node_uniformity_label: None }.into()
        }),
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_ms: 5000,
        active_deadline_seconds: 3600,
        payload: JobPayload { pod_spec: "{}".into(), services: vec![], ingresses: vec![] }.into(),
    }
}

fn plain(job: NewJob) -> PolicyJob {
    PolicyJob { job: NamespacedJob::from(job), policies: SubmitPoliciesRecord::default() }
}

fn submit(s: &mut State, queue: &str, at_ms: i64, jobs: Vec<PolicyJob>) {
    let (queue, job_set) = (QueueName::new(queue).expect("name"), JobSetName::new("set").expect("name"));
    s.apply(Command::Submit { queue, job_set, at_ms, owner: None, jobs }, ApplyContext::default());
}

fn lease(s: &mut State, job: u128, node: &str, at_ms: i64) {
    let lease = NewLease {
        job_id: id(job),
        run_id: RunId::from_u128(100 + job),
        executor: ExecutorName::new("e1").expect("name"),
        node: NodeName::new(node).expect("name"),
        pool: PoolName::default_pool(),
    };
    let cmd =
        Command::Schedule { term: 0, at_ms, leases: vec![lease], preemptions: vec![], failures: vec![], inputs: None };
    s.apply(cmd, ApplyContext::default());
}

fn report(s: &mut State, job: u128, run: u128, kind: RunReportKind, exit_code: Option<i32>, at_ms: i64) {
    let report = RunReport {
        run_id: RunId::from_u128(run),
        job_id: id(job),
        kind,
        time_ms: None,
        exit_code,
        reason: None,
        message: None,
        log_tail: None,
    };
    let executor = ExecutorName::new("e1").expect("name");
    let cmd = CommandRecord::RunEvents { executor, at_ms, events: vec![report], max_attempted_runs: 10 };
    s.apply(Command::from(cmd), ApplyContext::default());
}

fn config() -> SchedulerConfig {
    serde_yaml_ng::from_str(
        "gang_reservation_after_seconds: 60\nmax_reservations_per_pool: 2\n\
         min_runtime_before_preemption_seconds: 600\n\
         floating_resources: [{name: licence, pools: {default: '1'}}]",
    )
    .expect("config")
}

/// Queues A (guaranteed 4 cpu), B (fenced) and C; nodes n1 and n2 of 8 cpu.
/// - B's r1 (8 cpu) runs on n1, leased at T+20 s and running from T+25 s; B's r2 (4 cpu,
///   preemptible) on n2 since T+20 s; both have a deadline of an hour.
/// - A's gang g of two 8-cpu jobs has waited since T+30 s: past `gang_reservation_after`.
/// - C's x (retry on exit code 75, 3 attempts, 600 s back-off) failed its first run at T+50 s:
///   it is in back-off until T+650 s.
/// - C's d waits for r1 to succeed; C's f wants 1 cpu and the floating licence; C's e (1 cpu)
///   waits for d (so for a waiting job).
fn policy_state() -> State {
    let mut s = State::new(StateSettings::from_config(&config()));
    let ctx = ApplyContext::default;
    let mut a = Queue::new(QueueName::new("A").expect("name"), 1.0);
    a.guaranteed = Resources::parse([("cpu", "4")]).expect("quantity");
    let mut b = Queue::new(QueueName::new("B").expect("name"), 1.0);
    b.preemption_policy = PreemptionPolicy::Fence;
    b.priority_policy = PriorityPolicy::Fence;
    let c = Queue::new(QueueName::new("C").expect("name"), 1.0);
    for q in [a, b, c] {
        s.apply(Command::create_queue(q), ctx());
    }
    let node = |name: &str| {
        NodeRecord::from(Node {
            name: NodeName::new(name).expect("name"),
            executor: ExecutorName::new("e1").expect("name"),
            pool: PoolName::default_pool(),
            labels: Default::default(),
            taints: vec![],
            allocatable: Resources::parse([("cpu", "8")]).expect("quantity"),
            unallocatable: Resources::new(),
            unschedulable: false,
        })
    };
    let executor = ExecutorName::new("e1").expect("name");
    s.apply(Command::UpsertExecutor { executor, nodes: vec![node("n1"), node("n2")], at_ms: T }, ctx());
    let r1 = plain(job(1, "default", &[("cpu", "8")], None));
    let r2 = plain(job(2, "preemptible", &[("cpu", "4")], None));
    submit(&mut s, "B", T + 10_000, vec![r1, r2]);
    lease(&mut s, 1, "n1", T + 20_000);
    lease(&mut s, 2, "n2", T + 20_000);
    report(&mut s, 1, 101, RunReportKind::Running, None, T + 25_000);
    let gang = (1..=2).map(|m| plain(job(10 + m, "default", &[("cpu", "8")], Some(("g", 2))))).collect();
    submit(&mut s, "A", T + 30_000, gang);
    let retry = RetryRecord {
        max_attempts: 3,
        on_exit_codes: vec![75],
        on_oom: false,
        on_node_failure: false,
        backoff_ms: 600_000,
    };
    let x = PolicyJob {
        job: NamespacedJob::from(job(3, "default", &[("cpu", "2")], None)),
        policies: SubmitPoliciesRecord { depends_on: vec![], retry: Some(retry) },
    };
    submit(&mut s, "C", T + 35_000, vec![x]);
    lease(&mut s, 3, "n2", T + 40_000);
    report(&mut s, 3, 103, RunReportKind::Failed, Some(75), T + 50_000);
    let after = |parent: u128, on| SubmitDependencyRecord { job_id: id(parent), on, ended: None };
    let d = PolicyJob {
        job: NamespacedJob::from(job(4, "default", &[("cpu", "1")], None)),
        policies: SubmitPoliciesRecord {
            depends_on: vec![after(1, DependencyConditionRecord::Succeeded)],
            retry: None,
        },
    };
    let f = plain(job(5, "default", &[("cpu", "1"), ("licence", "1")], None));
    let e = PolicyJob {
        job: NamespacedJob::from(job(6, "default", &[("cpu", "1")], None)),
        policies: SubmitPoliciesRecord { depends_on: vec![after(4, DependencyConditionRecord::Ended)], retry: None },
    };
    submit(&mut s, "C", T + 60_000, vec![d, f, e]);
    s
}

fn entry(s: &Scenario, job: u128) -> &crate::simulate::scenario::SubmitSpec {
    let name = id(job).to_string();
    s.running.iter().chain(&s.rounds[0].submit).find(|e| e.id == name).unwrap_or_else(|| panic!("{name} exported"))
}

#[test]
fn the_clock_and_the_policy_configuration_are_exported() {
    let s = scenario_of(&policy_state(), &config(), NOW);
    assert_eq!(s.round_0_at, Some(NOW));
    let yaml = s.to_yaml("x").expect("YAML");
    assert!(yaml.contains("round_0_at: 2025-10-09T08:56:40.000Z\n"), "{yaml}");
    for key in [
        "gang_reservation_after: 1m\n",
        "max_reservations_per_pool: 2\n",
        "min_runtime_before_preemption: 10m\n",
        "floating_resources:\n  - name: licence\n    pools:\n      default: '1'\n",
    ] {
        assert!(yaml.contains(key), "{key}: {yaml}");
    }
    let back = Scenario::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!((back.config, back.round_0_at), (config(), Some(NOW)));
}

#[test]
fn queue_guarantees_and_fences_are_exported() {
    let s = scenario_of(&policy_state(), &config(), NOW);
    let yaml = s.to_yaml("x").expect("YAML");
    assert!(yaml.contains("- guaranteed:\n    cpu: '4'\n  name: A\n"), "{yaml}");
    assert!(yaml.contains("- name: B\n  preemption_policy: fence\n  priority_policy: fence\n"), "{yaml}");
    let back = Scenario::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(back.queues, s.queues);
    assert_eq!(back.queues[1].preemption_policy, PreemptionPolicy::Fence);
}

#[test]
fn running_jobs_carry_their_lease_run_and_deadline_times() {
    let s = scenario_of(&policy_state(), &config(), NOW);
    let r1 = entry(&s, 1);
    // Leased 180 s before round 0, running from 175 s before it.
    assert_eq!((r1.started_at_seconds, r1.running_at_seconds), (Some(-180.0), Some(-175.0)));
    assert_eq!(r1.active_deadline_seconds, Some(3600.0));
    // No running report: its deadline counts from the lease.
    let r2 = entry(&s, 2);
    assert_eq!((r2.started_at_seconds, r2.running_at_seconds), (Some(-180.0), None));
}

#[test]
fn queued_jobs_carry_since_when_they_wait() {
    let s = scenario_of(&policy_state(), &config(), NOW);
    // The gang was submitted 170 s before round 0; x went back to the queue when its run failed.
    assert_eq!(entry(&s, 11).queued_at_seconds, Some(-170.0));
    assert_eq!(entry(&s, 3).queued_at_seconds, Some(-150.0));
    assert_eq!(entry(&s, 5).queued_at_seconds, Some(-140.0));
    assert_eq!(entry(&s, 5).active_deadline_seconds, Some(3600.0));
}

#[test]
fn a_retried_job_carries_its_policy_spent_attempts_and_back_off() {
    let s = scenario_of(&policy_state(), &config(), NOW);
    let x = entry(&s, 3);
    let retry = x.retry.as_ref().expect("retry exported");
    assert_eq!(
        (retry.max_attempts, retry.on_exit_codes.as_slice(), retry.on_node_failure, retry.backoff_seconds),
        (3, &[75][..], false, 600)
    );
    assert_eq!(x.attempts_spent, 1);
    // Back-off until T+650 s: 450 s after round 0.
    assert_eq!(x.backoff_until_seconds, Some(450.0));
    // Once the back-off is over, it is not written.
    let later = scenario_of(&policy_state(), &config(), T + 650_000);
    assert_eq!(entry(&later, 3).backoff_until_seconds, None);
    // A job without a policy has none.
    assert!(entry(&s, 5).retry.is_none() && entry(&s, 5).attempts_spent == 0);
}

#[test]
fn waiting_jobs_are_exported_with_what_they_wait_for() {
    let s = scenario_of(&policy_state(), &config(), NOW);
    let submitted: Vec<String> = s.rounds[0].submit.iter().map(|e| e.id.clone()).collect();
    let ids: Vec<String> = [11, 12, 3, 4, 5, 6].map(|n| id(n).to_string()).to_vec();
    assert_eq!(submitted, ids, "in submission order, the waiting ones among the others");
    let deps = |n| entry(&s, n).depends_on.iter().map(|d| (d.id.clone(), d.on.as_str())).collect::<Vec<_>>();
    assert_eq!(deps(4), vec![(id(1).to_string(), "succeeded")], "a running job's simulate name");
    assert_eq!(deps(6), vec![(id(4).to_string(), "ended")], "a waiting job's simulate name");
    assert!(deps(5).is_empty());
    s.validate().expect("a valid scenario");
}

#[test]
fn a_job_waiting_for_a_job_the_scenario_does_not_hold_is_left_out() {
    let mut state = policy_state();
    // The executor stops reporting n1, where r1 (which d waits for) runs: r1 is left out, and so
    // are d and e, which waits for d.
    let n2 = NodeRecord::from(Node {
        name: NodeName::new("n2").expect("name"),
        executor: ExecutorName::new("e1").expect("name"),
        pool: PoolName::default_pool(),
        labels: Default::default(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "8")]).expect("quantity"),
        unallocatable: Resources::new(),
        unschedulable: false,
    });
    let executor = ExecutorName::new("e1").expect("name");
    state.apply(Command::UpsertExecutor { executor, nodes: vec![n2], at_ms: T + 70_000 }, ApplyContext::default());
    let s = scenario_of(&state, &config(), NOW);
    let submitted: Vec<String> = s.rounds[0].submit.iter().map(|e| e.id.clone()).collect();
    assert_eq!(submitted, [11, 12, 3, 5].map(|n| id(n).to_string()).to_vec());
    s.validate().expect("a valid scenario");
}

#[test]
fn a_met_dependency_is_not_written() {
    let mut state = policy_state();
    // r1 succeeds: d is released (its dependency met) and e still waits for d.
    report(&mut state, 1, 101, RunReportKind::Succeeded, Some(0), T + 100_000);
    let s = scenario_of(&state, &config(), NOW);
    assert!(entry(&s, 4).depends_on.is_empty());
    assert_eq!(entry(&s, 6).depends_on.len(), 1);
    s.validate().expect("a valid scenario");
}

/// A cycle's decisions as comparable JSON: the simulation's job ids (`names[i]` is job `i + 1`'s
/// name) written as the names, which are the server's ids; the waiting jobs sorted.
fn comparable(d: &crate::scheduler::Decisions, names: Option<&[String]>) -> serde_json::Value {
    let mut text = serde_json::to_string(d).expect("JSON");
    for (i, name) in names.unwrap_or_default().iter().enumerate() {
        text = text.replace(&JobId::from_u128(i as u128 + 1).to_string(), name);
    }
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    if let Some(list) = v["unscheduled"].as_array_mut() {
        list.sort_by_key(|u| u["job_id"].to_string());
    }
    v
}

#[test]
fn the_simulated_first_cycle_decides_as_the_server_for_the_same_reasons() {
    let state = policy_state();
    let cfg = config();
    // The server's cycle at NOW, on the snapshot it reads.
    let mut snapshot = state.scheduling_snapshot(cfg.max_queue_lookback, RateLimiterState::default());
    state.add_job_times(&mut snapshot, &cfg);
    let server = crate::scheduler::schedule(&snapshot, &cfg, 0, NOW);
    // The situation is the one described: a reservation for the gang, the job in back-off, the
    // floating resource, the dependents out of the cycle.
    assert_eq!(server.reservations.len(), 1, "{server:#?}");
    assert_eq!(server.reservations[0].jobs, vec![id(11), id(12)]);
    let reason = |d: &crate::scheduler::Decisions, job: JobId| {
        d.unscheduled.iter().find(|u| u.job_id == job).map(|u| u.reason.to_string())
    };
    assert!(reason(&server, id(3)).is_some_and(|r| r.starts_with("retry back-off until 2025-10-09T09:04:")));
    assert!(server.unscheduled.iter().all(|u| u.job_id != id(4) && u.job_id != id(6)));

    let scenario = scenario_of(&state, &cfg, NOW);
    let yaml = scenario.to_yaml("round trip").expect("YAML");
    let scenario = Scenario::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let names: Vec<String> = scenario.running.iter().chain(&scenario.rounds[0].submit).map(|e| e.id.clone()).collect();
    let out = Simulation::new(scenario).run();
    let r0 = &out.rounds[0];
    let simulated = r0.decisions.as_ref().expect("decisions");
    assert_eq!(comparable(simulated, Some(&names)), comparable(&server, None));
    // The waiting jobs wait for the same jobs, in the server's words.
    for (job, parent) in [(4, 1), (6, 4)] {
        let why = state.job(id(job)).and_then(|j| j.record.waiting_on().map(|d| d.waiting_reason()));
        assert_eq!(r0.jobs[&id(job).to_string()].reason, why, "{job} waits for {parent}");
    }
    assert_eq!(r0.jobs[&id(3).to_string()].reason, reason(&server, id(3)));
}
