//! Max-min fairness of fair-share preemption, as a property: on identical nodes with one-cpu
//! preemptible jobs, whatever the queues, their weights, their demands and the nodes their
//! running jobs happen to occupy, one cycle ends with every queue within one job of the
//! water-filling allocation, and a second cycle with nothing new changes nothing.
//!
//! The same holds in a pool with a node earmarked for a queue of its own ("home") when that
//! queue asks for no more than its fair share: it ends with all it asked for, on its node, and
//! the others water-fill the rest, as guests on its node where it leaves room.

use crate::model::{
    ExecutorName, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements,
};
use crate::scheduler::{Decisions, JobInfo, QueueSnapshot, RunningJob, SchedulerConfig, Snapshot, schedule};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct World {
    /// Cpus per node (every node the same).
    cpus: usize,
    /// Per node, per cpu: the queue whose job runs there, if any.
    layout: Vec<Vec<Option<usize>>>,
    /// Per queue: priority factor (weight = 1 / factor) and queued jobs.
    queues: Vec<(f64, usize)>,
    /// A node earmarked for queue "home" (factor 1), if any.
    home: Option<Home>,
}

/// The earmarked node: how many of its cpus run jobs of "home" (the rest are free), and how many
/// more "home" has queued.
#[derive(Debug, Clone)]
struct Home {
    running: usize,
    queued: usize,
}

fn world() -> impl Strategy<Value = World> {
    (1usize..=6, prop::sample::select(vec![2usize, 4, 8, 16]), 1usize..=5).prop_flat_map(|(nodes, cpus, nq)| {
        let capacity = nodes * cpus;
        (
            // The layout as runs of places (in node order) held by one queue or free: long runs
            // pack queues onto nodes of their own, as bin packing does; short ones mix them.
            prop::collection::vec((prop::option::weighted(0.85, 0..nq), 1..=2 * cpus), 1..=2 * nodes + 2),
            // Queues with nothing queued make evicted jobs that cannot go elsewhere.
            prop::collection::vec(
                (prop::sample::select(vec![1.0, 2.0, 3.0, 0.5]), prop_oneof![Just(0), 0..=capacity]),
                nq..=nq,
            ),
        )
            .prop_map(move |(runs, queues)| {
                let mut places: Vec<Option<usize>> =
                    runs.into_iter().flat_map(|(q, len)| std::iter::repeat_n(q, len)).collect();
                places.resize(capacity, None);
                let layout = places.chunks(cpus).map(<[Option<usize>]>::to_vec).collect();
                World { cpus, layout, queues, home: None }
            })
    })
}

fn world_with_home() -> impl Strategy<Value = World> {
    world().prop_flat_map(|w| {
        let cpus = w.cpus;
        (Just(w), 0..=cpus, 0..=cpus).prop_map(move |(mut w, running, queued)| {
            w.home = Some(Home { running, queued: queued.min(cpus - running) });
            w
        })
    })
}

const HOME: &str = "home";

fn queue_name(q: usize) -> QueueName {
    QueueName::new(&format!("q{q}")).expect("valid")
}

fn job(q: usize, seq: u64) -> Arc<JobInfo> {
    job_of(queue_name(q), seq)
}

fn job_of(queue: QueueName, seq: u64) -> Arc<JobInfo> {
    let requests = Resources::parse([("cpu", "1"), ("memory", "1Gi")]).expect("valid");
    Arc::new(JobInfo {
        id: JobId::from_u128(u128::from(seq)),
        queue,
        priority_class: PriorityClassName::new("preemptible").expect("valid"),
        priority: 0,
        submit_seq: seq,
        requirements: Requirements::new(SchedulingRequirements { requests, ..Default::default() }),
        gang: None,
        pools: vec![],
        not_before_ms: None,
    })
}

struct Cluster {
    nodes: Vec<Node>,
    queues: Vec<Queue>,
    queued: Vec<Arc<JobInfo>>,
    running: Vec<RunningJob>,
}

impl Cluster {
    fn new(w: &World) -> Self {
        let nodes: Vec<Node> = (0..w.layout.len())
            .map(|i| Node {
                name: NodeName::new(&format!("n{i}")).expect("valid"),
                executor: ExecutorName::new("e").expect("valid"),
                pool: PoolName::default_pool(),
                labels: Labels::new(),
                taints: vec![],
                allocatable: Resources::parse([("cpu", w.cpus.to_string().as_str()), ("memory", "64Gi")])
                    .expect("valid"),
                unallocatable: Resources::new(),
                unschedulable: false,
            })
            .collect();
        let mut nodes = nodes;
        let mut queues: Vec<Queue> =
            w.queues.iter().enumerate().map(|(i, (f, _))| Queue::new(queue_name(i), *f)).collect();
        let home = QueueName::new(HOME).expect("valid");
        if w.home.is_some() {
            let mut node = nodes[0].clone();
            node.name = NodeName::new("earmarked").expect("valid");
            node.labels.insert(crate::model::RESERVED_FOR_LABEL.to_string(), HOME.to_string());
            nodes.push(node);
            queues.push(Queue::new(home.clone(), 1.0));
        }
        let mut seq = 0u64;
        let mut running = Vec::new();
        for (n, slots) in w.layout.iter().enumerate() {
            for q in slots.iter().flatten() {
                seq += 1;
                running.push(RunningJob {
                    job: job(*q, seq),
                    executor: nodes[n].executor.clone(),
                    node: nodes[n].name.clone(),
                    leased_at_ms: 0,
                });
            }
        }
        let mut queued = Vec::new();
        for (q, (_, count)) in w.queues.iter().enumerate() {
            for _ in 0..*count {
                seq += 1;
                queued.push(job(q, seq));
            }
        }
        if let Some(h) = &w.home {
            let earmarked = nodes.last().expect("pushed above");
            for i in 0..h.running + h.queued {
                seq += 1;
                let j = job_of(home.clone(), seq);
                if i < h.running {
                    running.push(RunningJob {
                        job: j,
                        executor: earmarked.executor.clone(),
                        node: earmarked.name.clone(),
                        leased_at_ms: 0,
                    });
                } else {
                    queued.push(j);
                }
            }
        }
        Cluster { nodes, queues, queued, running }
    }

    fn snapshot(&self) -> Snapshot {
        let queues = self
            .queues
            .iter()
            .map(|q| QueueSnapshot {
                queue: q.clone(),
                queued: self.queued.iter().filter(|j| j.queue == q.name).cloned().collect(),
                queued_demand: None,
            })
            .collect();
        Snapshot {
            nodes: self.nodes.clone(),
            queues,
            running: self.running.clone(),
            rate_limits: Default::default(),
            quarantined: Default::default(),
            usage: Default::default(),
            job_times: Default::default(),
        }
    }

    fn apply(&mut self, d: &Decisions) {
        let preempted: BTreeSet<JobId> = d.preemptions.iter().map(|p| p.job_id).collect();
        self.running.retain(|r| !preempted.contains(&r.job.id));
        for l in &d.leases {
            let Some(pos) = self.queued.iter().position(|j| j.id == l.job_id) else { continue };
            let job = self.queued.remove(pos);
            self.running.push(RunningJob { job, executor: l.executor.clone(), node: l.node.clone(), leased_at_ms: 0 });
        }
    }

    /// Running jobs per queue, in the order of `queues` ("home" last).
    fn running_per_queue(&self) -> Vec<usize> {
        self.queues.iter().map(|q| self.running.iter().filter(|r| r.job.queue == q.name).count()).collect()
    }
}

/// Water filling one job at a time: each place goes to the queue (with demand left) whose
/// weighted count after it is lowest.
fn water_filling(factors: &[f64], demands: &[usize], capacity: usize) -> Vec<usize> {
    let mut alloc = vec![0usize; demands.len()];
    for _ in 0..capacity {
        let next = (0..demands.len())
            .filter(|&q| alloc[q] < demands[q])
            .min_by(|&a, &b| ((alloc[a] + 1) as f64 * factors[a]).total_cmp(&((alloc[b] + 1) as f64 * factors[b])));
        match next {
            Some(q) => alloc[q] += 1,
            None => break,
        }
    }
    alloc
}

fn check(w: &World) -> Result<(), TestCaseError> {
    let cfg = SchedulerConfig { node_eviction_probability: 1.0, max_queue_lookback: 0, ..Default::default() };
    let mut c = Cluster::new(w);
    let capacity = c.nodes.len() * w.cpus;
    let before = c.running_per_queue();
    let mut demands: Vec<usize> = before.iter().zip(&w.queues).map(|(r, (_, queued))| r + queued).collect();
    let mut factors: Vec<f64> = w.queues.iter().map(|(f, _)| *f).collect();
    if let Some(h) = &w.home {
        demands.push(h.running + h.queued);
        factors.push(1.0);
    }
    let want = water_filling(&factors, &demands, capacity);
    // "home" asks for no more than its fair share (above it, it would rightly be evicted, and
    // guests may not take its place: not the max-min situation). Worlds where it asks for more
    // are rejected, and proptest counts them.
    prop_assume!(w.home.is_none() || want[want.len() - 1] >= demands[demands.len() - 1]);

    let d1 = schedule(&c.snapshot(), &cfg, 7, 0);
    c.apply(&d1);
    let got = c.running_per_queue();
    prop_assert_eq!(
        got.iter().sum::<usize>(),
        capacity.min(demands.iter().sum()),
        "not every place is used: {:?} of {}",
        got,
        capacity
    );
    for q in 0..got.len() {
        prop_assert!(
            got[q].abs_diff(want[q]) <= 1,
            "queue q{q}: {} running, water filling gives {} (all: {:?} vs {:?}; demands {:?}, factors {:?})",
            got[q],
            want[q],
            got,
            want,
            demands,
            factors
        );
    }

    if w.home.is_some() {
        let away = c.running.iter().filter(|r| r.job.queue.as_str() == HOME && r.node.as_str() != "earmarked").count();
        prop_assert_eq!(away, 0, "home jobs away from their node: {:?}", got);
    }

    let d2 = schedule(&c.snapshot(), &cfg, 8, 1000);
    prop_assert!(
        d2.leases.is_empty() && d2.preemptions.is_empty(),
        "second cycle: {} leases, {} preemptions after {:?}",
        d2.leases.len(),
        d2.preemptions.len(),
        got
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300),
        ..ProptestConfig::default()
    })]

    #[test]
    fn one_cycle_reaches_water_filling_and_stays(w in world()) {
        check(&w)?;
    }

    #[test]
    fn with_an_earmarked_node_home_gets_its_demand_and_the_rest_water_fills(w in world_with_home()) {
        check(&w)?;
    }
}

#[test]
fn water_filling_reference() {
    // Equal weights: 10 places over demands 2, 10, 10 → 2, 4, 4.
    assert_eq!(water_filling(&[1.0, 1.0, 1.0], &[2, 10, 10], 10), vec![2, 4, 4]);
    // Weight 2 (factor 0.5) against 1: two to one.
    assert_eq!(water_filling(&[0.5, 1.0], &[20, 20], 12), vec![8, 4]);
    // Less demand than room.
    assert_eq!(water_filling(&[1.0, 3.0], &[1, 2], 8), vec![1, 2]);
}

#[test]
fn issue_example_holds() {
    let own = |q| vec![Some(q); 16];
    let w = World {
        cpus: 16,
        layout: vec![own(0), own(1), own(2)],
        queues: vec![(1.0, 0), (1.0, 0), (1.0, 0), (1.0, 48)],
        home: None,
    };
    check(&w).unwrap();
}
