//! Domain types shared by every role: resources, queues, priority classes, jobs, nodes.

pub(crate) mod annotations;
pub mod api;
pub(crate) mod duration;
mod gang;
pub mod human;
mod job;
mod job_policy;
mod job_retry;
pub(crate) mod names;
mod namespace;
pub(crate) mod node;
pub(crate) mod placeholder;
pub(crate) mod placement;
mod pool_policy;
mod priority;
pub(crate) mod quantity;
mod queue;
mod requirements;
mod resources;
pub(crate) mod spelling;
pub(crate) mod strict_json;

pub use gang::GangSpec;
pub use job::{Event, EventKind, EventSeqs, Job, JobPayload, JobState, KillRequest, Run, RunState, RunUsage};
pub use job_policy::{
    Dependency, DependencyCondition, DependencyVerdict, JobPolicies, RetryPolicy, RunFailure, is_oom_reason,
    queue_retry_policy, retry_time,
};
pub use names::{
    ExecutorName, JobId, JobSetName, NameError, NodeName, PoolName, PriorityClassName, QueueName, ResourceName, RunId,
};
pub use namespace::{Namespace, NamespaceError, RunPod};
pub use node::{Node, NodeFault, RESERVED_FOR_LABEL, parse_reserved_for, reserved_for_value};
pub use placement::{Labels, NodeAffinity, Taint, TaintEffect, Toleration};
pub use pool_policy::PoolPolicy;
pub use priority::PriorityClass;
pub use queue::{FieldError, PreemptionPolicy, PriorityPolicy, Queue, SortPriority};
pub use requirements::{Requirements, SchedulingRequirements};
pub use resources::Resources;
