//! What applying a command changes: durable writes for the store, in their stored form, and
//! effects for the server (whom to wake up). Applying is pure; the store and the server act on
//! these.

use crate::model::{ExecutorName, JobId, JobSetName, NodeName, QueueName, RunId};
use crate::record::{
    EventRecord, ExecutorRecord, JobRecord, NodeHealthRecord, PayloadRecord, QueuePoliciesWithRetryByQueueRecord,
    QueueRecord, QueueTreesRecord, QueueUsageRecord, SchedulerConfigRecord,
};
use std::collections::BTreeSet;

/// One durable write.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Writes a queue.
    PutQueue(QueueRecord),
    /// Deletes a queue.
    DeleteQueue(QueueName),
    /// The job record; `live` says whether it is non-terminal (kept in the live-jobs index).
    PutJob {
        /// The job as stored.
        record: Box<JobRecord>,
        /// Whether the job stays in memory (and in the live-jobs index).
        live: bool,
    },
    /// Writes a job's payload.
    PutPayload(JobId, Box<PayloadRecord>),
    /// Records a client id as taken by a job.
    PutClientId {
        /// The queue the client id is unique in.
        queue: QueueName,
        /// The client's idempotency key.
        client_id: String,
        /// The job it names.
        job: JobId,
    },
    /// Forgets every client id of a queue (the queue was deleted: a queue created later under the
    /// same name starts afresh).
    DeleteClientIds(QueueName),
    /// Adds a job to its job set's index.
    AddToJobSet {
        /// The job's queue.
        queue: QueueName,
        /// The job's job set.
        job_set: JobSetName,
        /// The job.
        job: JobId,
    },
    /// Appends an event to a job set's stream.
    AppendEvent {
        /// The job set's queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
        /// The event.
        event: EventRecord,
    },
    /// Writes an executor and its nodes.
    PutExecutor(ExecutorRecord),
    /// Deletes an executor.
    DeleteExecutor(ExecutorName),
    /// Next global submit sequence number.
    PutSubmitSeq(u64),
    /// Indexes a job that left memory (after its `PutJob`) by when it did, for `job_retention`.
    IndexFinished {
        /// The job.
        job: JobId,
        /// When it finished (ms since the epoch, the leader's clock).
        at_ms: i64,
    },
    /// Deletes a finished job: its record, payload, index rows and events.
    PurgeJob {
        /// The job.
        job: JobId,
        /// Its queue.
        queue: QueueName,
        /// Its job set.
        job_set: JobSetName,
        /// When it finished (its key in the `finished` index).
        finished_ms: i64,
    },
    /// Forgets one client id (the job it named was purged).
    DeleteClientId {
        /// The queue the client id is unique in.
        queue: QueueName,
        /// The client's idempotency key.
        client_id: String,
    },
    /// Forgets a job set that holds no job any more: its event counter (a new job under the same
    /// name starts a new stream from sequence number 1) and any events left.
    ForgetJobSet {
        /// The job set's queue.
        queue: QueueName,
        /// The job set.
        job_set: JobSetName,
    },
    /// Number of purges applied.
    PutPurges(u64),
    /// Largest job id ever submitted: kept apart from the jobs table once purges may have
    /// removed that job.
    PutMaxJobId(JobId),
    /// Writes a node's counted failures and quarantine.
    PutNodeHealth(NodeHealthRecord),
    /// Forgets a node's failures and quarantine.
    DeleteNodeHealth {
        /// The node's executor.
        executor: ExecutorName,
        /// The node.
        node: NodeName,
    },
    /// The queues' usage, replacing the record before.
    PutQueueUsage(QueueUsageRecord),
    /// The tree settings of every queue that has any, replacing the record before.
    PutQueueTrees(QueueTreesRecord),
    /// The guarantee, preemption policy and retry policy of every queue that has any, replacing
    /// the record before.
    PutQueuePolicies(QueuePoliciesWithRetryByQueueRecord),
    /// The scheduler configuration the leader recorded, replacing the record before.
    PutSchedulerConfig(Box<SchedulerConfigRecord>),
    /// The number of the last scheduling cycle recorded with its inputs.
    PutScheduleCycles(u64),
    /// Records who submitted a job (deleted with its purge).
    PutOwner {
        /// The job.
        job: JobId,
        /// The principal's name.
        owner: String,
    },
    /// Writes a job's dependencies and retry policy with their progress (deleted with its
    /// purge).
    PutPolicies {
        /// The job.
        job: JobId,
        /// Its policies.
        policies: Box<crate::record::JobPoliciesRecord>,
    },
    /// Records what an ended run used (deleted with its job's purge).
    PutRunUsage {
        /// The run.
        run: RunId,
        /// What it used.
        usage: crate::record::RunUsageRecord,
    },
    /// Indexes a new run by its id (it is deleted with its job's purge).
    IndexRun {
        /// The run.
        run: RunId,
        /// Its job.
        job: JobId,
    },
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
