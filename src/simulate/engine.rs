//! Runs a scenario round by round through the real scheduler and records what each round decided.

use super::output::{JobOutput, NodeOutput, Output, RoundOutput};
use super::scenario::Scenario;
use crate::model::{GangSpec, JobId, Node, NodeFault, NodeName, QueueName, Requirements, SchedulingRequirements};
use crate::scheduler::{
    Decisions, JobInfo, NodeFailure, NodeHealth, QueueSnapshot, QueueUsage, RateLimiterState, RunningJob, Snapshot,
    schedule,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// State of a simulated job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimState {
    /// Waiting to be scheduled.
    Queued,
    /// Placed on a node.
    Running,
    /// Evicted by the scheduler; it is not queued again.
    Preempted,
    /// Failed by the scheduler (e.g. a gang member beyond what fit), or by a round's `fail`.
    Failed,
    /// Finished by a round's `finish`.
    Succeeded,
    /// Cancelled by a round's `cancel`.
    Cancelled,
}

impl SimState {
    fn as_str(self) -> &'static str {
        match self {
            SimState::Queued => "queued",
            SimState::Running => "running",
            SimState::Preempted => "preempted",
            SimState::Failed => "failed",
            SimState::Succeeded => "succeeded",
            SimState::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone)]
struct SimJob {
    name: String,
    info: Arc<JobInfo>,
    state: SimState,
    /// Index into the node list while running.
    node: Option<usize>,
    reason: Option<String>,
    /// When it was last placed (the round's time).
    leased_at_ms: i64,
}

/// A scenario in progress.
pub struct Simulation {
    scenario: Scenario,
    nodes: Vec<Node>,
    node_index: HashMap<(String, String), usize>,
    node_labels: Vec<String>,
    /// Failures counted against each node (by index) and its quarantine.
    health: Vec<NodeHealth>,
    jobs: Vec<SimJob>,
    by_name: HashMap<String, usize>,
    rate_limits: RateLimiterState,
    /// Queues' usage as the last round recorded it.
    usage: QueueUsage,
    round: usize,
}

fn job_id(idx: usize) -> JobId {
    JobId::from_u128(idx as u128 + 1)
}

impl Simulation {
    /// Prepares a (validated) scenario.
    pub fn new(scenario: Scenario) -> Self {
        let mut nodes = Vec::new();
        for spec in &scenario.nodes {
            for name in spec.names() {
                let mut labels = spec.labels.clone();
                labels.entry("kubernetes.io/hostname".to_string()).or_insert_with(|| name.clone());
                if !spec.reserved_for.is_empty() {
                    labels.insert(
                        crate::model::RESERVED_FOR_LABEL.to_string(),
                        crate::model::reserved_for_value(&spec.reserved_for),
                    );
                }
                nodes.push(Node {
                    name: NodeName::new(&name).unwrap_or_else(|_| NodeName::new("invalid").expect("literal")),
                    executor: spec.executor.clone(),
                    pool: spec.pool.clone(),
                    labels,
                    taints: spec.taints.clone(),
                    allocatable: spec.allocatable.clone(),
                    unallocatable: Default::default(),
                    unschedulable: spec.unschedulable,
                });
            }
        }
        let node_index =
            nodes.iter().enumerate().map(|(i, n)| ((n.executor.to_string(), n.name.to_string()), i)).collect();
        // Node names label the output; executors disambiguate only when names repeat.
        let mut seen = HashSet::new();
        let clash = nodes.iter().any(|n| !seen.insert(n.name.to_string()));
        let node_labels = nodes
            .iter()
            .map(|n| if clash { format!("{}/{}", n.executor, n.name) } else { n.name.to_string() })
            .collect();
        Simulation {
            scenario,
            health: vec![NodeHealth::default(); nodes.len()],
            nodes,
            node_index,
            node_labels,
            jobs: Vec::new(),
            by_name: HashMap::new(),
            rate_limits: RateLimiterState::default(),
            usage: QueueUsage::default(),
            round: 0,
        }
    }

    /// Runs every round.
    pub fn run(mut self) -> Output {
        let mut rounds = Vec::new();
        while self.round < self.scenario.rounds.len() {
            rounds.push(self.step());
        }
        Output { rounds }
    }

    /// Runs the next round.
    pub fn step(&mut self) -> RoundOutput {
        let r = self.round;
        let round = self.scenario.rounds[r].clone();
        let mut warnings = Vec::new();
        let now_ms = (r as f64 * self.scenario.round_interval_seconds * 1000.0).round() as i64;
        for name in &round.finish {
            let Some(&j) = self.by_name.get(name) else { continue };
            if self.jobs[j].state == SimState::Running {
                self.jobs[j].state = SimState::Succeeded;
                self.jobs[j].node = None;
            } else {
                warnings.push(format!("finish {name}: the job is {}, not running", self.jobs[j].state.as_str()));
            }
        }
        for name in &round.cancel {
            let Some(&j) = self.by_name.get(name) else { continue };
            match self.jobs[j].state {
                SimState::Queued | SimState::Running => {
                    self.jobs[j].state = SimState::Cancelled;
                    self.jobs[j].node = None;
                    self.jobs[j].reason = None;
                }
                s => warnings.push(format!("cancel {name}: the job is already {}", s.as_str())),
            }
        }
        let policy = self.scenario.config.quarantine.policy();
        for f in &round.fail {
            let name = f.id();
            let Some(&j) = self.by_name.get(name) else { continue };
            if self.jobs[j].state != SimState::Running {
                warnings.push(format!("fail {name}: the job is {}, not running", self.jobs[j].state.as_str()));
                continue;
            }
            let job = &mut self.jobs[j];
            job.state = SimState::Failed;
            job.reason = Some(if f.node_fault() { "failed: its node's fault" } else { "failed" }.to_string());
            if let Some(n) = job.node.take()
                && f.node_fault()
            {
                // A running job its node failed: the node went away under it, as far as the
                // scenario says.
                self.health[n]
                    .record(NodeFailure { at_ms: now_ms, fault: NodeFault::NodeLost, job: job.info.id }, &policy);
            }
        }
        for (names, cordoned) in [(&round.cordon, true), (&round.uncordon, false)] {
            for q in self.scenario.queues.iter_mut().filter(|q| names.contains(&q.name)) {
                q.cordoned = cordoned;
            }
        }
        self.submit(&round.submit);

        let snapshot = self.snapshot();
        let seed = self.scenario.seed ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let decisions = schedule(&snapshot, &self.scenario.config, seed, now_ms);
        let out = self.apply(&decisions, r, now_ms, warnings);
        self.round += 1;
        out
    }

    fn submit(&mut self, entries: &[super::scenario::SubmitSpec]) {
        let default_pc = self.scenario.config.default_priority_class.clone();
        for sub in entries {
            let reqs = Requirements::new(SchedulingRequirements {
                requests: sub.requests.clone(),
                node_selector: sub.node_selector.clone(),
                tolerations: sub.tolerations.clone(),
                node_affinity: sub.node_affinity.clone(),
            });
            let gang = GangSpec::from_annotations(&sub.annotations).ok().flatten().map(Arc::new);
            for name in sub.names() {
                let idx = self.jobs.len();
                let info = Arc::new(JobInfo {
                    id: job_id(idx),
                    queue: sub.queue.clone(),
                    priority_class: sub.priority_class.clone().unwrap_or_else(|| default_pc.clone()),
                    priority: sub.priority,
                    submit_seq: idx as u64,
                    requirements: reqs.clone(),
                    gang: gang.clone(),
                    pools: sub.pools.clone(),
                });
                self.by_name.insert(name.clone(), idx);
                self.jobs.push(SimJob {
                    name,
                    info,
                    state: SimState::Queued,
                    node: None,
                    reason: None,
                    leased_at_ms: 0,
                });
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut queued: BTreeMap<&QueueName, Vec<Arc<JobInfo>>> = BTreeMap::new();
        let mut running = Vec::new();
        for j in &self.jobs {
            match j.state {
                SimState::Queued => queued.entry(&j.info.queue).or_default().push(j.info.clone()),
                SimState::Running => {
                    if let Some(n) = j.node {
                        let node = &self.nodes[n];
                        running.push(RunningJob {
                            job: j.info.clone(),
                            executor: node.executor.clone(),
                            node: node.name.clone(),
                            leased_at_ms: j.leased_at_ms,
                        });
                    }
                }
                _ => {}
            }
        }
        let queues = self
            .scenario
            .queues
            .iter()
            .map(|q| QueueSnapshot {
                queue: q.clone(),
                queued: queued.remove(&q.name).unwrap_or_default(),
                queued_demand: None,
            })
            .collect();
        Snapshot {
            nodes: self.nodes.clone(),
            queues,
            running,
            rate_limits: self.rate_limits.clone(),
            usage: self.usage.clone(),
            quarantined: self
                .health
                .iter()
                .enumerate()
                .filter_map(|(i, h)| {
                    let n = &self.nodes[i];
                    h.quarantine.as_ref().map(|q| ((n.executor.clone(), n.name.clone()), q.until_ms))
                })
                .collect(),
        }
    }

    fn apply(&mut self, d: &Decisions, round: usize, now_ms: i64, warnings: Vec<String>) -> RoundOutput {
        let idx = |id: JobId| (id.as_u128() - 1) as usize;
        let mut out = RoundOutput { round, warnings, ..Default::default() };
        for j in &mut self.jobs {
            if j.state == SimState::Queued {
                j.reason = None;
            }
        }
        for l in &d.leases {
            let j = idx(l.job_id);
            let node = self.node_index.get(&(l.executor.to_string(), l.node.to_string())).copied();
            let job = &mut self.jobs[j];
            job.state = SimState::Running;
            job.node = node;
            job.reason = None;
            job.leased_at_ms = now_ms;
            *out.scheduled.entry(l.queue.clone()).or_default() += 1;
        }
        for p in &d.preemptions {
            let job = &mut self.jobs[idx(p.job_id)];
            job.state = SimState::Preempted;
            job.node = None;
            job.reason = Some(p.reason.to_string());
            *out.preempted.entry(p.queue.clone()).or_default() += 1;
        }
        for f in &d.failures {
            let job = &mut self.jobs[idx(f.job_id)];
            job.state = SimState::Failed;
            job.reason = Some(f.reason.to_string());
            *out.failed.entry(f.queue.clone()).or_default() += 1;
        }
        for u in &d.unscheduled {
            let job = &mut self.jobs[idx(u.job_id)];
            if job.state == SimState::Queued {
                job.reason = Some(u.reason.to_string());
            }
        }
        for j in &mut self.jobs {
            if j.state == SimState::Queued && j.reason.is_none() {
                j.reason = Some(match d.queue_notes.get(&j.info.queue) {
                    Some(n) => n.to_string(),
                    None => "not considered in this cycle".to_string(),
                });
            }
        }
        self.rate_limits = d.rate_limits.clone();
        if let Some(u) = &d.usage {
            self.usage = u.clone();
        }

        let quarantine_on = self.scenario.config.quarantine.enabled();
        for (i, label) in self.node_labels.iter().enumerate() {
            let quarantined = quarantine_on && self.health[i].quarantined_at(now_ms).is_some();
            out.nodes.insert(label.clone(), NodeOutput { queues: BTreeMap::new(), quarantined });
        }
        for j in &self.jobs {
            match j.state {
                SimState::Running => {
                    *out.running.entry(j.info.queue.clone()).or_default() += 1;
                    if let Some(n) = j.node {
                        *out.nodes
                            .entry(self.node_labels[n].clone())
                            .or_default()
                            .entry(j.info.queue.clone())
                            .or_default() += 1;
                    }
                }
                SimState::Queued => *out.queued.entry(j.info.queue.clone()).or_default() += 1,
                _ => {}
            }
            out.jobs.insert(
                j.name.clone(),
                JobOutput {
                    state: j.state.as_str(),
                    node: j.node.map(|n| self.node_labels[n].clone()),
                    reason: j.reason.clone(),
                },
            );
        }
        out.queue_priority =
            d.pools.iter().flat_map(|p| p.queue_priority.iter().map(|(q, v)| (q.clone(), *v))).collect();
        out.decisions = Some(d.clone());
        out
    }
}
