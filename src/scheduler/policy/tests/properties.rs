//! Property tests of the pool policies over random pools and workloads.
//!
//! `priority`: no job starts while a job of a higher priority of its line (GPU or zero-slot) is
//! left waiting in the pool; nothing non-preemptible is preempted; nothing is preempted for a job
//! of equal or lower priority, nor for a job that did not start; gangs whole; no node holds more
//! than it has. `proportional`: the targets sum to `min(capacity, Σ demand)`, none above its
//! demand, in proportion to demand × weight up to one unit; a queue given GPUs ends the cycle
//! within its target; only queues above their target lose jobs; no node holds more than it has.

use super::super::proportional::proportional_targets;
use super::super::{PoolPolicy, PoolPolicyConfig};
use super::{Cluster, Spec};
use crate::model::JobId;
use crate::scheduler::{Decisions, PreemptionReason, Snapshot};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Debug, Clone)]
struct JobGen {
    queue: usize,
    priority: u32,
    preemptible: bool,
    /// 0: a zero-slot job.
    gpus: i64,
    cpus: i64,
    /// Members, if a gang.
    gang: Option<u32>,
}

#[derive(Debug, Clone)]
struct World {
    /// GPUs per node.
    nodes: Vec<i64>,
    factors: Vec<f64>,
    rounds: Vec<Vec<JobGen>>,
    /// Per round: how many running jobs end (the oldest first).
    ends: Vec<usize>,
    preemption: bool,
}

fn job_gen(nodes: usize) -> impl Strategy<Value = JobGen> {
    (
        0usize..3,
        0u32..4,
        any::<bool>(),
        prop_oneof![1 => Just(0i64), 3 => 1i64..=2],
        1i64..=24,
        prop::option::weighted(0.15, 2u32..=3),
    )
        .prop_map(move |(queue, priority, preemptible, gpus, cpus, gang)| JobGen {
            queue,
            priority,
            preemptible,
            gpus,
            cpus,
            // Every gang fits the empty pool: a member per node at most.
            gang: gang.map(|m| m.min(nodes as u32)).filter(|m| *m > 1),
        })
}

fn world() -> impl Strategy<Value = World> {
    (1usize..=4).prop_flat_map(|n| {
        (
            prop::collection::vec(prop::sample::select(vec![2i64, 4, 8]), n..=n),
            prop::collection::vec(prop::sample::select(vec![1.0, 2.0, 0.5]), 3..=3),
            prop::collection::vec(prop::collection::vec(job_gen(n), 0..14), 1..=4),
            prop::collection::vec(0usize..6, 4..=4),
            any::<bool>(),
        )
            .prop_map(|(nodes, factors, rounds, ends, preemption)| World {
                nodes,
                factors,
                rounds,
                ends,
                preemption,
            })
    })
}

const QUEUES: [&str; 3] = ["q0", "q1", "q2"];

fn cluster(w: &World, policy: PoolPolicy) -> Cluster {
    let queues: Vec<(&str, f64)> = QUEUES.iter().copied().zip(w.factors.iter().copied()).collect();
    Cluster::with_nodes("gpu", &w.nodes, PoolPolicyConfig { policy, preemption: Some(w.preemption) }, &queues)
}

fn submit_round(c: &mut Cluster, round: usize, jobs: &[JobGen]) {
    let names: Vec<String> = (0..jobs.len()).map(|i| format!("r{round}j{i}")).collect();
    let specs: Vec<Spec> = jobs
        .iter()
        .zip(&names)
        .map(|(g, name)| {
            let s = Spec::new(name, QUEUES[g.queue], g.priority, g.gpus).cpus(g.cpus);
            let s = if g.preemptible { s.preemptible() } else { s };
            match g.gang {
                Some(m) => s.gang(m),
                None => s,
            }
        })
        .collect();
    c.submit(&specs);
}

fn gpus(j: &crate::scheduler::JobInfo) -> i64 {
    j.requirements.requests.get("nvidia.com/gpu")
}

/// No node holds more than it has once the decisions are applied.
fn check_capacity(c: &Cluster) -> Result<(), TestCaseError> {
    let snap = c.snapshot();
    let mut used: HashMap<&str, crate::model::Resources> = HashMap::new();
    for r in &snap.running {
        used.entry(r.node.as_str()).or_default().add(&r.job.requirements.requests);
    }
    for n in &snap.nodes {
        if let Some(u) = used.get(n.name.as_str()) {
            prop_assert!(u.fits_in(&n.allocatable), "{} over-committed: {u:?}", n.name);
        }
    }
    Ok(())
}

fn check_priority_cycle(snap: &Snapshot, d: &Decisions) -> Result<(), TestCaseError> {
    let queued: HashMap<JobId, &std::sync::Arc<crate::scheduler::JobInfo>> =
        snap.queues.iter().flat_map(|q| q.queued.iter()).map(|j| (j.id, j)).collect();
    let running: HashMap<JobId, &crate::scheduler::RunningJob> = snap.running.iter().map(|r| (r.job.id, r)).collect();
    let leased: BTreeSet<JobId> = d.leases.iter().map(|l| l.job_id).collect();
    let failed: BTreeSet<JobId> = d.failures.iter().map(|f| f.job_id).collect();
    // Head-of-line blocking: every job left waiting could run in the empty pool, so no job of a
    // lower priority (higher number) of its line starts.
    for l in &d.leases {
        let j = queued[&l.job_id];
        for k in queued.values() {
            if leased.contains(&k.id) || failed.contains(&k.id) || (gpus(k) > 0) != (gpus(j) > 0) {
                continue;
            }
            prop_assert!(
                j.priority <= k.priority,
                "job {} of priority {} started while {} of priority {} waits",
                j.id,
                j.priority,
                k.id,
                k.priority
            );
        }
    }
    // Gangs whole.
    let mut gangs: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for j in queued.values() {
        if let Some(g) = &j.gang {
            let e = gangs.entry(g.id.as_str()).or_default();
            e.0 += 1;
            e.1 += usize::from(leased.contains(&j.id));
        }
    }
    for (g, (all, placed)) in gangs {
        prop_assert!(placed == 0 || placed == all, "gang {g}: {placed} of {all} placed");
    }
    // Preemptions: of preemptible jobs, for a job of strictly higher priority of the same line
    // that started in this cycle.
    for p in &d.preemptions {
        let v = running[&p.job_id];
        prop_assert_eq!(v.job.priority_class.as_str(), "preemptible", "{} is not preemptible", p.job_id);
        let by = match &p.reason {
            PreemptionReason::JobPriority { by, .. } | PreemptionReason::GangMember { by, .. } => *by,
            other => return Err(TestCaseError::fail(format!("{}: unexpected reason {other}", p.job_id))),
        };
        prop_assert!(leased.contains(&by), "{} preempted for {by}, which did not start", p.job_id);
        let b = queued[&by];
        prop_assert!(b.priority < v.job.priority, "{} preempted for {by} of priority {}", p.job_id, b.priority);
        prop_assert_eq!(gpus(b) > 0, gpus(&v.job) > 0, "{} preempted across lines", p.job_id);
    }
    if !snap.running.is_empty() || !queued.is_empty() {
        prop_assert_eq!(d.pools[0].policy, PoolPolicy::Priority);
    }
    Ok(())
}

fn check_proportional_cycle(snap: &Snapshot, d: &Decisions) -> Result<(), TestCaseError> {
    let busy = !snap.running.is_empty() || snap.queues.iter().any(|q| !q.queued.is_empty());
    let Some(report) = d.pools.first() else {
        prop_assert!(!busy, "a busy pool reported nothing");
        return Ok(());
    };
    if busy {
        prop_assert_eq!(report.policy, PoolPolicy::Proportional);
    }
    let target: HashMap<&str, i64> = report
        .queues
        .iter()
        .filter_map(|q| Some((q.queue.as_str(), q.proportional_target.as_ref()?.get("nvidia.com/gpu"))))
        .collect();
    let capacity: i64 = snap.nodes.iter().map(|n| n.allocatable.get("nvidia.com/gpu")).sum();
    let queued: HashMap<JobId, &std::sync::Arc<crate::scheduler::JobInfo>> =
        snap.queues.iter().flat_map(|q| q.queued.iter()).map(|j| (j.id, j)).collect();
    let preempted: BTreeSet<JobId> = d.preemptions.iter().map(|p| p.job_id).collect();
    let mut before: HashMap<&str, i64> = HashMap::new();
    let mut after: HashMap<&str, i64> = HashMap::new();
    for r in &snap.running {
        *before.entry(r.job.queue.as_str()).or_default() += gpus(&r.job);
        if !preempted.contains(&r.job.id) {
            *after.entry(r.job.queue.as_str()).or_default() += gpus(&r.job);
        }
    }
    let mut gpu_lease: BTreeSet<&str> = BTreeSet::new();
    for l in &d.leases {
        let j = queued[&l.job_id];
        *after.entry(j.queue.as_str()).or_default() += gpus(j);
        if gpus(j) > 0 {
            gpu_lease.insert(j.queue.as_str());
        }
    }
    prop_assert!(after.values().sum::<i64>() <= capacity, "more GPUs held than the pool has");
    prop_assert!(target.values().sum::<i64>() <= capacity);
    for q in gpu_lease {
        let t = target.get(q).copied().unwrap_or(0);
        prop_assert!(after[q] <= t, "queue {q} given GPUs up to {} above its target {t}", after[q]);
    }
    for p in &d.preemptions {
        let q = p.queue.as_str();
        prop_assert!(
            before.get(q).copied().unwrap_or(0) > target.get(q).copied().unwrap_or(0),
            "{} of {q} preempted though {q} was within its target",
            p.job_id
        );
        let expected =
            matches!(p.reason, PreemptionReason::ProportionalTarget { .. } | PreemptionReason::GangMember { .. });
        prop_assert!(expected, "{}: unexpected reason {}", p.job_id, p.reason);
    }
    check_proportional_lower_bound(snap, d, &target, &after)
}

/// The lower bound: a queue left below its target has no waiting GPU job (not of a gang) that
/// would fit on a node now and keep it within its target. Resources a preemption frees are
/// free only once the preempted job has ended, after the cycle.
fn check_proportional_lower_bound(
    snap: &Snapshot,
    d: &Decisions,
    target: &HashMap<&str, i64>,
    after: &HashMap<&str, i64>,
) -> Result<(), TestCaseError> {
    let queued: HashMap<JobId, &std::sync::Arc<crate::scheduler::JobInfo>> =
        snap.queues.iter().flat_map(|q| q.queued.iter()).map(|j| (j.id, j)).collect();
    let mut free: HashMap<&str, crate::model::Resources> =
        snap.nodes.iter().map(|n| (n.name.as_str(), n.allocatable.clone())).collect();
    for r in &snap.running {
        if let Some(f) = free.get_mut(r.node.as_str()) {
            f.sub(&r.job.requirements.requests);
        }
    }
    let leased: BTreeSet<JobId> = d.leases.iter().map(|l| l.job_id).collect();
    for l in &d.leases {
        if let Some(f) = free.get_mut(l.node.as_str()) {
            f.sub(&queued[&l.job_id].requirements.requests);
        }
    }
    let failed: BTreeSet<JobId> = d.failures.iter().map(|f| f.job_id).collect();
    for j in queued.values() {
        if leased.contains(&j.id) || failed.contains(&j.id) || j.gang.is_some() || gpus(j) == 0 {
            continue;
        }
        let q = j.queue.as_str();
        let room = target.get(q).copied().unwrap_or(0) - after.get(q).copied().unwrap_or(0);
        if gpus(j) > room {
            continue;
        }
        let fits = free.iter().find(|(_, f)| j.requirements.requests.fits_in(f)).map(|(n, _)| *n);
        prop_assert!(
            fits.is_none(),
            "job {} of queue {q} ({} GPUs, {room} below its target) waits though it fits node {:?}",
            j.id,
            gpus(j),
            fits
        );
    }
    Ok(())
}

fn run(w: &World, policy: PoolPolicy) -> Result<(), TestCaseError> {
    let mut c = cluster(w, policy);
    for (r, jobs) in w.rounds.iter().enumerate() {
        // The oldest running jobs end.
        let snap = c.snapshot();
        let ending: Vec<String> =
            snap.running.iter().take(w.ends[r % w.ends.len()]).map(|rj| c.name(rj.job.id).to_string()).collect();
        c.end(&ending.iter().map(String::as_str).collect::<Vec<_>>());
        submit_round(&mut c, r, jobs);
        let snap = c.snapshot();
        let d = crate::scheduler::schedule(&snap, &c.cfg, 7, 1_000 * (r as i64 + 1));
        match policy {
            PoolPolicy::Priority => check_priority_cycle(&snap, &d)?,
            _ => check_proportional_cycle(&snap, &d)?,
        }
        c.apply(&d);
        check_capacity(&c)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn priority_pools_keep_strict_priority(w in world()) {
        run(&w, PoolPolicy::Priority)?;
    }

    #[test]
    fn proportional_pools_keep_to_their_targets(w in world()) {
        run(&w, PoolPolicy::Proportional)?;
    }

    #[test]
    fn proportional_targets_are_proportional_and_capped(
        capacity in 0i64..64,
        claims in prop::collection::vec((0i64..40, prop::sample::select(vec![0.5, 1.0, 2.0, 3.0])), 1..6),
    ) {
        let demands: Vec<i64> = claims.iter().map(|c| c.0).collect();
        let weights: Vec<f64> = claims.iter().map(|c| c.1).collect();
        let t = proportional_targets(capacity, &demands, &weights);
        prop_assert_eq!(t.iter().sum::<i64>(), capacity.min(demands.iter().sum()));
        for i in 0..t.len() {
            prop_assert!(t[i] >= 0 && t[i] <= demands[i], "{t:?}");
        }
        // Within one unit of the continuous division: x_i = min(d_i, λ·d_i·w_i) with λ such that
        // Σ x_i = min(capacity, Σ d) (found by bisection, independently of the code under test).
        let total = capacity.min(demands.iter().sum()) as f64;
        let x = |l: f64| -> Vec<f64> {
            demands.iter().zip(&weights).map(|(&d, &w)| (d as f64).min(l * d as f64 * w)).collect()
        };
        let (mut lo, mut hi) = (0.0f64, 1e6f64);
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if x(mid).iter().sum::<f64>() < total { lo = mid } else { hi = mid }
        }
        let x = x(hi);
        for i in 0..t.len() {
            prop_assert!((t[i] as f64 - x[i]).abs() < 1.0 + 1e-6, "{t:?} vs {x:?} for {demands:?} × {weights:?}");
        }
    }
}
