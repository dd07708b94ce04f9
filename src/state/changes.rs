//! What applying a command changes: durable writes for the store, and effects for the server
//! (whom to wake up). Applying is pure; the store and the server act on these.

use crate::model::{Event, ExecutorName, JobId, JobPayload, JobRecord, JobSetName, Queue, QueueName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// An executor as stored: its nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorRecord {
    pub name: ExecutorName,
    pub nodes: Vec<crate::model::api::NodeReport>,
    pub updated_at_ms: i64,
}

/// One durable write.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    PutQueue(Queue),
    DeleteQueue(QueueName),
    /// The job record; `live` says whether it is non-terminal (kept in the live-jobs index).
    PutJob {
        record: Box<JobRecord>,
        live: bool,
    },
    PutPayload(JobId, Box<JobPayload>),
    PutClientId {
        queue: QueueName,
        client_id: String,
        job: JobId,
    },
    AddToJobSet {
        queue: QueueName,
        job_set: JobSetName,
        job: JobId,
    },
    AppendEvent {
        queue: QueueName,
        job_set: JobSetName,
        event: Event,
    },
    PutExecutor(ExecutorRecord),
    DeleteExecutor(ExecutorName),
    /// Next global submit sequence number.
    PutSubmitSeq(u64),
}

/// What the server should do after the changes are durable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effects {
    /// Executors with new leases or kill orders: wake their long polls.
    pub executors: BTreeSet<ExecutorName>,
    /// Job sets with new events: wake their watchers.
    pub job_sets: BTreeSet<(QueueName, JobSetName)>,
    /// Something the scheduler cares about changed (submission, job end, capacity).
    pub schedule: bool,
}

impl Effects {
    /// Merges another command's effects into these.
    pub fn merge(&mut self, other: Effects) {
        self.executors.extend(other.executors);
        self.job_sets.extend(other.job_sets);
        self.schedule |= other.schedule;
    }
}
