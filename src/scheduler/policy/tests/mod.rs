//! Pool policies with exact outcomes: Determined's worked example step by step, zero-slot lines,
//! head-of-line blocking, victims, proportional targets; and the configuration keys.

use super::proportional::proportional_targets;
use super::{PoolPolicy, PoolPolicyConfig};
use crate::model::{
    ExecutorName, GangSpec, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements,
};
use crate::scheduler::{
    Decisions, JobInfo, PreemptionReason, QueueSnapshot, Reason, RunningJob, SchedulerConfig, Snapshot, schedule,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod properties;

/// A small cluster driven cycle by cycle, jobs known by name.
struct Cluster {
    cfg: SchedulerConfig,
    nodes: Vec<Node>,
    queues: Vec<Queue>,
    queued: Vec<Arc<JobInfo>>,
    running: Vec<RunningJob>,
    names: BTreeMap<JobId, String>,
    ids: BTreeMap<String, JobId>,
    seq: u64,
    now_ms: i64,
}

/// One job to submit.
#[derive(Clone)]
struct Spec<'a> {
    name: &'a str,
    queue: &'a str,
    priority: u32,
    preemptible: bool,
    gpus: i64,
    cpus: i64,
    /// Members of a gang (1: a single job).
    members: u32,
}

impl<'a> Spec<'a> {
    fn new(name: &'a str, queue: &'a str, priority: u32, gpus: i64) -> Self {
        Spec { name, queue, priority, preemptible: false, gpus, cpus: 1, members: 1 }
    }
    fn preemptible(self) -> Self {
        Spec { preemptible: true, ..self }
    }
    fn gang(self, members: u32) -> Self {
        Spec { members, ..self }
    }
    fn cpus(self, cpus: i64) -> Self {
        Spec { cpus, ..self }
    }
}

/// What one cycle decided, by job name.
#[derive(Debug, Default)]
struct Outcome {
    /// Job → node.
    leased: BTreeMap<String, String>,
    /// Job → reason.
    preempted: BTreeMap<String, PreemptionReason>,
    /// Job → reason.
    waiting: BTreeMap<String, Reason>,
    #[allow(dead_code)]
    failed: BTreeSet<String>,
    decisions: Decisions,
}

impl Cluster {
    /// `nodes` nodes of `gpus` GPUs (and 64 cpus) in pool `pool`, scheduled by `policy`.
    fn new(pool: &str, nodes: usize, gpus: i64, policy: PoolPolicyConfig, queues: &[(&str, f64)]) -> Self {
        Self::with_nodes(pool, &vec![gpus; nodes], policy, queues)
    }

    /// Nodes `node-1 ..` with these GPUs (and 64 cpus each).
    fn with_nodes(pool: &str, gpus: &[i64], policy: PoolPolicyConfig, queues: &[(&str, f64)]) -> Self {
        let pool = PoolName::new(pool).expect("valid");
        let nodes = (1..=gpus.len())
            .zip(gpus)
            .map(|(i, gpus)| Node {
                name: NodeName::new(&format!("node-{i}")).expect("valid"),
                executor: ExecutorName::new("e").expect("valid"),
                pool: pool.clone(),
                labels: Labels::new(),
                taints: vec![],
                allocatable: Resources::parse([
                    ("cpu", "64"),
                    ("memory", "256Gi"),
                    ("nvidia.com/gpu", gpus.to_string().as_str()),
                ])
                .expect("valid"),
                unallocatable: Resources::new(),
                unschedulable: false,
            })
            .collect();
        let mut cfg = SchedulerConfig::default();
        cfg.pools.insert(pool, policy);
        cfg.validate().expect("valid config");
        Cluster {
            cfg,
            nodes,
            queues: queues.iter().map(|(q, f)| Queue::new(QueueName::new(q).expect("valid"), *f)).collect(),
            queued: vec![],
            running: vec![],
            names: BTreeMap::new(),
            ids: BTreeMap::new(),
            seq: 0,
            now_ms: 1_000_000,
        }
    }

    /// Submits jobs: a spec with `members > 1` is a gang `<name>-1 .. <name>-N`.
    fn submit(&mut self, specs: &[Spec]) {
        for s in specs {
            let requests = Resources::parse([
                ("cpu", s.cpus.to_string().as_str()),
                ("memory", "1Gi"),
                ("nvidia.com/gpu", s.gpus.to_string().as_str()),
            ])
            .expect("valid");
            let requirements = Requirements::new(SchedulingRequirements { requests, ..Default::default() });
            let gang = (s.members > 1).then(|| {
                Arc::new(GangSpec {
                    id: s.name.to_string(),
                    cardinality: s.members,
                    min_cardinality: s.members,
                    node_uniformity_label: None,
                })
            });
            let names: Vec<String> = if s.members > 1 {
                (1..=s.members).map(|i| format!("{}-{i}", s.name)).collect()
            } else {
                vec![s.name.to_string()]
            };
            for name in names {
                self.seq += 1;
                let id = JobId::from_u128(u128::from(self.seq));
                self.names.insert(id, name.clone());
                self.ids.insert(name, id);
                let class = if s.preemptible { "preemptible" } else { "default" };
                self.queued.push(Arc::new(JobInfo {
                    id,
                    queue: QueueName::new(s.queue).expect("valid"),
                    priority_class: PriorityClassName::new(class).expect("valid"),
                    priority: s.priority,
                    submit_seq: self.seq,
                    requirements: requirements.clone(),
                    gang: gang.clone(),
                    pools: vec![],
                    not_before_ms: None,
                }));
            }
        }
    }

    /// Trials `<prefix>-1 .. <prefix>-N`, one GPU each, preemptible.
    fn submit_many(&mut self, prefix: &str, queue: &str, priority: u32, count: usize) {
        let names: Vec<String> = (1..=count).map(|i| format!("{prefix}-{i}")).collect();
        let specs: Vec<Spec> = names.iter().map(|n| Spec::new(n, queue, priority, 1).preemptible()).collect();
        self.submit(&specs);
    }

    fn name(&self, id: JobId) -> &str {
        &self.names[&id]
    }

    fn id(&self, name: &str) -> JobId {
        self.ids[name]
    }

    /// Running jobs that end (finished or cancelled), and queued jobs cancelled.
    fn end(&mut self, names: &[&str]) {
        let ids: BTreeSet<JobId> = names.iter().map(|n| self.ids[*n]).collect();
        let before = self.running.len() + self.queued.len();
        self.running.retain(|r| !ids.contains(&r.job.id));
        self.queued.retain(|j| !ids.contains(&j.id));
        assert_eq!(before - self.running.len() - self.queued.len(), ids.len(), "every job named was live");
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
        Snapshot { nodes: self.nodes.clone(), queues, running: self.running.clone(), ..Default::default() }
    }

    /// Runs one cycle a second after the last and applies it.
    fn cycle(&mut self) -> Outcome {
        self.now_ms += 1000;
        let d = schedule(&self.snapshot(), &self.cfg, 7, self.now_ms);
        self.apply(&d);
        let name = |id: &JobId| self.names[id].clone();
        Outcome {
            leased: d.leases.iter().map(|l| (name(&l.job_id), l.node.to_string())).collect(),
            preempted: d.preemptions.iter().map(|p| (name(&p.job_id), p.reason.clone())).collect(),
            waiting: d.unscheduled.iter().map(|u| (name(&u.job_id), (*u.reason).clone())).collect(),
            failed: d.failures.iter().map(|f| name(&f.job_id)).collect(),
            decisions: d,
        }
    }

    fn apply(&mut self, d: &Decisions) {
        let preempted: BTreeSet<JobId> = d.preemptions.iter().map(|p| p.job_id).collect();
        let failed: BTreeSet<JobId> = d.failures.iter().map(|f| f.job_id).collect();
        self.running.retain(|r| !preempted.contains(&r.job.id));
        for l in &d.leases {
            let Some(pos) = self.queued.iter().position(|j| j.id == l.job_id) else { continue };
            let job = self.queued.remove(pos);
            self.running.push(RunningJob {
                job,
                executor: l.executor.clone(),
                node: l.node.clone(),
                leased_at_ms: self.now_ms,
            });
        }
        self.queued.retain(|j| !failed.contains(&j.id));
    }

    /// Running jobs per node, by name.
    fn on_nodes(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in &self.running {
            out.entry(r.node.to_string()).or_default().insert(self.names[&r.job.id].clone());
        }
        out
    }
}

fn names(prefix: &str, range: std::ops::RangeInclusive<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

fn leased_on(o: &Outcome, node: &str) -> Vec<String> {
    o.leased
        .iter()
        .filter(|(_, n)| n.as_str() == node)
        .map(|(j, _)| j.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

fn no_gpu(pool: &str) -> Reason {
    Reason::NoCapacity { pool: PoolName::new(pool).expect("valid"), missing: "1 nvidia.com/gpu".into() }
}

fn behind(c: &Cluster, job: &str, priority: u32) -> Reason {
    Reason::BehindHigherPriority { pool: PoolName::new("gpu").expect("valid"), job: c.id(job), priority }
}

fn priority_pool(preemption: bool) -> PoolPolicyConfig {
    PoolPolicyConfig { policy: PoolPolicy::Priority, preemption: Some(preemption) }
}

/// Determined's worked example of the priority scheduler with preemption, on a pool of 8 GPUs
/// (two nodes of 4), step by step.
#[test]
fn determined_priority_worked_example() {
    let mut c = Cluster::new("gpu", 2, 4, priority_pool(true), &[("research", 1.0), ("notebooks", 1.0)]);

    // 1. An experiment of priority 2 with 20 one-GPU preemptible trials: 8 run, 4 per node.
    c.submit_many("t", "research", 2, 20);
    let o = c.cycle();
    assert_eq!(set(&leased_on(&o, "node-1")), set(&names("t", 1..=4)));
    assert_eq!(set(&leased_on(&o, "node-2")), set(&names("t", 5..=8)));
    assert!(o.preempted.is_empty());
    for t in names("t", 9..=20) {
        assert_eq!(o.waiting[&t], no_gpu("gpu"), "{t}");
    }

    // 2. A priority-1 training job needing 4 GPUs preempts 4 trials (the newest, on one node) and
    //    runs there.
    c.submit(&[Spec::new("train", "research", 1, 4)]);
    let o = c.cycle();
    assert_eq!(o.leased, BTreeMap::from([("train".to_string(), "node-2".to_string())]));
    let by = c.id("train");
    let want: BTreeMap<String, PreemptionReason> = names("t", 5..=8)
        .into_iter()
        .map(|t| (t, PreemptionReason::JobPriority { by, by_priority: 1, priority: 2 }))
        .collect();
    assert_eq!(o.preempted, want);
    assert_eq!(
        o.preempted["t-5"].to_string(),
        format!("preempted (priority 2) by higher-priority job {by} (priority 1)")
    );
    // The pending trials may not preempt trials of their own priority.
    assert_eq!(o.waiting["t-9"], no_gpu("gpu"));

    // 3. A priority-3 notebook (1 GPU, not preemptible) waits behind the pending trials.
    c.submit(&[Spec::new("nb", "notebooks", 3, 1)]);
    let o = c.cycle();
    assert!(o.leased.is_empty() && o.preempted.is_empty());
    assert_eq!(o.waiting["nb"], behind(&c, "t-9", 2));
    assert_eq!(
        o.waiting["nb"].to_string(),
        format!("behind higher-priority pending job {} (priority 2) in pool gpu", c.id("t-9"))
    );

    // 4. The running trials and the training job end: 8 more trials start; the notebook still
    //    waits, now behind t-17.
    c.end(&["t-1", "t-2", "t-3", "t-4", "train"]);
    let o = c.cycle();
    assert_eq!(set(&o.leased.keys().cloned().collect::<Vec<_>>()), set(&names("t", 9..=16)));
    assert_eq!(o.waiting["nb"], behind(&c, "t-17", 2));
    // Those end too: the last 4 trials start and, the experiment needing no more than 7 GPUs,
    // so does the notebook.
    let ended = names("t", 9..=16);
    c.end(&ended.iter().map(String::as_str).collect::<Vec<_>>());
    let o = c.cycle();
    let mut want = set(&names("t", 17..=20));
    want.insert("nb".into());
    assert_eq!(set(&o.leased.keys().cloned().collect::<Vec<_>>()), want);
    assert_eq!(o.leased["nb"], "node-2");
    // Both experiments are done; the notebook runs alone.
    let ended = names("t", 17..=20);
    c.end(&ended.iter().map(String::as_str).collect::<Vec<_>>());
    let o = c.cycle();
    assert!(o.leased.is_empty() && o.preempted.is_empty());
    assert_eq!(c.on_nodes(), BTreeMap::from([("node-2".to_string(), set(&["nb".to_string()]))]));

    // 5. A priority-1 job needing 8 GPUs (a gang of two 4-GPU members) cannot start: 7 GPUs are
    //    free and the notebook is not preemptible.
    c.submit(&[Spec::new("big", "research", 1, 4).preemptible().gang(2)]);
    let o = c.cycle();
    assert!(o.leased.is_empty() && o.preempted.is_empty());
    let Reason::Gang { fit, cardinality, .. } = &o.waiting["big-1"] else { panic!("{:?}", o.waiting["big-1"]) };
    assert_eq!((*fit, *cardinality), (1, 2));

    // 6. A priority-2 job needing 4 GPUs does not start either, though 4 fit on node-1: it is
    //    behind the pending priority-1 gang.
    c.submit(&[Spec::new("mid", "research", 2, 4).preemptible()]);
    let o = c.cycle();
    assert!(o.leased.is_empty() && o.preempted.is_empty());
    assert_eq!(o.waiting["mid"], behind(&c, "big-1", 1));

    // 7. The notebook is cancelled: the 8-GPU gang runs; the 4-GPU job waits for room.
    c.end(&["nb"]);
    let o = c.cycle();
    assert_eq!(set(&o.leased.keys().cloned().collect::<Vec<_>>()), set(&names("big", 1..=2)));
    assert_ne!(o.leased["big-1"], o.leased["big-2"]);
    assert_eq!(
        o.waiting["mid"],
        Reason::NoCapacity { pool: PoolName::new("gpu").unwrap(), missing: "4 nvidia.com/gpu".into() }
    );

    // 8. Once it is done, the 4-GPU job runs.
    c.end(&["big-1", "big-2"]);
    let o = c.cycle();
    assert_eq!(o.leased.keys().cloned().collect::<Vec<_>>(), vec!["mid".to_string()]);
    assert!(o.waiting.is_empty());
    assert_eq!(o.decisions.pools[0].policy, PoolPolicy::Priority);
}

#[test]
fn zero_slot_jobs_form_a_line_of_their_own() {
    let mut c = Cluster::new("gpu", 1, 4, priority_pool(false), &[("a", 1.0), ("b", 1.0)]);
    c.submit(&[Spec::new("run", "a", 5, 4)]);
    c.cycle();
    // A priority-1 GPU job waits for room; a priority-9 CPU-only job still starts, and a
    // priority-5 GPU job waits behind the first.
    c.submit(&[Spec::new("gpu1", "a", 1, 2), Spec::new("cpu9", "b", 9, 0).cpus(8), Spec::new("gpu5", "b", 5, 1)]);
    let o = c.cycle();
    assert_eq!(o.leased, BTreeMap::from([("cpu9".to_string(), "node-1".to_string())]));
    assert_eq!(
        o.waiting["gpu1"],
        Reason::NoCapacity { pool: PoolName::new("gpu").unwrap(), missing: "2 nvidia.com/gpu".into() }
    );
    assert_eq!(o.waiting["gpu5"], behind(&c, "gpu1", 1));
    // Without preemption nothing is preempted, whatever the priorities.
    assert!(o.preempted.is_empty());
    // A CPU-only job that waits for room blocks CPU-only jobs only: a GPU job of a lower
    // priority starts beside it.
    c.end(&["run"]);
    c.submit(&[Spec::new("cpu0", "a", 0, 0).cpus(60), Spec::new("cpu1", "a", 1, 0).cpus(1)]);
    let o = c.cycle();
    let leased: BTreeSet<String> = o.leased.keys().cloned().collect();
    assert_eq!(leased, set(&["gpu1".to_string(), "gpu5".to_string()]));
    assert_eq!(o.waiting["cpu1"], behind(&c, "cpu0", 0));
}

#[test]
fn equal_priorities_go_in_submission_order_without_blocking_each_other() {
    let mut c = Cluster::new("gpu", 1, 4, priority_pool(false), &[("a", 1.0), ("b", 1.0)]);
    c.submit(&[Spec::new("hold", "a", 0, 2)]);
    c.cycle();
    c.submit(&[Spec::new("x", "b", 3, 4), Spec::new("y", "a", 3, 2), Spec::new("z", "a", 4, 1)]);
    let o = c.cycle();
    // x (first, 4 GPUs) does not fit; y (same priority, 2 GPUs) does; z waits behind x.
    assert_eq!(o.leased.keys().cloned().collect::<Vec<_>>(), vec!["y".to_string()]);
    assert_eq!(o.waiting["z"], behind(&c, "x", 3));
}

#[test]
fn a_job_no_node_could_ever_hold_blocks_nobody() {
    let mut c = Cluster::new("gpu", 2, 4, priority_pool(true), &[("a", 1.0)]);
    c.submit(&[Spec::new("huge", "a", 0, 8), Spec::new("small", "a", 1, 1)]);
    let o = c.cycle();
    assert_eq!(o.leased.keys().cloned().collect::<Vec<_>>(), vec!["small".to_string()]);
    assert_eq!(
        o.waiting["huge"],
        Reason::NoCapacity { pool: PoolName::new("gpu").unwrap(), missing: "8 nvidia.com/gpu".into() }
    );
}

#[test]
fn victims_lowest_priority_then_latest_started_never_equal_or_protected() {
    let mut c = Cluster::new("gpu", 1, 8, priority_pool(true), &[("a", 1.0), ("b", 1.0)]);
    // Started in three cycles: p3-old, then p3-new and p2, then a non-preemptible p9 and a p1.
    c.submit(&[Spec::new("p3-old", "a", 3, 2).preemptible()]);
    c.cycle();
    c.submit(&[Spec::new("p3-new", "b", 3, 2).preemptible(), Spec::new("p2", "a", 2, 1).preemptible()]);
    c.cycle();
    c.submit(&[Spec::new("p9", "b", 9, 2), Spec::new("p1", "a", 1, 1).preemptible()]);
    assert_eq!(c.cycle().leased.len(), 2);
    // A priority-1 job needing 2 GPUs: the latest started of the lowest priority (p3-new) goes;
    // not p9 (not preemptible), not p1 (equal).
    c.submit(&[Spec::new("urgent", "b", 1, 2)]);
    let o = c.cycle();
    assert_eq!(o.preempted.keys().cloned().collect::<Vec<_>>(), vec!["p3-new".to_string()]);
    assert_eq!(o.leased.keys().cloned().collect::<Vec<_>>(), vec!["urgent".to_string()]);
    // A priority-0 job needing 4 GPUs: p3-old (2), then p2 (1), then p1 (1).
    c.submit(&[Spec::new("top", "a", 0, 4)]);
    let o = c.cycle();
    let preempted: BTreeSet<String> = o.preempted.keys().cloned().collect();
    assert_eq!(preempted, set(&["p3-old".to_string(), "p2".to_string(), "p1".to_string()]));
    assert_eq!(o.leased.keys().cloned().collect::<Vec<_>>(), vec!["top".to_string()]);
    // A job that preempting everything it may would still not make fit preempts nothing.
    c.submit(&[Spec::new("more", "a", 0, 4)]);
    let o = c.cycle();
    assert!(o.preempted.is_empty() && o.leased.is_empty());
}

#[test]
fn preempting_a_gang_member_preempts_its_gang() {
    let mut c = Cluster::new("gpu", 2, 4, priority_pool(true), &[("a", 1.0)]);
    c.submit(&[Spec::new("g", "a", 5, 4).preemptible().gang(2)]);
    assert_eq!(c.cycle().leased.len(), 2);
    c.submit(&[Spec::new("one", "a", 1, 4)]);
    let o = c.cycle();
    assert_eq!(o.preempted.keys().cloned().collect::<Vec<_>>(), vec!["g-1".to_string(), "g-2".to_string()]);
    // The member on the node chosen goes for the job's priority, the other with its gang.
    let mut kinds: Vec<&str> = o
        .preempted
        .values()
        .map(|r| match r {
            PreemptionReason::JobPriority { .. } => "priority",
            PreemptionReason::GangMember { .. } => "gang",
            _ => "other",
        })
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, vec!["gang", "priority"]);
    assert_eq!(o.leased.len(), 1);
}

#[test]
fn proportional_targets_follow_determineds_example() {
    assert_eq!(proportional_targets(8, &[10, 30], &[1.0, 1.0]), vec![2, 6]);
    assert_eq!(proportional_targets(8, &[10, 30], &[3.0, 1.0]), vec![4, 4]);
    // Capped at demand, the rest shared again: A wants 1, B and C share the other 7 by demand.
    assert_eq!(proportional_targets(8, &[1, 10, 30], &[10.0, 1.0, 1.0]), vec![1, 2, 5]);
    // Enough for everyone: targets are the demands.
    assert_eq!(proportional_targets(8, &[3, 2, 0], &[1.0, 1.0, 1.0]), vec![3, 2, 0]);
    // Whole units; left-over units to the largest remainders, then the first.
    assert_eq!(proportional_targets(8, &[10, 10, 10], &[1.0, 1.0, 1.0]), vec![3, 3, 2]);
    assert_eq!(proportional_targets(10, &[1, 2, 100], &[1.0, 1.0, 1.0]), vec![0, 0, 10]);
    assert_eq!(proportional_targets(0, &[5], &[1.0]), vec![0]);
}

fn proportional_pool() -> PoolPolicyConfig {
    PoolPolicyConfig { policy: PoolPolicy::Proportional, preemption: None }
}

#[test]
fn proportional_pool_starts_queues_up_to_their_targets_and_preempts_above() {
    let mut c = Cluster::new("gpu", 2, 4, proportional_pool(), &[("A", 1.0), ("B", 1.0)]);
    // A alone wants 10: it gets all 8 GPUs.
    c.submit_many("a", "A", 0, 10);
    let o = c.cycle();
    assert_eq!(set(&o.leased.keys().cloned().collect::<Vec<_>>()), set(&names("a", 1..=8)));
    let target = |o: &Outcome, q: &str| {
        let report = &o.decisions.pools[0];
        let share = report.queues.iter().find(|s| s.queue.as_str() == q).expect("queue in report");
        share.proportional_target.as_ref().map(|r| r.get("nvidia.com/gpu") / 1000)
    };
    assert_eq!(target(&o, "A"), Some(8));
    // B arrives wanting 30: targets 2 and 6; A's 6 latest started trials go (all started in
    // one cycle: the newest submitted) and B starts 6.
    c.submit_many("b", "B", 0, 30);
    let o = c.cycle();
    assert_eq!((target(&o, "A"), target(&o, "B")), (Some(2), Some(6)));
    assert_eq!(set(&o.preempted.keys().cloned().collect::<Vec<_>>()), set(&names("a", 3..=8)));
    assert_eq!(
        o.preempted["a-8"].to_string(),
        "preempted: queue A held more than its proportional target of 2 nvidia.com/gpu in pool gpu"
    );
    assert_eq!(set(&o.leased.keys().cloned().collect::<Vec<_>>()), set(&names("b", 1..=6)));
    assert_eq!(
        o.waiting["a-9"].to_string(),
        "queue A at its proportional target in pool gpu: holds 2 of 2 nvidia.com/gpu, and the job would take it above"
    );
    assert_eq!(o.decisions.pools[0].policy, PoolPolicy::Proportional);
    // Preempted jobs end (they are not queued again), so A's demand is now 2 running + 2 queued:
    // targets 4:30 → 1 and 7 (0.94 and 7.06, the spare unit to the larger remainder, A's).
    let o = c.cycle();
    assert_eq!((target(&o, "A"), target(&o, "B")), (Some(1), Some(7)));
    assert_eq!(o.preempted.keys().cloned().collect::<Vec<_>>(), vec!["a-2".to_string()]);
    assert_eq!(o.leased.keys().cloned().collect::<Vec<_>>(), vec!["b-7".to_string()]);
    // 3:30 → still 1 and 7: stable.
    let o = c.cycle();
    assert_eq!((target(&o, "A"), target(&o, "B")), (Some(1), Some(7)));
    assert!(o.leased.is_empty() && o.preempted.is_empty());
}

#[test]
fn proportional_weights_and_no_preemption() {
    let off = PoolPolicyConfig { policy: PoolPolicy::Proportional, preemption: Some(false) };
    // Weight 3 for A (priority factor 1/3), 1 for B.
    let mut c = Cluster::new("gpu", 2, 4, off, &[("A", 1.0 / 3.0), ("B", 1.0)]);
    c.submit_many("b", "B", 0, 30);
    assert_eq!(c.cycle().leased.len(), 8);
    // A arrives wanting 10: targets 4 and 4, but without preemption B keeps its 8 GPUs.
    c.submit_many("a", "A", 0, 10);
    let o = c.cycle();
    assert!(o.preempted.is_empty() && o.leased.is_empty());
    // Six of B's jobs end: demands 10 and 24, weighted 30 : 24 → 4.44 and 3.56 → 4 and 4. A
    // starts 4, B (holding 2) 2 more, and the rest of B waits at its target.
    c.end(&["b-1", "b-2", "b-3", "b-4", "b-5", "b-6"]);
    let o = c.cycle();
    let mut want = set(&names("a", 1..=4));
    want.extend(names("b", 9..=10));
    assert_eq!(set(&o.leased.keys().cloned().collect::<Vec<_>>()), want);
    assert!(o.waiting["b-11"].to_string().contains("at its proportional target"), "{}", o.waiting["b-11"]);
    assert!(o.waiting["a-5"].to_string().contains("holds 4 of 4 nvidia.com/gpu"), "{}", o.waiting["a-5"]);
}

#[test]
fn proportional_without_gpus_divides_the_dominant_resource() {
    let mut c = Cluster::new("cpu", 1, 0, proportional_pool(), &[("A", 1.0), ("B", 1.0)]);
    // cpu is the most demanded resource: 64 cpus shared by demand 32 : 96 → 16 and 48.
    let a: Vec<String> = names("a", 1..=4);
    let b: Vec<String> = names("b", 1..=12);
    let specs: Vec<Spec> = a
        .iter()
        .map(|n| Spec::new(n, "A", 0, 0).cpus(8))
        .chain(b.iter().map(|n| Spec::new(n, "B", 0, 0).cpus(8)))
        .collect();
    c.submit(&specs);
    let o = c.cycle();
    let report = &o.decisions.pools[0];
    let targets: Vec<i64> = report.queues.iter().map(|s| s.proportional_target.as_ref().unwrap().get("cpu")).collect();
    assert_eq!(targets, vec![16_000, 48_000]);
    let count = |q: char| o.leased.keys().filter(|k| k.starts_with(q)).count();
    assert_eq!((count('a'), count('b')), (2, 6));
}

#[test]
fn fair_share_pools_are_untouched_by_other_pools_policies() {
    // The same cycle with and without a policy for another pool decides the same.
    let mut c = Cluster::new("gpu", 2, 4, priority_pool(true), &[("A", 1.0), ("B", 1.0)]);
    c.cfg.pools.clear();
    c.submit_many("a", "A", 2, 10);
    let plain = schedule(&c.snapshot(), &c.cfg, 7, 5);
    c.cfg.pools.insert(PoolName::new("other").unwrap(), priority_pool(true));
    let with = schedule(&c.snapshot(), &c.cfg, 7, 5);
    assert_eq!(plain, with);
    assert_eq!(plain.pools[0].policy, PoolPolicy::FairShare);
}

#[test]
fn pool_policies_parse_and_are_checked_by_key() {
    let c: SchedulerConfig = toml::from_str(
        "[pools.gpu]\npolicy = \"priority\"\npreemption = true\n[pools.batch]\npolicy = \"proportional\"\n",
    )
    .unwrap();
    let gpu = &c.pools[&PoolName::new("gpu").unwrap()];
    assert_eq!((gpu.policy, gpu.preemption()), (PoolPolicy::Priority, true));
    let batch = &c.pools[&PoolName::new("batch").unwrap()];
    assert_eq!((batch.policy, batch.preemption()), (PoolPolicy::Proportional, true));
    c.validate().unwrap();
    let c: SchedulerConfig = toml::from_str("[pools.gpu]\npolicy = \"priority\"\n").unwrap();
    assert!(!c.pools[&PoolName::new("gpu").unwrap()].preemption());

    let c: SchedulerConfig = toml::from_str("[pools.gpu]\npolicy = \"fair_share\"\npreemption = true\n").unwrap();
    assert_eq!(c.validate().unwrap_err().field, "pools.gpu.preemption");
    let e = toml::from_str::<SchedulerConfig>("[pools.gpu]\npolicy = \"fifo\"\n").unwrap_err().to_string();
    assert!(e.contains("unknown variant `fifo`"), "{e}");
    let e = toml::from_str::<SchedulerConfig>("[pools.gpu]\npolicy = \"priority\"\npreempt = true\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `preempt`"), "{e}");
    // The simulate spelling.
    let c: SchedulerConfig =
        serde_yaml_ng::from_str("pools: {gpu: {policy: proportional, preemption: false}}\n").unwrap();
    assert!(!c.pools[&PoolName::new("gpu").unwrap()].preemption());
}

mod scenarios {
    //! The worked scenarios (tests/scenarios/pool_*.yaml) through the simulator, exact outcomes.

    use crate::simulate::{Output, RoundOutput, run_text};
    use std::collections::BTreeMap;

    fn run(name: &str) -> Output {
        let path = format!("{}/tests/scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        run_text(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn counts(m: &BTreeMap<crate::model::QueueName, usize>) -> Vec<(String, usize)> {
        m.iter().filter(|(_, v)| **v > 0).map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn pairs(p: &[(&str, usize)]) -> Vec<(String, usize)> {
        p.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// (state, node, reason) of a job after a round.
    fn job<'a>(r: &'a RoundOutput, name: &str) -> (&'a str, Option<&'a str>, &'a str) {
        let j = r.jobs.get(name).unwrap_or_else(|| panic!("no job {name}"));
        (j.state, j.node.as_deref(), j.reason.as_deref().unwrap_or(""))
    }

    fn id(n: u128) -> crate::model::JobId {
        crate::model::JobId::from_u128(n)
    }

    fn range(prefix: &str, r: std::ops::RangeInclusive<usize>) -> Vec<String> {
        r.map(|i| format!("{prefix}-{i}")).collect()
    }

    #[test]
    fn pool_priority_worked_example() {
        let out = run("pool_priority.yaml");
        let rounds = &out.rounds;
        assert_eq!(rounds.len(), 10);
        let no_gpu = "no node with 1 nvidia.com/gpu free in pool gpu";
        // Job ids follow submission: t-N is N, train 21, nb 22, big-1 23, big-2 24, mid 25.
        let behind =
            |n: u128, p: u32| format!("behind higher-priority pending job {} (priority {p}) in pool gpu", id(n));

        let r = &rounds[0];
        assert_eq!(counts(&r.scheduled), pairs(&[("research", 8)]));
        for t in range("t", 1..=4) {
            assert_eq!(job(r, &t), ("running", Some("node-1"), ""), "{t}");
        }
        for t in range("t", 5..=8) {
            assert_eq!(job(r, &t), ("running", Some("node-2"), ""), "{t}");
        }
        for t in range("t", 9..=20) {
            assert_eq!(job(r, &t), ("queued", None, no_gpu), "{t}");
        }

        let r = &rounds[1];
        assert_eq!(counts(&r.scheduled), pairs(&[("research", 1)]));
        assert_eq!(counts(&r.preempted), pairs(&[("research", 4)]));
        assert_eq!(job(r, "train"), ("running", Some("node-2"), ""));
        let by_train = format!("preempted (priority 2) by higher-priority job {} (priority 1)", id(21));
        for t in range("t", 5..=8) {
            assert_eq!(job(r, &t), ("preempted", None, by_train.as_str()), "{t}");
        }
        assert_eq!(job(r, "t-9"), ("queued", None, no_gpu));

        let r = &rounds[2];
        assert!(counts(&r.scheduled).is_empty() && counts(&r.preempted).is_empty());
        assert_eq!(job(r, "nb"), ("queued", None, behind(9, 2).as_str()));

        let r = &rounds[3];
        assert_eq!(counts(&r.scheduled), pairs(&[("research", 8)]));
        for t in range("t", 9..=16) {
            assert_eq!(job(r, &t).0, "running", "{t}");
        }
        assert_eq!(job(r, "nb"), ("queued", None, behind(17, 2).as_str()));

        let r = &rounds[4];
        assert_eq!(counts(&r.scheduled), pairs(&[("notebooks", 1), ("research", 4)]));
        for t in range("t", 17..=20) {
            assert_eq!(job(r, &t), ("running", Some("node-1"), ""), "{t}");
        }
        assert_eq!(job(r, "nb"), ("running", Some("node-2"), ""));

        let r = &rounds[5];
        assert!(counts(&r.scheduled).is_empty());
        assert_eq!(counts(&r.running), pairs(&[("notebooks", 1)]));

        let r = &rounds[6];
        assert!(counts(&r.scheduled).is_empty() && counts(&r.preempted).is_empty());
        let gang = "gang big: 1 of 2 members fit; no node with 4 nvidia.com/gpu free in pool gpu";
        assert_eq!(job(r, "big-1"), ("queued", None, gang));
        assert_eq!(job(r, "big-2"), ("queued", None, gang));

        let r = &rounds[7];
        assert!(counts(&r.scheduled).is_empty() && counts(&r.preempted).is_empty());
        assert_eq!(job(r, "mid"), ("queued", None, behind(23, 1).as_str()));
        assert_eq!(counts(&r.nodes["node-1"]), vec![]);

        let r = &rounds[8];
        assert_eq!(counts(&r.scheduled), pairs(&[("research", 2)]));
        assert_eq!(job(r, "big-1"), ("running", Some("node-1"), ""));
        assert_eq!(job(r, "big-2"), ("running", Some("node-2"), ""));
        assert_eq!(job(r, "mid"), ("queued", None, "no node with 4 nvidia.com/gpu free in pool gpu"));

        let r = &rounds[9];
        assert_eq!(counts(&r.scheduled), pairs(&[("research", 1)]));
        assert_eq!(job(r, "mid"), ("running", Some("node-1"), ""));
        assert!(counts(&r.queued).is_empty());
    }

    #[test]
    fn pool_proportional_example() {
        let out = run("pool_proportional.yaml");
        let rounds = &out.rounds;
        for r in &rounds[..2] {
            assert_eq!(counts(&r.scheduled).len(), if r.round == 0 { 4 } else { 0 });
            assert_eq!(counts(&r.running), pairs(&[("A", 2), ("B", 6), ("C", 4), ("D", 4)]));
            assert!(counts(&r.preempted).is_empty());
            assert_eq!(
                job(r, "a-3").2,
                "queue A at its proportional target in pool even: holds 2 of 2 nvidia.com/gpu, and the job would \
                 take it above"
            );
            assert_eq!(
                job(r, "d-5").2,
                "queue D at its proportional target in pool weighted: holds 4 of 4 nvidia.com/gpu, and the job \
                 would take it above"
            );
        }
        let r = &rounds[2];
        assert_eq!(counts(&r.scheduled), pairs(&[("E", 1)]));
        assert_eq!(counts(&r.preempted), pairs(&[("B", 1)]));
        assert_eq!(
            job(r, "b-6"),
            (
                "preempted",
                None,
                "preempted: queue B held more than its proportional target of 5 nvidia.com/gpu in pool even"
            )
        );
        assert_eq!(counts(&r.running), pairs(&[("A", 2), ("B", 5), ("C", 4), ("D", 4), ("E", 1)]));
        let report = r.decisions.as_ref().expect("decisions");
        let even = report.pools.iter().find(|p| p.pool.as_str() == "even").expect("pool even");
        let targets: Vec<(String, i64)> = even
            .queues
            .iter()
            .map(|q| {
                (q.queue.to_string(), q.proportional_target.as_ref().map(|t| t.get("nvidia.com/gpu")).unwrap_or(-1))
            })
            .collect();
        assert_eq!(targets, vec![("A".into(), 2000), ("B".into(), 5000), ("E".into(), 1000)]);
    }
}
