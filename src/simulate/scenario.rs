//! The scenario file of `convoy simulate` (see docs/simulate.md): nodes, queues, scheduler config and
//! rounds of submissions, parsed from YAML or JSON and checked with errors that name the field.

use crate::model::placement::NodeAffinity;
use crate::model::{
    ExecutorName, GangSpec, JobSetName, Labels, PoolName, PriorityClassName, Queue, QueueName, Resources, Taint,
    Toleration,
};
use crate::scheduler::SchedulerConfig;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A scenario was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScenarioError {
    /// Path of the offending field, e.g. `rounds[1].submit[0].requests`.
    pub field: String,
    /// What is wrong, for people.
    pub message: String,
}

impl ScenarioError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

fn default_interval() -> f64 {
    1.0
}

/// A whole scenario. It serializes (for `convoy simulate --from-server`) with keys at their
/// defaults left out, and reads back as the same scenario.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of the scheduler's random draws (default 0); each round mixes in its index.
    #[serde(default)]
    pub seed: u64,
    /// Simulated time between rounds, in seconds (default 1, at least 0): the rate limiters
    /// refill by it.
    #[serde(default = "default_interval")]
    pub round_interval_seconds: f64,
    /// The wall-clock time of round 0, RFC 3339 (default: the epoch). Times given in seconds
    /// (`started_at_seconds`, …) stay relative to round 0; this moves the clock the scheduler
    /// reads, so a retry back-off's end or a reservation's expected start are shown as the
    /// server would show them. An exported scenario sets it to the export's time.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rfc3339_ms")]
    pub round_0_at: Option<i64>,
    /// Scheduler configuration, as the server's `[scheduler]` section (default: its defaults);
    /// pool policies as `pools: {<pool>: {policy: fair_share|priority|proportional, preemption:
    /// bool}}` (docs/pool-policies.md).
    #[serde(default)]
    pub config: SchedulerConfig,
    /// The nodes; a node name is unique within its executor.
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    /// The queues; names are unique. Each may give `weight` instead of `priority_factor`
    /// (weight = 1 / priority_factor), and `parent`, `priority_offset`, `priority_policy`,
    /// `sort_priority` for the queue tree.
    #[serde(default, deserialize_with = "queues_with_weight", serialize_with = "queues_without_defaults")]
    pub queues: Vec<Queue>,
    /// Jobs already running when the scenario starts, each on its `node` (and `executor`, when
    /// the node's name is not unique): they hold their nodes before round 0's cycle, and may be
    /// preempted, finished, cancelled or failed like jobs placed by a round. The entries are
    /// submit entries plus `node`, `executor` and `started_at_seconds`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<SubmitSpec>,
    /// The rounds, run in order, one scheduling cycle each.
    #[serde(default)]
    pub rounds: Vec<Round>,
}

/// One node entry (expanded to `count` nodes).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Node name; with a `count` above 1 the nodes are `<name>-1` to `<name>-<count>`.
    pub name: String,
    /// Number of identical nodes (default 1, at most 10,000,000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Executor of the nodes (default `default`).
    #[serde(default = "ExecutorName::default_executor")]
    pub executor: ExecutorName,
    /// Pool of the nodes (default `default`).
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    /// Node labels; `kubernetes.io/hostname` is the node's name unless set here.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// Node taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// What each node offers.
    pub allocatable: Resources,
    /// What each node has in use by things the scenario's jobs are not (other workloads, jobs
    /// being stopped): the scheduler places on allocatable minus this (default none).
    #[serde(default, skip_serializing_if = "Resources::is_zero")]
    pub unallocatable: Resources,
    /// Cordoned: no jobs are placed on these nodes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
    /// Earmarked for these queues (declared in `queues`): their jobs are at home on the nodes;
    /// other queues' jobs may use them only as preemptible guests. The same as the node label
    /// `convoy.io/reserved-for`, which this sets (default: not earmarked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<QueueName>,
}

/// One round.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Round {
    /// Jobs submitted before this round's cycle (after its `finish` and `cancel`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submit: Vec<SubmitSpec>,
    /// Running jobs that succeed before this round's cycle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finish: Vec<String>,
    /// Jobs cancelled before this round's cycle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancel: Vec<String>,
    /// Running jobs that fail before this round's cycle (with `finish` and `cancel`): a job name,
    /// or `{id, node_fault: true}` for a failure its node is to blame for, which counts toward the
    /// node's quarantine (`config.quarantine`) at the round's time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail: Vec<FailSpec>,
    /// Queues cordoned before this round's cycle: their queued jobs are not scheduled, their
    /// running jobs keep running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordon: Vec<QueueName>,
    /// Queues uncordoned before this round's cycle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncordon: Vec<QueueName>,
}

/// One entry of a round's `fail`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum FailSpec {
    /// A job name: the job's own failure.
    Job(String),
    /// A job name, and whether its node is to blame.
    Detailed {
        /// The job name.
        id: String,
        /// True: the failure counts against the job's node (default false).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        node_fault: bool,
        /// The exit code the job fails with (what a retry policy's `on_exit_codes` matches).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// True: the run was killed for running out of memory (what `on_oom` matches).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        oom: bool,
    },
}

impl FailSpec {
    /// The job's name.
    pub fn id(&self) -> &str {
        match self {
            FailSpec::Job(id) | FailSpec::Detailed { id, .. } => id,
        }
    }

    /// Whether the failure counts against the node.
    pub fn node_fault(&self) -> bool {
        matches!(self, FailSpec::Detailed { node_fault: true, .. })
    }

    /// Whether the run ran out of memory.
    pub fn oom(&self) -> bool {
        matches!(self, FailSpec::Detailed { oom: true, .. })
    }

    /// The exit code the job fails with, if given.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            FailSpec::Detailed { exit_code, .. } => *exit_code,
            FailSpec::Job(_) => None,
        }
    }
}

/// One submit entry (expanded to `count` jobs), or one entry of the scenario's `running`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitSpec {
    /// Job name, unique in the scenario; with a `count` above 1 the jobs are `<id>-1` to
    /// `<id>-<count>`.
    pub id: String,
    /// Queue of the jobs; it must be declared in `queues`.
    pub queue: QueueName,
    /// Job set of the jobs (default `default`); it does not affect scheduling.
    #[serde(default = "JobSetName::default_set", skip_serializing_if = "is_default_set")]
    pub job_set: JobSetName,
    /// Number of identical jobs (default 1, at most 10,000,000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Priority class, one of the configuration's (default: its default class).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<PriorityClassName>,
    /// Lower runs first among the queue's jobs of the same priority class (default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: u32,
    /// What each job requests.
    #[serde(default, skip_serializing_if = "Resources::is_zero")]
    pub requests: Resources,
    /// Labels a node must carry.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub node_selector: Labels,
    /// Taints the jobs tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Required node affinity, as in Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// Annotations; only the gang ones (`convoy.io/gang-*`, or Armada's
    /// `armadaproject.io/gangId`, `gangCardinality`, `gangMinimumCardinality`,
    /// `gangNodeUniformityLabel`) affect scheduling.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Pools the jobs may use (extension; default any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolName>,
    /// In a `running` entry (required there, refused in a round's `submit`): the node the jobs
    /// run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// In a `running` entry: the executor of `node`, needed only when several executors have a
    /// node of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorName>,
    /// In a `running` entry: when the jobs started, in seconds of simulated time, where round 0
    /// runs at 0 (so `-600` is ten minutes before it; default 0). Pool policies preempt the latest
    /// started first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_seconds: Option<f64>,
    /// In a `running` entry: when the run began running, in seconds of simulated time (default:
    /// `started_at_seconds`). A running job's deadline counts from it, so reservations expect
    /// the job to end at `running_at_seconds + active_deadline_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at_seconds: Option<f64>,
    /// In a round's `submit`: since when the jobs have been queued, in seconds of simulated time,
    /// at most the round's time (default: the round's time). How long a job has waited is what
    /// `gang_reservation_after_seconds` reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at_seconds: Option<f64>,
    /// In a round's `submit`: the jobs are in a retry back-off until this time, in seconds of
    /// simulated time; no cycle before it places them (default: no back-off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until_seconds: Option<f64>,
    /// Runs of each job that failed already and count against `retry.max_attempts` (needs
    /// `retry`, less than its `max_attempts`; default 0): a job on its second attempt has 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts_spent: u32,
    /// The jobs' deadline (Kubernetes `activeDeadlineSeconds`, > 0; default none): what
    /// reservations know of when a running job ends, and whether a queued job may backfill a
    /// reserved node (`gang_reservation_after_seconds`). The simulation does not end jobs by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<f64>,
    /// Jobs each job waits for: `{id, on}` with `id` naming one job submitted before and `on`
    /// one of `succeeded` (default), `failed`, `ended`. Not for gang members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<SimDependency>,
    /// When a job's failed run (a round's `fail`) is retried: it is queued again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::model::api::JobRetryPolicy>,
}

/// One dependency of a simulated job.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SimDependency {
    /// The job waited for: one simulated job's name.
    pub id: String,
    /// The outcome waited for (default `succeeded`).
    #[serde(default = "succeeded")]
    pub on: crate::model::DependencyCondition,
}

fn succeeded() -> crate::model::DependencyCondition {
    crate::model::DependencyCondition::Succeeded
}

/// Serde adapter for `round_0_at`: RFC 3339 text (to the millisecond) of a time in ms since the
/// epoch.
mod rfc3339_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    pub(super) fn serialize<S: Serializer>(t: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        let ms = t.unwrap_or(0);
        let at = match u64::try_from(ms) {
            Ok(ms) => UNIX_EPOCH + Duration::from_millis(ms),
            Err(_) => return Err(serde::ser::Error::custom("round_0_at before the epoch")),
        };
        s.serialize_str(&humantime::format_rfc3339_millis(at).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        let text = String::deserialize(d)?;
        let at = humantime::parse_rfc3339_weak(text.trim()).map_err(|e| {
            serde::de::Error::custom(format!("{e}: a time such as \"2026-11-26T12:46:26.914Z\" (RFC 3339)"))
        })?;
        let ms = at.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
        i64::try_from(ms).map(Some).map_err(|_| serde::de::Error::custom("time out of range"))
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_default_set(set: &JobSetName) -> bool {
    set.as_str() == JobSetName::default_set().as_str()
}

/// Checks an entry's `depends_on` (each names one job submitted before it) and `retry`, and
/// refuses either for gang members.
fn validate_policies(f: &str, sub: &SubmitSpec, jobs: &HashSet<String>) -> Result<(), ScenarioError> {
    let gang = GangSpec::from_annotations(&sub.annotations).ok().flatten().is_some();
    if gang && (!sub.depends_on.is_empty() || sub.retry.is_some()) {
        let key = if sub.depends_on.is_empty() { "retry" } else { "depends_on" };
        return Err(ScenarioError::new(format!("{f}.{key}"), "gang members have no dependencies or retries"));
    }
    for (i, d) in sub.depends_on.iter().enumerate() {
        if !jobs.contains(&d.id) {
            return Err(ScenarioError::new(
                format!("{f}.depends_on[{i}].id"),
                format!("job {} has not been submitted before (name one simulated job, e.g. a-1)", d.id),
            ));
        }
    }
    if let Some(r) = &sub.retry {
        crate::model::RetryPolicy::check(r)
            .map_err(|e| ScenarioError::new(format!("{f}.retry.{}", e.field), e.message))?;
    }
    Ok(())
}

/// Checks an entry's times and retry progress: `running_at_seconds` in a running entry only,
/// `queued_at_seconds` and `backoff_until_seconds` in a round's submit only (`round_s`: the
/// round's time, `None` for a running entry), and `attempts_spent` below `retry.max_attempts`.
fn validate_progress(f: &str, sub: &SubmitSpec, round_s: Option<f64>) -> Result<(), ScenarioError> {
    let (only_running, only_submit) = (
        [("running_at_seconds", sub.running_at_seconds)],
        [("queued_at_seconds", sub.queued_at_seconds), ("backoff_until_seconds", sub.backoff_until_seconds)],
    );
    let (allowed, refused, why): (&[_], &[_], _) = match round_s {
        Some(_) => (&only_submit, &only_running, "only an entry of the scenario's running list has run times"),
        None => (&only_running, &only_submit, "only a round's submit entry is queued"),
    };
    if let Some((key, _)) = refused.iter().find(|(_, v)| v.is_some()) {
        return Err(ScenarioError::new(format!("{f}.{key}"), why));
    }
    if let Some((key, _)) = allowed.iter().find(|(_, v)| v.is_some_and(|t| !t.is_finite())) {
        return Err(ScenarioError::new(format!("{f}.{key}"), "must be a number of seconds"));
    }
    if let (Some(at), Some(now)) = (sub.queued_at_seconds, round_s)
        && at > now
    {
        return Err(ScenarioError::new(
            format!("{f}.queued_at_seconds"),
            format!("must be at most the round's time ({now} s): a job is queued by the time it is submitted"),
        ));
    }
    if let Some(at) = sub.running_at_seconds
        && at < sub.started_at_seconds.unwrap_or(0.0)
    {
        return Err(ScenarioError::new(format!("{f}.running_at_seconds"), "must not be before started_at_seconds"));
    }
    if let Some(r) = &sub.retry {
        crate::model::RetryPolicy::check(r)
            .map_err(|e| ScenarioError::new(format!("{f}.retry.{}", e.field), e.message))?;
    }
    if sub.attempts_spent > 0 {
        let Some(r) = &sub.retry else {
            return Err(ScenarioError::new(
                format!("{f}.attempts_spent"),
                "counts against retry.max_attempts: give retry",
            ));
        };
        if sub.attempts_spent >= r.max_attempts {
            return Err(ScenarioError::new(
                format!("{f}.attempts_spent"),
                format!(
                    "must be less than retry.max_attempts ({}): a job with none left is not retried",
                    r.max_attempts
                ),
            ));
        }
    }
    Ok(())
}

/// Most nodes or jobs one entry may expand to.
const MAX_COUNT: u32 = 10_000_000;

impl NodeSpec {
    /// Names of the nodes this entry stands for.
    pub fn names(&self) -> Vec<String> {
        match self.count {
            Some(c) if c > 1 => (1..=c).map(|i| format!("{}-{i}", self.name)).collect(),
            _ => vec![self.name.clone()],
        }
    }
}

impl SubmitSpec {
    /// Names of the jobs this entry stands for.
    pub fn names(&self) -> Vec<String> {
        match self.count {
            Some(c) if c > 1 => (1..=c).map(|i| format!("{}-{i}", self.id)).collect(),
            _ => vec![self.id.clone()],
        }
    }
}

/// A scenario's queue: the queue API's fields, or `weight` in place of `priority_factor`.
struct QueueEntry(Queue);

impl<'de> Deserialize<'de> for QueueEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut fields = serde_yaml_ng::Mapping::deserialize(d)?;
        let weight = fields.remove("weight");
        if weight.is_some() && fields.contains_key("priority_factor") {
            return Err(D::Error::custom(
                "weight: give weight or priority_factor, not both (weight = 1 / priority_factor)",
            ));
        }
        let mut q: Queue =
            serde_yaml_ng::from_value(serde_yaml_ng::Value::Mapping(fields)).map_err(D::Error::custom)?;
        if let Some(w) = weight {
            let w: f64 = serde_yaml_ng::from_value(w).map_err(|e| D::Error::custom(format!("weight: {e}")))?;
            if !(w.is_finite() && w > 0.0) {
                return Err(D::Error::custom(format!("weight: must be a finite number > 0, got {w}")));
            }
            q.priority_factor = 1.0 / w;
        }
        Ok(QueueEntry(q))
    }
}

fn queues_with_weight<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Queue>, D::Error> {
    Ok(Vec::<QueueEntry>::deserialize(d)?.into_iter().map(|e| e.0).collect())
}

/// Queues as the queue API writes them, less the keys at their defaults (`{name: A}` for a plain
/// queue), so an exported scenario reads easily.
fn queues_without_defaults<S: serde::Serializer>(queues: &[Queue], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    let mut out = Vec::with_capacity(queues.len());
    for q in queues {
        let defaults = serde_json::to_value(Queue::new(q.name.clone(), 1.0)).map_err(S::Error::custom)?;
        let serde_json::Value::Object(mut fields) = serde_json::to_value(q).map_err(S::Error::custom)? else {
            return Err(S::Error::custom("a queue serializes as a map"));
        };
        fields.retain(|k, v| k == "name" || defaults.get(k) != Some(v));
        out.push(fields);
    }
    out.serialize(s)
}

impl Scenario {
    /// Parses YAML (or JSON, which is YAML) and checks it.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "scenario".to_string() } else { path };
            ScenarioError::new(field, e.into_inner().to_string())
        })?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// The scenario exported from `source` (a server, a data directory) at `at`, as YAML headed by
    /// what it holds and how to use it (`convoy simulate --from-…`, the web UI's download).
    pub fn to_export_yaml(&self, source: &str, at: std::time::SystemTime) -> Result<String, serde_yaml_ng::Error> {
        let header = format!(
            "The state of {source} at {}\n\
             as a convoy simulate scenario (docs/simulate.md). {}.\n\
             Running jobs are in `running`, each on its node; queued jobs in round 0's `submit`, in\n\
             submission order (those waiting for other jobs with `depends_on`); all named by their job\n\
             ids, with their retry policies, back-offs and times. Round 0 replays the next scheduling cycle:\n\
             change weights, nodes or rounds, then run `convoy simulate FILE`.",
            humantime::format_rfc3339_millis(at),
            self.counts(),
        );
        self.to_yaml(&header)
    }

    /// What an exported scenario holds, in words.
    pub fn counts(&self) -> String {
        let queued: usize = self.rounds.iter().flat_map(|r| &r.submit).map(|s| s.names().len()).sum();
        format!(
            "nodes: {}, queues: {}, running jobs: {}, queued jobs: {queued}",
            self.nodes.len(),
            self.queues.len(),
            self.running.len(),
        )
    }

    /// The scenario as YAML, after `header` (lines of text, written as comments).
    pub fn to_yaml(&self, header: &str) -> Result<String, serde_yaml_ng::Error> {
        let body = serde_yaml_ng::to_string(self)?;
        let comments: String = header.lines().map(|l| format!("# {l}\n")).collect();
        Ok(format!("{comments}{body}"))
    }

    /// The queue tree's rules: every parent is declared, and no queue is its own ancestor.
    fn validate_tree(&self) -> Result<(), ScenarioError> {
        let parent: HashMap<&QueueName, Option<&QueueName>> =
            self.queues.iter().map(|q| (&q.name, q.parent.as_ref())).collect();
        for (i, q) in self.queues.iter().enumerate() {
            let Some(p) = &q.parent else { continue };
            if !parent.contains_key(p) {
                return Err(ScenarioError::new(
                    format!("queues[{i}].parent"),
                    format!("parent queue {p} is not declared in queues"),
                ));
            }
            let mut at = Some(p);
            for _ in 0..=self.queues.len() {
                let Some(a) = at else { break };
                if a == &q.name {
                    return Err(ScenarioError::new(
                        format!("queues[{i}].parent"),
                        format!("queue {} would be its own ancestor", q.name),
                    ));
                }
                at = parent.get(a).copied().flatten();
            }
        }
        Ok(())
    }

    /// Checks the rules serde cannot: references, uniqueness, gangs.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.config.validate().map_err(|e| ScenarioError::new(format!("config.{}", e.field), e.message))?;
        if !(self.round_interval_seconds.is_finite() && self.round_interval_seconds >= 0.0) {
            return Err(ScenarioError::new("round_interval_seconds", "must be a number >= 0"));
        }
        let nodes = self.validate_nodes()?;
        let queues = self.validate_queues()?;
        let mut jobs: HashSet<String> = HashSet::new();
        self.validate_running(&nodes, &queues, &mut jobs)?;
        for (r, round) in self.rounds.iter().enumerate() {
            self.validate_round(r, round, &queues, &mut jobs)?;
        }
        Ok(())
    }

    /// Node names unique per executor, counts in range, earmarks given once; the executors of
    /// each node name.
    fn validate_nodes(&self) -> Result<HashMap<String, Vec<ExecutorName>>, ScenarioError> {
        let mut node_names = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let f = format!("nodes[{i}]");
            if n.count == Some(0) || n.count.is_some_and(|c| c > MAX_COUNT) {
                return Err(ScenarioError::new(format!("{f}.count"), format!("must be between 1 and {MAX_COUNT}")));
            }
            if !n.reserved_for.is_empty() && n.labels.contains_key(crate::model::RESERVED_FOR_LABEL) {
                return Err(ScenarioError::new(
                    format!("{f}.reserved_for"),
                    format!("set reserved_for or the label {}, not both", crate::model::RESERVED_FOR_LABEL),
                ));
            }
            for name in n.names() {
                crate::model::NodeName::new(&name)
                    .map_err(|e| ScenarioError::new(format!("{f}.name"), e.to_string()))?;
                if !node_names.insert((n.executor.clone(), name.clone())) {
                    return Err(ScenarioError::new(
                        format!("{f}.name"),
                        format!("node {name} of executor {} is declared twice", n.executor),
                    ));
                }
            }
        }
        let mut executors: HashMap<String, Vec<ExecutorName>> = HashMap::new();
        for (executor, name) in node_names {
            executors.entry(name).or_default().push(executor);
        }
        Ok(executors)
    }

    /// Queue names unique, the tree sound, earmarks naming declared queues; the declared names.
    fn validate_queues(&self) -> Result<HashSet<QueueName>, ScenarioError> {
        let mut queues = HashSet::new();
        for (i, q) in self.queues.iter().enumerate() {
            q.validate().map_err(|e| ScenarioError::new(format!("queues[{i}].{}", e.field), e.message))?;
            if self.config.quarantine.enabled() && q.name.as_str() == super::output::QUARANTINED_KEY {
                return Err(ScenarioError::new(
                    format!("queues[{i}].name"),
                    "with config.quarantine on, a queue may not be called `quarantined`: the output's node \
                     records use that key for the node's quarantine",
                ));
            }
            if !queues.insert(q.name.clone()) {
                return Err(ScenarioError::new(
                    format!("queues[{i}].name"),
                    format!("queue {} is declared twice", q.name),
                ));
            }
        }
        self.validate_tree()?;
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some((k, q)) = n.reserved_for.iter().enumerate().find(|(_, q)| !queues.contains(*q)) {
                return Err(ScenarioError::new(
                    format!("nodes[{i}].reserved_for[{k}]"),
                    format!("queue {q} is not declared in queues"),
                ));
            }
        }
        Ok(queues)
    }

    /// One submit or running entry `f`: its queue, class, count, name, affinity and gang
    /// annotations; its job names are added to `jobs` (an error if one is there already).
    fn validate_entry(
        &self,
        f: &str,
        sub: &SubmitSpec,
        queues: &HashSet<QueueName>,
        jobs: &mut HashSet<String>,
    ) -> Result<Option<GangSpec>, ScenarioError> {
        if !queues.contains(&sub.queue) {
            return Err(ScenarioError::new(
                format!("{f}.queue"),
                format!("queue {} is not declared in queues", sub.queue),
            ));
        }
        if self.queues.iter().any(|q| q.parent.as_ref() == Some(&sub.queue)) {
            return Err(ScenarioError::new(
                format!("{f}.queue"),
                format!("queue {} is a parent queue: jobs are submitted to leaf queues only", sub.queue),
            ));
        }
        if let Some(pc) = &sub.priority_class
            && self.config.priority_class(pc.as_str()).is_none()
        {
            return Err(ScenarioError::new(
                format!("{f}.priority_class"),
                format!("priority class {pc} is not configured"),
            ));
        }
        if sub.active_deadline_seconds.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
            return Err(ScenarioError::new(format!("{f}.active_deadline_seconds"), "must be a number of seconds > 0"));
        }
        if sub.count == Some(0) || sub.count.is_some_and(|c| c > MAX_COUNT) {
            return Err(ScenarioError::new(format!("{f}.count"), format!("must be between 1 and {MAX_COUNT}")));
        }
        if sub.id.is_empty() {
            return Err(ScenarioError::new(format!("{f}.id"), "must not be empty"));
        }
        if let Some(a) = &sub.node_affinity {
            a.validate().map_err(|m| ScenarioError::new(format!("{f}.node_affinity"), m))?;
        }
        let gang = GangSpec::from_annotations(&sub.annotations)
            .map_err(|e| ScenarioError::new(format!("{f}.{}", e.field), e.message))?;
        for name in sub.names() {
            if !jobs.insert(name.clone()) {
                return Err(ScenarioError::new(format!("{f}.id"), format!("job {name} is submitted twice")));
            }
        }
        Ok(gang)
    }

    /// The `running` entries: entries like a submit's, each on a declared node. Gangs must agree
    /// on their annotations, but not all members need be running (some may have ended).
    fn validate_running(
        &self,
        nodes: &HashMap<String, Vec<ExecutorName>>,
        queues: &HashSet<QueueName>,
        jobs: &mut HashSet<String>,
    ) -> Result<(), ScenarioError> {
        let mut gangs: HashMap<(QueueName, String), (GangSpec, String)> = HashMap::new();
        for (i, entry) in self.running.iter().enumerate() {
            let f = format!("running[{i}]");
            if !entry.depends_on.is_empty() {
                return Err(ScenarioError::new(format!("{f}.depends_on"), "a running job waits for nothing"));
            }
            let gang = self.validate_entry(&f, entry, queues, jobs)?;
            validate_progress(&f, entry, None)?;
            let Some(node) = &entry.node else {
                return Err(ScenarioError::new(format!("{f}.node"), "a running entry needs the node it runs on"));
            };
            let on: Vec<&ExecutorName> = nodes
                .get(node)
                .into_iter()
                .flatten()
                .filter(|e| entry.executor.as_ref().is_none_or(|x| x == *e))
                .collect();
            let executor = entry.executor.as_ref().map(|e| format!(" of executor {e}")).unwrap_or_default();
            match on.as_slice() {
                [] => {
                    return Err(ScenarioError::new(
                        format!("{f}.node"),
                        format!("node {node}{executor} is not declared in nodes"),
                    ));
                }
                [_] => {}
                _ => {
                    return Err(ScenarioError::new(
                        format!("{f}.executor"),
                        format!("several executors have a node {node}: say which with executor"),
                    ));
                }
            }
            if entry.started_at_seconds.is_some_and(|t| !t.is_finite()) {
                return Err(ScenarioError::new(format!("{f}.started_at_seconds"), "must be a number"));
            }
            if let Some(g) = gang {
                let e = gangs.entry((entry.queue.clone(), g.id.clone())).or_insert_with(|| (g.clone(), f.clone()));
                if e.0 != g {
                    return Err(ScenarioError::new(
                        format!("{f}.annotations"),
                        format!("gang {} is annotated differently in {}", g.id, e.1),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Round `r`: its submit entries (gangs whole), and the queues and jobs it names.
    fn validate_round(
        &self,
        r: usize,
        round: &Round,
        queues: &HashSet<QueueName>,
        jobs: &mut HashSet<String>,
    ) -> Result<(), ScenarioError> {
        // Gang id → (declared cardinality, members in this round, first field).
        let mut gangs: HashMap<(QueueName, String), (GangSpec, u32, String)> = HashMap::new();
        for (s, sub) in round.submit.iter().enumerate() {
            let f = format!("rounds[{r}].submit[{s}]");
            for (key, given) in [
                ("node", sub.node.is_some()),
                ("executor", sub.executor.is_some()),
                ("started_at_seconds", sub.started_at_seconds.is_some()),
            ] {
                if given {
                    return Err(ScenarioError::new(
                        format!("{f}.{key}"),
                        "only an entry of the scenario's running list has a node; a submitted job is placed by the \
                         scheduler",
                    ));
                }
            }
            validate_policies(&f, sub, jobs)?;
            validate_progress(&f, sub, Some(r as f64 * self.round_interval_seconds))?;
            let Some(g) = self.validate_entry(&f, sub, queues, jobs)? else { continue };
            let n = sub.names().len() as u32;
            let e = gangs.entry((sub.queue.clone(), g.id.clone())).or_insert_with(|| (g.clone(), 0, f.clone()));
            if e.0 != g {
                return Err(ScenarioError::new(
                    format!("{f}.annotations"),
                    format!("gang {} is annotated differently in {}", g.id, e.2),
                ));
            }
            e.1 += n;
        }
        for ((_, id), (g, n, f)) in &gangs {
            if *n != g.cardinality {
                return Err(ScenarioError::new(
                    format!("{f}.annotations"),
                    format!("gang {id} has cardinality {} but {n} members are submitted in this round", g.cardinality),
                ));
            }
        }
        for (key, list) in [("cordon", &round.cordon), ("uncordon", &round.uncordon)] {
            if let Some((i, q)) = list.iter().enumerate().find(|(_, q)| !queues.contains(*q)) {
                return Err(ScenarioError::new(
                    format!("rounds[{r}].{key}[{i}]"),
                    format!("queue {q} is not declared in queues"),
                ));
            }
        }
        let failed: Vec<String> = round.fail.iter().map(|f| f.id().to_string()).collect();
        for (key, list) in [("finish", &round.finish), ("cancel", &round.cancel), ("fail", &failed)] {
            for (i, name) in list.iter().enumerate() {
                if !jobs.contains(name) {
                    return Err(ScenarioError::new(
                        format!("rounds[{r}].{key}[{i}]"),
                        format!("job {name} has not been submitted"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let e = Scenario::parse("nodes: [{name: n, allocatable: {cpu: lots}}]").unwrap_err();
        assert!(e.field.starts_with("nodes[0].allocatable"), "{e}");
        assert!(e.message.contains("lots"), "{e}");
        let e = Scenario::parse("queues: [{name: A}]\nrounds: [{submit: [{id: a, queue: B}]}]").unwrap_err();
        assert_eq!(e.field, "rounds[0].submit[0].queue");
        let e = Scenario::parse("bogus: 1").unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
        let e = Scenario::parse("config: {node_eviction_probability: 3}").unwrap_err();
        assert_eq!(e.field, "config.node_eviction_probability");
        let e = Scenario::parse(
            "queues: [{name: A}]\nrounds: [{submit: [{id: g, queue: A, count: 3, annotations: {convoy.io/gang-id: g1, convoy.io/gang-cardinality: '4'}}]}]",
        )
        .unwrap_err();
        assert!(e.message.contains("cardinality 4 but 3"), "{e}");
        let e = Scenario::parse("queues: [{name: A}]\nrounds: [{finish: [x]}]").unwrap_err();
        assert_eq!(e.field, "rounds[0].finish[0]");
        let e =
            Scenario::parse("nodes: [{name: n, allocatable: {cpu: '1'}, reserved_for: [A, B]}]\nqueues: [{name: A}]")
                .unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("nodes[0].reserved_for[1]", "queue B is not declared in queues")
        );
        let e = Scenario::parse(
            "nodes: [{name: n, allocatable: {cpu: '1'}, reserved_for: [A], labels: {convoy.io/reserved-for: A}}]\nqueues: [{name: A}]",
        )
        .unwrap_err();
        assert_eq!(e.field, "nodes[0].reserved_for");
        let e = Scenario::parse("nodes: [{name: n, allocatable: {cpu: '1'}, reserved_for: ['a b']}]").unwrap_err();
        assert!(e.field.starts_with("nodes[0].reserved_for"), "{e}");
        // Gang annotations are named as spelled, in Armada's spelling too.
        let e = Scenario::parse(
            "queues: [{name: A}]\nrounds: [{submit: [{id: g, queue: A, count: 2, annotations: {armadaproject.io/gangId: g1, armadaproject.io/gangCardinality: two}}]}]",
        )
        .unwrap_err();
        assert_eq!(e.field, "rounds[0].submit[0].annotations.armadaproject.io/gangCardinality");
        assert_eq!(e.message, "must be an integer >= 1, got \"two\"");
        let e = Scenario::parse(
            "queues: [{name: A}]\nrounds: [{submit: [{id: g, queue: A, annotations: {armadaproject.io/gang-id: g1}}]}]",
        )
        .unwrap_err();
        assert_eq!(e.field, "rounds[0].submit[0].annotations.armadaproject.io/gang-id");
        assert!(e.message.contains("armadaproject.io/gangId"), "{e}");
    }

    #[test]
    fn fail_entries_and_quarantine_keys() {
        let s = Scenario::parse(
            "config: {quarantine: {max_failures: 3, window_seconds: 600, duration_seconds: 1800}}\n\
             queues: [{name: A}]\nrounds: [{submit: [{id: a, queue: A, count: 4}]}, {fail: [a-3, {id: a-4, node_fault: true}, {id: a-1}]}]",
        )
        .unwrap();
        assert_eq!(s.config.quarantine.max_failures, 3);
        assert_eq!(s.config.quarantine.window, std::time::Duration::from_secs(600));
        assert_eq!(s.config.quarantine.duration, std::time::Duration::from_secs(1800));
        let f = &s.rounds[1].fail;
        assert_eq!(
            f.iter().map(|f| (f.id(), f.node_fault())).collect::<Vec<_>>(),
            vec![("a-3", false), ("a-4", true), ("a-1", false)]
        );
        let e = Scenario::parse("queues: [{name: A}]\nrounds: [{fail: [{id: x, node_fault: true}]}]").unwrap_err();
        assert_eq!(e.field, "rounds[0].fail[0]");
        let e = Scenario::parse("config: {quarantine: {max_failures: 1, window_seconds: 0}}").unwrap_err();
        assert_eq!(e.field, "config.quarantine.window");
        let e = Scenario::parse("config: {quarantine: {max_failures: 1}}\nqueues: [{name: quarantined}]").unwrap_err();
        assert_eq!(e.field, "queues[0].name");
        // Without quarantine the name is free.
        Scenario::parse("queues: [{name: quarantined}]").unwrap();
    }

    #[test]
    fn running_entries_are_checked() {
        let base = "nodes: [{name: n, allocatable: {cpu: '4'}}, {name: m, executor: e2, allocatable: {cpu: '4'}}, \
                    {name: m, allocatable: {cpu: '4'}}]\nqueues: [{name: A}]\n";
        for (rest, field, message) in [
            ("running: [{id: a, queue: A}]", "running[0].node", "a running entry needs the node it runs on"),
            ("running: [{id: a, queue: A, node: z}]", "running[0].node", "node z is not declared in nodes"),
            ("running: [{id: a, queue: A, node: n, executor: e2}]", "running[0].node", "node n of executor e2"),
            ("running: [{id: a, queue: A, node: m}]", "running[0].executor", "several executors have a node m"),
            ("running: [{id: a, queue: B, node: n}]", "running[0].queue", "queue B is not declared"),
            (
                "running: [{id: a, queue: A, node: n}]\nrounds: [{submit: [{id: a, queue: A}]}]",
                "rounds[0].submit[0].id",
                "job a is submitted twice",
            ),
            ("rounds: [{submit: [{id: a, queue: A, node: n}]}]", "rounds[0].submit[0].node", "only an entry of"),
            (
                "rounds: [{submit: [{id: a, queue: A, started_at_seconds: -5}]}]",
                "rounds[0].submit[0].started_at_seconds",
                "only an entry of",
            ),
            ("running: [{id: a, queue: A, node: n, nod: n}]", "running[0]", "nod"),
        ] {
            let e = Scenario::parse(&format!("{base}{rest}")).unwrap_err();
            assert!(e.field.starts_with(field) && e.to_string().contains(message), "{rest}: {e}");
        }
        let s = Scenario::parse(&format!(
            "{base}running: [{{id: a, queue: A, node: m, executor: e2, started_at_seconds: -30}}]\n\
             rounds: [{{finish: [a]}}]"
        ))
        .unwrap();
        assert_eq!(s.running[0].started_at_seconds, Some(-30.0));
        // A running gang need not be whole (members may have ended).
        Scenario::parse(&format!(
            "{base}running: [{{id: g, queue: A, node: n, annotations: {{convoy.io/gang-id: g1, convoy.io/gang-cardinality: '4'}}}}]"
        ))
        .unwrap();
    }

    #[test]
    fn the_policy_progress_keys_are_checked() {
        let base = "nodes: [{name: n, allocatable: {cpu: '4'}}]\nqueues: [{name: A}]\n";
        let retry = "retry: {max_attempts: 2, on_exit_codes: [75]}";
        for (rest, field, message) in [
            (
                "running: [{id: a, queue: A, node: n, queued_at_seconds: -5}]",
                "running[0].queued_at_seconds",
                "only a round's",
            ),
            (
                "running: [{id: a, queue: A, node: n, backoff_until_seconds: 5}]",
                "running[0].backoff_until_seconds",
                "only a round's",
            ),
            (
                "rounds: [{submit: [{id: a, queue: A, running_at_seconds: -5}]}]",
                "rounds[0].submit[0].running_at_seconds",
                "run times",
            ),
            (
                "rounds: [{submit: [{id: a, queue: A, queued_at_seconds: 5}]}]",
                "rounds[0].submit[0].queued_at_seconds",
                "at most the round's time (0 s)",
            ),
            (
                "rounds: [{submit: [{id: a, queue: A, queued_at_seconds: .nan}]}]",
                "rounds[0].submit[0].queued_at_seconds",
                "a number",
            ),
            (
                "rounds: [{submit: [{id: a, queue: A, attempts_spent: 1}]}]",
                "rounds[0].submit[0].attempts_spent",
                "give retry",
            ),
            (
                &format!("rounds: [{{submit: [{{id: a, queue: A, attempts_spent: 2, {retry}}}]}}]"),
                "rounds[0].submit[0].attempts_spent",
                "less than retry.max_attempts (2)",
            ),
            (
                "running: [{id: a, queue: A, node: n, started_at_seconds: -5, running_at_seconds: -6}]",
                "running[0].running_at_seconds",
                "not be before started_at_seconds",
            ),
            (
                "running: [{id: a, queue: A, node: n, retry: {max_attempts: 0}}]",
                "running[0].retry.max_attempts",
                "1 to 100",
            ),
            ("round_0_at: yesterday", "round_0_at", "RFC 3339"),
        ] {
            let e = Scenario::parse(&format!("{base}{rest}")).unwrap_err();
            assert!(e.field == field && e.message.contains(message), "{rest}: {e}");
        }
        let s = Scenario::parse(&format!(
            "{base}round_0_at: 2026-11-26T12:46:26.914Z\nround_interval_seconds: 10\n\
             running: [{{id: a, queue: A, node: n, started_at_seconds: -6, running_at_seconds: -5, attempts_spent: 1, {retry}}}]\n\
             rounds: [{{}}, {{submit: [{{id: b, queue: A, queued_at_seconds: 10, backoff_until_seconds: 30}}]}}]"
        ))
        .unwrap();
        assert_eq!(s.round_0_at, Some(1_795_697_186_914));
        assert_eq!((s.running[0].running_at_seconds, s.running[0].attempts_spent), (Some(-5.0), 1));
        let yaml = serde_yaml_ng::to_string(&s).unwrap();
        assert!(yaml.contains("round_0_at: 2026-11-26T12:46:26.914Z\n"), "{yaml}");
        let back = Scenario::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(serde_yaml_ng::to_string(&back).unwrap(), yaml);
    }

    #[test]
    fn a_scenario_serializes_to_what_parses_back_the_same() {
        let text = include_str!("../../tests/scenarios/contract_example.yaml");
        let s = Scenario::parse(text).unwrap();
        let yaml = serde_yaml_ng::to_string(&s).unwrap();
        let back = Scenario::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(serde_yaml_ng::to_string(&back).unwrap(), yaml);
        assert_eq!(back.config, s.config);
        assert_eq!(back.queues, s.queues);
        // Keys at their defaults are left out.
        let plain = Scenario::parse("queues: [{name: A}]\nrounds: [{submit: [{id: a, queue: A}]}]").unwrap();
        let yaml = serde_yaml_ng::to_string(&plain).unwrap();
        assert!(yaml.contains("queues:\n- name: A\n"), "{yaml}");
        assert!(yaml.contains("submit:\n  - id: a\n    queue: A\n"), "{yaml}");
        assert!(!yaml.contains("running"), "{yaml}");
    }

    #[test]
    fn parses_the_contract_example() {
        let s = Scenario::parse(include_str!("../../tests/scenarios/contract_example.yaml")).unwrap();
        assert_eq!(s.nodes[0].names(), vec!["node-1", "node-2"]);
        assert_eq!(s.rounds[0].submit[0].names().len(), 40);
    }
}
