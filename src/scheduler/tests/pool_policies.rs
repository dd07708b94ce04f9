//! Minimum runtime before preemption and floating resources: exact outcomes of single cycles,
//! and the rules as properties (no evicted job ran less than its minimum; a pool's floating
//! allocation never exceeds its amount).

use crate::model::{
    ExecutorName, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements,
};
use crate::scheduler::{
    Decisions, FloatingResourceConfig, JobInfo, PreemptionReason, QueueSnapshot, Reason, RunningJob, SchedulerConfig,
    Snapshot, schedule,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub(super) fn node(name: &str, cpu: i64) -> Node {
    Node {
        name: NodeName::new(name).expect("valid"),
        executor: ExecutorName::new("e").expect("valid"),
        pool: PoolName::default_pool(),
        labels: Labels::new(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", cpu.to_string().as_str()), ("memory", "64Gi")]).expect("valid"),
        unallocatable: Resources::new(),
        unschedulable: false,
    }
}

pub(super) fn job(id: u128, queue: &str, class: &str, cpu: i64, licences: i64) -> Arc<JobInfo> {
    let mut pairs = vec![("cpu".to_string(), cpu.to_string()), ("memory".to_string(), "1Gi".to_string())];
    if licences > 0 {
        pairs.push(("licence/matlab".to_string(), licences.to_string()));
    }
    let requests = Resources::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).expect("valid");
    Arc::new(JobInfo {
        id: JobId::from_u128(id),
        queue: QueueName::new(queue).expect("valid"),
        priority_class: PriorityClassName::new(class).expect("valid"),
        priority: 0,
        submit_seq: id as u64,
        requirements: Requirements::new(SchedulingRequirements { requests, ..Default::default() }),
        gang: None,
        pools: vec![],
        not_before_ms: None,
    })
}

fn running(j: &Arc<JobInfo>, node: &str, leased_at_ms: i64) -> RunningJob {
    RunningJob {
        job: j.clone(),
        executor: ExecutorName::new("e").expect("valid"),
        node: NodeName::new(node).expect("valid"),
        leased_at_ms,
    }
}

fn snapshot(nodes: Vec<Node>, queues: &[&str], queued: &[Arc<JobInfo>], running: Vec<RunningJob>) -> Snapshot {
    let queues = queues
        .iter()
        .map(|q| QueueSnapshot {
            queue: Queue::new(QueueName::new(q).expect("valid"), 1.0),
            queued: queued.iter().filter(|j| j.queue.as_str() == *q).cloned().collect(),
            queued_demand: None,
        })
        .collect();
    Snapshot { nodes, queues, running, ..Default::default() }
}

fn licences(n: &str) -> SchedulerConfig {
    SchedulerConfig {
        floating_resources: vec![FloatingResourceConfig {
            name: "licence/matlab".parse().expect("valid"),
            pools: [(PoolName::default_pool(), n.to_string())].into_iter().collect(),
        }],
        ..Default::default()
    }
}

fn reasons(d: &Decisions) -> BTreeMap<u128, String> {
    d.unscheduled.iter().map(|u| (u.job_id.as_u128(), u.reason.to_string())).collect()
}

/// Queue A fills an 8-cpu node with preemptible jobs leased at t=0; queue B asks for 8 more.
fn over_share() -> Snapshot {
    let a: Vec<Arc<JobInfo>> = (1..=8).map(|i| job(i, "A", "preemptible", 1, 0)).collect();
    let b: Vec<Arc<JobInfo>> = (11..=18).map(|i| job(i, "B", "preemptible", 1, 0)).collect();
    snapshot(vec![node("n", 8)], &["A", "B"], &b, a.iter().map(|j| running(j, "n", 0)).collect())
}

#[test]
fn a_queue_over_its_share_keeps_jobs_younger_than_the_minimum() {
    let cfg = SchedulerConfig { min_runtime_before_preemption: Duration::from_secs(60), ..Default::default() };
    let s = over_share();
    // At t=10 s they have run 10 s of 60: nothing is evicted, and B's jobs say why.
    let d = schedule(&s, &cfg, 0, 10_000);
    assert!(d.preemptions.is_empty() && d.leases.is_empty());
    assert_eq!(d.pools[0].evictions_spared_min_runtime, 8);
    assert_eq!(
        reasons(&d)[&11],
        "no node with 1 cpu free in pool default; fair-share eviction spared 8 running jobs that ran less than \
         min_runtime_before_preemption (the first may be evicted in 50s)"
    );
    assert!(matches!(&*d.unscheduled[0].reason, Reason::MinRuntime { spared: 8, ready_in_seconds: 50, .. }));
    // At t=60 s they have: half of A's jobs make room for B, as without the setting.
    let d = schedule(&s, &cfg, 0, 60_000);
    assert_eq!(d.preemptions.len(), 4);
    assert_eq!(d.leases.len(), 4);
    assert_eq!(d.pools[0].evictions_spared_min_runtime, 0);
    // Exactly as without the setting.
    assert_eq!(d, schedule(&s, &SchedulerConfig::default(), 0, 60_000));
}

#[test]
fn a_priority_class_overrides_the_global_minimum() {
    let mut cfg = SchedulerConfig { min_runtime_before_preemption: Duration::from_secs(60), ..Default::default() };
    // The class's own minimum of 0 s: its jobs may be evicted at once.
    cfg.priority_classes[1].min_runtime_before_preemption = Some(Duration::ZERO);
    let d = schedule(&over_share(), &cfg, 0, 10_000);
    assert_eq!(d.preemptions.len(), 4);
    // And a class minimum with no global one.
    let mut cfg = SchedulerConfig::default();
    cfg.priority_classes[1].min_runtime_before_preemption = Some(Duration::from_secs(30));
    assert!(schedule(&over_share(), &cfg, 0, 10_000).preemptions.is_empty());
    assert_eq!(schedule(&over_share(), &cfg, 0, 30_000).preemptions.len(), 4);
}

#[test]
fn urgency_preemption_follows_its_own_minimum_off_by_default() {
    let a: Vec<Arc<JobInfo>> = (1..=8).map(|i| job(i, "A", "preemptible", 1, 0)).collect();
    let urgent = vec![job(20, "A", "default", 2, 0)];
    let s = snapshot(vec![node("n", 8)], &["A"], &urgent, a.iter().map(|j| running(j, "n", 0)).collect());
    let fair_share_only = SchedulerConfig {
        min_runtime_before_preemption: Duration::from_secs(60),
        node_eviction_probability: 0.0,
        ..Default::default()
    };
    let d = schedule(&s, &fair_share_only, 0, 10_000);
    assert_eq!(d.preemptions.len(), 2, "the fair-share minimum does not hold urgency back");
    assert!(d.preemptions.iter().all(|p| matches!(p.reason, PreemptionReason::Urgency { .. })));
    let both = SchedulerConfig { min_runtime_before_urgency_preemption: Duration::from_secs(60), ..fair_share_only };
    let d = schedule(&s, &both, 0, 10_000);
    assert!(d.preemptions.is_empty() && d.leases.is_empty());
    assert!(reasons(&d)[&20].starts_with("no node with 2 cpu free"), "{:?}", reasons(&d));
    assert_eq!(schedule(&s, &both, 0, 60_000).preemptions.len(), 2);
}

#[test]
fn three_licences_run_three_of_five_jobs_and_the_next_when_one_ends() {
    let cfg = licences("3");
    let jobs: Vec<Arc<JobInfo>> = (1..=5).map(|i| job(i, "A", "default", 1, 1)).collect();
    let d = schedule(&snapshot(vec![node("n", 32)], &["A"], &jobs, vec![]), &cfg, 0, 0);
    let leased: Vec<u128> = d.leases.iter().map(|l| l.job_id.as_u128()).collect();
    assert_eq!(leased, vec![1, 2, 3]);
    let why = "pool default has 0 of 3 licence/matlab left (floating resource); the job needs 1";
    assert_eq!(reasons(&d), [(4, why.to_string()), (5, why.to_string())].into_iter().collect());
    let f = &d.pools[0].floating[0];
    assert_eq!((f.resource.as_str(), f.capacity, f.allocated), ("licence/matlab", 3000, 3000));
    // Job 1 ended: two still hold licences, so one more starts.
    let held = vec![running(&jobs[1], "n", 0), running(&jobs[2], "n", 0)];
    let d = schedule(&snapshot(vec![node("n", 32)], &["A"], &jobs[3..], held), &cfg, 0, 1000);
    assert_eq!(d.leases.iter().map(|l| l.job_id.as_u128()).collect::<Vec<_>>(), vec![4]);
    assert_eq!(reasons(&d)[&5], why);
}

#[test]
fn a_floating_resource_is_checked_per_pool_not_per_node() {
    // Two licences asked at once by one job on two small nodes: node fit ignores the licences,
    // the pool has them.
    let cfg = licences("2");
    let d = schedule(
        &snapshot(vec![node("a", 1), node("b", 1)], &["A"], &[job(1, "A", "default", 1, 2)], vec![]),
        &cfg,
        0,
        0,
    );
    assert_eq!(d.leases.len(), 1);
    // More than the pool has: it waits, saying how much is left.
    let d = schedule(&snapshot(vec![node("a", 1)], &["A"], &[job(1, "A", "default", 1, 3)], vec![]), &cfg, 0, 0);
    assert_eq!(reasons(&d)[&1], "pool default has 2 of 2 licence/matlab left (floating resource); the job needs 3");
    // Without the floating resource the request names a resource no node offers.
    let d = schedule(
        &snapshot(vec![node("a", 1)], &["A"], &[job(1, "A", "default", 1, 1)], vec![]),
        &SchedulerConfig::default(),
        0,
        0,
    );
    assert_eq!(reasons(&d)[&1], "no node in pool default offers licence/matlab");
}

// ---- properties ----

#[derive(Debug, Clone)]
struct Gen {
    queue: usize,
    preemptible: bool,
    cpu: i64,
    licences: i64,
}

fn job_gen() -> impl Strategy<Value = Gen> {
    (0usize..3, any::<bool>(), 1i64..=4, prop::sample::select(vec![0i64, 0, 1, 2]))
        .prop_map(|(queue, preemptible, cpu, licences)| Gen { queue, preemptible, cpu, licences })
}

const QUEUES: [&str; 3] = ["A", "B", "C"];

/// Runs `rounds` of (submit, cycle, apply, finish every `finish_every`-th running job) and checks
/// `check` on each cycle's snapshot and decisions.
fn run_rounds(
    cfg: &SchedulerConfig,
    nodes: &[i64],
    rounds: &[Vec<Gen>],
    ages: &[i64],
    finish_every: usize,
    mut check: impl FnMut(&Snapshot, &Decisions, i64) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let nodes: Vec<Node> = nodes.iter().enumerate().map(|(i, c)| node(&format!("n{i}"), *c)).collect();
    let (mut queued, mut run): (Vec<Arc<JobInfo>>, Vec<RunningJob>) = (vec![], vec![]);
    let mut id = 0u128;
    for (r, batch) in rounds.iter().enumerate() {
        let now = (r as i64 + 1) * 20_000;
        for g in batch {
            id += 1;
            queued.push(job(
                id,
                QUEUES[g.queue],
                if g.preemptible { "preemptible" } else { "default" },
                g.cpu,
                g.licences,
            ));
        }
        let s = snapshot(nodes.clone(), &QUEUES, &queued, run.clone());
        let d = schedule(&s, cfg, r as u64, now);
        check(&s, &d, now)?;
        let by_id: HashMap<JobId, Arc<JobInfo>> = queued.iter().map(|j| (j.id, j.clone())).collect();
        run.retain(|x| !d.preemptions.iter().any(|p| p.job_id == x.job.id));
        for (k, l) in d.leases.iter().enumerate() {
            // Leased some time before now, so that ages vary.
            let age = ages.get(k % ages.len().max(1)).copied().unwrap_or(0);
            run.push(RunningJob {
                job: by_id[&l.job_id].clone(),
                executor: l.executor.clone(),
                node: l.node.clone(),
                leased_at_ms: now - age,
            });
        }
        queued.retain(|j| !d.leases.iter().any(|l| l.job_id == j.id));
        let mut k = 0;
        run.retain(|_| {
            k += 1;
            finish_every == 0 || k % finish_every != 0
        });
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200),
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_job_is_evicted_before_its_minimum_runtime(
        nodes in prop::collection::vec(prop::sample::select(vec![4i64, 8, 16]), 1..4),
        rounds in prop::collection::vec(prop::collection::vec(job_gen(), 0..12), 2..5),
        ages in prop::collection::vec(0i64..40_000, 1..8),
        min_s in 1u64..50,
        class_min in prop::option::of(0u64..50),
        urgency in any::<bool>(),
    ) {
        let mut cfg = SchedulerConfig { min_runtime_before_preemption: Duration::from_secs(min_s), ..Default::default() };
        cfg.priority_classes[1].min_runtime_before_preemption = class_min.map(Duration::from_secs);
        if urgency {
            cfg.min_runtime_before_urgency_preemption = Duration::from_secs(min_s);
        }
        let min_ms = class_min.unwrap_or(min_s) as i64 * 1000;
        run_rounds(&cfg, &nodes, &rounds, &ages, 3, |s, d, now| {
            let leased: HashMap<JobId, i64> = s.running.iter().map(|r| (r.job.id, r.leased_at_ms)).collect();
            for p in &d.preemptions {
                let ran = now - leased[&p.job_id];
                match p.reason {
                    // A job old enough for fair-share eviction may be evicted and its place
                    // taken by a more urgent job (reported as urgency).
                    PreemptionReason::Urgency { .. } => prop_assert!(!urgency || ran >= min_s as i64 * 1000 || ran >= min_ms,
                        "{} urgency-preempted after {ran} ms", p.job_id),
                    _ => prop_assert!(ran >= min_ms, "{} evicted after {ran} ms < {min_ms} ms: {}", p.job_id, p.reason),
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn a_pools_floating_allocation_never_exceeds_its_amount(
        nodes in prop::collection::vec(prop::sample::select(vec![4i64, 8, 16]), 1..4),
        rounds in prop::collection::vec(prop::collection::vec(job_gen(), 0..12), 1..5),
        amount in 0i64..5,
        finish_every in 0usize..4,
    ) {
        let cfg = licences(&amount.to_string());
        run_rounds(&cfg, &nodes, &rounds, &[0], finish_every, |s, d, _| {
            let held: i64 = s
                .running
                .iter()
                .filter(|r| !d.preemptions.iter().any(|p| p.job_id == r.job.id))
                .map(|r| r.job.requirements.requests.get("licence/matlab"))
                .sum();
            let queued: HashMap<JobId, &Arc<JobInfo>> = s.queues.iter().flat_map(|q| q.queued.iter()).map(|j| (j.id, j)).collect();
            let placed: i64 = d.leases.iter().map(|l| queued[&l.job_id].requirements.requests.get("licence/matlab")).sum();
            prop_assert!(held + placed <= amount * 1000, "{held} held + {placed} placed > {amount} licences");
            prop_assert_eq!(d.pools[0].floating[0].allocated, held + placed);
            Ok(())
        })?;
    }
}
