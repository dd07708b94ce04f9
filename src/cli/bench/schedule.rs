//! `convoy bench schedule`: one cycle over a synthetic cluster (cpu, high-memory and GPU nodes
//! across several executors) and workload (mixed sizes, some GPU jobs, some gangs, some
//! preemptible), optionally with part of the cluster already running.

use super::harness::tenths;
use super::peak_rss_mb;
use convoy::model::{
    ExecutorName, GangSpec, JobId, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements, Taint, TaintEffect, Toleration,
};
use convoy::scheduler::{
    JobInfo, PoolPolicy, PoolPolicyConfig, QueueOrderKey, QueueSnapshot, RunningJob, SchedulerConfig, Snapshot,
    schedule,
};
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `convoy bench schedule`.
#[derive(clap::Args, Debug)]
pub(crate) struct ScheduleArgs {
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    #[arg(long, default_value_t = 100)]
    queues: usize,
    #[arg(long, default_value_t = 1_000_000)]
    jobs: usize,
    #[command(flatten)]
    cycle: CycleArgs,
    /// Depth of the queue tree over the queues: 1 = flat queues (Armada's path); N > 1 puts
    /// them under N - 1 levels of parent queues of equal fan-out.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Pool policy of the (single) pool: Armada's fair share, or Determined's priority or
    /// proportional (docs/pool-policies.md).
    #[arg(long, value_enum, default_value_t = PolicyArg::FairShare)]
    policy: PolicyArg,
    /// With --policy priority: preempt lower-priority jobs (off by default); with --policy
    /// proportional preemption is on unless --no-preemption.
    #[arg(long, conflicts_with = "no_preemption")]
    preemption: bool,
    /// With --policy proportional: no preemption of queues above their targets.
    #[arg(long)]
    no_preemption: bool,
    /// After the cycle, ask why (`GET /v1/jobs/{id}/why`'s analysis) for this many of the jobs it
    /// left waiting, spread over them; the running jobs end an hour apart from one another.
    #[arg(long, default_value_t = 0)]
    why: usize,
}

/// How the synthetic workload is scheduled and timed: shared by `bench schedule` and `bench groups`.
#[derive(clap::Args, Debug)]
pub(super) struct CycleArgs {
    /// Jobs tried per queue per cycle (0 = all; a server's default is 1,000).
    #[arg(long, default_value_t = 0)]
    pub(super) lookback: usize,
    /// Fraction of the cluster already running preemptible jobs of the first tenth of the
    /// queues, so the cycle also evicts and preempts.
    #[arg(long, default_value_t = 0.0)]
    pub(super) preload: f64,
    /// Cycles to run (the figures are of the fastest; `bench schedule` lists every run's time in
    /// `cycle_ms_runs`).
    #[arg(long, default_value_t = 1)]
    pub(super) repeat: usize,
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
}

/// Hangs the snapshot's queues (the leaves) under `depth - 1` levels of parent queues, each
/// level grouping the one below by the same fan-out (`queues^(1/depth)`, at least 2).
fn add_tree(snap: &mut Snapshot, depth: usize) {
    if depth <= 1 || snap.queues.is_empty() {
        return;
    }
    let leaves = snap.queues.len();
    let fan = ((leaves as f64).powf(1.0 / depth as f64).ceil() as usize).max(2);
    let parent_name = |level: usize, k: usize| name(&format!("p{level}-{k:04}"));
    // Level depth - 1 holds the leaves' parents; level 1 is the top.
    let mut below = leaves;
    for level in (1..depth).rev() {
        let count = below.div_ceil(fan);
        for k in 0..count {
            let mut q = Queue::new(parent_name(level, k), 1.0);
            if level > 1 {
                q.parent = Some(parent_name(level - 1, k / fan));
            }
            snap.queues.push(QueueSnapshot { queue: q, queued: vec![], queued_demand: None });
        }
        below = count;
    }
    for (i, qs) in snap.queues.iter_mut().take(leaves).enumerate() {
        qs.queue.parent = Some(parent_name(depth - 1, i / fan));
    }
}

/// `--policy`: the pool policy benchmarked.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum PolicyArg {
    FairShare,
    Priority,
    Proportional,
}

impl PolicyArg {
    fn policy(self) -> PoolPolicy {
        match self {
            PolicyArg::FairShare => PoolPolicy::FairShare,
            PolicyArg::Priority => PoolPolicy::Priority,
            PolicyArg::Proportional => PoolPolicy::Proportional,
        }
    }
}

/// Small deterministic generator for the synthetic workload.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn res(cpu: i64, mem_gi: i64, gpu: i64) -> Resources {
    let mut r = Resources::new();
    r.set(convoy::model::ResourceName::cpu(), cpu * 1000);
    r.set(convoy::model::ResourceName::memory(), mem_gi << 30);
    r.set(convoy::model::ResourceName::gpu(), gpu * 1000);
    r
}

/// A generated name (always valid) as the type that holds it.
pub(super) fn name<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().expect("generated names are valid")
}

/// Builds the synthetic snapshot.
pub(super) fn synthetic(nodes: usize, queues: usize, jobs: usize, preload: f64, seed: u64) -> Snapshot {
    let mut rng = SplitMix(seed);
    let node_list = synthetic_nodes(nodes);
    let menu = ShapeMenu::new();
    let default_pc: PriorityClassName = name("default");
    let preemptible_pc: PriorityClassName = name("preemptible");
    let queue_names: Vec<QueueName> = (0..queues).map(|q| name(&format!("q{q:04}"))).collect();
    let (per_queue, mut seq) = queued_jobs(&mut rng, &menu, &queue_names, jobs, &default_pc, &preemptible_pc);

    // Optionally fill part of the cluster with running preemptible jobs of a few queues.
    let mut running = Vec::new();
    if preload > 0.0 {
        let fill_shape = Requirements::new(SchedulingRequirements { requests: res(4, 16, 0), ..Default::default() });
        let heavy = (queues / 10).max(1);
        for (i, n) in node_list.iter().enumerate() {
            if n.taints.is_empty() && (i as f64 / nodes as f64) < preload {
                let slots = n.allocatable.get("cpu") / 4000;
                for _ in 0..slots {
                    let q = rng.below(heavy as u64) as usize;
                    running.push(RunningJob {
                        job: Arc::new(JobInfo {
                            id: JobId::from_u128(seq as u128 + 1),
                            queue: queue_names[q].clone(),
                            priority_class: preemptible_pc.clone(),
                            priority: 0,
                            submit_seq: seq,
                            requirements: fill_shape.clone(),
                            gang: None,
                            pools: vec![],
                            not_before_ms: None,
                        }),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                        leased_at_ms: seq as i64,
                    });
                    seq += 1;
                }
            }
        }
    }

    Snapshot {
        nodes: node_list,
        queues: queue_names
            .iter()
            .zip(per_queue)
            .enumerate()
            .map(|(i, (qn, queued))| QueueSnapshot {
                queue: Queue::new(qn.clone(), 1.0 + (i % 3) as f64),
                queued,
                queued_demand: None,
            })
            .collect(),
        running,
        rate_limits: Default::default(),
        quarantined: Default::default(),
        usage: Default::default(),
        job_times: Default::default(),
    }
}

/// The synthetic cluster: one GPU node in ten (tainted), two small nodes, seven large ones, over
/// four executors and fifty racks.
fn synthetic_nodes(nodes: usize) -> Vec<Node> {
    let gpu_taint = Taint { key: "nvidia.com/gpu".into(), value: "true".into(), effect: TaintEffect::NoSchedule };
    (0..nodes)
        .map(|i| {
            let kind = i % 10;
            let (alloc, taints) = match kind {
                0 => (res(96, 768, 8), vec![gpu_taint.clone()]),
                1 | 2 => (res(32, 512, 0), vec![]),
                _ => (res(64, 256, 0), vec![]),
            };
            let mut labels = convoy::model::Labels::new();
            labels.insert("rack".into(), format!("r{}", i % 50));
            labels.insert("kubernetes.io/hostname".into(), format!("node-{i}"));
            Node {
                name: name::<NodeName>(&format!("node-{i}")),
                executor: name::<ExecutorName>(&format!("cluster-{}", i % 4)),
                pool: PoolName::default_pool(),
                labels,
                taints,
                allocatable: alloc,
                unallocatable: Resources::new(),
                unschedulable: false,
            }
        })
        .collect()
}

/// A fixed menu of job shapes, shared between jobs as the server shares identical specs.
struct ShapeMenu {
    shapes: Vec<Requirements>,
    gpu_shapes: Vec<Requirements>,
    gang_shape: Requirements,
}

impl ShapeMenu {
    fn new() -> Self {
        let tolerate = vec![Toleration {
            key: "nvidia.com/gpu".into(),
            operator: Default::default(),
            value: "true".into(),
            effect: None,
        }];
        let mut shapes: Vec<Requirements> = Vec::new();
        for cpu in [1, 2, 4, 8, 16] {
            for mem_per_cpu in [2, 4, 8] {
                shapes.push(Requirements::new(SchedulingRequirements {
                    requests: res(cpu, cpu * mem_per_cpu, 0),
                    ..Default::default()
                }));
            }
        }
        let gpu_shapes: Vec<Requirements> = [1, 2, 4, 8]
            .iter()
            .map(|g| {
                Requirements::new(SchedulingRequirements {
                    requests: res(8 * g, 64 * g, *g),
                    tolerations: tolerate.clone(),
                    ..Default::default()
                })
            })
            .collect();
        let gang_shape = Requirements::new(SchedulingRequirements { requests: res(8, 32, 0), ..Default::default() });
        ShapeMenu { shapes, gpu_shapes, gang_shape }
    }
}

/// The queued jobs, in each queue's scheduling order: 2% of draws a gang of four, 5% a GPU job,
/// the rest a CPU job of the menu; 30% preemptible. Returns them and the next sequence number.
fn queued_jobs(
    rng: &mut SplitMix,
    menu: &ShapeMenu,
    queue_names: &[QueueName],
    jobs: usize,
    default_pc: &PriorityClassName,
    preemptible_pc: &PriorityClassName,
) -> (Vec<Vec<Arc<JobInfo>>>, u64) {
    let queues = queue_names.len();
    let mut per_queue: Vec<Vec<Arc<JobInfo>>> = vec![Vec::new(); queues];
    let mut seq = 0u64;
    let mut gang_no = 0u64;
    while (seq as usize) < jobs {
        let q = rng.below(queues as u64) as usize;
        let roll = rng.below(100);
        let pc = if rng.below(10) < 3 { preemptible_pc.clone() } else { default_pc.clone() };
        if roll < 2 && (seq as usize) + 4 <= jobs {
            gang_no += 1;
            let gang = Arc::new(GangSpec {
                id: format!("gang-{gang_no}"),
                cardinality: 4,
                min_cardinality: 4,
                node_uniformity_label: None,
            });
            for _ in 0..4 {
                per_queue[q].push(Arc::new(JobInfo {
                    id: JobId::from_u128(seq as u128 + 1),
                    queue: queue_names[q].clone(),
                    priority_class: pc.clone(),
                    priority: 0,
                    submit_seq: seq,
                    requirements: menu.gang_shape.clone(),
                    gang: Some(gang.clone()),
                    pools: vec![],
                    not_before_ms: None,
                }));
                seq += 1;
            }
            continue;
        }
        let requirements = if roll < 7 {
            menu.gpu_shapes[rng.below(4) as usize].clone()
        } else {
            menu.shapes[rng.below(menu.shapes.len() as u64) as usize].clone()
        };
        per_queue[q].push(Arc::new(JobInfo {
            id: JobId::from_u128(seq as u128 + 1),
            queue: queue_names[q].clone(),
            priority_class: pc,
            priority: rng.below(3) as u32,
            submit_seq: seq,
            requirements,
            gang: None,
            pools: vec![],
            not_before_ms: None,
        }));
        seq += 1;
    }
    let cfg = SchedulerConfig::default();
    for list in &mut per_queue {
        // The server keeps queues in scheduling order; do the same.
        list.sort_by_key(|j| {
            let class = cfg.priority_class(j.priority_class.as_str()).map(|p| p.priority).unwrap_or(0);
            QueueOrderKey::new(class, j.priority, j.submit_seq)
        });
    }
    (per_queue, seq)
}

pub(super) fn run(args: ScheduleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes > 0 && args.queues > 0, "--nodes and --queues must be at least 1");
    let t0 = Instant::now();
    anyhow::ensure!(args.depth >= 1, "--depth must be at least 1");
    let mut snap = synthetic(args.nodes, args.queues, args.jobs, args.cycle.preload, args.cycle.seed);
    add_tree(&mut snap, args.depth);
    let build_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut cfg = SchedulerConfig { max_queue_lookback: args.cycle.lookback, ..Default::default() };
    let policy = args.policy.policy();
    anyhow::ensure!(
        policy != PoolPolicy::FairShare || !(args.preemption || args.no_preemption),
        "--preemption and --no-preemption go with --policy priority or proportional"
    );
    if policy != PoolPolicy::FairShare {
        let preemption = if args.preemption { Some(true) } else { args.no_preemption.then_some(false) };
        cfg.pools.insert(PoolName::default_pool(), PoolPolicyConfig { policy, preemption });
    }
    cfg.validate().map_err(|e| anyhow::anyhow!("config: {e}"))?;
    let mut best: Option<(f64, f64, convoy::scheduler::Decisions)> = None;
    // Every run's time, in order, beside the fastest: whether a target holds "at every run"
    // is read from one command, and the first run (on memory the process has not touched
    // before) shows apart from the rest.
    let mut runs_ms: Vec<f64> = Vec::with_capacity(args.cycle.repeat.max(1));
    for _ in 0..args.cycle.repeat.max(1) {
        // Taking a snapshot is part of a cycle in the server: clone the queue lists (pointers).
        let t = Instant::now();
        let copy = snap.clone();
        let snapshot_ms = t.elapsed().as_secs_f64() * 1000.0;
        let t = Instant::now();
        let d = schedule(&copy, &cfg, args.cycle.seed, 0);
        let cycle_ms = t.elapsed().as_secs_f64() * 1000.0;
        runs_ms.push(tenths(cycle_ms));
        if best.as_ref().is_none_or(|(c, _, _)| cycle_ms < *c) {
            best = Some((cycle_ms, snapshot_ms, d));
        }
    }
    let Some((cycle_ms, snapshot_ms, d)) = best else { anyhow::bail!("no cycle ran") };
    let why = ask_why(&snap, &cfg, &d, args.why, args.cycle.seed);
    let scheduled = d.leases.len();
    let tried: usize = d.pools.iter().map(|p| p.jobs_tried).sum();
    let evicted: usize = d.pools.iter().map(|p| p.evicted).sum();
    let out = serde_json::json!({
        "nodes": args.nodes,
        "queues": args.queues,
        "depth": args.depth,
        "jobs": args.jobs,
        "running_before": snap.running.len(),
        "lookback": args.cycle.lookback,
        "policy": policy.as_str(),
        "scheduled": scheduled,
        "preempted": d.preemptions.len(),
        "evicted": evicted,
        "jobs_tried": tried,
        "cycle_ms": tenths(cycle_ms),
        "cycle_ms_runs": runs_ms,
        "snapshot_ms": tenths(snapshot_ms),
        "placements_per_sec": (scheduled as f64 / (cycle_ms / 1000.0)).round(),
        "build_ms": build_ms.round(),
        "peak_rss_mb": peak_rss_mb().round(),
        "decisions_digest": digest(&d),
    });
    let out = match (out, why) {
        (serde_json::Value::Object(mut o), Some(serde_json::Value::Object(w))) => {
            o.extend(w);
            serde_json::Value::Object(o)
        }
        (out, _) => out,
    };
    println!("{out}");
    Ok(())
}

/// A digest of everything the cycle decided and why (not how long it took): two builds that print
/// the same digest for the same arguments decided alike, so a change meant to be faster can show
/// it changed no outcome.
pub(super) fn digest(d: &convoy::scheduler::Decisions) -> String {
    use std::fmt::Write as _;
    use std::hash::Hasher as _;
    /// Feeds formatted text to a hasher without building the string.
    struct Feed(std::hash::DefaultHasher);
    impl std::fmt::Write for Feed {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let mut h = Feed(std::hash::DefaultHasher::new());
    // Writing into a hasher cannot fail.
    let _ = write!(
        h,
        "{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
        d.leases, d.preemptions, d.failures, d.unscheduled, d.queue_notes, d.pools, d.reservations
    );
    format!("{:016x}", h.0.finish())
}

/// Asks why for `count` of the jobs the cycle left waiting: the time each answer took (p50 and
/// the slowest), the most scheduler runs one took, and how many found a condition and an
/// estimate.
fn ask_why(
    snap: &Snapshot,
    cfg: &SchedulerConfig,
    d: &convoy::scheduler::Decisions,
    count: usize,
    seed: u64,
) -> Option<serde_json::Value> {
    use convoy::scheduler::why::{EndBasis, RunEnd, WhyQuestion, explain};
    if count == 0 || d.unscheduled.is_empty() {
        return None;
    }
    let ends: Vec<RunEnd> = snap
        .running
        .iter()
        .enumerate()
        .map(|(i, r)| RunEnd { job: r.job.id, at_ms: 3_600_000 * (i as i64 + 1), basis: EndBasis::Deadline })
        .collect();
    let step = (d.unscheduled.len() / count).max(1);
    let mut took = Vec::new();
    let (mut runs, mut with_condition, mut with_estimate) = (0, 0, 0);
    for u in d.unscheduled.iter().step_by(step).take(count) {
        let t = Instant::now();
        let e = explain(&WhyQuestion { snapshot: snap, cfg, seed, now_ms: 0, job: u.job_id, ends: &ends });
        took.push(t.elapsed().as_secs_f64() * 1000.0);
        runs = runs.max(e.runs);
        with_condition += usize::from(!e.would_start_if.is_empty());
        with_estimate += usize::from(e.estimated_start.is_some());
    }
    took.sort_by(f64::total_cmp);
    Some(serde_json::json!({
        "why_asked": took.len(),
        "why_ms_p50": tenths(took[took.len() / 2]),
        "why_ms_max": tenths(took[took.len() - 1]),
        "why_runs_max": runs,
        "why_with_condition": with_condition,
        "why_with_estimate": with_estimate,
    }))
}
