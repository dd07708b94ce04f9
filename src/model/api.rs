//! The HTTP contract (DESIGN.md §6) as plain types: request and response bodies of the public API
//! and of the executor API. The server, the agent and the CLI all speak through these.

use super::job::{EventKind, JobState, RunState};
use super::names::{JobId, JobSetName, NodeName, PoolName, PriorityClassName, QueueName, RunId};
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
    pub queue: QueueName,
    pub job_set: JobSetName,
    pub jobs: Vec<SubmitItem>,
}

/// One job of a submission. The pod spec, services and ingresses are kept as the client's JSON
/// text: checked once, stored as sent.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitItem {
    /// Lower runs first within the queue.
    #[serde(default)]
    pub priority: u32,
    /// Defaults to the configured default class.
    #[serde(default)]
    pub priority_class: Option<String>,
    /// A Kubernetes PodSpec.
    #[schema(value_type = Object)]
    pub pod_spec: Box<serde_json::value::RawValue>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Kubernetes Service objects to create with the pod.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub services: Vec<Box<serde_json::value::RawValue>>,
    /// Kubernetes Ingress objects to create with the pod.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub ingresses: Vec<Box<serde_json::value::RawValue>>,
    /// Resubmitting with the same client id (within the queue) returns the same job id.
    #[serde(default)]
    pub client_id: Option<String>,
}

/// Answer to a submission: one id per submitted job, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubmitResponse {
    pub job_ids: Vec<JobId>,
}

/// `POST /v1/jobs/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub queue: QueueName,
    pub job_set: JobSetName,
    /// Only these jobs (default: the whole job set).
    #[serde(default)]
    pub job_ids: Option<Vec<JobId>>,
    /// Only jobs in these states (default: every non-terminal state).
    #[serde(default)]
    pub states: Option<Vec<JobState>>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Jobs a cancel, reprioritize or preempt request changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobIdsResponse {
    pub job_ids: Vec<JobId>,
}

/// `POST /v1/jobs/reprioritize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReprioritizeRequest {
    pub queue: QueueName,
    pub job_set: JobSetName,
    #[serde(default)]
    pub job_ids: Option<Vec<JobId>>,
    pub priority: u32,
}

/// `POST /v1/jobs/preempt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreemptRequest {
    pub queue: QueueName,
    pub job_set: JobSetName,
    pub job_ids: Vec<JobId>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A run as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunView {
    pub run_id: RunId,
    pub executor: String,
    pub node: NodeName,
    pub pool: PoolName,
    pub state: RunState,
    #[schema(format = DateTime)]
    pub leased_at: String,
    #[schema(format = DateTime)]
    pub pending_at: Option<String>,
    #[schema(format = DateTime)]
    pub running_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: JobId,
    pub queue: QueueName,
    pub job_set: JobSetName,
    pub state: JobState,
    pub priority: u32,
    pub priority_class: PriorityClassName,
    #[schema(format = DateTime)]
    pub submitted_at: String,
    pub requests: Resources,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub client_id: Option<String>,
    /// Why the job waits (the scheduler's latest reason) or why it ended.
    pub reason: Option<String>,
    pub runs: Vec<RunView>,
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
    pub jobs: Vec<JobView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<JobId>,
}

/// One event as the API and the event stream show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventView {
    pub seq: u64,
    pub job_id: JobId,
    #[schema(format = DateTime)]
    pub at: String,
    pub kind: EventKind,
    pub run_id: Option<RunId>,
    pub message: Option<String>,
}

/// A queue's standing, per pool (`GET /v1/queues/{queue}/report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueReport {
    pub queue: QueueName,
    pub weight: f64,
    pub pools: Vec<QueuePoolReport>,
    /// Jobs per state.
    pub jobs: BTreeMap<JobState, u64>,
}

/// A queue's standing in one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueuePoolReport {
    pub pool: PoolName,
    pub fair_share: f64,
    pub adjusted_fair_share: f64,
    pub actual_share: f64,
    pub allocated: Resources,
    pub demand: Resources,
    pub pool_total: Resources,
}

// ---------------------------------------------------------------------------------------------
// Executor API
// ---------------------------------------------------------------------------------------------

/// A node as an agent reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeReport {
    pub name: NodeName,
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, String>)]
    pub labels: Labels,
    #[serde(default)]
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Resources used by things Convoy did not start.
    #[serde(default)]
    pub unallocatable: Resources,
    #[serde(default)]
    pub unschedulable: bool,
}

/// A run an agent holds, with its state as the agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeldRun {
    pub run_id: RunId,
    pub job_id: JobId,
    pub state: RunState,
}

/// `POST /v1/executors/{executor}/lease`: the agent's inventory and runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    pub nodes: Vec<NodeReport>,
    #[serde(default)]
    pub runs: Vec<HeldRun>,
    /// Longest the server may hold the request open, in seconds (default 30, at most 60).
    #[serde(default)]
    pub wait_seconds: Option<f64>,
    /// At most this many new leases in one answer.
    #[serde(default)]
    pub max_leases: Option<u32>,
}

/// A job to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseOrder {
    pub run_id: RunId,
    pub job_id: JobId,
    pub queue: QueueName,
    pub job_set: JobSetName,
    pub node: NodeName,
    pub priority_class: PriorityClassName,
    /// The Kubernetes PodSpec as submitted.
    #[schema(value_type = Object)]
    pub pod_spec: serde_json::Value,
    /// Kubernetes Service objects as submitted.
    #[schema(value_type = Vec<Object>)]
    pub services: Vec<serde_json::Value>,
    /// Kubernetes Ingress objects as submitted.
    #[schema(value_type = Vec<Object>)]
    pub ingresses: Vec<serde_json::Value>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub termination_grace_period_seconds: f64,
    pub active_deadline_seconds: u64,
}

/// A run to stop: SIGTERM (or pod delete) with the grace period, then SIGKILL (forced delete).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KillOrder {
    pub run_id: RunId,
    pub job_id: Option<JobId>,
    pub grace_period_seconds: f64,
    pub reason: String,
}

/// Answer to a lease poll.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseResponse {
    pub leases: Vec<LeaseOrder>,
    pub kills: Vec<KillOrder>,
}

/// What happened to a run, as an agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunEventKind {
    /// Accepted by the runtime, not started yet (pod created, image pulling).
    Pending,
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
    pub run_id: RunId,
    pub job_id: JobId,
    pub kind: RunEventKind,
    /// When it happened on the agent (ms since the epoch); the server records its own time too.
    #[serde(default)]
    pub time_ms: Option<i64>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Short machine-friendly cause ("deadline exceeded", "image pull error", "killed").
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// Last lines of output (at most 64 KiB), with the final event.
    #[serde(default)]
    pub log_tail: Option<String>,
}

/// `POST /v1/executors/{executor}/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsRequest {
    pub events: Vec<RunEventReport>,
}

/// Answer to an events report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventsResponse {
    pub accepted: u32,
}

/// Body of every error answer (`application/problem+json`, RFC 9457).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// The offending field, e.g. `jobs[3].pod_spec.containers[0].resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
