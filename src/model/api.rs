//! The HTTP contract (DESIGN.md §6) as plain types: request and response bodies of the public API
//! and of the executor API. The server, the agent and the CLI all speak through these.

use super::job::{EventKind, JobState, RunState};
use super::names::{ExecutorName, JobId, JobSetName, NodeName, PoolName, PriorityClassName, QueueName, RunId};
use super::placement::{Labels, Taint};
use super::resources::Resources;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// `POST /v1/jobs`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// Queue to submit to; it must exist (a cordoned queue takes jobs and leaves them queued).
    pub queue: QueueName,
    /// Job set to put the jobs in: related jobs of the queue, watched and cancelled together.
    /// Created by its first submission.
    pub job_set: JobSetName,
    /// The jobs, at least one and at most the server's `max_jobs_per_request`.
    pub jobs: Vec<SubmitItem>,
}

/// One job of a submission. The pod spec, services and ingresses are kept as the client's JSON
/// text: checked once, stored as sent.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitItem {
    /// Lower runs first among the queue's jobs of the same priority class.
    #[serde(default)]
    pub priority: u32,
    /// Defaults to the configured default class.
    #[serde(default)]
    pub priority_class: Option<String>,
    /// A Kubernetes PodSpec.
    #[schema(value_type = Object)]
    pub pod_spec: Box<serde_json::value::RawValue>,
    /// Annotations (keys of 1 to 253 characters, values up to 64 KiB), handed to the executor and
    /// set on the pod. The gang ones make the job a gang member: `convoy.io/gang-id`,
    /// `convoy.io/gang-cardinality`, `convoy.io/gang-minimum-cardinality`,
    /// `convoy.io/gang-node-uniformity-label`, or Armada's `armadaproject.io/gangId`,
    /// `gangCardinality`, `gangMinimumCardinality`, `gangNodeUniformityLabel`.
    /// `convoy.io/fail-fast` or `armadaproject.io/failFast` = `"true"`: a lost run fails the job
    /// instead of queueing it again.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Labels (same limits as annotations), handed to the executor and set on the pod.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Kubernetes Service objects to create with the pod. Their names may hold `{pod}` (the
    /// run's pod name) and `{namespace}`, which the Kubernetes agent fills in.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub services: Vec<Box<serde_json::value::RawValue>>,
    /// Kubernetes Ingress objects to create with the pod. Their names, hosts, backend service
    /// names and TLS hosts and secrets may hold `{pod}`, `{namespace}`, `{host_suffix}` and
    /// `{cert_suffix}`, which the Kubernetes agent fills in (docs/armada-grpc.md).
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub ingresses: Vec<Box<serde_json::value::RawValue>>,
    /// Resubmitting with the same client id (within the queue) returns the same job id, for as
    /// long as that job is kept (until `job_retention` after it finished; then the client id may
    /// name a new job).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Kubernetes namespace of the job's pod, services and ingresses: a DNS-1123 label (1 to 63
    /// lower-case letters, digits and `-`). Absent: the namespace configured for the agent that
    /// runs the job. Runtimes without Kubernetes (processes) ignore it.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Jobs this one waits for (Slurm's `--dependency`): it stays `queued`, out of its queue's
    /// order, until each has ended as asked; when one can no longer, it fails naming it (or is
    /// cancelled with a cancelled one). Each names an existing job by `job_id`, or an earlier
    /// job of this request by its `client_id`. Not for gang members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<JobDependency>,
    /// When a failed run is tried again (the job keeps its id; each run is listed with its
    /// attempt number). Not for gang members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<JobRetryPolicy>,
}

/// A job a submitted job waits for: `job_id` or `client_id`, and the outcome waited for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobDependency {
    /// An existing job (of any queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
    /// An earlier job of the same request, by its client id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// `succeeded` (default; Slurm's afterok), `failed` (afternotok) or `ended` (afterany).
    #[serde(default = "succeeded")]
    pub on: super::DependencyCondition,
}

fn succeeded() -> super::DependencyCondition {
    super::DependencyCondition::Succeeded
}

pub use super::job_retry::JobRetryPolicy;

/// A dependency of a job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobDependencyStatus {
    /// The job waited for.
    pub job_id: JobId,
    /// The outcome waited for.
    pub on: super::DependencyCondition,
    /// Whether it came.
    pub met: bool,
}

impl SubmitItem {
    /// A job of this pod spec alone (in `priority_class`, or the default), everything else unset.
    pub fn of_pod_spec(pod_spec: Box<serde_json::value::RawValue>, priority_class: Option<String>) -> SubmitItem {
        SubmitItem {
            priority: 0,
            priority_class,
            pod_spec,
            annotations: BTreeMap::new(),
            labels: BTreeMap::new(),
            services: Vec::new(),
            ingresses: Vec::new(),
            client_id: None,
            namespace: None,
            depends_on: Vec::new(),
            retry: None,
        }
    }
}

/// Answer to a submission: one id per submitted job, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubmitResponse {
    /// One id per submitted job, in request order; a job whose `client_id` was used before in the
    /// queue gets the earlier job's id.
    pub job_ids: Vec<JobId>,
}

/// `POST /v1/jobs/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Queue of the jobs.
    pub queue: QueueName,
    /// Job set of the jobs; every id in `job_ids` must belong to it.
    pub job_set: JobSetName,
    /// Only these jobs (default: the whole job set).
    #[serde(default)]
    pub job_ids: Option<Vec<JobId>>,
    /// Only jobs in these states (default: every non-terminal state).
    #[serde(default)]
    pub states: Option<Vec<JobState>>,
    /// Why, recorded on the jobs and their events (default: `cancelled by <caller>`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Jobs a cancel, reprioritize or preempt request changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobIdsResponse {
    /// The jobs changed; jobs that were already over or needed no change are left out.
    pub job_ids: Vec<JobId>,
}

/// `POST /v1/jobs/reprioritize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReprioritizeRequest {
    /// Queue of the jobs.
    pub queue: QueueName,
    /// Job set of the jobs; every id in `job_ids` must belong to it.
    pub job_set: JobSetName,
    /// Only these jobs (default: every job of the job set that is not over).
    #[serde(default)]
    pub job_ids: Option<Vec<JobId>>,
    /// The new priority: lower runs first among the queue's jobs of the same priority class.
    pub priority: u32,
}

/// `POST /v1/jobs/preempt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreemptRequest {
    /// Queue of the jobs.
    pub queue: QueueName,
    /// Job set of the jobs; every id in `job_ids` must belong to it.
    pub job_set: JobSetName,
    /// The jobs, at least one; only those holding a node (leased, pending or running) are
    /// preempted.
    pub job_ids: Vec<JobId>,
    /// Why, recorded on the jobs and their events (default: `preempted by <caller>`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/queues/{queue}/cancel`: the queue's live jobs, every job set; the filters narrow
/// them (an absent or empty filter reaches every job).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueCancelRequest {
    /// Only jobs in these states (not finished ones).
    #[serde(default)]
    pub states: Vec<JobState>,
    /// Only jobs of these priority classes.
    #[serde(default)]
    pub priority_classes: Vec<PriorityClassName>,
    /// Only jobs in these pools: where a job's run is, or for a queued job a pool it may use.
    #[serde(default)]
    pub pools: Vec<PoolName>,
    /// Why, recorded on the jobs and their events (default: `cancelled by <caller>`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/queues/{queue}/preempt`: the queue's jobs that hold a node (leased, pending or
/// running), every job set; the filters narrow them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueuePreemptRequest {
    /// Only jobs of these priority classes.
    #[serde(default)]
    pub priority_classes: Vec<PriorityClassName>,
    /// Only jobs whose run is in one of these pools.
    #[serde(default)]
    pub pools: Vec<PoolName>,
    /// Why, recorded on the jobs and their events (default: `preempted by <caller>`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A run (one attempt to run a job) as the API shows it. Its times are the leader's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunView {
    /// The run's id (a ULID).
    pub run_id: RunId,
    /// Executor the run was leased to.
    pub executor: String,
    /// Node of that executor the run was placed on.
    pub node: NodeName,
    /// Pool of the node.
    pub pool: PoolName,
    /// Where the run is.
    pub state: RunState,
    /// When the scheduler placed the run on its node.
    #[schema(format = DateTime)]
    pub leased_at: String,
    /// When the executor reported the run accepted (or running, if it skipped that step).
    #[schema(format = DateTime)]
    pub pending_at: Option<String>,
    /// When the executor reported the run running.
    #[schema(format = DateTime)]
    pub running_at: Option<String>,
    /// When the run ended: reported over by the executor, or lost.
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    /// Exit code of the job's process or main container, when the executor reported one.
    pub exit_code: Option<i32>,
    /// Short cause of the end, e.g. `deadline exceeded`, `oom killed` or `executor <name> lost`.
    pub reason: Option<String>,
    /// Details of the end, as the executor reported them.
    pub message: Option<String>,
    /// The Kubernetes pod the run became (name, namespace, uid), as the Kubernetes agent reported
    /// it; absent for runs of other runtimes and before the pod was created.
    pub pod: Option<super::RunPod>,
    /// What the run used (CPU time, peak memory), once it ended, where its runtime tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::RunUsage>,
    /// Which attempt this run is: 1 for the job's first run.
    #[serde(default)]
    pub attempt: u32,
}

/// `GET /v1/runs/{run_id}`: a run with the job it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunDetails {
    /// The run's job.
    pub job_id: JobId,
    /// The job's queue.
    pub queue: QueueName,
    /// The job's job set.
    pub job_set: JobSetName,
    /// The job's Kubernetes namespace, if it named one.
    pub namespace: Option<super::Namespace>,
    /// The run.
    pub run: RunView,
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    /// The job's id, a ULID: ids sort by submission time.
    pub id: JobId,
    /// Queue the job was submitted to.
    pub queue: QueueName,
    /// Job set of the job.
    pub job_set: JobSetName,
    /// Where the job is in its life.
    pub state: JobState,
    /// Priority: lower runs first among the queue's jobs of the same priority class.
    pub priority: u32,
    /// Priority class (the configured default when the submission named none).
    pub priority_class: PriorityClassName,
    /// When the leader accepted the submission.
    #[schema(format = DateTime)]
    pub submitted_at: String,
    /// What the job requests from its node: its containers' requests summed (or an init
    /// container's, where larger), plus the pod overhead.
    pub requests: Resources,
    /// Annotations as submitted.
    pub annotations: BTreeMap<String, String>,
    /// Labels as submitted.
    pub labels: BTreeMap<String, String>,
    /// The submission's `client_id`, if it had one.
    pub client_id: Option<String>,
    /// The Kubernetes namespace the job asked for; absent: its agent's configured namespace.
    pub namespace: Option<super::Namespace>,
    /// The principal that submitted the job (`anonymous` with auth off); absent for jobs
    /// submitted before servers recorded it.
    pub owner: Option<String>,
    /// Why the job waits (the scheduler's latest reason) or why it ended.
    pub reason: Option<String>,
    /// Attempts to run the job, oldest first; at most one is not over.
    pub runs: Vec<RunView>,
    /// The jobs it waits for, with whether each wait is over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<JobDependencyStatus>,
    /// When its failed runs are retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<JobRetryPolicy>,
    /// The job's events (only on `GET /v1/jobs/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventView>>,
    /// The PodSpec (only on `GET /v1/jobs/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub pod_spec: Option<serde_json::Value>,
}

/// `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobList {
    /// The page's jobs, in id (submission) order.
    pub jobs: Vec<JobView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<JobId>,
}

/// One event as the API and the event stream show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventView {
    /// Sequence number in the job set's stream: dense, from 1 (the stream's event id).
    pub seq: u64,
    /// Job the event is about.
    pub job_id: JobId,
    /// When it happened (the leader's clock).
    #[schema(format = DateTime)]
    pub at: String,
    /// What happened.
    pub kind: EventKind,
    /// The run concerned, for the events of a run.
    pub run_id: Option<RunId>,
    /// Details, e.g. the node of a lease, a cancel reason, or why a run failed.
    pub message: Option<String>,
}

/// A queue's standing, per pool (`GET /v1/queues/{queue}/report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueReport {
    /// The queue's name.
    pub queue: QueueName,
    /// Fair-share weight: `1 / priority_factor`.
    pub weight: f64,
    /// The queue's standing in each pool where it had running or queued jobs, as of the latest
    /// scheduling cycle this server ran as leader (cycles are skipped while nothing is queued).
    pub pools: Vec<QueuePoolReport>,
    /// The queue's live jobs per state. Finished jobs are not counted: a terminal state counts
    /// only jobs whose run is still being stopped.
    pub jobs: BTreeMap<JobState, u64>,
    /// With `queue_usage_halftime`: per pool, the moving average of the queue's share of the pool
    /// (0 to 1) as of now, which orders it against other queues; from the replicated state, so
    /// every server shows it, before any cycle too. Empty without a half-time.
    #[serde(default)]
    pub usage: BTreeMap<PoolName, f64>,
}

/// A queue's standing in one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueuePoolReport {
    /// The pool's name.
    pub pool: PoolName,
    /// The queue's weight over the summed weights of the queues active in the pool (0 to 1).
    pub fair_share: f64,
    /// Fair share capped by what the queue demands, with what it leaves shared among the other
    /// queues (0 to 1).
    pub adjusted_fair_share: f64,
    /// Share of the pool the queue holds after the cycle, by the configured fairness model.
    pub actual_share: f64,
    /// True if the queue was protected from fair-share eviction in the cycle: its share was at
    /// or below `protected_fraction_of_fair_share` of the larger of its fair share and its
    /// adjusted fair share, so its preemptible jobs were not evicted.
    #[serde(default)]
    pub protected: bool,
    /// Resources the queue's jobs hold in the pool after the cycle.
    pub allocated: Resources,
    /// Resources the queue held at the start of the cycle plus those its queued jobs request.
    pub demand: Resources,
    /// The pool's capacity in the cycle: allocatable minus unallocatable, summed over its nodes.
    pub pool_total: Resources,
    /// Of `allocated`, what the queue holds on nodes earmarked for it (`convoy.io/reserved-for`).
    #[serde(default)]
    pub home_allocated: Resources,
    /// Of `allocated`, what the queue holds as a guest on nodes earmarked for other queues.
    #[serde(default)]
    pub guest_allocated: Resources,
    /// The usage that ordered the queue in the cycle: with `queue_usage_halftime`, the moving
    /// average of its share; otherwise its share at the start of the cycle.
    #[serde(default)]
    pub usage: f64,
    /// The queue's parent in the queue tree (absent: a top-level queue).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent: Option<QueueName>,
    /// True for a parent queue: its shares are its level's, its allocation and demand its
    /// subtree's.
    #[serde(default)]
    pub is_parent: bool,
    /// How the pool is scheduled (`[scheduler.pools.<pool>] policy`): `fair_share` (the default),
    /// `priority` or `proportional`.
    #[serde(default)]
    pub policy: super::pool_policy::PoolPolicy,
    /// In a `proportional` pool: the queue's target of the resource divided (whole GPUs, or the
    /// pool's dominant resource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proportional_target: Option<Resources>,
    /// With a guarantee (the queue's own, or its children's for a parent): the share of the pool
    /// the queue is guaranteed in the cycle, after nesting and scaling: the share of the part of
    /// its demand that holds, of every resource, the smaller of its guarantee and its demand (0
    /// to 1). Its share is at least this; the rest of the pool goes by fair share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guaranteed_share: Option<f64>,
    /// True if the queue's guarantee was scaled down in proportion because the guarantees at its
    /// level add up to more than the pool (or than its parent's guarantee).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub guarantee_scaled: bool,
}

// ---------------------------------------------------------------------------------------------
// Executor API
// ---------------------------------------------------------------------------------------------

/// A node as an agent reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeReport {
    /// Node name, unique within the executor.
    pub name: NodeName,
    /// Pool the node is scheduled in (default `default`).
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    /// Node labels, which jobs' node selectors and node affinity match.
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, String>)]
    pub labels: Labels,
    /// Node taints: a job is placed here only if it tolerates them (`PreferNoSchedule` excepted).
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Everything the node offers (as Kubernetes `allocatable`).
    pub allocatable: Resources,
    /// Resources used by things Convoy did not start.
    #[serde(default)]
    pub unallocatable: Resources,
    /// Cordoned: no new jobs are placed here; running ones stay.
    #[serde(default)]
    pub unschedulable: bool,
}

/// A run an agent holds, with its state as the agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeldRun {
    /// The run's id, as its lease gave it.
    pub run_id: RunId,
    /// The run's job.
    pub job_id: JobId,
    /// The run's state as the agent last saw it.
    pub state: RunState,
}

/// `POST /v1/executors/{executor}/lease`: the agent's inventory and runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// Every node of the executor, each listed once: the list replaces the one the server had.
    pub nodes: Vec<NodeReport>,
    /// Every run the agent holds. Their leases are not sent again, and those the server does not
    /// know as this executor's (and that are not over) get kill orders.
    #[serde(default)]
    pub runs: Vec<HeldRun>,
    /// Longest the server may hold the request open, in seconds (default 30, at most the server's
    /// `max_lease_wait`, 30 by default).
    #[serde(default)]
    pub wait_seconds: Option<f64>,
    /// At most this many leases in one answer (default: no limit; 0 counts as 1).
    #[serde(default)]
    pub max_leases: Option<u32>,
}

/// A job to start. The pod spec, services and ingresses are the submitted JSON text: the server
/// sends them as stored, without building a tree of each (under load an answer carries
/// thousands), and the agent reads what it needs.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseOrder {
    /// The run to start; later events and kill orders name it.
    pub run_id: RunId,
    /// The run's job.
    pub job_id: JobId,
    /// The job's queue.
    pub queue: QueueName,
    /// The job's job set.
    pub job_set: JobSetName,
    /// The node of this executor to start the run on.
    pub node: NodeName,
    /// The job's priority class.
    pub priority_class: PriorityClassName,
    /// The Kubernetes PodSpec as submitted.
    #[schema(value_type = Object)]
    pub pod_spec: Box<serde_json::value::RawValue>,
    /// Kubernetes Service objects as submitted.
    #[schema(value_type = Vec<Object>)]
    pub services: Vec<Box<serde_json::value::RawValue>>,
    /// Kubernetes Ingress objects as submitted.
    #[schema(value_type = Vec<Object>)]
    pub ingresses: Vec<Box<serde_json::value::RawValue>>,
    /// The job's annotations, as submitted.
    pub annotations: BTreeMap<String, String>,
    /// The job's labels, as submitted.
    pub labels: BTreeMap<String, String>,
    /// Seconds between SIGTERM (or pod delete) and SIGKILL when the run is stopped: the pod spec's
    /// `terminationGracePeriodSeconds`, at least 1.
    pub termination_grace_period_seconds: f64,
    /// Longest the run may last, in seconds: the pod spec's `activeDeadlineSeconds`, or the
    /// server's default for CPU or GPU jobs. 0: no deadline.
    pub active_deadline_seconds: u64,
    /// Kubernetes namespace of the job's pod, services and ingresses; absent: the agent's
    /// configured one. Runtimes without Kubernetes ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<super::Namespace>,
    /// The principal that submitted the job (absent for jobs submitted before servers recorded
    /// it): the process runtime's `run_as = "principal"` runs the job as this Unix user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How much of the run's output to ship when it ends, in bytes (the server's
    /// `finished_output_tail`); absent: 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail_bytes: Option<u64>,
}

impl LeaseOrder {
    /// The pod spec as a JSON tree; an error names what is wrong with it.
    pub fn pod_spec_value(&self) -> Result<serde_json::Value, String> {
        serde_json::from_str(self.pod_spec.get()).map_err(|e| format!("pod spec: {e}"))
    }
}

/// JSON text of a value (a JSON tree always has one).
pub fn raw_json(v: &serde_json::Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).unwrap_or_else(|_| raw_null())
}

/// JSON's `null` as text.
pub fn raw_null() -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::NULL.to_owned()
}

#[cfg(test)]
impl LeaseOrder {
    /// A lease of `pod_spec` for unit tests: run (1, 1) of job (1, 2), queue `q`, job set `s`,
    /// node `n`, class `default`, a 1 s grace period, nothing else.
    pub(crate) fn sample(pod_spec: serde_json::Value) -> LeaseOrder {
        use crate::model::{JobId, JobSetName, NodeName, PriorityClassName, QueueName, RunId};
        LeaseOrder {
            run_id: RunId::from_parts(1, 1),
            job_id: JobId::from_parts(1, 2),
            queue: QueueName::new("q").expect("name"),
            job_set: JobSetName::new("s").expect("name"),
            node: NodeName::new("n").expect("name"),
            priority_class: PriorityClassName::new("default").expect("name"),
            pod_spec: raw_json(&pod_spec),
            services: vec![],
            ingresses: vec![],
            annotations: Default::default(),
            labels: Default::default(),
            termination_grace_period_seconds: 1.0,
            active_deadline_seconds: 0,
            namespace: None,
            owner: None,
            output_tail_bytes: None,
        }
    }
}

/// A run to stop: SIGTERM (or pod delete) with the grace period, then SIGKILL (forced delete).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KillOrder {
    /// The run to stop.
    pub run_id: RunId,
    /// The run's job (for a run the server does not know, as the agent reported it).
    pub job_id: Option<JobId>,
    /// Seconds between SIGTERM (or pod delete) and SIGKILL: the job's grace period, or 5 for a
    /// run the server does not know.
    pub grace_period_seconds: f64,
    /// Why: the cancel or preemption reason, or that the server does not know the run.
    pub reason: String,
}

/// Answer to a lease poll.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseResponse {
    /// Runs to start: those leased to this executor, not yet reported by it, and not listed as held.
    pub leases: Vec<LeaseOrder>,
    /// Runs to stop.
    pub kills: Vec<KillOrder>,
    /// Output someone is following: the agent sends what it has of each from the offset asked
    /// (`POST /v1/executors/{executor}/output`). Agents that do not know it ignore it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<OutputWanted>,
}

/// The line that starts standard error in a run's shipped `log_tail` (standard output comes
/// first).
pub const STDERR_MARKER: &str = "--- stderr ---\n";

/// One of a run's output streams. Runtimes that keep one log (Kubernetes) have `stdout` only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output (a pod's log).
    #[default]
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    /// The stream's name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Output of a run the server wants from its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutputWanted {
    /// The run.
    pub run_id: RunId,
    /// Which stream.
    pub stream: OutputStream,
    /// Byte offset to send from; absent: the last lines (up to 64 KiB before the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
}

/// A piece of a run's output, as its agent read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputChunk {
    /// The run.
    pub run_id: RunId,
    /// Which stream.
    pub stream: OutputStream,
    /// Byte offset in the stream where `data` starts.
    pub from: u64,
    /// Byte offset where it ends (`data` is the bytes between, as UTF-8 with invalid sequences
    /// replaced, so its length may differ).
    pub to: u64,
    /// The text.
    pub data: String,
    /// The run is over: the stream will not grow.
    #[serde(default)]
    pub done: bool,
    /// Why the agent has no output of this run (the runtime keeps none, the run is unknown);
    /// then `data` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// `POST /v1/executors/{executor}/output`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputReport {
    /// Pieces of output, each of a run of this executor.
    pub chunks: Vec<OutputChunk>,
}

/// Answer to `GET /v1/jobs/{id}/output`: a piece of the job's latest run's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutputPage {
    /// The run the output is of (absent: the job never ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Which stream.
    pub stream: OutputStream,
    /// Byte offset where `data` starts.
    pub from: u64,
    /// Ask again from here for what follows; absent when nothing came and no `from` was given
    /// (ask again the same way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// The text.
    pub data: String,
    /// No more output will come: the run is over and everything kept was sent (or the job
    /// ended without running).
    pub done: bool,
    /// The run has ended: its output no longer grows, and reading on from `next` until `done`
    /// gives the whole of it (while its agent keeps it).
    #[serde(default)]
    pub run_over: bool,
    /// What people should know about this answer: the output is only the last lines the run
    /// shipped when it ended, the agent keeps none, the job has not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What happened to a run, as an agent reports it: `pending`, `running`, then `succeeded`, `failed`
/// or `returned` (never started, for a reason of the node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunEventKind {
    /// Accepted by the runtime, not started yet (pod created, image pulling).
    Pending,
    /// The job's process or containers run.
    Running,
    /// Exited 0.
    Succeeded,
    /// Exited non-zero, exceeded its deadline, or was killed.
    Failed,
    /// Never started for a reason of the node (unschedulable pod, node gone): the job goes back
    /// to the queue with a new run.
    Returned,
}

/// One run event from an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunEventReport {
    /// The run, as its lease named it.
    pub run_id: RunId,
    /// The run's job; an event naming another job than the run's is ignored.
    pub job_id: JobId,
    /// What happened.
    pub kind: RunEventKind,
    /// When it happened on the agent (ms since the epoch). Kept in the log only: the times the API
    /// shows are the server's.
    #[serde(default)]
    pub time_ms: Option<i64>,
    /// Exit code of the job's process or main container, when it exited.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Short machine-friendly cause ("deadline exceeded", "image pull error", "killed").
    #[serde(default)]
    pub reason: Option<String>,
    /// Details for people: an error text, the stop order's reason, a container's message.
    #[serde(default)]
    pub message: Option<String>,
    /// Last lines of output (at most 64 KiB), with the final event.
    #[serde(default)]
    pub log_tail: Option<String>,
    /// With `failed` or `returned`: the run ended because of its node, not the job (it counts
    /// toward the node's quarantine). Absent: a `failed` run is the job's own failure, and a
    /// `returned` one (which agents that do not send this field report) counts as
    /// `not_started`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_fault: Option<crate::model::NodeFault>,
    /// The Kubernetes pod the run became (with `pending` and `running`, by the Kubernetes
    /// runtime; absent for runtimes without pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<super::RunPod>,
    /// What the run used, with its final event (processes; absent where the runtime cannot
    /// tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::RunUsage>,
}

/// `POST /v1/executors/{executor}/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsRequest {
    /// Run events, in the order they happened.
    pub events: Vec<RunEventReport>,
}

/// Answer to an events report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventsResponse {
    /// How many events named (with its job) a run of this executor that is not over; the others
    /// were ignored.
    pub accepted: u32,
}

/// Body of every error answer (`application/problem+json`, RFC 9457).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// URI of the problem type: `https://convoy.dev/problems/<status>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The HTTP status's reason phrase, e.g. `Not Found`.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong, for people.
    pub detail: String,
    /// The offending field, e.g. `jobs[3].pod_spec.containers[0].resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Id of the request, as in the `x-request-id` header of the answer: quote it when reporting
    /// a problem, the server's log carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Answer of `GET /v1/cluster`: this server's view of the Raft cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// This server's Raft node id.
    pub id: u64,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    /// True if this server leads and a majority acknowledged it recently: only such a leader
    /// takes writes, hands out leases and schedules.
    pub serving: bool,
    /// The current Raft term.
    pub term: u64,
    /// The leader's node id, if one is known.
    pub leader: Option<u64>,
    /// The leader's address, if one is known.
    pub leader_addr: Option<String>,
    /// Index of the last entry in this server's log.
    pub last_log_index: Option<u64>,
    /// Index of the last entry this server applied.
    pub last_applied: Option<u64>,
    /// Index of the last entry its latest snapshot covers.
    pub snapshot_index: Option<u64>,
    /// Index of the last entry purged from its log (covered by a snapshot).
    pub purged_index: Option<u64>,
    /// On the leader: milliseconds since a majority last acknowledged it.
    pub millis_since_quorum_ack: Option<u64>,
    /// Leader changes this server saw since it started.
    pub leader_changes: u64,
    /// Snapshots this server installed since it started: each time it caught up with a leader
    /// whose log no longer held what it lacked.
    #[serde(default)]
    pub snapshots_installed: u64,
    /// Voters and learners. Replication progress (`matched_index`, `lag`) is known by the
    /// leader only.
    pub members: Vec<ClusterMember>,
}

/// Answer of `GET /v1/cluster/digest`: the digest of this server's replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClusterDigest {
    /// This server's Raft node id.
    pub node_id: u64,
    /// Index of the last log entry the digested state includes (0 before any).
    pub applied_index: u64,
    /// SHA-256 of the replicated state at that index, in lower-case hex.
    #[schema(examples("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"))]
    pub digest: String,
    /// Rows hashed (events one by one).
    pub rows: u64,
}

/// One member of the Raft cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClusterMember {
    /// Raft node id.
    pub id: u64,
    /// Address its peers reach it at.
    pub addr: String,
    /// False for learners (members that receive the log but do not vote).
    pub voter: bool,
    /// On the leader: the last log index known to be replicated to this member.
    pub matched_index: Option<u64>,
    /// On the leader: how many entries this member is behind the leader's log.
    pub lag: Option<u64>,
}

/// `POST /v1/cluster/members`: a server to add to the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemberRequest {
    /// Its node id (`server.node_id` in its configuration), unique in the cluster.
    pub id: u64,
    /// Its address as the other servers reach it (its `server.advertise`), e.g.
    /// `https://convoy-4.example.org:8080`.
    pub addr: String,
}

/// Answer of a membership change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MembershipChange {
    /// `voter` once the member votes, `catching_up` while it is a learner still receiving the
    /// log (it is promoted by the leader once caught up), `removed` after a removal.
    pub outcome: String,
    /// The cluster after the change, as the leader sees it.
    pub cluster: ClusterStatus,
}

/// Answer of `GET /v1/cluster/nodes`: the nodes of the known executors, and nodes of executors
/// that went away while quarantined, by executor and name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeList {
    /// The nodes.
    pub nodes: Vec<NodeView>,
}

/// A node as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeView {
    /// The executor that reports it.
    pub executor: ExecutorName,
    /// Node name.
    pub name: NodeName,
    /// Pool of the node; absent for a node its executor does not report (any more).
    pub pool: Option<PoolName>,
    /// Reported by a live executor. False for a node kept only for its quarantine (its executor
    /// went away; the quarantine holds if it comes back).
    pub reported: bool,
    /// Cordoned: no new jobs are placed here; running ones stay.
    pub unschedulable: bool,
    /// Everything the node offers.
    pub allocatable: Resources,
    /// Jobs holding resources on the node (leased, pending or running).
    pub jobs: u64,
    /// Failures of the node (of the node's own making, see `NodeFault`) counted toward its next
    /// quarantine: those within `quarantine.window`. 0 when quarantine is off.
    pub recent_failures: u32,
    /// The quarantine in force: no new jobs are placed here until it ends or an admin lifts it.
    pub quarantine: Option<QuarantineView>,
    /// The reservation holding the node, as the leader's latest cycle left it
    /// (`gang_reservation_after`): no other new job starts here until its job fits, except jobs
    /// whose deadline ends before its expected start. Absent when the node is not reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_for: Option<NodeReservationView>,
}

/// The reservation holding a node, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeReservationView {
    /// The job the node is reserved for (a gang's first member).
    #[schema(value_type = String)]
    pub job_id: JobId,
    /// Its gang, for a gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
    /// Its queue.
    pub queue: QueueName,
    /// When it is expected to fit (RFC 3339), if the running jobs' deadlines say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub expected_start: Option<String>,
    /// Since when it has waited (RFC 3339).
    #[schema(format = DateTime)]
    pub waiting_since: String,
}

/// A node's quarantine as the API shows it. Times are the leader's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuarantineView {
    /// When it began.
    #[schema(format = DateTime)]
    pub since: String,
    /// When it ends.
    #[schema(format = DateTime)]
    pub until: String,
    /// Why: the failures of the node that led to it.
    pub reason: String,
}
