//! The replicated state: queues, live (non-terminal) jobs and executors in memory, with the
//! indexes the scheduler and the API read. `apply` is deterministic: the same commands in the
//! same order give the same state and the same changes on every node.

use super::changes::{Change, Effects};
use super::command::{Command, RejectKind, Rejection, ReportedEvent, Response};
pub use super::live_jobs::LiveJob;
use super::live_jobs::LiveJobs;
use crate::model::{
    EventKind, ExecutorName, Job, JobId, JobSetName, JobState, Node, NodeName, PriorityClassName, Queue, QueueName,
    Requirements, ResourceName, Resources, RunId,
};
use crate::record::{EventRecord, ExecutorRecord, JobRecord, SchedulerConfigRecord};
use crate::scheduler::{JobInfo, NodeHealth, QuarantinePolicy, QueueOrderKey, QueueUsage};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// What a scheduling cycle reads of a job's active run, kept in its executor's index so that a
/// cycle finds it without looking the job up. A change to a job that gives it a new view puts the
/// new one here (`State::update_job`), so the view is never stale.
#[derive(Debug, Clone)]
pub(super) struct ActiveRunView {
    /// The job's scheduler view (the live job's own).
    pub info: Arc<JobInfo>,
    /// The node the run holds resources on.
    pub node: NodeName,
    /// When the run was leased (ms since the epoch).
    pub leased_at_ms: i64,
    /// The run is being stopped (cancelled or preempted, not yet confirmed over).
    pub stopping: bool,
}

/// The state's hash maps. Their keys are names and ids users choose, so the hasher is seeded
/// per process; foldhash (hashbrown's default) rather than std's SipHash, which was an eighth of
/// the instructions of applying commands.
type StateMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Fewest interned requirement sets at which unused ones are trimmed.
const MIN_TRIM_INTERNED_AT: usize = 1024;

/// Order of queued jobs within a queue: the scheduler's queue order.
pub(super) type QueueKey = QueueOrderKey;

/// A queue with its queued jobs in scheduling order.
#[derive(Debug, Clone)]
pub struct QueueState {
    /// The queue's settings, as last created or updated.
    pub queue: Queue,
    /// Queued jobs, keyed so that they iterate in the order the scheduler takes them, each with
    /// the scheduler's view of it: a cycle reads its queues without looking a job up. The view is
    /// the live job's own (`LiveJob::info`), replaced only while the job is out of the indexes.
    pub queued: BTreeMap<QueueKey, Arc<JobInfo>>,
    /// Sum of the requests of the queued jobs.
    pub demand: Resources,
    /// Live jobs per state.
    pub counts: BTreeMap<JobState, u64>,
}

/// An executor and its nodes, as last reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Executor {
    /// The executor's name.
    pub name: ExecutorName,
    /// Its nodes (in the order reported; fixed once made: `node_names` follows them).
    nodes: Vec<Node>,
    /// The nodes' names: applying a cycle's leases asks for each lease whether its node is
    /// still reported, and under load a scan of a thousand names per lease took 2.8% of the
    /// leader's time.
    node_names: HashSet<NodeName>,
    /// When they were last reported (ms since the epoch, the leader's clock).
    pub updated_at_ms: i64,
}

impl Executor {
    /// Its nodes, in the order reported.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// True if it reported a node of this name.
    pub fn has_node(&self, name: &NodeName) -> bool {
        self.node_names.contains(name)
    }
}

impl From<ExecutorRecord> for Executor {
    fn from(r: ExecutorRecord) -> Self {
        let ExecutorRecord { name, nodes, updated_at_ms } = r;
        let nodes: Vec<Node> = nodes.into_iter().map(|n| n.into_node(name.clone())).collect();
        let node_names = nodes.iter().map(|n| n.name.clone()).collect();
        Executor { name, nodes, node_names, updated_at_ms }
    }
}

/// Where applying happens: the log entry's term (for refusing a deposed leader's decisions).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyContext {
    /// Raft term of the entry being applied; a `Schedule` command of another term is refused.
    pub term: u64,
}

/// What one command did.
#[derive(Debug, Default)]
pub struct Applied {
    /// What the command answered (always set by [`State::apply`]).
    pub response: Option<Response>,
    /// Durable writes for the store, in order.
    pub changes: Vec<Change>,
    /// Whom to wake once the changes are durable.
    pub effects: Effects,
    /// Live jobs changed by the command (written once, at the end).
    touched: Vec<JobId>,
    /// Jobs the command finished (no longer in memory), as they end, with when they did.
    finished: StateMap<JobId, (Job, i64)>,
    /// Jobs the command finished that live jobs wait for, in the order they finished, with how
    /// they ended: their dependents are judged at the end of the command.
    pub(super) ended_parents: Vec<(JobId, JobState, i64)>,
}

/// What the job policies did since this server started applying: counters for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyCounts {
    /// Failed runs retried, by cause (`exit_code`, `oom`, `node_failure`).
    pub retries: BTreeMap<&'static str, u64>,
    /// Jobs failed because a dependency could no longer be met.
    pub dependency_failures: u64,
}

/// Settings that shape local indexes but are not replicated (they come from configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct StateSettings {
    /// Priority of each configured priority class.
    pub class_priority: HashMap<PriorityClassName, i32>,
    /// Priority given to a class missing from `class_priority`: the default class's (0 if that is
    /// missing too).
    pub default_class_priority: i32,
}

impl StateSettings {
    /// From the scheduler configuration.
    pub fn from_config(cfg: &crate::scheduler::SchedulerConfig) -> Self {
        let class_priority: HashMap<PriorityClassName, i32> =
            cfg.priority_classes.iter().map(|p| (p.name.clone(), p.priority)).collect();
        let default_class_priority = class_priority.get(&cfg.default_priority_class).copied().unwrap_or(0);
        StateSettings { class_priority, default_class_priority }
    }
}

/// The state machine's memory.
#[derive(Debug, Clone)]
pub struct State {
    /// Settings from this server's configuration.
    pub(super) settings: StateSettings,
    /// Every queue, by name.
    pub(super) queues: BTreeMap<QueueName, QueueState>,
    /// Boxed so that growing the table moves pointers, not records: a burst of submissions
    /// doubles it many times, and at half load an inline record would waste its size per job.
    pub(super) jobs: LiveJobs,
    /// Active runs.
    pub(super) runs: StateMap<RunId, JobId>,
    /// Jobs with an active run, per executor, with what a scheduling cycle reads of the run.
    pub(super) by_executor: StateMap<ExecutorName, BTreeMap<JobId, ActiveRunView>>,
    /// Jobs whose run is leased and not yet reported by its executor (sent on every poll until
    /// then), per executor, with the run: a poll skips the runs its agent holds without looking
    /// the jobs up, and under load an agent holds thousands.
    pub(super) unacked: StateMap<ExecutorName, BTreeMap<JobId, RunId>>,
    /// Jobs whose run must be stopped, per executor.
    pub(super) killing: StateMap<ExecutorName, BTreeSet<JobId>>,
    /// Live jobs per job set.
    pub(super) job_sets: StateMap<(QueueName, JobSetName), BTreeSet<JobId>>,
    /// Live members of each gang.
    pub(super) gangs: StateMap<(QueueName, String), BTreeSet<JobId>>,
    /// Live jobs waiting for each job (a dependency not met yet), by the job waited for.
    pub(super) dependents: StateMap<JobId, BTreeSet<JobId>>,
    /// Retries and dependency failures this server applied (for the metrics; not replicated).
    pub(super) policy_counts: PolicyCounts,
    /// The job each client id names, per queue. A resubmission answers the same job for as long
    /// as the job is stored: the client id goes when the job is purged (`job_retention`), so
    /// that is the window within which resubmitting is idempotent.
    pub(super) client_ids: StateMap<(QueueName, String), JobId>,
    /// Last event sequence number per job set.
    pub(super) event_seqs: StateMap<(QueueName, JobSetName), u64>,
    /// Jobs stored per job set, live or finished: once purges take the last one, the job set is
    /// forgotten (its event counter too).
    pub(super) set_jobs: StateMap<(QueueName, JobSetName), u64>,
    /// Purges applied so far (see `Command::PurgeFinished`).
    pub(super) purges: u64,
    /// Known executors with their nodes, as last reported; a lost executor is removed.
    pub(super) executors: BTreeMap<ExecutorName, Executor>,
    /// Failures counted against nodes and their quarantines, by executor and node (kept when
    /// the executor goes away: a node that comes back is still quarantined).
    pub(super) node_health: BTreeMap<(ExecutorName, NodeName), NodeHealth>,
    /// Largest amount of each resource on any known node (allocatable minus used by others).
    pub(super) largest_node: Resources,
    /// The resources any known node has (with any amount); shared, as every submission reads it.
    pub(super) node_resource_names: Arc<BTreeSet<ResourceName>>,
    /// Nodes are known and all run jobs as processes ([`crate::model::node::runs_processes`]).
    pub(super) process_nodes_only: bool,
    /// Submission sequence number the next submitted job gets.
    pub(super) next_seq: u64,
    /// The largest job id ever submitted: a new leader's ids start above it, whatever its clock
    /// says (ids are ULIDs, and another leader's clock may have been ahead).
    pub(super) max_job_id: Option<JobId>,
    /// The queues' usage as the leader last recorded it (`queue_usage_halftime`; see
    /// [`crate::scheduler::usage`]).
    pub(super) queue_usage: QueueUsage,
    /// The scheduler configuration the leader last recorded (`Command::RecordSchedulerConfig`):
    /// the one the cycles recorded after it ran with, for replay.
    pub(super) scheduler_config: Option<SchedulerConfigRecord>,
    /// The number of the last scheduling cycle recorded with its inputs.
    pub(super) cycles: u64,
    /// The index of the last log entry applied (not replicated: the Raft adapter sets it inside
    /// the same write lock as the apply, so a reader sees the state and its index together).
    pub(super) applied_index: u64,
    /// Shared requirements, so identical jobs share one allocation (and scheduler class).
    interned: StateMap<u64, Vec<Requirements>>,
    /// Number of requirement sets in `interned`.
    interned_len: usize,
    /// `interned_len` at which unused sets are dropped next (see [`State::intern`]).
    trim_interned_at: usize,
    /// Shared class names, so the scheduler can compare them by address.
    class_names: StateMap<PriorityClassName, PriorityClassName>,
}

impl State {
    /// An empty state.
    pub fn new(settings: StateSettings) -> Self {
        State {
            settings,
            queues: BTreeMap::new(),
            jobs: LiveJobs::default(),
            runs: StateMap::default(),
            by_executor: StateMap::default(),
            unacked: StateMap::default(),
            killing: StateMap::default(),
            job_sets: StateMap::default(),
            gangs: StateMap::default(),
            dependents: StateMap::default(),
            policy_counts: PolicyCounts::default(),
            client_ids: StateMap::default(),
            event_seqs: StateMap::default(),
            set_jobs: StateMap::default(),
            purges: 0,
            executors: BTreeMap::new(),
            node_health: BTreeMap::new(),
            largest_node: Resources::new(),
            node_resource_names: Arc::default(),
            process_nodes_only: false,
            next_seq: 0,
            max_job_id: None,
            queue_usage: QueueUsage::default(),
            scheduler_config: None,
            cycles: 0,
            applied_index: 0,
            interned: StateMap::default(),
            interned_len: 0,
            trim_interned_at: MIN_TRIM_INTERNED_AT,
            class_names: StateMap::default(),
        }
    }

    /// Applies one command.
    pub fn apply(&mut self, cmd: Command, ctx: ApplyContext) -> Applied {
        let mut out = Applied::default();
        let response = self.apply_into(cmd, ctx, &mut out);
        self.judge_dependents(&mut out);
        out.response = Some(response);
        // Every job the command changed is written once, in its final state.
        let mut touched = std::mem::take(&mut out.touched);
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            if let Some(j) = self.jobs.get(&id) {
                let record = j.record.clone();
                let policies = record.policies.clone();
                out.changes.push(Change::PutJob { record: Box::new(JobRecord::from(record)), live: true });
                if let Some(p) = policies {
                    out.changes.push(Change::PutPolicies { job: id, policies: Box::new((*p).into()) });
                }
            }
        }
        let mut finished: Vec<_> = std::mem::take(&mut out.finished).into_values().collect();
        finished.sort_unstable_by_key(|(r, _)| r.id);
        for (record, at_ms) in finished {
            let job = record.id;
            let policies = record.policies.clone();
            out.changes.push(Change::PutJob { record: Box::new(JobRecord::from(record)), live: false });
            if let Some(p) = policies {
                out.changes.push(Change::PutPolicies { job, policies: Box::new((*p).into()) });
            }
            out.changes.push(Change::IndexFinished { job, at_ms });
        }
        out
    }

    fn apply_into(&mut self, cmd: Command, ctx: ApplyContext, out: &mut Applied) -> Response {
        match cmd {
            Command::Batch(cmds) => Response::Batch(cmds.into_iter().map(|c| self.apply_into(c, ctx, out)).collect()),
            Command::CreateQueue { queue, tree, policies, retry } => {
                self.create_queue(crate::record::queue::queue_with_retry(queue, tree, policies, retry), out)
            }
            Command::UpdateQueue { queue, tree, policies, retry } => {
                self.update_queue(crate::record::queue::queue_with_retry(queue, tree, policies, retry), out)
            }
            Command::DeleteQueue { name, force, at_ms } => self.delete_queue(&name, force, at_ms, out),
            Command::Submit { queue, job_set, at_ms, owner, jobs } => {
                self.submit(&queue, &job_set, at_ms, jobs, owner.as_deref(), out)
            }
            Command::Cancel { queue, job_set, job_ids, states, reason, at_ms } => {
                let states: Option<Vec<JobState>> = states.map(|s| s.into_iter().map(JobState::from).collect());
                self.cancel(&queue, &job_set, job_ids.as_deref(), states.as_deref(), &reason, at_ms, out)
            }
            Command::Reprioritize { queue, job_set, job_ids, priority, at_ms } => {
                self.reprioritize(&queue, &job_set, job_ids.as_deref(), priority, at_ms, out)
            }
            Command::Preempt { queue, job_set, job_ids, reason, at_ms } => {
                self.preempt(&queue, &job_set, &job_ids, &reason, at_ms, out)
            }
            Command::Schedule { term, at_ms, leases, preemptions, failures, inputs } => {
                if term != ctx.term {
                    return reject(
                        RejectKind::Conflict,
                        None,
                        format!("scheduling decisions of term {term} arrived in term {}: the leader changed", ctx.term),
                    );
                }
                if let Some(inputs) = inputs
                    && inputs.cycle > self.cycles
                {
                    self.cycles = inputs.cycle;
                    out.changes.push(Change::PutScheduleCycles(inputs.cycle));
                }
                self.schedule(at_ms, leases, preemptions, failures, out)
            }
            Command::UpsertExecutor { executor, nodes, at_ms } => self.upsert_executor(executor, nodes, at_ms, out),
            Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine } => {
                let events = events.into_iter().map(ReportedEvent::from).collect();
                self.run_events(&executor, at_ms, events, max_attempted_runs, policy_of(quarantine), out)
            }
            Command::LiftQuarantine { executor, node, at_ms } => self.lift_quarantine(executor, node, at_ms, out),
            Command::ExecutorLost { executor, at_ms, max_attempted_runs } => {
                self.executor_lost(&executor, at_ms, max_attempted_runs, out)
            }
            Command::PurgeFinished { purges, before_ms, jobs } => self.purge_finished(purges, before_ms, jobs, out),
            Command::RecordUsage { term, usage } => {
                if term != ctx.term {
                    return reject(
                        RejectKind::Conflict,
                        None,
                        format!("queue usage of term {term} arrived in term {}: the leader changed", ctx.term),
                    );
                }
                self.queue_usage = QueueUsage::from(usage.clone());
                out.changes.push(Change::PutQueueUsage(usage));
                Response::Ok
            }
            Command::RecordSchedulerConfig { term, config } => {
                if term != ctx.term {
                    return reject(
                        RejectKind::Conflict,
                        None,
                        format!(
                            "a scheduler configuration of term {term} arrived in term {}: the leader changed",
                            ctx.term
                        ),
                    );
                }
                self.scheduler_config = Some(config.clone());
                out.changes.push(Change::PutSchedulerConfig(Box::new(config)));
                Response::Ok
            }
            Command::RecordReservations { term, at_ms, reserved, released } => {
                if term != ctx.term {
                    return reject(
                        RejectKind::Conflict,
                        None,
                        format!("reservations of term {term} arrived in term {}: the leader changed", ctx.term),
                    );
                }
                self.record_reservations(at_ms, released, reserved, out);
                Response::Ok
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Helpers shared by the command modules.
    // -----------------------------------------------------------------------------------------

    /// Priority of a class in this node's configuration.
    pub(super) fn class_priority(&self, name: &PriorityClassName) -> i32 {
        self.settings.class_priority.get(name).copied().unwrap_or(self.settings.default_class_priority)
    }

    /// Queue-order key of a job.
    pub(super) fn queue_key(&self, r: &Job) -> QueueKey {
        QueueOrderKey::new(self.class_priority(&r.priority_class), r.priority, r.submit_seq)
    }

    /// The scheduler's view of a record, sharing requirements and names with other jobs.
    fn job_info(&mut self, r: &Job) -> Arc<JobInfo> {
        let priority_class =
            self.class_names.entry(r.priority_class.clone()).or_insert_with(|| r.priority_class.clone()).clone();
        let queue = self.queues.get(&r.queue).map(|q| q.queue.name.clone()).unwrap_or_else(|| r.queue.clone());
        Arc::new(JobInfo {
            id: r.id,
            queue,
            priority_class,
            priority: r.priority,
            submit_seq: r.submit_seq,
            requirements: r.requirements.clone(),
            gang: r.gang.clone(),
            pools: vec![],
            not_before_ms: r.policies.as_ref().and_then(|p| p.not_before_ms),
        })
    }

    fn intern(&mut self, r: &Requirements) -> Requirements {
        let bucket = self.interned.entry(r.fingerprint()).or_default();
        if let Some(existing) = bucket.iter().find(|e| e.ptr_eq(r) || ***e == **r) {
            return existing.clone();
        }
        let new = r.clone();
        bucket.push(new.clone());
        self.interned_len += 1;
        // Finished jobs leave their requirement sets behind; drop the unused ones whenever the
        // table has doubled since the last time, so its size follows the live jobs' variety at
        // an amortised constant cost per new set.
        if self.interned_len >= self.trim_interned_at {
            self.trim_interned();
            self.trim_interned_at = (2 * self.interned_len).max(MIN_TRIM_INTERNED_AT);
        }
        new
    }

    /// Drops interned requirements no job uses any more.
    fn trim_interned(&mut self) {
        for bucket in self.interned.values_mut() {
            bucket.retain(|r| r.strong_count() > 1);
        }
        self.interned.retain(|_, b| !b.is_empty());
        self.interned_len = self.interned.values().map(Vec::len).sum();
    }

    /// Number of distinct requirement sets held for live jobs (and, until the next trim, for
    /// jobs that finished).
    pub fn interned_requirements(&self) -> usize {
        self.interned_len
    }

    /// Appends an event to the job's job set (and its sequence number to the job, if it is in
    /// memory or finished by this command); returns the sequence number.
    pub(super) fn event(
        &mut self,
        out: &mut Applied,
        r: &Job,
        at_ms: i64,
        kind: EventKind,
        run_id: Option<RunId>,
        message: Option<String>,
    ) -> u64 {
        self.event_of(out, r.id, (r.queue.clone(), r.job_set.clone()), at_ms, kind, run_id, message)
    }

    /// [`State::event`] for the job `job` of the job set `key` (queue, job set), when the
    /// record is not at hand.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn event_of(
        &mut self,
        out: &mut Applied,
        job: JobId,
        key: (QueueName, JobSetName),
        at_ms: i64,
        kind: EventKind,
        run_id: Option<RunId>,
        message: Option<String>,
    ) -> u64 {
        let seq = self.event_seqs.entry(key.clone()).or_insert(0);
        *seq += 1;
        let event = EventRecord { seq: *seq, job_id: job, at_ms, kind: kind.into(), run_id, message };
        if let Some(j) = self.jobs.get_mut(&job) {
            j.record.event_seqs.push(event.seq);
            out.touched.push(job);
        } else if let Some((done, _)) = out.finished.get_mut(&job) {
            done.event_seqs.push(event.seq);
        }
        let seq = event.seq;
        out.changes.push(Change::AppendEvent { queue: key.0.clone(), job_set: key.1.clone(), event });
        out.effects.job_sets.insert(key);
        seq
    }

    /// Adds a live job to the indexes (queued ones to their queue).
    pub(super) fn index_job(&mut self, job: Box<LiveJob>) {
        let id = job.record.id;
        let r = &job.record;
        self.job_sets.entry((r.queue.clone(), r.job_set.clone())).or_default().insert(id);
        if let Some(g) = &r.gang {
            self.gangs.entry((r.queue.clone(), g.id.clone())).or_default().insert(id);
        }
        let at = self.footprint(&job);
        self.place(id, &r.queue, &at);
        self.jobs.insert(job);
    }

    /// Takes a job out of its job set's and its gang's members.
    pub(super) fn unindex_membership(&mut self, r: &Job) {
        let set_key = (r.queue.clone(), r.job_set.clone());
        if let Some(s) = self.job_sets.get_mut(&set_key) {
            s.remove(&r.id);
            if s.is_empty() {
                self.job_sets.remove(&set_key);
            }
        }
        if let Some(g) = &r.gang {
            let gk = (r.queue.clone(), g.id.clone());
            if let Some(s) = self.gangs.get_mut(&gk) {
                s.remove(&r.id);
                if s.is_empty() {
                    self.gangs.remove(&gk);
                }
            }
        }
    }

    /// Changes a live job under `f` at `at_ms`, keeping every index in step (moving it only in
    /// those whose part of it changed: `reindex`), persisting it, and dropping it from memory
    /// once it is over (`at_ms` is then its finish time).
    pub(super) fn update_job(&mut self, out: &mut Applied, id: JobId, at_ms: i64, f: impl FnOnce(&mut Job)) {
        let Some(mut job) = self.jobs.remove(&id) else { return };
        let before = self.footprint(&job);
        let before_priority = job.record.priority;
        let before_not_before = job.info.not_before_ms;
        f(&mut job.record);
        let not_before = job.record.policies.as_ref().and_then(|p| p.not_before_ms);
        if job.record.priority != before_priority || not_before != before_not_before {
            job.info = self.job_info(&job.record);
        }
        let live = !job.record.state.is_terminal() || job.record.active_run().is_some();
        if live {
            let after = self.footprint(&job);
            self.shift(id, &job.record.queue, &before, &after);
            out.touched.push(id);
            self.jobs.insert(job);
        } else {
            self.unplace(id, &job.record.queue, &before);
            self.unindex_membership(&job.record);
            // Always: a job of the same command may come to depend on it after it ended (a
            // request's job that ends at once, named by a later job's client id).
            out.ended_parents.push((id, job.record.state, at_ms));
            out.finished.insert(id, (job.record, at_ms));
        }
    }

    /// Makes a record a live job: interned requirements, shared names.
    fn live(&mut self, mut record: Job) -> Box<LiveJob> {
        record.requirements = self.intern(&record.requirements);
        if let Some(q) = self.queues.get(&record.queue) {
            record.queue = q.queue.name.clone();
        }
        if let Some(((_, set), _)) = self.job_sets.get_key_value(&(record.queue.clone(), record.job_set.clone())) {
            record.job_set = set.clone();
        }
        record.priority_class = self
            .class_names
            .entry(record.priority_class.clone())
            .or_insert_with(|| record.priority_class.clone())
            .clone();
        let info = self.job_info(&record);
        Box::new(LiveJob { record, info })
    }

    /// Records a new live job (submission), to be written at the end of the command.
    pub(super) fn add_job(&mut self, out: &mut Applied, record: Job) {
        let id = record.id;
        let job = self.live(record);
        self.index_job(job);
        out.touched.push(id);
    }

    /// Puts a live job read back from storage into memory (start-up, snapshot install).
    pub fn restore_job(&mut self, record: Job) {
        let job = self.live(record);
        self.index_job(job);
    }

    /// Recomputes [`State::largest_node`] after the executors changed.
    /// Also [`State::node_resource_names`] and [`State::process_nodes_only`].
    pub fn refresh_largest_node(&mut self) {
        let mut out = Resources::new();
        let mut names = BTreeSet::new();
        let (mut nodes, mut process) = (0usize, 0usize);
        for e in self.executors.values() {
            for n in &e.nodes {
                let mut cap = n.allocatable.clone();
                cap.sub(&n.unallocatable);
                out.max_with(&cap);
                // Names are few and nodes many: clone a name only the first time it is seen.
                for (r, _) in n.allocatable.iter() {
                    if !names.contains(r) {
                        names.insert(r.clone());
                    }
                }
                nodes += 1;
                process += usize::from(crate::model::node::runs_processes(&n.labels));
            }
        }
        self.largest_node = out;
        self.node_resource_names = Arc::new(names);
        self.process_nodes_only = nodes > 0 && process == nodes;
    }

    /// Number of live jobs.
    pub fn live_jobs(&self) -> usize {
        self.jobs.len()
    }
}

/// A refusal.
pub(super) fn reject(kind: RejectKind, field: Option<&str>, message: impl Into<String>) -> Response {
    Response::Rejected(Rejection { kind, field: field.map(str::to_string), message: message.into() })
}

/// The quarantine policy a run-events command carries.
fn policy_of(q: crate::record::QuarantinePolicyRecord) -> QuarantinePolicy {
    QuarantinePolicy { max_failures: q.max_failures, window_ms: q.window_ms, duration_ms: q.duration_ms }
}
