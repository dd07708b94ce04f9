//! The live state as a `convoy simulate` scenario (`GET /v1/scenario`, `convoy simulate
//! --from-server` and `--from-data-dir`): the scheduler's configuration, the nodes, the queues,
//! the jobs running (in the scenario's `running`, each on its node) and the jobs queued (round 0's
//! `submit`, in submission order, those waiting for other jobs among them), under their real job
//! ids, with what the policies read: dependencies, retry policies and spent attempts, back-offs,
//! deadlines and the times reservations and min-runtime count from, and round 0's wall-clock
//! time. Running the scenario replays the next scheduling cycle on a copy of the state; editing it
//! first answers "what if" (docs/simulate.md). A read of this server's state: on a follower, as of
//! what it has applied.
//!
//! What a scenario cannot hold is left out: the rate limiters' tokens (a scenario starts with full
//! buckets), the queues' recorded usage (it starts from none), and node quarantines; so are jobs
//! running on a node no executor reports any more, which a cycle does not count either, and jobs
//! waiting for a job the scenario does not hold.

use super::access::Principal;
use super::data_dir::{DataDirError, LogCopy, TempDir, check_data_dir, copy_steady};
use super::error::ServiceError;
use crate::config::Role;
use crate::control::{Control, now_ms};
use crate::model::api::JobRetryPolicy;
use crate::model::{
    Dependency, GangSpec, JobId, JobSetName, Node, QueueName, RESERVED_FOR_LABEL, annotations, parse_reserved_for,
};
use crate::scheduler::{JobInfo, JobTimes, RateLimiterState, SchedulerConfig, Snapshot};
use crate::simulate::scenario::{NodeSpec, Round, Scenario, SimDependency, SubmitSpec};
use crate::state::{ApplyContext, State, StateSettings};
use crate::store::Store;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The scenario of the state now, under this server's `[scheduler]` configuration (admins only).
pub(crate) fn export(app: &Control, p: &Principal) -> Result<Scenario, ServiceError> {
    p.require(Role::Admin)?;
    // The lock is held while pointers are copied; the scenario is built after.
    let capture = Capture::of(&app.state());
    Ok(capture.into_scenario(&app.config.scheduler, now_ms()))
}

/// What an export reads of the state, taken under its lock: the scheduler's whole view (every
/// queued job), the jobs waiting for others, and what each of them carries beyond the
/// scheduler's view (its job set, retry policy and progress, times, dependencies). Pointers and
/// small facts are copied, not jobs, so the lock is held briefly; turning it into a scenario
/// happens after.
pub(crate) struct Capture {
    snapshot: Snapshot,
    /// Queued jobs waiting for another job, in submission order.
    waiting: Vec<Arc<JobInfo>>,
    facts: HashMap<JobId, JobFacts>,
}

/// What a scenario entry carries of a job beyond the scheduler's view of it.
struct JobFacts {
    job_set: JobSetName,
    /// Its retry policy, as the API and simulate write it.
    retry: Option<JobRetryPolicy>,
    /// Runs that failed (what `retry.max_attempts` counts).
    failed_runs: u32,
    /// Its deadline and since when it has been queued or running (reservations read both).
    times: Option<JobTimes>,
    /// The jobs it still waits for.
    waits_for: Vec<Dependency>,
}

impl JobFacts {
    fn of(state: &State, id: JobId) -> Option<JobFacts> {
        let job = state.job(id)?;
        let policies = job.record.policies.as_deref();
        Some(JobFacts {
            job_set: job.record.job_set.clone(),
            retry: policies.and_then(|p| p.retry.as_ref()).map(|r| JobRetryPolicy {
                max_attempts: r.max_attempts,
                on_exit_codes: r.on_exit_codes.clone(),
                on_oom: r.on_oom,
                on_node_failure: r.on_node_failure,
                backoff_seconds: r.backoff_ms / 1000,
            }),
            failed_runs: job.record.failed_runs(),
            times: state.job_times(id),
            waits_for: policies.map(|p| p.depends_on.iter().filter(|d| !d.met).copied().collect()).unwrap_or_default(),
        })
    }
}

impl Capture {
    /// Reads `state`.
    pub(crate) fn of(state: &State) -> Capture {
        let snapshot = state.scheduling_snapshot(0, RateLimiterState::default());
        let waiting: Vec<Arc<JobInfo>> = state.waiting_jobs().into_iter().map(|j| j.info.clone()).collect();
        let jobs = snapshot.running.iter().map(|r| &r.job).chain(snapshot.queues.iter().flat_map(|q| &q.queued));
        let facts = jobs.chain(&waiting).filter_map(|j| Some((j.id, JobFacts::of(state, j.id)?))).collect();
        Capture { snapshot, waiting, facts }
    }

    /// The scenario: `config` as its `config`, one round whose cycle is the next one, round 0 at
    /// `now_ms` (ms since the epoch): the jobs' times (`started_at_seconds`, …) count back from
    /// it.
    pub(crate) fn into_scenario(self, config: &SchedulerConfig, now_ms: i64) -> Scenario {
        let queues: Vec<_> = self.snapshot.queues.iter().map(|q| q.queue.clone()).collect();
        let declared: HashSet<&QueueName> = queues.iter().map(|q| &q.name).collect();
        let nodes = self.snapshot.nodes.iter().map(|n| node_spec(n, &declared)).collect();
        let running = self.running_entries(now_ms);
        let submit = self.submit_entries(running.iter().map(|r| r.id.clone()).collect(), now_ms);
        let mut scenario = Scenario {
            seed: 0,
            round_interval_seconds: 1.0,
            round_0_at: Some(now_ms),
            config: config.clone(),
            nodes,
            queues,
            running,
            rounds: vec![Round { submit, ..Round::default() }],
        };
        // A class the configuration no longer has is scheduled as the default class: so it is
        // written (as no class).
        let jobs = scenario.running.iter_mut().chain(scenario.rounds.iter_mut().flat_map(|r| &mut r.submit));
        for job in jobs {
            if job.priority_class.as_ref().is_some_and(|pc| config.priority_class(pc.as_str()).is_none()) {
                job.priority_class = None;
            }
        }
        scenario
    }

    /// The running jobs, each on its node, in submission order. A job running on a node no
    /// executor reports any more counts nowhere in a cycle: it is left out.
    fn running_entries(&self, now_ms: i64) -> Vec<SubmitSpec> {
        let mut name_count: HashMap<&str, usize> = HashMap::new();
        for n in &self.snapshot.nodes {
            *name_count.entry(n.name.as_str()).or_default() += 1;
        }
        let reported: HashSet<(&str, &str)> =
            self.snapshot.nodes.iter().map(|n| (n.executor.as_str(), n.name.as_str())).collect();
        let mut running: Vec<_> = self
            .snapshot
            .running
            .iter()
            .filter(|r| reported.contains(&(r.executor.as_str(), r.node.as_str())))
            .collect();
        running.sort_by_key(|r| r.job.submit_seq);
        running
            .into_iter()
            .map(|r| {
                let mut entry = self.entry(&r.job, gang_annotations(r.job.gang.as_deref(), None));
                entry.node = Some(r.node.to_string());
                entry.executor = (name_count.get(r.node.as_str()) > Some(&1)).then(|| r.executor.clone());
                let started = seconds_from(now_ms, r.leased_at_ms);
                entry.started_at_seconds = Some(started);
                // Its deadline counts from when it began running, if that was later.
                let since = self.facts.get(&r.job.id).and_then(|f| f.times).map(|t| t.since_ms);
                entry.running_at_seconds =
                    since.filter(|s| *s > r.leased_at_ms).map(|s| seconds_from(now_ms, s).max(started));
                entry
            })
            .collect()
    }

    /// The queued jobs in submission order: those the scheduler sees, and those waiting for jobs
    /// the scenario holds (`exported`: the running jobs' names). A job waiting for a job the
    /// scenario does not hold (one running on a node no executor reports, one being stopped, or
    /// one itself left out) is left out: the scenario has nothing it could wait for.
    fn submit_entries(&self, mut exported: HashSet<String>, now_ms: i64) -> Vec<SubmitSpec> {
        let mut queued: Vec<&Arc<JobInfo>> = self.snapshot.queues.iter().flat_map(|q| &q.queued).collect();
        queued.extend(&self.waiting);
        queued.sort_by_key(|j| j.submit_seq);
        // A scenario's gang is submitted whole: a queued gang that lost members (one was
        // cancelled) is written as the gang of the members left.
        let mut present: HashMap<(&QueueName, &str), u32> = HashMap::new();
        for j in queued.iter().filter(|j| self.waits_for(j).is_empty()) {
            if let Some(g) = &j.gang {
                *present.entry((&j.queue, g.id.as_str())).or_default() += 1;
            }
        }
        let mut out = Vec::with_capacity(queued.len());
        for j in queued {
            let waits_for = self.waits_for(j);
            let held = j.gang.is_none() && waits_for.iter().all(|d| exported.contains(&d.job_id.to_string()));
            if !waits_for.is_empty() && !held {
                tracing::debug!(job = %j.id, "waits for a job the scenario does not hold: left out");
                continue;
            }
            let members = j.gang.as_ref().and_then(|g| present.get(&(&j.queue, g.id.as_str())).copied());
            let mut entry = self.entry(j, gang_annotations(j.gang.as_deref(), members));
            let since = self.facts.get(&j.id).and_then(|f| f.times).map(|t| t.since_ms);
            entry.queued_at_seconds = since.map(|s| seconds_from(now_ms, s).min(0.0));
            entry.backoff_until_seconds = j.not_before_ms.filter(|t| *t > now_ms).map(|t| seconds_from(now_ms, t));
            entry.depends_on = waits_for.iter().map(|d| SimDependency { id: d.job_id.to_string(), on: d.on }).collect();
            exported.insert(entry.id.clone());
            out.push(entry);
        }
        out
    }

    /// The jobs `job` still waits for.
    fn waits_for(&self, job: &JobInfo) -> &[Dependency] {
        self.facts.get(&job.id).map_or(&[], |f| f.waits_for.as_slice())
    }

    /// A job as a scenario entry of count 1 named by its id, with its deadline and (but for a
    /// gang member, which simulate gives none) its retry policy and the attempts it spent.
    fn entry(&self, job: &JobInfo, annotations: BTreeMap<String, String>) -> SubmitSpec {
        let reqs = &job.requirements;
        let facts = self.facts.get(&job.id);
        let retry = facts.and_then(|f| f.retry.clone()).filter(|_| job.gang.is_none());
        let attempts_spent = match &retry {
            Some(r) => facts.map_or(0, |f| f.failed_runs).min(r.max_attempts.saturating_sub(1)),
            None => 0,
        };
        SubmitSpec {
            id: job.id.to_string(),
            queue: job.queue.clone(),
            job_set: facts.map(|f| f.job_set.clone()).unwrap_or_else(JobSetName::default_set),
            count: None,
            priority_class: Some(job.priority_class.clone()),
            priority: job.priority,
            requests: reqs.requests.clone(),
            node_selector: reqs.node_selector.clone(),
            tolerations: reqs.tolerations.clone(),
            node_affinity: reqs.node_affinity.clone(),
            annotations,
            pools: job.pools.clone(),
            node: None,
            executor: None,
            started_at_seconds: None,
            running_at_seconds: None,
            queued_at_seconds: None,
            backoff_until_seconds: None,
            attempts_spent,
            active_deadline_seconds: facts.and_then(|f| f.times?.deadline_ms).map(|ms| ms as f64 / 1000.0),
            depends_on: vec![],
            retry,
        }
    }
}

/// Seconds from `now_ms` to `at_ms` (negative for a time before it).
fn seconds_from(now_ms: i64, at_ms: i64) -> f64 {
    at_ms.saturating_sub(now_ms) as f64 / 1000.0
}

/// A node as a scenario entry. The hostname label the simulator sets anyway is left out, and an
/// earmark naming declared queues is written as `reserved_for`.
fn node_spec(n: &Node, declared: &HashSet<&QueueName>) -> NodeSpec {
    let mut labels = n.labels.clone();
    if labels.get("kubernetes.io/hostname").is_some_and(|h| h == n.name.as_str()) {
        labels.remove("kubernetes.io/hostname");
    }
    let mut reserved_for = Vec::new();
    if let Some(value) = labels.get(RESERVED_FOR_LABEL)
        && let Ok(queues) = parse_reserved_for(value)
        && queues.iter().all(|q| declared.contains(q))
    {
        reserved_for = queues;
        labels.remove(RESERVED_FOR_LABEL);
    }
    NodeSpec {
        name: n.name.to_string(),
        count: None,
        executor: n.executor.clone(),
        pool: n.pool.clone(),
        labels,
        taints: n.taints.clone(),
        allocatable: n.allocatable.clone(),
        unallocatable: n.unallocatable.clone(),
        unschedulable: n.unschedulable,
        reserved_for,
    }
}

/// A gang's annotations in Convoy's spelling; with `members`, the gang is written as that many.
fn gang_annotations(gang: Option<&GangSpec>, members: Option<u32>) -> BTreeMap<String, String> {
    let Some(g) = gang else { return BTreeMap::new() };
    let cardinality = members.unwrap_or(g.cardinality);
    let minimum = g.min_cardinality.min(cardinality);
    let mut out = BTreeMap::new();
    out.insert(annotations::GANG_ID.convoy.to_string(), g.id.clone());
    out.insert(annotations::GANG_CARDINALITY.convoy.to_string(), cardinality.to_string());
    if minimum != cardinality {
        out.insert(annotations::GANG_MINIMUM_CARDINALITY.convoy.to_string(), minimum.to_string());
    }
    if let Some(label) = &g.node_uniformity_label {
        out.insert(annotations::GANG_NODE_UNIFORMITY_LABEL.convoy.to_string(), label.clone());
    }
    out
}

/// The scenario of `state` under `config` at `now_ms`.
pub(crate) fn scenario_of(state: &State, config: &SchedulerConfig, now_ms: i64) -> Scenario {
    Capture::of(state).into_scenario(config, now_ms)
}

/// The scenario of the state in a server's data directory `dir`: its state database
/// (`convoy.redb`) as the server last committed it durably, with the entries of its Raft log
/// (`raft.redb`) after that applied as the server applies them when it starts. Both files are
/// copied to a temporary directory and read there, so the server may be running (its lock and
/// its files are left alone). `config` is the server's `[scheduler]` section.
pub fn from_data_dir(dir: &Path, config: &SchedulerConfig, now_ms: i64) -> Result<Scenario, DataDirError> {
    let db = dir.join("convoy.redb");
    check_data_dir(dir, &db)?;
    let tmp = TempDir::new("scenario", &db)?;
    // The state first: the log copied after it holds every entry the state lacks.
    let state_copy = tmp.0.join("convoy.redb");
    copy_steady(&db, &state_copy)?;
    let log = dir.join("raft.redb");
    let log_copy = if log.is_file() { Some(LogCopy::take(&log, &tmp)?) } else { None };
    let store_err = |source| DataDirError::Store { path: db.clone(), source };
    let store = Store::open_with_cache(&state_copy, 64 << 20).map_err(store_err)?;
    let state = store.load_state(StateSettings::from_config(config)).map_err(store_err)?;
    let state = match &log_copy {
        Some(copy) => replay_log(&store, state, copy).map_err(|source| DataDirError::Log { path: log, source })?,
        None => state,
    };
    Ok(scenario_of(&state, config, now_ms))
}

/// Applies the log's entries after the state's last applied one to the state, as the server's
/// state machine applies them (each command with its entry's term), and answers the state after
/// them. Entries not known to be committed yet (on a follower) are applied too: a server alone
/// commits all it appends.
fn replay_log(store: &Store, mut state: State, log: &LogCopy) -> std::io::Result<State> {
    use crate::raft::LogId;
    use crate::record::raft::LogIdRecord;
    let applied = store
        .pin_export()
        .and_then(|view| view.raft_meta(crate::store::tables::RAFT_APPLIED))
        .map_err(std::io::Error::other)?;
    let applied: Option<LogId> = match applied {
        Some(bytes) => {
            crate::record::decode::<Option<LogIdRecord>>(&bytes).map_err(std::io::Error::other)?.map(Into::into)
        }
        None => None,
    };
    let Some((_, last)) = log.held()? else { return Ok(state) };
    let from = applied.map_or(0, |id| id.index + 1);
    log.each_command(from, last, |_, term, cmd| {
        state.apply(cmd, ApplyContext { term });
    })?;
    Ok(state)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        ExecutorName, GangSpec, JobPayload, NodeName, PoolName, PriorityClassName, Queue, Resources, RunId,
        SchedulingRequirements,
    };
    use crate::record::{CommandRecord, NodeRecord};
    use crate::simulate::Simulation;
    use crate::state::{Command, NewJob, NewLease};

    fn job(id: u128, cpu: &str, gang: Option<(&str, u32)>) -> NewJob {
        NewJob {
            id: JobId::from_u128(id),
            client_id: None,
            priority: 0,
            priority_class: PriorityClassName::new("default").expect("name"),
            requirements: SchedulingRequirements {
                requests: Resources::parse([("cpu", cpu)]).expect("quantity"),
                ..Default::default()
            }
            .into(),
            gang: gang.map(|(g, n)| {
                GangSpec { id: g.into(), cardinality: n, min_cardinality: n, node_uniformity_label: None }.into()
            }),
            annotations: Default::default(),
            labels: Default::default(),
            termination_grace_period_ms: 5000,
            active_deadline_seconds: 3600,
            payload: JobPayload { pod_spec: "{}".into(), services: vec![], ingresses: vec![] }.into(),
        }
    }

    fn node(name: &str, cpu: &str, labels: &[(&str, &str)], unschedulable: bool) -> NodeRecord {
        NodeRecord::from(Node {
            name: NodeName::new(name).expect("name"),
            executor: ExecutorName::new("e1").expect("name"),
            pool: PoolName::default_pool(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            taints: vec![],
            allocatable: Resources::parse([("cpu", cpu)]).expect("quantity"),
            unallocatable: Resources::new(),
            unschedulable,
        })
    }

    /// Queues A, B (weight 1/2) and C (cordoned); nodes n1 (8 cpu), n2 (4, earmarked for A) and
    /// n3 (4, cordoned). Running: a1 and b1 on n1, a2 on n2, all full. Queued: a3, c1, and B's
    /// gang g of two.
    fn live_state() -> State {
        let mut s = State::new(StateSettings::from_config(&SchedulerConfig::default()));
        let ctx = ApplyContext::default;
        let queue = |name: &str, factor: f64, cordoned: bool| {
            let mut q = Queue::new(QueueName::new(name).expect("name"), factor);
            q.cordoned = cordoned;
            Command::create_queue(q)
        };
        for cmd in [queue("A", 1.0, false), queue("B", 2.0, false), queue("C", 1.0, true)] {
            s.apply(cmd, ctx());
        }
        let nodes = vec![
            node("n1", "8", &[("rack", "r1"), ("kubernetes.io/hostname", "n1")], false),
            node("n2", "4", &[(RESERVED_FOR_LABEL, "A")], false),
            node("n3", "4", &[], true),
        ];
        s.apply(Command::UpsertExecutor { executor: ExecutorName::new("e1").expect("name"), nodes, at_ms: 1 }, ctx());
        let submit = |queue: &str, set: &str, at_ms: i64, jobs: Vec<NewJob>| {
            let (queue, job_set) = (QueueName::new(queue).expect("name"), JobSetName::new(set).expect("name"));
            Command::from(CommandRecord::Submit { queue, job_set, at_ms, jobs })
        };
        s.apply(submit("A", "sa", 10, vec![job(1, "4", None), job(2, "4", None)]), ctx());
        s.apply(submit("B", "sb", 11, vec![job(3, "4", None)]), ctx());
        s.apply(submit("A", "sa", 12, vec![job(4, "4", None)]), ctx());
        s.apply(submit("C", "sc", 13, vec![job(5, "1", None)]), ctx());
        s.apply(submit("B", "sb", 14, vec![job(6, "4", Some(("g", 2))), job(7, "4", Some(("g", 2)))]), ctx());
        let lease = |job: u128, node: &str| NewLease {
            job_id: JobId::from_u128(job),
            run_id: RunId::from_u128(100 + job),
            executor: ExecutorName::new("e1").expect("name"),
            node: NodeName::new(node).expect("name"),
            pool: PoolName::default_pool(),
        };
        let leases = vec![lease(1, "n1"), lease(3, "n1"), lease(2, "n2")];
        s.apply(
            Command::Schedule { term: 0, at_ms: 20_000, leases, preemptions: vec![], failures: vec![], inputs: None },
            ctx(),
        );
        s
    }

    fn id(n: u128) -> String {
        JobId::from_u128(n).to_string()
    }

    #[test]
    fn the_state_becomes_a_scenario() {
        let cfg = SchedulerConfig::default();
        let s = scenario_of(&live_state(), &cfg, 80_000);
        assert_eq!(s.config, cfg);
        let q: Vec<_> = s.queues.iter().map(|q| (q.name.as_str(), q.priority_factor, q.cordoned)).collect();
        assert_eq!(q, vec![("A", 1.0, false), ("B", 2.0, false), ("C", 1.0, true)]);
        let n = &s.nodes;
        assert_eq!(n.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), vec!["n1", "n2", "n3"]);
        assert_eq!(n[0].labels.iter().collect::<Vec<_>>(), vec![(&"rack".to_string(), &"r1".to_string())]);
        assert_eq!((n[1].reserved_for.len(), n[1].labels.is_empty()), (1, true));
        assert!(n[2].unschedulable && !n[0].unschedulable);
        let running: Vec<_> = s
            .running
            .iter()
            .map(|r| (r.id.clone(), r.node.as_deref(), r.started_at_seconds, r.job_set.as_str()))
            .collect();
        assert_eq!(
            running,
            vec![
                (id(1), Some("n1"), Some(-60.0), "sa"),
                (id(2), Some("n2"), Some(-60.0), "sa"),
                (id(3), Some("n1"), Some(-60.0), "sb")
            ]
        );
        assert!(s.running.iter().all(|r| r.executor.is_none() && r.count.is_none()));
        let queued: Vec<_> = s.rounds[0].submit.iter().map(|j| (j.id.clone(), j.queue.as_str())).collect();
        assert_eq!(queued, vec![(id(4), "A"), (id(5), "C"), (id(6), "B"), (id(7), "B")]);
        let gang = &s.rounds[0].submit[2].annotations;
        assert_eq!(gang.get("convoy.io/gang-id").map(String::as_str), Some("g"));
        assert_eq!(gang.get("convoy.io/gang-cardinality").map(String::as_str), Some("2"));
        // It is a valid scenario, in YAML too.
        let yaml = s.to_yaml("exported\nfor a test").expect("YAML");
        assert!(yaml.starts_with("# exported\n# for a test\n"), "{yaml}");
        let back = Scenario::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(serde_yaml_ng::to_string(&back).ok(), serde_yaml_ng::to_string(&s).ok());
    }

    #[test]
    fn jobs_on_nodes_no_executor_reports_are_left_out() {
        let mut state = live_state();
        // The executor stops reporting n2, where a2 runs.
        let nodes = vec![node("n1", "8", &[], false), node("n3", "4", &[], true)];
        let e1 = ExecutorName::new("e1").expect("name");
        state.apply(Command::UpsertExecutor { executor: e1, nodes, at_ms: 30_000 }, ApplyContext::default());
        let s = scenario_of(&state, &SchedulerConfig::default(), 80_000);
        let running: Vec<_> = s.running.iter().map(|r| r.id.clone()).collect();
        assert_eq!(running, vec![id(1), id(3)]);
        s.validate().expect("a valid scenario");
    }

    #[test]
    fn classes_the_configuration_lacks_are_written_as_the_default() {
        let cfg: SchedulerConfig = serde_yaml_ng::from_str(
            "priority_classes: [{name: gold, priority: 1, preemptible: false}]\ndefault_priority_class: gold",
        )
        .expect("config");
        let s = scenario_of(&live_state(), &cfg, 80_000);
        assert!(s.running.iter().chain(&s.rounds[0].submit).all(|j| j.priority_class.is_none()));
        s.validate().expect("a valid scenario");
    }

    #[test]
    fn the_scenario_replays_the_running_placement() {
        let s = scenario_of(&live_state(), &SchedulerConfig::default(), 80_000);
        let out = Simulation::new(s).run();
        let r0 = &out.rounds[0];
        for (job, node) in [(1, "n1"), (2, "n2"), (3, "n1")] {
            assert_eq!((r0.jobs[&id(job)].state, r0.jobs[&id(job)].node.as_deref()), ("running", Some(node)));
        }
        // Nothing fits, nothing is preempted: the queued jobs stay queued.
        assert!(r0.scheduled.is_empty() && r0.preempted.is_empty() && r0.failed.is_empty(), "{r0:?}");
        for job in [4, 5, 6, 7] {
            assert_eq!(r0.jobs[&id(job)].state, "queued");
        }
        assert!(r0.jobs[&id(5)].reason.as_deref().is_some_and(|r| r.contains("cordon")), "{:?}", r0.jobs[&id(5)]);
    }

    #[test]
    fn an_added_node_starts_the_queued_jobs() {
        let mut s = scenario_of(&live_state(), &SchedulerConfig::default(), 80_000);
        let mut n4 = s.nodes[0].clone();
        n4.name = "n4".into();
        n4.allocatable = Resources::parse([("cpu", "16")]).expect("quantity");
        s.nodes.push(n4);
        let out = Simulation::new(s).run();
        let r0 = &out.rounds[0];
        assert_eq!(r0.scheduled.get("A").copied(), Some(1), "{r0:?}");
        assert_eq!(r0.scheduled.get("B").copied(), Some(2), "{r0:?}");
        for job in [4, 6, 7] {
            assert_eq!(r0.jobs[&id(job)].node.as_deref(), Some("n4"), "{job}");
        }
        assert_eq!(r0.jobs[&id(5)].state, "queued");
        assert!(r0.preempted.is_empty());
    }
}

#[cfg(test)]
#[path = "scenario_policy_tests.rs"]
mod policy_tests;
