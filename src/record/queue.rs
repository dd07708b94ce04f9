//! The stored queue (`queues` rows, and the queue commands of the log).

use crate::model::{PriorityClassName, Queue, QueueName, ResourceName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A queue's settings. Format: state schema 2, log format 1.
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
        }
    }
}
