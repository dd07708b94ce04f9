//! Stored dependencies and retry policies: the `job_policies` rows (state schema 11) and what the
//! log's submit command carries of them (log format 11).

use super::job::JobStateRecord;
use crate::model::{Dependency, DependencyCondition, JobId, JobPolicies, RetryPolicy};
use serde::{Deserialize, Serialize};

/// The outcome a dependent waits for. Format: state schema 11, log format 11.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The variants are `model::DependencyCondition`'s.
pub enum DependencyConditionRecord {
    Succeeded,
    Failed,
    Ended,
}

impl From<DependencyCondition> for DependencyConditionRecord {
    fn from(c: DependencyCondition) -> Self {
        match c {
            DependencyCondition::Succeeded => Self::Succeeded,
            DependencyCondition::Failed => Self::Failed,
            DependencyCondition::Ended => Self::Ended,
        }
    }
}

impl From<DependencyConditionRecord> for DependencyCondition {
    fn from(c: DependencyConditionRecord) -> Self {
        match c {
            DependencyConditionRecord::Succeeded => Self::Succeeded,
            DependencyConditionRecord::Failed => Self::Failed,
            DependencyConditionRecord::Ended => Self::Ended,
        }
    }
}

/// A stored dependency with whether it is met. Format: state schema 11.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyRecord {
    /// The job waited for.
    pub job_id: JobId,
    /// The outcome waited for.
    pub on: DependencyConditionRecord,
    /// Whether it came.
    pub met: bool,
}

/// A retry policy. Format: state schema 11, log format 11.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRecord {
    /// Most failed runs, the first included.
    pub max_attempts: u32,
    /// Exit codes retried.
    pub on_exit_codes: Vec<i32>,
    /// Retry OOM kills.
    pub on_oom: bool,
    /// Retry failures of the node.
    pub on_node_failure: bool,
    /// First back-off, in ms (doubled per later attempt).
    pub backoff_ms: u64,
}

impl From<RetryPolicy> for RetryRecord {
    fn from(r: RetryPolicy) -> Self {
        let RetryPolicy { max_attempts, on_exit_codes, on_oom, on_node_failure, backoff_ms } = r;
        RetryRecord { max_attempts, on_exit_codes, on_oom, on_node_failure, backoff_ms }
    }
}

impl From<RetryRecord> for RetryPolicy {
    fn from(r: RetryRecord) -> Self {
        let RetryRecord { max_attempts, on_exit_codes, on_oom, on_node_failure, backoff_ms } = r;
        RetryPolicy { max_attempts, on_exit_codes, on_oom, on_node_failure, backoff_ms }
    }
}

/// A job's dependencies and retry policy with their progress (`job_policies` rows, kept beside
/// the `jobs` rows so that no `jobs` row changes). Format: state schema 11.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPoliciesRecord {
    /// The jobs waited for.
    pub depends_on: Vec<DependencyRecord>,
    /// When failed runs are retried.
    pub retry: Option<RetryRecord>,
    /// Back-off: not scheduled before this time (ms since the epoch).
    pub not_before_ms: Option<i64>,
}

impl From<JobPolicies> for JobPoliciesRecord {
    fn from(p: JobPolicies) -> Self {
        let JobPolicies { depends_on, retry, not_before_ms } = p;
        JobPoliciesRecord {
            depends_on: depends_on
                .into_iter()
                .map(|Dependency { job_id, on, met }| DependencyRecord { job_id, on: on.into(), met })
                .collect(),
            retry: retry.map(Into::into),
            not_before_ms,
        }
    }
}

impl From<JobPoliciesRecord> for JobPolicies {
    fn from(p: JobPoliciesRecord) -> Self {
        let JobPoliciesRecord { depends_on, retry, not_before_ms } = p;
        JobPolicies {
            depends_on: depends_on
                .into_iter()
                .map(|DependencyRecord { job_id, on, met }| Dependency { job_id, on: on.into(), met })
                .collect(),
            retry: retry.map(Into::into),
            not_before_ms,
        }
    }
}

/// A dependency as the leader proposes it. Format: log format 11.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitDependencyRecord {
    /// The job waited for: an earlier job of the same command, or a stored one.
    pub job_id: JobId,
    /// The outcome waited for.
    pub on: DependencyConditionRecord,
    /// How the job waited for had ended when the leader read it (it was no longer live): applying
    /// reads only memory, and an ended job never changes again, so the leader passes it along.
    pub ended: Option<JobStateRecord>,
}

/// A submitted job's dependencies and retry policy. Format: log format 11.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubmitPoliciesRecord {
    /// The jobs waited for.
    pub depends_on: Vec<SubmitDependencyRecord>,
    /// When failed runs are retried.
    pub retry: Option<RetryRecord>,
}

impl SubmitPoliciesRecord {
    /// True when the job has neither.
    pub fn is_empty(&self) -> bool {
        self.depends_on.is_empty() && self.retry.is_none()
    }
}
