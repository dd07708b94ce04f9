//! `convoy bench groups`: the growth past one Raft group that docs/scaling.md proposes (one group
//! per pool, a router in front), simulated with the real scheduler. The synthetic cluster of
//! `bench schedule` is cut into equal blocks of nodes, one pool each, and one cycle is run three
//! ways:
//! - **one pool**: the same nodes as one pool in one group, as they would be deployed today;
//! - **pools in one group**: the blocks as pools of one group, whose leader schedules them in turn;
//! - **groups**: one group per pool, each holding the jobs the router sends it, each scheduled
//!   alone (on its own leader: the round takes as long as the slowest group).
//!
//! It prints each way's time and placements, whether the groups placed exactly what the one group
//! placed, and how far each queue's share of the allocated CPU moved between the two.

use super::harness::tenths;
use super::peak_rss_mb;
use super::schedule::{CycleArgs, digest, name, synthetic};
use convoy::model::{JobId, NodeName, PoolName, QueueName};
use convoy::scheduler::{Decisions, JobInfo, QueueSnapshot, SchedulerConfig, Snapshot, schedule};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `convoy bench groups`.
#[derive(clap::Args, Debug)]
pub(crate) struct GroupsArgs {
    #[arg(long, default_value_t = 100_000)]
    nodes: usize,
    #[arg(long, default_value_t = 1_000)]
    queues: usize,
    #[arg(long, default_value_t = 2_000_000)]
    jobs: usize,
    /// Groups (and pools): the nodes are cut into this many equal blocks.
    #[arg(long, default_value_t = 2)]
    groups: usize,
    /// How the router picks a job's group.
    #[arg(long, value_enum, default_value_t = Route::Job)]
    route: Route,
    // As `bench schedule`'s; each way is run `--repeat` times.
    #[command(flatten)]
    cycle: CycleArgs,
}

/// How the router picks a job's group.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Jobs may run in any pool; the router spreads them by a hash of the job (of the gang for a
    /// gang's members, which stay together), as it would by client id.
    Job,
    /// Jobs may run in any pool; all of a queue's jobs go to one group.
    Queue,
    /// Each job names one pool (chosen by the hash of `job`) and goes to the group that owns it.
    Pinned,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Route::Job => "job",
            Route::Queue => "queue",
            Route::Pinned => "pinned",
        }
    }
}

/// The pool of group `g`.
fn pool_name(g: usize) -> PoolName {
    name(&format!("pool-{g}"))
}

/// FNV-1a: a fixed, platform-independent hash, so the same job goes to the same group in every
/// run and every build.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The group the router sends `job` (queue number `queue`) to.
fn group_of(route: Route, job: &JobInfo, queue: usize, groups: usize) -> usize {
    let h = match (route, &job.gang) {
        (Route::Queue, _) => return queue % groups,
        (_, Some(gang)) => fnv(gang.id.as_bytes()),
        (_, None) => fnv(&job.id.as_u128().to_le_bytes()),
    };
    (h % groups as u64) as usize
}

/// Puts node `i` of `n` in pool `i * groups / n`: equal blocks, each with the same mix of node
/// kinds as the whole (the synthetic kinds repeat every ten nodes).
fn cut_into_pools(snap: &mut Snapshot, groups: usize) {
    let n = snap.nodes.len();
    for (i, node) in snap.nodes.iter_mut().enumerate() {
        node.pool = pool_name(i * groups / n);
    }
}

/// With [`Route::Pinned`], each queued job names the pool of the group it is routed to.
fn pin(snap: &mut Snapshot, groups: usize) {
    for (q, qs) in snap.queues.iter_mut().enumerate() {
        for job in &mut qs.queued {
            let g = group_of(Route::Pinned, job, q, groups);
            let mut pinned = JobInfo::clone(job);
            pinned.pools = vec![pool_name(g)];
            *job = Arc::new(pinned);
        }
    }
}

/// What each group holds: the nodes of its pool and the jobs running on them, every queue (a
/// queue is created in every group) with the queued jobs routed to it.
fn split(snap: &Snapshot, route: Route, groups: usize) -> Vec<Snapshot> {
    (0..groups)
        .map(|g| {
            let pool = pool_name(g);
            let nodes: Vec<_> = snap.nodes.iter().filter(|n| n.pool == pool).cloned().collect();
            let here: HashSet<&NodeName> = nodes.iter().map(|n| &n.name).collect();
            let running = snap.running.iter().filter(|r| here.contains(&r.node)).cloned().collect();
            let queues = snap
                .queues
                .iter()
                .enumerate()
                .map(|(q, qs)| QueueSnapshot {
                    queue: qs.queue.clone(),
                    queued: qs.queued.iter().filter(|j| group_of(route, j, q, groups) == g).cloned().collect(),
                    queued_demand: None,
                })
                .collect();
            Snapshot {
                nodes,
                queues,
                running,
                rate_limits: snap.rate_limits.clone(),
                quarantined: snap.quarantined.clone(),
                usage: snap.usage.clone(),
                job_times: snap.job_times.clone(),
            }
        })
        .collect()
}

/// The fastest of `repeat` cycles over `snap`, with its decisions.
fn fastest(snap: &Snapshot, cfg: &SchedulerConfig, seed: u64, repeat: usize) -> (f64, Decisions) {
    let timed = || {
        let t = Instant::now();
        let d = schedule(snap, cfg, seed, 0);
        (t.elapsed().as_secs_f64() * 1000.0, d)
    };
    let mut best = timed();
    for _ in 1..repeat {
        let (ms, d) = timed();
        if ms < best.0 {
            best = (ms, d);
        }
    }
    best
}

/// CPU (millicores) each queue holds after a cycle: its running jobs not preempted, and its new
/// leases.
fn cpu_by_queue(snap: &Snapshot, decisions: &[&Decisions]) -> HashMap<QueueName, i64> {
    let cpu_of: HashMap<JobId, (&QueueName, i64)> = snap
        .queues
        .iter()
        .flat_map(|qs| qs.queued.iter())
        .chain(snap.running.iter().map(|r| &r.job))
        .map(|j| (j.id, (&j.queue, j.requirements.requests.get("cpu"))))
        .collect();
    let stopped: HashSet<JobId> = decisions.iter().flat_map(|d| d.preemptions.iter().map(|p| p.job_id)).collect();
    let mut held: HashMap<QueueName, i64> = HashMap::new();
    let leased = decisions.iter().flat_map(|d| d.leases.iter().map(|l| l.job_id));
    for id in snap.running.iter().map(|r| r.job.id).filter(|id| !stopped.contains(id)).chain(leased) {
        if let Some((queue, cpu)) = cpu_of.get(&id) {
            *held.entry((*queue).clone()).or_default() += cpu;
        }
    }
    held
}

/// The largest and the mean change, in percentage points, of a queue's share of the allocated CPU.
fn share_moved(a: &HashMap<QueueName, i64>, b: &HashMap<QueueName, i64>) -> (f64, f64) {
    let total = |m: &HashMap<QueueName, i64>| m.values().sum::<i64>().max(1) as f64;
    let (ta, tb) = (total(a), total(b));
    let queues: BTreeSet<&QueueName> = a.keys().chain(b.keys()).collect();
    let moved: Vec<f64> = queues
        .iter()
        .map(|q| {
            let share = |m: &HashMap<QueueName, i64>, t: f64| m.get(*q).copied().unwrap_or(0) as f64 / t;
            (share(a, ta) - share(b, tb)).abs() * 100.0
        })
        .collect();
    let max = moved.iter().copied().fold(0.0, f64::max);
    let mean = if moved.is_empty() { 0.0 } else { moved.iter().sum::<f64>() / moved.len() as f64 };
    (max, mean)
}

/// Whole cores of CPU left unallocated on `snap`'s nodes after the cycles that decided `held`.
fn idle_cores(snap: &Snapshot, held: &HashMap<QueueName, i64>) -> i64 {
    let allocatable: i64 = snap.nodes.iter().map(|n| n.allocatable.get("cpu")).sum();
    (allocatable - held.values().sum::<i64>()) / 1000
}

/// Each placement, as (job, node), and each preemption.
fn placements(decisions: &[&Decisions]) -> BTreeSet<(JobId, NodeName, bool)> {
    decisions
        .iter()
        .flat_map(|d| {
            let leases = d.leases.iter().map(|l| (l.job_id, l.node.clone(), true));
            leases.chain(d.preemptions.iter().map(|p| (p.job_id, p.node.clone(), false)))
        })
        .collect()
}

pub(super) fn run(args: GroupsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes > 0 && args.queues > 0, "--nodes and --queues must be at least 1");
    anyhow::ensure!(
        (1..=args.nodes).contains(&args.groups),
        "--groups must be at least 1 and at most --nodes ({})",
        args.nodes
    );
    let cfg = SchedulerConfig { max_queue_lookback: args.cycle.lookback, ..Default::default() };
    let one_pool = synthetic(args.nodes, args.queues, args.jobs, args.cycle.preload, args.cycle.seed);
    let (one_pool_ms, one_pool_d) = fastest(&one_pool, &cfg, args.cycle.seed, args.cycle.repeat);
    let one_pool_held = cpu_by_queue(&one_pool, &[&one_pool_d]);
    let one_pool_scheduled = one_pool_d.leases.len();
    let one_pool_digest = digest(&one_pool_d);
    drop(one_pool_d);

    let mut pools = one_pool;
    cut_into_pools(&mut pools, args.groups);
    if args.route == Route::Pinned {
        pin(&mut pools, args.groups);
    }
    let (pools_ms, pools_d) = fastest(&pools, &cfg, args.cycle.seed, args.cycle.repeat);
    let pools_held = cpu_by_queue(&pools, &[&pools_d]);

    let parts = split(&pools, args.route, args.groups);
    let mut each = Vec::new();
    let mut decided = Vec::new();
    for part in &parts {
        let (ms, d) = fastest(part, &cfg, args.cycle.seed, args.cycle.repeat);
        let queued: usize = part.queues.iter().map(|q| q.queued.len()).sum();
        each.push(serde_json::json!({
            "nodes": part.nodes.len(),
            "queued": queued,
            "cycle_ms": tenths(ms),
            "scheduled": d.leases.len(),
        }));
        decided.push((ms, d));
    }
    let groups_d: Vec<&Decisions> = decided.iter().map(|(_, d)| d).collect();
    let groups_held = cpu_by_queue(&pools, &groups_d);
    let (one, many) = (placements(&[&pools_d]), placements(&groups_d));
    let differing = one.symmetric_difference(&many).count();
    let (moved_max, moved_mean) = share_moved(&pools_held, &groups_held);
    let round_ms = decided.iter().map(|(ms, _)| *ms).fold(0.0, f64::max);
    let all_ms: f64 = decided.iter().map(|(ms, _)| *ms).sum();
    let out = serde_json::json!({
        "nodes": args.nodes,
        "queues": args.queues,
        "jobs": args.jobs,
        "groups": args.groups,
        "route": args.route.as_str(),
        "lookback": args.cycle.lookback,
        "running_before": pools.running.len(),
        "one_pool": {
            "cycle_ms": tenths(one_pool_ms),
            "scheduled": one_pool_scheduled,
            "decisions_digest": one_pool_digest,
            "idle_cpu_cores": idle_cores(&pools, &one_pool_held),
        },
        "pools_in_one_group": {
            "cycle_ms": tenths(pools_ms),
            "scheduled": pools_d.leases.len(),
            "idle_cpu_cores": idle_cores(&pools, &pools_held),
        },
        "groups_each": each,
        "groups_round_ms": tenths(round_ms),
        "groups_cycle_ms_sum": tenths(all_ms),
        "groups_scheduled": groups_d.iter().map(|d| d.leases.len()).sum::<usize>(),
        "groups_idle_cpu_cores": idle_cores(&pools, &groups_held),
        "placements_differing_from_one_group": differing,
        "queue_cpu_share_moved_pp_max": (moved_max * 1000.0).round() / 1000.0,
        "queue_cpu_share_moved_pp_mean": (moved_mean * 1000.0).round() / 1000.0,
        "peak_rss_mb": peak_rss_mb().round(),
    });
    println!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn small(preload: f64, seed: u64) -> Snapshot {
        synthetic(200, 12, 6_000, preload, seed)
    }

    fn queued_ids(snap: &Snapshot) -> Vec<JobId> {
        let mut ids: Vec<JobId> = snap.queues.iter().flat_map(|q| q.queued.iter().map(|j| j.id)).collect();
        ids.sort();
        ids
    }

    /// The groups' cycles and the one group's cycle over the same pools.
    fn both(route: Route, groups: usize, preload: f64, seed: u64) -> (Snapshot, Decisions, Vec<Decisions>) {
        let mut pools = small(preload, seed);
        cut_into_pools(&mut pools, groups);
        if route == Route::Pinned {
            pin(&mut pools, groups);
        }
        let cfg = SchedulerConfig::default();
        let one = schedule(&pools, &cfg, seed, 0);
        let many = split(&pools, route, groups).iter().map(|p| schedule(p, &cfg, seed, 0)).collect();
        (pools, one, many)
    }

    #[test]
    fn pools_are_equal_blocks_with_the_same_mix_of_nodes() {
        let mut snap = small(0.0, 1);
        cut_into_pools(&mut snap, 4);
        for g in 0..4 {
            let block: Vec<_> = snap.nodes.iter().filter(|n| n.pool == pool_name(g)).collect();
            assert_eq!(block.len(), 50);
            let gpu = block.iter().filter(|n| !n.taints.is_empty()).count();
            assert_eq!(gpu, 5, "one GPU node in ten in pool {g}");
        }
    }

    #[test]
    fn every_job_and_every_running_job_lands_in_exactly_one_group() {
        for route in [Route::Job, Route::Queue, Route::Pinned] {
            let mut snap = small(0.4, 3);
            cut_into_pools(&mut snap, 3);
            let parts = split(&snap, route, 3);
            let mut ids: Vec<JobId> = parts.iter().flat_map(queued_ids).collect();
            ids.sort();
            assert_eq!(ids, queued_ids(&snap), "{route:?}");
            assert_eq!(parts.iter().map(|p| p.running.len()).sum::<usize>(), snap.running.len());
            assert!(!snap.running.is_empty());
            for (g, p) in parts.iter().enumerate() {
                assert!(p.nodes.iter().all(|n| n.pool == pool_name(g)));
                assert_eq!(p.queues.len(), snap.queues.len(), "every queue exists in every group");
                let here: HashSet<&NodeName> = p.nodes.iter().map(|n| &n.name).collect();
                assert!(p.running.iter().all(|r| here.contains(&r.node)));
            }
        }
    }

    #[test]
    fn a_gang_goes_to_one_group_and_a_queue_route_keeps_a_queue_whole() {
        let mut snap = small(0.0, 5);
        cut_into_pools(&mut snap, 3);
        let parts = split(&snap, Route::Job, 3);
        let mut gang_group: HashMap<String, usize> = HashMap::new();
        for (g, p) in parts.iter().enumerate() {
            for j in p.queues.iter().flat_map(|q| q.queued.iter()) {
                if let Some(gang) = &j.gang {
                    assert_eq!(*gang_group.entry(gang.id.clone()).or_insert(g), g, "gang {}", gang.id);
                }
            }
        }
        assert!(!gang_group.is_empty());
        // Job routing spreads a queue over every group.
        assert!(parts.iter().all(|p| p.queues[0].queued.len() > 50));
        let parts = split(&snap, Route::Queue, 3);
        for (q, qs) in snap.queues.iter().enumerate() {
            assert_eq!(parts[q % 3].queues[q].queued.len(), qs.queued.len());
        }
    }

    #[test]
    fn jobs_pinned_to_a_pool_are_placed_by_its_group_exactly_as_by_one_group() {
        let (_, one, many) = both(Route::Pinned, 2, 0.5, 7);
        let many: Vec<&Decisions> = many.iter().collect();
        assert!(!one.leases.is_empty() && !one.preemptions.is_empty(), "the cycle places and preempts");
        assert_eq!(placements(&[&one]), placements(&many));
    }

    #[test]
    fn jobs_that_may_run_anywhere_are_placed_differently_once_routed() {
        let (pools, one, many) = both(Route::Queue, 2, 0.0, 9);
        let many: Vec<&Decisions> = many.iter().collect();
        assert_ne!(placements(&[&one]), placements(&many));
        // The one group fills both pools with any queue's jobs; each group only with its queues'.
        let (max, mean) = share_moved(&cpu_by_queue(&pools, &[&one]), &cpu_by_queue(&pools, &many));
        assert!(max > 0.0 && mean > 0.0 && mean <= max, "{max} {mean}");
    }

    #[test]
    fn shares_that_did_not_move_measure_zero() {
        let held: HashMap<QueueName, i64> = [("a", 3000), ("b", 1000)].map(|(q, c)| (q.parse().unwrap(), c)).into();
        assert_eq!(share_moved(&held, &held), (0.0, 0.0));
        let mut other = held.clone();
        other.insert("b".parse().unwrap(), 3000);
        // a: 75% → 50%, b: 25% → 50%.
        assert_eq!(share_moved(&held, &other), (25.0, 25.0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]
        /// One group holding every pool is today's deployment, whatever the route.
        #[test]
        fn one_group_decides_as_today(seed in 0u64..1_000, preload in 0.0f64..0.6) {
            for route in [Route::Job, Route::Queue, Route::Pinned] {
                let (_, one, many) = both(route, 1, preload, seed);
                prop_assert_eq!(many.len(), 1);
                prop_assert_eq!(&many[0], &one);
            }
        }

        /// Pools owned whole by groups are scheduled as they were in one group.
        #[test]
        fn pinned_jobs_decide_alike_in_groups(seed in 0u64..1_000, preload in 0.0f64..0.6, groups in 2usize..5) {
            let (_, one, many) = both(Route::Pinned, groups, preload, seed);
            let many: Vec<&Decisions> = many.iter().collect();
            prop_assert_eq!(placements(&[&one]), placements(&many));
        }
    }
}
