//! The recorded usage of queues (the `queue_usage` meta row, and [`super::Command::RecordUsage`]).

use crate::model::{PoolName, QueueName};
use crate::scheduler::{QueueUsage, UsageSample};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every queue's usage of every pool, as of one time. Format: state schema 5, log format 5.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueUsageRecord {
    /// When it was recorded (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// Per pool, per queue.
    pub pools: BTreeMap<PoolName, BTreeMap<QueueName, UsageSampleRecord>>,
}

/// One queue's usage of one pool. Format: state schema 5, log format 5.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageSampleRecord {
    /// The moving average of its share of the pool at the record's time.
    pub usage: f64,
    /// Its share of the pool from the record's time on.
    pub current: f64,
}

impl From<QueueUsage> for QueueUsageRecord {
    fn from(u: QueueUsage) -> Self {
        let QueueUsage { at_ms, pools } = u;
        let pools = pools
            .into_iter()
            .map(|(p, queues)| {
                let queues = queues
                    .into_iter()
                    .map(|(q, UsageSample { usage, current })| (q, UsageSampleRecord { usage, current }))
                    .collect();
                (p, queues)
            })
            .collect();
        QueueUsageRecord { at_ms, pools }
    }
}

impl From<QueueUsageRecord> for QueueUsage {
    fn from(r: QueueUsageRecord) -> Self {
        let QueueUsageRecord { at_ms, pools } = r;
        let pools = pools
            .into_iter()
            .map(|(p, queues)| {
                let queues = queues
                    .into_iter()
                    .map(|(q, UsageSampleRecord { usage, current })| (q, UsageSample { usage, current }))
                    .collect();
                (p, queues)
            })
            .collect();
        QueueUsage { at_ms, pools }
    }
}
