//! Property tests over random clusters and workloads: no over-commitment, gangs all-or-nothing,
//! every preemption makes room for something scheduled in the same cycle, determinism, and
//! stability (a second cycle with nothing new changes nothing). Some nodes are earmarked for a
//! queue: no non-preemptible job of another queue is placed there, and a job at home never waits
//! while guests hold the room it needs.

use crate::model::{
    ExecutorName, GangSpec, JobId, Labels, Node, NodeName, PoolName, PriorityClass, PriorityClassName, Queue,
    QueueName, RESERVED_FOR_LABEL, Requirements, Resources, SchedulingRequirements,
};
use crate::scheduler::{
    Decisions, JobInfo, PreemptionReason, QueueSnapshot, RunningJob, SchedulerConfig, Snapshot, schedule,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

fn res(cpu: i64, mem_gi: i64) -> Resources {
    Resources::parse([("cpu", cpu.to_string().as_str()), ("memory", format!("{mem_gi}Gi").as_str())]).expect("valid")
}

#[derive(Debug, Clone)]
pub(super) struct JobGen {
    queue: usize,
    class: usize,
    cpu: i64,
    mem: i64,
    priority: u32,
    rack: Option<u8>,
    /// (cardinality, minimum) if the job starts a gang of identical members.
    gang: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
pub(super) struct World {
    nodes: Vec<(i64, i64, u8, u8)>, // cpu, mem, rack, executor
    /// Per node: the queue it is earmarked for, if any.
    reserved: Vec<Option<usize>>,
    factors: Vec<f64>,
    pub(super) before: Vec<JobGen>,
    pub(super) after: Vec<JobGen>,
    eviction_probability: f64,
    pub(super) seed: u64,
}

fn job_gen() -> impl Strategy<Value = JobGen> {
    (
        0usize..4,
        0usize..3,
        1i64..=8,
        1i64..=16,
        0u32..3,
        prop::option::weighted(0.2, 0u8..2),
        prop::option::weighted(0.15, (2u32..=3, 0u32..=1)),
    )
        .prop_map(|(queue, class, cpu, mem, priority, rack, gang)| JobGen {
            queue,
            class,
            cpu,
            mem,
            priority,
            rack,
            gang: gang.map(|(c, slack)| (c, c - slack.min(c - 1))),
        })
}

pub(super) fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(
            (prop::sample::select(vec![4i64, 8, 16, 32]), prop::sample::select(vec![16i64, 32, 64]), 0u8..2, 0u8..2),
            1..6,
        ),
        prop::collection::vec(prop::sample::select(vec![1.0, 2.0, 3.0]), 1..4),
        prop::collection::vec(job_gen(), 0..30),
        prop::collection::vec(job_gen(), 0..40),
        prop::sample::select(vec![1.0, 0.5]),
        any::<u64>(),
        prop::collection::vec(prop::option::weighted(0.3, 0usize..4), 6),
    )
        .prop_map(|(nodes, factors, before, after, eviction_probability, seed, reserved)| World {
            reserved: reserved.into_iter().take(nodes.len()).map(|r| r.map(|q| q % factors.len())).collect(),
            nodes,
            factors,
            before,
            after,
            eviction_probability,
            seed,
        })
}

fn config(w: &World) -> SchedulerConfig {
    let mut pcs = PriorityClass::defaults();
    pcs.push(PriorityClass {
        name: PriorityClassName::new("urgent").expect("valid"),
        priority: 35000,
        preemptible: false,
        max_resource_fraction_per_queue: Default::default(),
        min_runtime_before_preemption: None,
    });
    SchedulerConfig {
        priority_classes: pcs,
        node_eviction_probability: w.eviction_probability,
        max_queue_lookback: 0,
        ..Default::default()
    }
}

const CLASSES: [&str; 3] = ["default", "preemptible", "urgent"];

pub(super) struct Harness {
    pub(super) cfg: SchedulerConfig,
    nodes: Vec<Node>,
    queues: Vec<Queue>,
    queued: Vec<Arc<JobInfo>>,
    running: Vec<RunningJob>,
    seq: u64,
}

impl Harness {
    pub(super) fn new(w: &World) -> Self {
        let nodes = w
            .nodes
            .iter()
            .enumerate()
            .map(|(i, (cpu, mem, rack, exec))| {
                let mut labels = Labels::new();
                labels.insert("rack".into(), format!("r{rack}"));
                if let Some(q) = w.reserved[i] {
                    labels.insert(RESERVED_FOR_LABEL.into(), format!("q{q}"));
                }
                Node {
                    name: NodeName::new(&format!("n{i}")).expect("valid"),
                    executor: ExecutorName::new(&format!("e{exec}")).expect("valid"),
                    pool: PoolName::default_pool(),
                    labels,
                    taints: vec![],
                    allocatable: res(*cpu, *mem),
                    unallocatable: Resources::new(),
                    unschedulable: false,
                }
            })
            .collect();
        let queues = w
            .factors
            .iter()
            .enumerate()
            .map(|(i, f)| Queue::new(QueueName::new(&format!("q{i}")).expect("valid"), *f))
            .collect();
        Harness { cfg: config(w), nodes, queues, queued: vec![], running: vec![], seq: 0 }
    }

    pub(super) fn submit(&mut self, jobs: &[JobGen]) {
        let nq = self.queues.len();
        for g in jobs {
            let mut node_selector = Labels::new();
            if let Some(r) = g.rack {
                node_selector.insert("rack".into(), format!("r{r}"));
            }
            let reqs = Requirements::new(SchedulingRequirements {
                requests: res(g.cpu, g.mem),
                node_selector,
                ..Default::default()
            });
            let (count, gang) = match g.gang {
                Some((c, m)) => (
                    c,
                    Some(Arc::new(GangSpec {
                        id: format!("g{}", self.seq + 1),
                        cardinality: c,
                        min_cardinality: m,
                        node_uniformity_label: None,
                    })),
                ),
                None => (1, None),
            };
            for _ in 0..count {
                self.seq += 1;
                self.queued.push(Arc::new(JobInfo {
                    id: JobId::from_u128(u128::from(self.seq)),
                    queue: self.queues[g.queue % nq].name.clone(),
                    priority_class: PriorityClassName::new(CLASSES[g.class]).expect("valid"),
                    priority: g.priority,
                    submit_seq: self.seq,
                    requirements: reqs.clone(),
                    gang: gang.clone(),
                    pools: vec![],
                    not_before_ms: None,
                }));
            }
        }
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let queues = self
            .queues
            .iter()
            .map(|q| QueueSnapshot {
                queue: q.clone(),
                queued: self.queued.iter().filter(|j| j.queue == q.name).cloned().collect(),
                queued_demand: None,
            })
            .collect();
        Snapshot { nodes: self.nodes.clone(), queues, running: self.running.clone(), ..Default::default() }
    }

    pub(super) fn apply(&mut self, d: &Decisions) {
        let by_id: HashMap<JobId, Arc<JobInfo>> = self.queued.iter().map(|j| (j.id, j.clone())).collect();
        let preempted: BTreeSet<JobId> = d.preemptions.iter().map(|p| p.job_id).collect();
        let leased: BTreeSet<JobId> = d.leases.iter().map(|l| l.job_id).collect();
        let failed: BTreeSet<JobId> = d.failures.iter().map(|f| f.job_id).collect();
        self.running.retain(|r| !preempted.contains(&r.job.id));
        for l in &d.leases {
            self.running.push(RunningJob {
                job: by_id[&l.job_id].clone(),
                executor: l.executor.clone(),
                node: l.node.clone(),
                leased_at_ms: 0,
            });
        }
        self.queued.retain(|j| !leased.contains(&j.id) && !failed.contains(&j.id));
    }
}

/// Checks the invariants of one cycle's decisions against the snapshot it was made from.
fn check_cycle(snap: &Snapshot, d: &Decisions) -> Result<(), TestCaseError> {
    let running_before: HashMap<JobId, &RunningJob> = snap.running.iter().map(|r| (r.job.id, r)).collect();
    let queued: HashMap<JobId, &Arc<JobInfo>> =
        snap.queues.iter().flat_map(|q| q.queued.iter()).map(|j| (j.id, j)).collect();
    let preempted: BTreeSet<JobId> = d.preemptions.iter().map(|p| p.job_id).collect();
    let leased: HashMap<JobId, &crate::scheduler::Lease> = d.leases.iter().map(|l| (l.job_id, l)).collect();
    let failed: BTreeSet<JobId> = d.failures.iter().map(|f| f.job_id).collect();

    // Each decision is about a job that could take it.
    for id in &preempted {
        prop_assert!(running_before.contains_key(id), "preempted {id} was not running");
    }
    for id in leased.keys().chain(failed.iter()) {
        prop_assert!(queued.contains_key(id), "{id} was not queued");
    }

    // No node over-committed after the cycle.
    let mut used: BTreeMap<(String, String), Resources> = BTreeMap::new();
    for r in &snap.running {
        if !preempted.contains(&r.job.id) {
            used.entry((r.executor.to_string(), r.node.to_string())).or_default().add(&r.job.requirements.requests);
        }
    }
    for l in d.leases.iter() {
        used.entry((l.executor.to_string(), l.node.to_string()))
            .or_default()
            .add(&queued[&l.job_id].requirements.requests);
    }
    for n in &snap.nodes {
        if let Some(u) = used.get(&(n.executor.to_string(), n.name.to_string())) {
            prop_assert!(u.fits_in(&n.allocatable), "node {} over-committed: {u} > {}", n.name, n.allocatable);
        }
    }

    // Leases respect node selectors.
    for l in &d.leases {
        let job = queued[&l.job_id];
        let node =
            snap.nodes.iter().find(|n| n.name == l.node && n.executor == l.executor).expect("leased node exists");
        for (k, v) in &job.requirements.node_selector {
            prop_assert_eq!(node.labels.get(k), Some(v), "lease of {} ignores its node selector", l.job_id);
        }
    }

    // Gangs: none placed, or at least the minimum in one executor with the rest failed.
    let mut gangs: BTreeMap<String, Vec<&Arc<JobInfo>>> = BTreeMap::new();
    for j in queued.values() {
        if let Some(g) = &j.gang {
            gangs.entry(format!("{}/{}", j.queue, g.id)).or_default().push(j);
        }
    }
    for (id, members) in &gangs {
        let g = members[0].gang.as_ref().expect("gang member");
        let placed: Vec<_> = members.iter().filter(|m| leased.contains_key(&m.id)).collect();
        let nfailed = members.iter().filter(|m| failed.contains(&m.id)).count();
        if placed.is_empty() {
            prop_assert_eq!(nfailed, 0, "gang {} failed members without placing any", id);
        } else {
            prop_assert!(
                placed.len() >= g.min_cardinality as usize,
                "gang {id}: {} placed < minimum {}",
                placed.len(),
                g.min_cardinality
            );
            prop_assert_eq!(placed.len() + nfailed, members.len(), "gang {}: members neither placed nor failed", id);
            let execs: BTreeSet<_> = placed.iter().map(|m| leased[&m.id].executor.clone()).collect();
            prop_assert_eq!(execs.len(), 1, "gang {} spans executors", id);
        }
    }

    // Every preemption makes room for a job scheduled on the same node in this cycle (for a gang,
    // on the node of one of its preempted members).
    for p in &d.preemptions {
        let victim = running_before[&p.job_id];
        let victim_nodes: BTreeSet<(String, String)> = match (&p.reason, &victim.job.gang) {
            (PreemptionReason::GangMember { .. }, Some(g)) => d
                .preemptions
                .iter()
                .filter(|o| {
                    running_before[&o.job_id].job.gang.as_ref().is_some_and(|og| og.id == g.id) && o.queue == p.queue
                })
                .map(|o| (o.executor.to_string(), o.node.to_string()))
                .collect(),
            _ => [(p.executor.to_string(), p.node.to_string())].into_iter().collect(),
        };
        let by = match &p.reason {
            PreemptionReason::FairShare { by, .. }
            | PreemptionReason::Urgency { by, .. }
            | PreemptionReason::GangMember { by, .. }
            | PreemptionReason::Reserved { by, .. }
            | PreemptionReason::JobPriority { by, .. } => *by,
            PreemptionReason::ProportionalTarget { .. } => {
                return Err(TestCaseError::fail(format!("{} preempted for a proportional target", p.job_id)));
            }
            PreemptionReason::NotRescheduled { reason } => {
                return Err(TestCaseError::fail(format!("{} preempted without helping anyone: {reason}", p.job_id)));
            }
        };
        let on_same_node = match leased.get(&by) {
            Some(l) => victim_nodes.contains(&(l.executor.to_string(), l.node.to_string())),
            None => {
                running_before
                    .get(&by)
                    .is_some_and(|r| victim_nodes.contains(&(r.executor.to_string(), r.node.to_string())))
                    && !preempted.contains(&by)
            }
        };
        prop_assert!(on_same_node, "{} preempted for {by}, which is not scheduled on {}", p.job_id, p.node);
        // Fair-share preemption never displaces a higher class; urgency only strictly lower ones.
        let prio = |j: &JobInfo| match j.priority_class.as_str() {
            "urgent" => 35000,
            "default" => 30000,
            _ => 20000,
        };
        let by_job: &JobInfo =
            leased.get(&by).map(|_| queued[&by].as_ref()).unwrap_or_else(|| running_before[&by].job.as_ref());
        match &p.reason {
            PreemptionReason::Urgency { .. } => {
                prop_assert!(prio(by_job) > prio(&victim.job), "urgency preemption of an equal or higher class")
            }
            // A job at home displaces guests whatever their class.
            PreemptionReason::Reserved { node, by_queue, .. } => {
                let n = snap.nodes.iter().find(|n| &n.name == node && n.executor == p.executor).expect("node exists");
                prop_assert!(reserved_for(n).is_some_and(|r| r == by_queue.as_str() && r != p.queue.as_str()));
            }
            _ => prop_assert!(prio(by_job) >= prio(&victim.job), "fair-share displacement of a higher class"),
        }
    }
    check_earmarks(snap, d)
}

/// The queue a node is earmarked for (the harness earmarks for one queue at most).
fn reserved_for(n: &Node) -> Option<&str> {
    n.labels.get(RESERVED_FOR_LABEL).map(String::as_str)
}

/// After the cycle: no non-preemptible job of another queue on an earmarked node (none is ever
/// placed there, and none runs there at the start); and a job at home that waits does not fit on
/// any of its earmarked nodes even with that node's guests gone.
fn check_earmarks(snap: &Snapshot, d: &Decisions) -> Result<(), TestCaseError> {
    let preempted: BTreeSet<JobId> = d.preemptions.iter().map(|p| p.job_id).collect();
    let queued: HashMap<JobId, &Arc<JobInfo>> =
        snap.queues.iter().flat_map(|q| q.queued.iter()).map(|j| (j.id, j)).collect();
    let key = |e: &ExecutorName, n: &NodeName| (e.to_string(), n.to_string());
    // Jobs on each node after the cycle.
    let mut on: BTreeMap<(String, String), Vec<&JobInfo>> = BTreeMap::new();
    for r in snap.running.iter().filter(|r| !preempted.contains(&r.job.id)) {
        on.entry(key(&r.executor, &r.node)).or_default().push(&r.job);
    }
    for l in &d.leases {
        on.entry(key(&l.executor, &l.node)).or_default().push(queued[&l.job_id]);
    }
    let preemptible = |j: &JobInfo| j.priority_class.as_str() == "preemptible";
    for n in &snap.nodes {
        let Some(home) = reserved_for(n) else { continue };
        let jobs = on.get(&key(&n.executor, &n.name)).map(Vec::as_slice).unwrap_or_default();
        for j in jobs {
            prop_assert!(
                j.queue.as_str() == home || preemptible(j),
                "non-preemptible job {} of queue {} on node {} earmarked for {home}",
                j.id,
                j.queue,
                n.name
            );
        }
    }
    let leased: BTreeSet<JobId> = d.leases.iter().map(|l| l.job_id).collect();
    let failed: BTreeSet<JobId> = d.failures.iter().map(|f| f.job_id).collect();
    for j in queued.values().filter(|j| !leased.contains(&j.id) && !failed.contains(&j.id) && j.gang.is_none()) {
        for n in &snap.nodes {
            if reserved_for(n) != Some(j.queue.as_str())
                || j.requirements.node_selector.iter().any(|(k, v)| n.labels.get(k) != Some(v))
            {
                continue;
            }
            let jobs = on.get(&key(&n.executor, &n.name)).map(Vec::as_slice).unwrap_or_default();
            if jobs.iter().all(|g| g.queue == j.queue) {
                continue;
            }
            let mut free = n.allocatable.clone();
            for g in jobs.iter().filter(|g| g.queue == j.queue) {
                free.sub(&g.requirements.requests);
            }
            prop_assert!(
                !j.requirements.requests.fits_in(&free),
                "job {} of queue {} waits while guests hold the room it needs on its earmarked node {}",
                j.id,
                j.queue,
                n.name
            );
        }
    }
    Ok(())
}

/// The seed the simulator uses for a round, so a failing world replays under `convoy simulate`.
pub(super) fn round_seed(seed: u64, round: u64) -> u64 {
    seed ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The world as a scenario file (same jobs, ids, seeds and rounds), for replaying a failure.
fn world_yaml(w: &World) -> String {
    let mut out = format!(
        "seed: {}\nconfig:\n  node_eviction_probability: {}\n  max_queue_lookback: 0\n  priority_classes:\n",
        w.seed, w.eviction_probability
    );
    out.push_str("    - {name: default, priority: 30000, preemptible: false}\n    - {name: preemptible, priority: 20000, preemptible: true}\n    - {name: urgent, priority: 35000, preemptible: false}\nnodes:\n");
    for (i, (cpu, mem, rack, exec)) in w.nodes.iter().enumerate() {
        let reserved = w.reserved[i].map(|q| format!(", reserved_for: [q{q}]")).unwrap_or_default();
        out.push_str(&format!("  - {{name: n{i}, executor: e{exec}, labels: {{rack: r{rack}}}, allocatable: {{cpu: \"{cpu}\", memory: {mem}Gi}}{reserved}}}\n"));
    }
    out.push_str("queues:\n");
    for (i, f) in w.factors.iter().enumerate() {
        out.push_str(&format!("  - {{name: q{i}, priority_factor: {f}}}\n"));
    }
    out.push_str("rounds:\n");
    let mut seq = 0u64;
    for jobs in [&w.before, &w.after] {
        out.push_str("  - submit:\n");
        for g in jobs.iter() {
            let count = g.gang.map(|(c, _)| c).unwrap_or(1);
            let first = seq + 1;
            let sel = g.rack.map(|r| format!(", node_selector: {{rack: r{r}}}")).unwrap_or_default();
            let ann = g
                .gang
                .map(|(c, m)| format!(", annotations: {{convoy.io/gang-id: g{first}, convoy.io/gang-cardinality: '{c}', convoy.io/gang-minimum-cardinality: '{m}'}}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "      - {{id: j{first}, count: {count}, queue: q{}, priority_class: {}, priority: {}, requests: {{cpu: \"{}\", memory: {}Gi}}{sel}{ann}}}\n",
                g.queue % w.factors.len(),
                CLASSES[g.class],
                g.priority,
                g.cpu,
                g.mem
            ));
            seq += u64::from(count);
        }
    }
    out.push_str("  - submit: []\n");
    out
}

fn decisions_json(d: &Decisions) -> String {
    serde_json::to_string(d).expect("decisions serialize")
}

proptest! {
    // 300 cases per run by default; PROPTEST_CASES=100000 for a long search.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300),
        ..ProptestConfig::default()
    })]

    #[test]
    fn invariants_determinism_and_stability(w in world()) {
        run_world(&w).map_err(|e| TestCaseError::fail(format!("{e}\nreplay with convoy simulate:\n{}", world_yaml(&w))))?;
    }

    /// A gang's trial in a domain where it fits whole without displacing anyone is judged without
    /// running it (`gang::whole_fit`): the decisions are those of running every trial.
    #[test]
    fn gang_trials_judged_without_running_decide_as_run_trials(w in world()) {
        let decide_both = |s: &Snapshot, cfg: &SchedulerConfig, round: u64| {
            let judged = schedule(s, cfg, round_seed(w.seed, round), round as i64 * 1000);
            crate::scheduler::gang::TRIALS_ALWAYS_RUN.with(|c| c.set(true));
            let run = schedule(s, cfg, round_seed(w.seed, round), round as i64 * 1000);
            crate::scheduler::gang::TRIALS_ALWAYS_RUN.with(|c| c.set(false));
            (judged, run)
        };
        let mut h = Harness::new(&w);
        h.submit(&w.before);
        let (d0, run0) = decide_both(&h.snapshot(), &h.cfg, 0);
        prop_assert_eq!(decisions_json(&d0), decisions_json(&run0));
        h.apply(&d0);
        h.submit(&w.after);
        let (d1, run1) = decide_both(&h.snapshot(), &h.cfg, 1);
        prop_assert_eq!(decisions_json(&d1), decisions_json(&run1));
    }
}

fn run_world(w: &World) -> Result<(), TestCaseError> {
    {
        let mut h = Harness::new(w);
        // Cycle 0 on the first jobs, so the interesting cycle starts with jobs running.
        h.submit(&w.before);
        let s0 = h.snapshot();
        let d0 = schedule(&s0, &h.cfg, round_seed(w.seed, 0), 0);
        check_cycle(&s0, &d0)?;
        h.apply(&d0);

        h.submit(&w.after);
        let s1 = h.snapshot();
        let d1 = schedule(&s1, &h.cfg, round_seed(w.seed, 1), 1000);
        check_cycle(&s1, &d1)?;
        // Determinism: same inputs, same seed, same decisions.
        let again = schedule(&s1, &h.cfg, round_seed(w.seed, 1), 1000);
        prop_assert_eq!(decisions_json(&d1), decisions_json(&again));
        h.apply(&d1);

        // Stability: with nothing new, the state settles. With an eviction probability of 1 the
        // next cycle schedules and preempts nothing; below 1, rebalancing is spread over cycles
        // on purpose, so cycles go on until one with every node open to eviction (tried on the
        // side) would change nothing, which must happen within a bounded number of cycles.
        let mut settling = h.cfg.clone();
        settling.node_eviction_probability = 1.0;
        let quiet = |d: &Decisions| d.leases.is_empty() && d.preemptions.is_empty() && d.failures.is_empty();
        let mut round = 2;
        loop {
            let s = h.snapshot();
            let probe = schedule(&s, &settling, round_seed(w.seed, round), round as i64 * 1000);
            check_cycle(&s, &probe)?;
            if quiet(&probe) {
                break;
            }
            prop_assert!(
                w.eviction_probability < 1.0,
                "second cycle changed things: {} leases {:?}, {} preemptions {:?}",
                probe.leases.len(),
                probe.leases.iter().map(|l| l.job_id).collect::<Vec<_>>(),
                probe.preemptions.len(),
                probe.preemptions
            );
            prop_assert!(round < 64, "still rebalancing after {round} cycles: {:?}", probe.preemptions);
            let d = schedule(&s, &h.cfg, round_seed(w.seed, round), round as i64 * 1000);
            check_cycle(&s, &d)?;
            h.apply(&d);
            round += 1;
        }
    }
    Ok(())
}
