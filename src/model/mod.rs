//! Domain types shared by every role: resources, queues, priority classes, jobs, nodes.

pub mod annotations;
pub mod api;
pub mod duration;
pub mod gang;
pub mod human;
pub mod job;
pub mod names;
pub mod namespace;
pub mod node;
pub mod placeholder;
pub mod placement;
pub mod pool_policy;
pub mod priority;
pub mod quantity;
pub mod queue;
pub mod requirements;
pub mod resources;
pub mod spelling;
pub mod strict_json;

pub use gang::GangSpec;
pub use job::{Event, EventKind, Job, JobPayload, JobState, KillRequest, Run, RunState, RunUsage};
pub use names::{
    ExecutorName, JobId, JobSetName, NameError, NodeName, PoolName, PriorityClassName, QueueName, ResourceName, RunId,
};
pub use namespace::{Namespace, NamespaceError, RunPod};
pub use node::{Node, NodeFault, RESERVED_FOR_LABEL, parse_reserved_for, reserved_for_value};
pub use placement::{Labels, NodeAffinity, Taint, TaintEffect, Toleration};
pub use pool_policy::PoolPolicy;
pub use priority::PriorityClass;
pub use queue::{FieldError, PriorityPolicy, Queue, SortPriority};
pub use requirements::{Requirements, SchedulingRequirements};
pub use resources::Resources;
