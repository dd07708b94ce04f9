//! Stored jobs: the `jobs` rows (a job with its runs), the `payloads` rows (what the agent needs
//! to start it), and the parts the log's submit command shares with them.

use super::placement::{NodeAffinityRecord, TolerationRecord};
use crate::model::{
    ExecutorName, GangSpec, Job, JobId, JobPayload, JobSetName, JobState, KillRequest, Namespace, NodeName, PoolName,
    PriorityClassName, QueueName, Requirements, ResourceName, Resources, Run, RunId, RunPod, RunState,
    SchedulingRequirements,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Resource amounts by name (cpu in millicores, memory in bytes, others in milli-units).
pub(super) type QuantitiesRecord = BTreeMap<ResourceName, i64>;

/// What a job needs from a node. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequirementsRecord {
    /// Effective requests.
    pub requests: QuantitiesRecord,
    /// Labels a node must carry.
    pub node_selector: BTreeMap<String, String>,
    /// Taints the job tolerates.
    pub tolerations: Vec<TolerationRecord>,
    /// Required node affinity.
    pub node_affinity: Option<NodeAffinityRecord>,
}

impl From<SchedulingRequirements> for RequirementsRecord {
    fn from(r: SchedulingRequirements) -> Self {
        let SchedulingRequirements { requests, node_selector, tolerations, node_affinity } = r;
        RequirementsRecord {
            requests: requests.into_map(),
            node_selector,
            tolerations: tolerations.into_iter().map(Into::into).collect(),
            node_affinity: node_affinity.map(Into::into),
        }
    }
}

impl From<RequirementsRecord> for SchedulingRequirements {
    fn from(r: RequirementsRecord) -> Self {
        let RequirementsRecord { requests, node_selector, tolerations, node_affinity } = r;
        SchedulingRequirements {
            requests: Resources::from_map(requests),
            node_selector,
            tolerations: tolerations.into_iter().map(Into::into).collect(),
            node_affinity: node_affinity.map(Into::into),
        }
    }
}

/// A job's gang membership. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangRecord {
    /// Gang id, unique within the queue.
    pub id: String,
    /// Number of members.
    pub cardinality: u32,
    /// Fewest members that may be placed.
    pub min_cardinality: u32,
    /// Label whose value all members' nodes share.
    pub node_uniformity_label: Option<String>,
}

impl From<GangSpec> for GangRecord {
    fn from(g: GangSpec) -> Self {
        let GangSpec { id, cardinality, min_cardinality, node_uniformity_label } = g;
        GangRecord { id, cardinality, min_cardinality, node_uniformity_label }
    }
}

impl From<GangRecord> for GangSpec {
    fn from(g: GangRecord) -> Self {
        let GangRecord { id, cardinality, min_cardinality, node_uniformity_label } = g;
        GangSpec { id, cardinality, min_cardinality, node_uniformity_label }
    }
}

/// Where a job is in its life. Format: state schema 2, log format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The variants are `model::JobState`'s.
pub enum JobStateRecord {
    Queued,
    Leased,
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Preempted,
}

impl From<JobState> for JobStateRecord {
    fn from(s: JobState) -> Self {
        match s {
            JobState::Queued => Self::Queued,
            JobState::Leased => Self::Leased,
            JobState::Pending => Self::Pending,
            JobState::Running => Self::Running,
            JobState::Succeeded => Self::Succeeded,
            JobState::Failed => Self::Failed,
            JobState::Cancelled => Self::Cancelled,
            JobState::Preempted => Self::Preempted,
        }
    }
}

impl From<JobStateRecord> for JobState {
    fn from(s: JobStateRecord) -> Self {
        match s {
            JobStateRecord::Queued => Self::Queued,
            JobStateRecord::Leased => Self::Leased,
            JobStateRecord::Pending => Self::Pending,
            JobStateRecord::Running => Self::Running,
            JobStateRecord::Succeeded => Self::Succeeded,
            JobStateRecord::Failed => Self::Failed,
            JobStateRecord::Cancelled => Self::Cancelled,
            JobStateRecord::Preempted => Self::Preempted,
        }
    }
}

/// Where a run is. Format: state schema 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The variants are `model::RunState`'s.
pub enum RunStateRecord {
    Leased,
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Preempted,
    Lost,
}

impl From<RunState> for RunStateRecord {
    fn from(s: RunState) -> Self {
        match s {
            RunState::Leased => Self::Leased,
            RunState::Pending => Self::Pending,
            RunState::Running => Self::Running,
            RunState::Succeeded => Self::Succeeded,
            RunState::Failed => Self::Failed,
            RunState::Cancelled => Self::Cancelled,
            RunState::Preempted => Self::Preempted,
            RunState::Lost => Self::Lost,
        }
    }
}

impl From<RunStateRecord> for RunState {
    fn from(s: RunStateRecord) -> Self {
        match s {
            RunStateRecord::Leased => Self::Leased,
            RunStateRecord::Pending => Self::Pending,
            RunStateRecord::Running => Self::Running,
            RunStateRecord::Succeeded => Self::Succeeded,
            RunStateRecord::Failed => Self::Failed,
            RunStateRecord::Cancelled => Self::Cancelled,
            RunStateRecord::Preempted => Self::Preempted,
            RunStateRecord::Lost => Self::Lost,
        }
    }
}

/// An order to stop a run. Format: state schema 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillRecord {
    /// When it was ordered (ms since the epoch).
    pub at_ms: i64,
    /// Grace period between SIGTERM and SIGKILL.
    pub grace_period_ms: u64,
    /// Why.
    pub reason: String,
}

/// The Kubernetes pod a run became. Format: state schema 7, log format 7.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    /// The pod's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its uid.
    pub uid: String,
}

impl From<RunPod> for PodRecord {
    fn from(p: RunPod) -> Self {
        let RunPod { name, namespace, uid } = p;
        PodRecord { name, namespace, uid }
    }
}

impl From<PodRecord> for RunPod {
    fn from(p: PodRecord) -> Self {
        let PodRecord { name, namespace, uid } = p;
        RunPod { name, namespace, uid }
    }
}

/// One attempt to run a job. Format: state schema 7 (schemas 2 to 6 had no `pod`: migration 7
/// converts them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub run_id: RunId,
    /// Executor holding the run.
    pub executor: ExecutorName,
    /// Node within the executor.
    pub node: NodeName,
    /// Pool of the node.
    pub pool: PoolName,
    /// Where the run is.
    pub state: RunStateRecord,
    /// Times (ms since the epoch) it reached each state.
    pub leased_at_ms: i64,
    /// See `leased_at_ms`.
    pub pending_at_ms: Option<i64>,
    /// See `leased_at_ms`.
    pub running_at_ms: Option<i64>,
    /// See `leased_at_ms`.
    pub finished_at_ms: Option<i64>,
    /// Exit code of the job's process or main container.
    pub exit_code: Option<i32>,
    /// Short cause of the end.
    pub reason: Option<String>,
    /// Longer explanation.
    pub message: Option<String>,
    /// Pending stop order.
    pub kill: Option<KillRecord>,
    /// Last lines of output.
    pub log_tail: Option<String>,
    /// The pod the run became, as its agent reported it.
    pub pod: Option<PodRecord>,
}

impl From<Run> for RunRecord {
    fn from(r: Run) -> Self {
        let Run {
            run_id,
            executor,
            node,
            pool,
            state,
            leased_at_ms,
            pending_at_ms,
            running_at_ms,
            finished_at_ms,
            exit_code,
            reason,
            message,
            kill,
            log_tail,
            pod,
        } = r;
        RunRecord {
            run_id,
            executor,
            node,
            pool,
            state: state.into(),
            leased_at_ms,
            pending_at_ms,
            running_at_ms,
            finished_at_ms,
            exit_code,
            reason,
            message,
            kill: kill.map(|KillRequest { at_ms, grace_period_ms, reason }| KillRecord {
                at_ms,
                grace_period_ms,
                reason,
            }),
            log_tail,
            pod: pod.map(Into::into),
        }
    }
}

impl From<RunRecord> for Run {
    fn from(r: RunRecord) -> Self {
        let RunRecord {
            run_id,
            executor,
            node,
            pool,
            state,
            leased_at_ms,
            pending_at_ms,
            running_at_ms,
            finished_at_ms,
            exit_code,
            reason,
            message,
            kill,
            log_tail,
            pod,
        } = r;
        Run {
            run_id,
            executor,
            node,
            pool,
            state: state.into(),
            leased_at_ms,
            pending_at_ms,
            running_at_ms,
            finished_at_ms,
            exit_code,
            reason,
            message,
            kill: kill.map(|KillRecord { at_ms, grace_period_ms, reason }| KillRequest {
                at_ms,
                grace_period_ms,
                reason,
            }),
            log_tail,
            pod: pod.map(Into::into),
        }
    }
}

/// A job with its runs (`jobs` rows). Format: state schema 7 (schemas 2 to 6 had no
/// `namespace`, and runs without `pod`: migration 7 converts them). A job's dependencies and
/// retry policy are not here but in its `job_policies` row (schema 11): reading a job back from
/// this record alone leaves them out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: QueueName,
    /// Its job set.
    pub job_set: JobSetName,
    /// Priority within the queue (lower first).
    pub priority: u32,
    /// Priority class.
    pub priority_class: PriorityClassName,
    /// Global submission sequence number.
    pub submit_seq: u64,
    /// Submission time (ms since the epoch, the leader's clock).
    pub submitted_at_ms: i64,
    /// Idempotency key within the queue.
    pub client_id: Option<String>,
    /// Annotations as submitted.
    pub annotations: BTreeMap<String, String>,
    /// Labels as submitted.
    pub labels: BTreeMap<String, String>,
    /// What the job needs from a node.
    pub requirements: RequirementsRecord,
    /// Gang membership.
    pub gang: Option<GangRecord>,
    /// Grace period between SIGTERM and SIGKILL.
    pub termination_grace_period_ms: u64,
    /// Longest the job may run.
    pub active_deadline_seconds: u64,
    /// Where the job is.
    pub state: JobStateRecord,
    /// Why it ended, if it did.
    pub state_reason: Option<String>,
    /// Its runs, oldest first.
    pub runs: Vec<RunRecord>,
    /// Sequence numbers of its events in its job set's stream.
    pub event_seqs: Vec<u64>,
    /// Kubernetes namespace of its pod; none: its agent's.
    pub namespace: Option<Namespace>,
}

impl From<Job> for JobRecord {
    fn from(j: Job) -> Self {
        let Job {
            id,
            queue,
            job_set,
            priority,
            priority_class,
            submit_seq,
            submitted_at_ms,
            client_id,
            annotations,
            labels,
            requirements,
            gang,
            termination_grace_period_ms,
            active_deadline_seconds,
            state,
            state_reason,
            runs,
            event_seqs,
            namespace,
            policies: _,
        } = j;
        JobRecord {
            id,
            queue,
            job_set,
            priority,
            priority_class,
            submit_seq,
            submitted_at_ms,
            client_id,
            annotations,
            labels,
            requirements: SchedulingRequirements::clone(&requirements).into(),
            gang: gang.map(|g| GangSpec::clone(&g).into()),
            termination_grace_period_ms,
            active_deadline_seconds,
            state: state.into(),
            state_reason,
            runs: runs.into_iter().map(Into::into).collect(),
            event_seqs: event_seqs.into_vec(),
            namespace,
        }
    }
}

impl From<JobRecord> for Job {
    fn from(j: JobRecord) -> Self {
        let JobRecord {
            id,
            queue,
            job_set,
            priority,
            priority_class,
            submit_seq,
            submitted_at_ms,
            client_id,
            annotations,
            labels,
            requirements,
            gang,
            termination_grace_period_ms,
            active_deadline_seconds,
            state,
            state_reason,
            runs,
            event_seqs,
            namespace,
        } = j;
        Job {
            id,
            queue,
            job_set,
            priority,
            priority_class,
            submit_seq,
            submitted_at_ms,
            client_id,
            annotations,
            labels,
            requirements: Requirements::new(requirements.into()),
            gang: gang.map(|g| Arc::new(g.into())),
            termination_grace_period_ms,
            active_deadline_seconds,
            state: state.into(),
            state_reason,
            runs: runs.into_iter().map(Into::into).collect(),
            event_seqs: event_seqs.into(),
            namespace,
            policies: None,
        }
    }
}

/// What the agent needs to start a job (`payloads` rows, and part of the submit command).
/// Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadRecord {
    /// Kubernetes PodSpec, as JSON text.
    pub pod_spec: String,
    /// Kubernetes Service objects, as JSON text.
    pub services: Vec<String>,
    /// Kubernetes Ingress objects, as JSON text.
    pub ingresses: Vec<String>,
}

impl From<JobPayload> for PayloadRecord {
    fn from(p: JobPayload) -> Self {
        let JobPayload { pod_spec, services, ingresses } = p;
        PayloadRecord { pod_spec, services, ingresses }
    }
}

impl From<PayloadRecord> for JobPayload {
    fn from(p: PayloadRecord) -> Self {
        let PayloadRecord { pod_spec, services, ingresses } = p;
        JobPayload { pod_spec, services, ingresses }
    }
}
