//! The stored queue (`queues` rows, and the queue commands of the log).

use super::job_policy::RetryRecord;
use crate::model::{
    PreemptionPolicy, PriorityClassName, PriorityPolicy, Queue, QueueName, ResourceName, Resources, SortPriority,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A queue's settings, but its place in the tree ([`QueueTreeRecord`], stored and carried
/// beside it). Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueRecord {
    /// The queue's name.
    pub name: QueueName,
    /// Share divisor (> 0).
    pub priority_factor: f64,
    /// Users who may submit and cancel.
    pub owners: Vec<String>,
    /// Groups whose members may submit and cancel.
    pub groups: Vec<String>,
    /// Largest fraction of a pool, per resource.
    pub resource_limits: BTreeMap<ResourceName, f64>,
    /// Largest fraction of a pool per priority class, per resource.
    pub resource_limits_by_priority_class: BTreeMap<PriorityClassName, BTreeMap<ResourceName, f64>>,
    /// Refuses new submissions.
    pub cordoned: bool,
    /// Free-form labels.
    pub labels: BTreeMap<String, String>,
}

/// The settings part: the tree settings go into a [`QueueTreeRecord`] ([`QueueTreeRecord::of`]).
impl From<Queue> for QueueRecord {
    fn from(q: Queue) -> Self {
        let Queue {
            name,
            priority_factor,
            owners,
            groups,
            resource_limits,
            resource_limits_by_priority_class,
            cordoned,
            labels,
            parent: _,
            priority_offset: _,
            priority_policy: _,
            sort_priority: _,
            guaranteed: _,
            preemption_policy: _,
            retry: _,
        } = q;
        QueueRecord {
            name,
            priority_factor,
            owners,
            groups,
            resource_limits,
            resource_limits_by_priority_class,
            cordoned,
            labels,
        }
    }
}

/// A top-level queue with default tree settings (see [`queue_in_tree`]).
impl From<QueueRecord> for Queue {
    fn from(r: QueueRecord) -> Self {
        let QueueRecord {
            name,
            priority_factor,
            owners,
            groups,
            resource_limits,
            resource_limits_by_priority_class,
            cordoned,
            labels,
        } = r;
        Queue {
            name,
            priority_factor,
            owners,
            groups,
            resource_limits,
            resource_limits_by_priority_class,
            cordoned,
            labels,
            parent: None,
            priority_offset: 0,
            priority_policy: PriorityPolicy::Default,
            sort_priority: SortPriority::Enabled,
            guaranteed: Resources::new(),
            preemption_policy: PreemptionPolicy::Default,
            retry: None,
        }
    }
}

/// A queue's place in the queue tree and its priority settings. Format: state schema 6 (in the
/// `queue_tree` meta row, [`QueueTreesRecord`]), log format 6 ([`super::CommandRecord::CreateQueueInTree`],
/// [`super::CommandRecord::UpdateQueueInTree`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueTreeRecord {
    /// The parent queue (none: a top-level queue).
    pub parent: Option<QueueName>,
    /// Added to the queue's priority among its siblings.
    pub priority_offset: i32,
    /// Whether the subtree's priorities are fenced in.
    pub priority_policy: PriorityPolicyRecord,
    /// Whether priorities order the queue's children.
    pub sort_priority: SortPriorityRecord,
}

/// [`crate::model::PriorityPolicy`]. Format: state schema 6, log format 6.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PriorityPolicyRecord {
    /// Priorities flow up.
    #[default]
    Default,
    /// Fenced in.
    Fence,
}

/// [`crate::model::SortPriority`]. Format: state schema 6, log format 6.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortPriorityRecord {
    /// Priorities order the children.
    #[default]
    Enabled,
    /// Fair share alone orders the children.
    Disabled,
}

/// The `queue_tree` meta row: the tree settings of every queue that has any (a queue absent from
/// it is a top-level queue with the default settings). Format: state schema 6.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueTreesRecord {
    /// By queue name.
    pub queues: BTreeMap<QueueName, QueueTreeRecord>,
}

impl QueueTreeRecord {
    /// The tree settings of a queue.
    pub fn of(q: &Queue) -> Self {
        QueueTreeRecord {
            parent: q.parent.clone(),
            priority_offset: q.priority_offset,
            priority_policy: match q.priority_policy {
                PriorityPolicy::Default => PriorityPolicyRecord::Default,
                PriorityPolicy::Fence => PriorityPolicyRecord::Fence,
            },
            sort_priority: match q.sort_priority {
                SortPriority::Enabled => SortPriorityRecord::Enabled,
                SortPriority::Disabled => SortPriorityRecord::Disabled,
            },
        }
    }

    /// Sets these tree settings on a queue.
    pub fn apply_to(self, q: &mut Queue) {
        let QueueTreeRecord { parent, priority_offset, priority_policy, sort_priority } = self;
        q.parent = parent;
        q.priority_offset = priority_offset;
        q.priority_policy = match priority_policy {
            PriorityPolicyRecord::Default => PriorityPolicy::Default,
            PriorityPolicyRecord::Fence => PriorityPolicy::Fence,
        };
        q.sort_priority = match sort_priority {
            SortPriorityRecord::Enabled => SortPriority::Enabled,
            SortPriorityRecord::Disabled => SortPriority::Disabled,
        };
    }
}

/// A queue with its tree settings, from the two records a command carries.
pub(crate) fn queue_in_tree(queue: QueueRecord, tree: QueueTreeRecord) -> Queue {
    let mut q = Queue::from(queue);
    tree.apply_to(&mut q);
    q
}

/// A queue's guarantee and preemption fence. Format: state schema 12 (in the `queue_policies`
/// meta row, [`QueuePoliciesByQueueRecord`]), log format 12
/// ([`super::CommandRecord::CreateQueueWithPolicies`],
/// [`super::CommandRecord::UpdateQueueWithPolicies`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuePoliciesRecord {
    /// Guaranteed resources (fixed-point amounts: cpu in millicores, memory in bytes, others in
    /// milli-units); empty: none.
    pub guaranteed: BTreeMap<ResourceName, i64>,
    /// Whether the subtree may urgency-preempt outside it.
    pub preemption_policy: PreemptionPolicyRecord,
}

/// [`crate::model::PreemptionPolicy`]. Format: state schema 12, log format 12.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreemptionPolicyRecord {
    /// Urgency preemption anywhere.
    #[default]
    Default,
    /// No urgency preemption from inside the subtree to outside it.
    Fence,
}

/// The `queue_policies` meta row: the policies of every queue that has any (a queue absent from
/// it has no guarantee and no fence). Format: state schema 12.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuePoliciesByQueueRecord {
    /// By queue name.
    pub queues: BTreeMap<QueueName, QueuePoliciesRecord>,
}

impl QueuePoliciesRecord {
    /// The policies of a queue.
    pub fn of(q: &Queue) -> Self {
        QueuePoliciesRecord {
            guaranteed: q.guaranteed.clone().into_map(),
            preemption_policy: match q.preemption_policy {
                PreemptionPolicy::Default => PreemptionPolicyRecord::Default,
                PreemptionPolicy::Fence => PreemptionPolicyRecord::Fence,
            },
        }
    }

    /// Sets these policies on a queue.
    pub fn apply_to(self, q: &mut Queue) {
        let QueuePoliciesRecord { guaranteed, preemption_policy } = self;
        q.guaranteed = Resources::from_map(guaranteed);
        q.preemption_policy = match preemption_policy {
            PreemptionPolicyRecord::Default => PreemptionPolicy::Default,
            PreemptionPolicyRecord::Fence => PreemptionPolicy::Fence,
        };
    }
}

/// A queue with its tree settings and policies, from the three records a command carries.
pub(crate) fn queue_with_policies(queue: QueueRecord, tree: QueueTreeRecord, policies: QueuePoliciesRecord) -> Queue {
    let mut q = queue_in_tree(queue, tree);
    policies.apply_to(&mut q);
    q
}

/// The `queue_policies` meta row since state schema 13: the policies of every queue that has any
/// (a queue absent from it has no guarantee, no fence and no retry policy). Migration 13 rewrote
/// the schema 12 row ([`QueuePoliciesByQueueRecord`]) as this one, every queue without a retry
/// policy. Format: state schema 13.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuePoliciesWithRetryByQueueRecord {
    /// By queue name.
    pub queues: BTreeMap<QueueName, QueuePoliciesWithRetryRecord>,
}

/// A queue's guarantee, fence and retry policy, as the `queue_policies` meta row holds them since
/// state schema 13. Format: state schema 13.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuePoliciesWithRetryRecord {
    /// Its guarantee and preemption policy.
    pub policies: QueuePoliciesRecord,
    /// When its jobs' failed runs are retried (a job's own policy wins).
    pub retry: Option<RetryRecord>,
}

impl QueuePoliciesWithRetryRecord {
    /// The policies of a queue.
    pub fn of(q: &Queue) -> Self {
        QueuePoliciesWithRetryRecord { policies: QueuePoliciesRecord::of(q), retry: retry_record_of(q) }
    }

    /// Sets these policies on a queue.
    pub fn apply_to(self, q: &mut Queue) {
        let QueuePoliciesWithRetryRecord { policies, retry } = self;
        policies.apply_to(q);
        q.retry = retry.map(api_retry);
    }
}

/// A queue's retry policy as stored.
pub(crate) fn retry_record_of(q: &Queue) -> Option<RetryRecord> {
    q.retry.as_ref().map(|r| RetryRecord {
        max_attempts: r.max_attempts,
        on_exit_codes: r.on_exit_codes.clone(),
        on_oom: r.on_oom,
        on_node_failure: r.on_node_failure,
        backoff_ms: r.backoff_seconds.saturating_mul(1000),
    })
}

/// A stored retry policy as a queue holds it (in the API's shape: the back-off in seconds, which
/// is how every queue's policy was given).
fn api_retry(r: RetryRecord) -> crate::model::api::JobRetryPolicy {
    let RetryRecord { max_attempts, on_exit_codes, on_oom, on_node_failure, backoff_ms } = r;
    crate::model::api::JobRetryPolicy {
        max_attempts,
        on_exit_codes,
        on_oom,
        on_node_failure,
        backoff_seconds: backoff_ms / 1000,
    }
}

/// A queue with its tree settings, policies and retry policy, from the records a command carries.
pub(crate) fn queue_with_retry(
    queue: QueueRecord,
    tree: QueueTreeRecord,
    policies: QueuePoliciesRecord,
    retry: Option<Box<RetryRecord>>,
) -> Queue {
    let mut q = queue_with_policies(queue, tree, policies);
    q.retry = retry.map(|r| api_retry(*r));
    q
}
