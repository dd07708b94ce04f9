//! Runs a scenario round by round through the real scheduler and records what each round decided.

use super::job::{SimJob, SimPolicies, SimState};
use super::output::{JobOutput, NodeOutput, Output, ReservationOutput, RoundOutput};
use super::policies::{fail_run, judge_dependencies, queue_retry, waiting_reason};
use super::scenario::Scenario;
use crate::model::{GangSpec, JobId, Node, NodeFault, NodeName, QueueName, Requirements, SchedulingRequirements};
use crate::scheduler::{
    Decisions, JobInfo, JobTimes, NodeFailure, NodeHealth, QueueSnapshot, QueueUsage, RateLimiterState, RunningJob,
    Snapshot, schedule,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

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
    /// The current round's time (ms).
    now_ms: i64,
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
                    unallocatable: spec.unallocatable.clone(),
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
        let running = scenario.running.clone();
        let now_ms = scenario.round_0_at.unwrap_or(0);
        let mut sim = Simulation {
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
            now_ms,
        };
        sim.start_running(&running);
        sim
    }

    /// Adds the scenario's `running` jobs, each on its node, before any round.
    fn start_running(&mut self, entries: &[super::scenario::SubmitSpec]) {
        // Without an executor an entry names a node whose name is unique (the scenario checked).
        let by_name: HashMap<String, usize> =
            self.nodes.iter().enumerate().map(|(i, n)| (n.name.to_string(), i)).collect();
        for entry in entries {
            let first = self.jobs.len();
            self.submit(std::slice::from_ref(entry));
            let node = entry.node.as_ref().and_then(|name| match &entry.executor {
                Some(e) => self.node_index.get(&(e.to_string(), name.clone())).copied(),
                None => by_name.get(name).copied(),
            });
            let started_ms = self.at_ms(entry.started_at_seconds.unwrap_or(0.0));
            let running_ms = entry.running_at_seconds.map(|s| self.at_ms(s));
            for job in &mut self.jobs[first..] {
                job.state = SimState::Running;
                job.node = node;
                job.leased_at_ms = started_ms;
                job.queued_at_ms = started_ms;
                job.running_at_ms = running_ms;
            }
        }
    }

    /// The clock's time (ms) at `seconds` of simulated time: `round_0_at` plus them.
    fn at_ms(&self, seconds: f64) -> i64 {
        self.scenario.round_0_at.unwrap_or(0).saturating_add((seconds * 1000.0).round() as i64)
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
        let now_ms = self.at_ms(r as f64 * self.scenario.round_interval_seconds);
        self.now_ms = now_ms;
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
            let queue = queue_retry(&self.scenario.queues, &self.jobs[j]);
            let job = &mut self.jobs[j];
            fail_run(job, queue, f.exit_code(), f.node_fault(), f.oom(), self.now_ms);
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
        judge_dependencies(&mut self.jobs);

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
            let policies = self.policies_of(sub);
            let not_before_ms = sub.backoff_until_seconds.map(|s| self.at_ms(s));
            let queued_at_ms = sub.queued_at_seconds.map_or(self.now_ms, |s| self.at_ms(s));
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
                    not_before_ms,
                });
                self.by_name.insert(name.clone(), idx);
                self.jobs.push(SimJob {
                    name,
                    info,
                    state: SimState::Queued,
                    node: None,
                    reason: None,
                    leased_at_ms: 0,
                    queued_at_ms,
                    running_at_ms: None,
                    deadline_ms: sub.active_deadline_seconds.map(|d| (d * 1000.0).round() as i64),
                    policies: policies.clone(),
                });
            }
        }
    }

    /// An entry's dependencies (by job index) and retry policy.
    fn policies_of(&self, sub: &super::scenario::SubmitSpec) -> Option<Box<SimPolicies>> {
        if sub.depends_on.is_empty() && sub.retry.is_none() {
            return None;
        }
        let deps = sub.depends_on.iter().filter_map(|d| Some((*self.by_name.get(&d.id)?, d.on, false))).collect();
        let retry = sub.retry.as_ref().map(|r| crate::model::RetryPolicy {
            max_attempts: r.max_attempts,
            on_exit_codes: r.on_exit_codes.clone(),
            on_oom: r.on_oom,
            on_node_failure: r.on_node_failure,
            backoff_ms: r.backoff_seconds.saturating_mul(1000),
        });
        Some(Box::new(SimPolicies { deps, retry, failed: sub.attempts_spent }))
    }

    fn snapshot(&self) -> Snapshot {
        let mut queued: BTreeMap<&QueueName, Vec<Arc<JobInfo>>> = BTreeMap::new();
        let mut running = Vec::new();
        for j in &self.jobs {
            match j.state {
                // A job waiting for another is not offered to the scheduler.
                SimState::Queued if j.policies.as_ref().is_some_and(|p| p.waiting()) => {}
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
            .map(|q| {
                let queued = queued.remove(&q.name).unwrap_or_default();
                QueueSnapshot { queue: q.clone(), queued_demand: self.demand_with_backoffs(&queued), queued }
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
            job_times: self.job_times(),
        }
    }

    /// A queue's demand when some of its `queued` jobs are in a retry back-off: all their
    /// requests, as a server's queue counts them (the cycle offers the held jobs nothing, but
    /// their demand still weighs in fair shares). `None` otherwise: the scheduler sums what it
    /// is offered.
    fn demand_with_backoffs(&self, queued: &[Arc<JobInfo>]) -> Option<crate::model::Resources> {
        if !queued.iter().any(|j| j.not_before_ms.is_some_and(|t| t > self.now_ms)) {
            return None;
        }
        let mut demand = crate::model::Resources::new();
        for j in queued {
            demand.add(&j.requirements.requests);
        }
        Some(demand)
    }

    /// The jobs' times, for reservations only: queued jobs since their submission, running ones
    /// since their placement.
    fn job_times(&self) -> BTreeMap<JobId, JobTimes> {
        if !crate::scheduler::reservation::enabled(&self.scenario.config) {
            return BTreeMap::new();
        }
        let since = |j: &SimJob| match j.state {
            SimState::Queued => Some(j.queued_at_ms),
            SimState::Running => Some(j.running_at_ms.unwrap_or(j.leased_at_ms)),
            _ => None,
        };
        self.jobs
            .iter()
            .filter_map(|j| since(j).map(|s| (j.info.id, JobTimes { since_ms: s, deadline_ms: j.deadline_ms })))
            .collect()
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
            job.running_at_ms = None;
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
        judge_dependencies(&mut self.jobs);
        for j in 0..self.jobs.len() {
            if self.jobs[j].state == SimState::Queued && self.jobs[j].reason.is_none() {
                self.jobs[j].reason = waiting_reason(&self.jobs, j);
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
        out.reservations = self.reservations(d);
        out.decisions = Some(d.clone());
        out
    }

    /// The cycle's held reservations, with the scenario's job and node names.
    fn reservations(&self, d: &Decisions) -> Vec<ReservationOutput> {
        let idx = |id: JobId| (id.as_u128() - 1) as usize;
        d.reservations
            .iter()
            .map(|r| ReservationOutput {
                job: self.jobs[idx(r.job_id)].name.clone(),
                gang: r.gang.clone(),
                queue: r.queue.clone(),
                pool: r.pool.to_string(),
                nodes: r
                    .nodes
                    .iter()
                    .filter_map(|n| self.node_index.get(&(n.executor.to_string(), n.node.to_string())))
                    .map(|&i| self.node_labels[i].clone())
                    .collect(),
                expected_start_seconds: r
                    .expected_start_ms
                    .map(|ms| ms.saturating_sub(self.scenario.round_0_at.unwrap_or(0)) as f64 / 1000.0),
                kept_off: r.kept_off,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::simulate::run_text;

    /// Two 4-cpu nodes; A runs 4 jobs of 1 cpu on n1 from the start (preemptible), B submits.
    const RUNNING: &str = "
nodes:
  - {name: n, count: 2, allocatable: {cpu: '4'}}
queues: [{name: A}, {name: B}]
running:
  - {id: a, queue: A, count: 4, priority_class: preemptible, requests: {cpu: '1'}, node: n-1, started_at_seconds: -60}
  - {id: x, queue: A, priority_class: preemptible, requests: {cpu: '2'}, node: n-2}
rounds:
";

    #[test]
    fn running_jobs_hold_their_nodes_before_round_0() {
        let out = run_text(&format!("{RUNNING}  - submit: [{{id: b, queue: B, count: 3, requests: {{cpu: '1'}}}}]\n"))
            .expect("valid");
        let r0 = &out.rounds[0];
        for a in ["a-1", "a-2", "a-3", "a-4"] {
            assert_eq!((r0.jobs[a].state, r0.jobs[a].node.as_deref()), ("running", Some("n-1")), "{a}");
        }
        // n-1 is full; n-2 has 2 cpus free and x's 2: B's third job (of the default class, more
        // urgent than preemptible) takes x's place.
        assert_eq!((r0.scheduled.get("B").copied(), r0.preempted.get("A").copied()), (Some(3), Some(1)), "{r0:?}");
        assert_eq!(r0.jobs["x"].state, "preempted");
        assert!(r0.jobs["x"].reason.as_deref().is_some_and(|r| r.starts_with("preempted by more urgent job")));
        assert_eq!(r0.nodes["n-2"].get("B").copied(), Some(3));
        assert_eq!(r0.nodes["n-1"].get("A").copied(), Some(4));
    }

    #[test]
    fn running_jobs_finish_and_are_preempted_like_others() {
        let out = run_text(&format!(
            "{RUNNING}  - finish: [x]\n  - submit: [{{id: b, queue: B, count: 4, priority_class: preemptible, requests: {{cpu: '1'}}}}]\n"
        ))
        .expect("valid");
        assert_eq!(out.rounds[0].jobs["x"].state, "succeeded");
        assert_eq!(out.rounds[0].running.get("A").copied(), Some(4));
        // Round 1: B's fair share is half of 8 cpus: n-2's 4 free cpus take all its jobs, A keeps
        // its own.
        let r1 = &out.rounds[1];
        assert_eq!((r1.running.get("A").copied(), r1.running.get("B").copied()), (Some(4), Some(4)), "{r1:?}");
        let out = run_text(
            "nodes: [{name: n, allocatable: {cpu: '4'}}]\nqueues: [{name: A}, {name: B}]\n\
             running: [{id: a, queue: A, count: 4, priority_class: preemptible, requests: {cpu: '1'}, node: n}]\n\
             rounds: [{submit: [{id: b, queue: B, count: 2, priority_class: preemptible, requests: {cpu: '1'}}]}]",
        )
        .expect("valid");
        // A holds the whole node above its fair share: two of its running jobs are preempted for B.
        let r0 = &out.rounds[0];
        assert_eq!((r0.preempted.get("A").copied(), r0.scheduled.get("B").copied()), (Some(2), Some(2)), "{r0:?}");
    }

    #[test]
    fn spent_attempts_count_against_the_retry_policy() {
        let text = |spent: u32| {
            format!(
                "nodes: [{{name: n, allocatable: {{cpu: '1'}}}}]\nqueues: [{{name: A}}]\n\
                 running: [{{id: a, queue: A, requests: {{cpu: '1'}}, node: n, attempts_spent: {spent}, \
                 retry: {{max_attempts: 3, on_exit_codes: [75], backoff_seconds: 10}}}}]\n\
                 rounds: [{{fail: [{{id: a, exit_code: 75}}]}}]"
            )
        };
        let out = run_text(&text(1)).expect("valid");
        // The third attempt's back-off is doubled: 20 s from round 0.
        let a = &out.rounds[0].jobs["a"];
        assert_eq!(a.state, "queued");
        assert_eq!(a.reason.as_deref(), Some("retry back-off until 1970-01-01T00:00:20Z"));
        let out = run_text(&text(2)).expect("valid");
        assert_eq!(out.rounds[0].jobs["a"].state, "failed", "no attempt left");
    }

    #[test]
    fn a_back_off_holds_a_job_until_its_time_on_the_scenario_clock() {
        let out = run_text(
            "round_0_at: 2026-01-01T00:00:00Z\nround_interval_seconds: 20\n\
             nodes: [{name: n, allocatable: {cpu: '1'}}]\nqueues: [{name: A}]\n\
             rounds: [{submit: [{id: b, queue: A, requests: {cpu: '1'}, backoff_until_seconds: 30}]}, {}, {}]",
        )
        .expect("valid");
        let b = |r: usize| (out.rounds[r].jobs["b"].state, out.rounds[r].jobs["b"].reason.clone());
        let held = Some("retry back-off until 2026-01-01T00:00:30Z".to_string());
        assert_eq!((b(0), b(1)), (("queued", held.clone()), ("queued", held)));
        assert_eq!(b(2).0, "running");
    }

    #[test]
    fn reservations_read_queued_and_running_times() {
        let text = |queued_at: &str| {
            format!(
                "round_0_at: 2026-01-01T00:00:00Z\nconfig: {{gang_reservation_after_seconds: 15}}\n\
                 nodes: [{{name: n, allocatable: {{cpu: '2'}}}}]\nqueues: [{{name: A}}, {{name: B}}]\n\
                 running: [{{id: r, queue: B, requests: {{cpu: '2'}}, node: n, started_at_seconds: -10, \
                 running_at_seconds: -5, active_deadline_seconds: 40}}]\n\
                 rounds: [{{submit: [{{id: g, queue: A, requests: {{cpu: '2'}}{queued_at}}}]}}]"
            )
        };
        // Queued 20 s before round 0: past gang_reservation_after; r ends 40 s after it began
        // running.
        let out = run_text(&text(", queued_at_seconds: -20")).expect("valid");
        let res = &out.rounds[0].reservations;
        assert_eq!(res.len(), 1, "{:?}", out.rounds[0]);
        assert_eq!((res[0].job.as_str(), res[0].expected_start_seconds), ("g", Some(35.0)));
        assert_eq!(
            out.rounds[0].jobs["g"].reason.as_deref(),
            Some("reserved node n in pool default; expected to fit at 2026-01-01T00:00:35Z")
        );
        // Submitted at round 0: it has not waited.
        let out = run_text(&text("")).expect("valid");
        assert!(out.rounds[0].reservations.is_empty());
    }

    #[test]
    fn running_jobs_name_their_executor_when_node_names_repeat() {
        let text = "nodes: [{name: n, executor: e1, allocatable: {cpu: '2'}}, {name: n, executor: e2, allocatable: {cpu: '2'}}]\n\
                    queues: [{name: A}]\n\
                    running: [{id: a, queue: A, requests: {cpu: '2'}, node: n, executor: e2}]\n\
                    rounds: [{submit: [{id: b, queue: A, requests: {cpu: '2'}}]}]";
        let out = run_text(text).expect("valid");
        let r0 = &out.rounds[0];
        assert_eq!(r0.jobs["a"].node.as_deref(), Some("e2/n"));
        assert_eq!(r0.jobs["b"].node.as_deref(), Some("e1/n"));
    }
}
