//! The state's read face: what the layers above (service, API, UI, gRPC, server, store) ask of
//! the state machine's memory, named for the question. The indexes themselves stay private to
//! this module, so only applying a command changes them.
//!
//! Iterators borrow the state (no clone); those over ordered maps keep their order.

use super::machine::{Executor, LiveJob, QueueState, State};
use crate::model::{ExecutorName, JobId, JobSetName, NodeName, QueueName, ResourceName, Resources, RunId};
use crate::record::SchedulerConfigRecord;
use crate::scheduler::{NodeHealth, QueueUsage};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Where a queued job stands in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePlace {
    /// 1-based, among the queue's queued jobs in the order the scheduler tries them.
    pub position: u64,
    /// Queued jobs of the queue before it that may run in a pool it may run in.
    pub ahead_in_its_pools: u64,
}

impl State {
    /// Where queued job `id` stands in its queue (none if it is not queued). Walks the queue up
    /// to the job.
    pub fn queue_place(&self, id: JobId) -> Option<QueuePlace> {
        let job = self.jobs.get(&id)?;
        let q = self.queues.get(&job.record.queue)?;
        let mut place = QueuePlace { position: 0, ahead_in_its_pools: 0 };
        for other in q.queued.values() {
            place.position += 1;
            if other.id == id {
                return Some(place);
            }
            if job.info.shares_a_pool_with(other) {
                place.ahead_in_its_pools += 1;
            }
        }
        None
    }

    /// A queue, with its queued jobs and counts.
    pub fn queue(&self, name: &QueueName) -> Option<&QueueState> {
        self.queues.get(name)
    }

    /// Every queue, in name order.
    pub fn queues(&self) -> impl ExactSizeIterator<Item = &QueueState> + '_ {
        self.queues.values()
    }

    /// A live job.
    pub fn job(&self, id: JobId) -> Option<&LiveJob> {
        self.jobs.get(&id)
    }

    /// Every live job, in no particular order.
    pub fn jobs(&self) -> impl ExactSizeIterator<Item = &LiveJob> + '_ {
        self.jobs.values()
    }

    /// The live job whose active run is `run`.
    pub fn job_of_run(&self, run: RunId) -> Option<&LiveJob> {
        self.runs.get(&run).and_then(|id| self.job(*id))
    }

    /// Every active run with its job, in no particular order.
    pub fn active_runs(&self) -> impl Iterator<Item = (RunId, &LiveJob)> + '_ {
        self.runs.iter().filter_map(|(run, id)| Some((*run, self.job(*id)?)))
    }

    /// Number of active runs.
    pub fn active_run_count(&self) -> usize {
        self.runs.len()
    }

    /// The jobs with an active run on any executor, executor by executor.
    pub fn jobs_with_active_runs(&self) -> impl Iterator<Item = &LiveJob> + '_ {
        self.by_executor.values().flat_map(|runs| runs.keys()).filter_map(|id| self.job(*id))
    }

    /// The jobs whose run `executor` has been leased and has not yet reported, with the run, in
    /// id order (the lease poll sends them until it does).
    pub fn unacked_for(&self, executor: &ExecutorName) -> impl Iterator<Item = (JobId, RunId)> + '_ {
        self.unacked.get(executor).into_iter().flatten().map(|(id, run)| (*id, *run))
    }

    /// The jobs whose run on `executor` must be stopped, in id order.
    pub fn killing_for<'a>(&'a self, executor: &ExecutorName) -> impl Iterator<Item = &'a LiveJob> + 'a {
        self.killing.get(executor).into_iter().flatten().filter_map(|id| self.job(*id))
    }

    /// The live jobs of a job set, in id order.
    pub fn job_set_jobs<'a>(
        &'a self,
        queue: &QueueName,
        job_set: &JobSetName,
    ) -> impl Iterator<Item = &'a LiveJob> + 'a {
        let key = (queue.clone(), job_set.clone());
        self.job_sets.get(&key).into_iter().flatten().filter_map(|id| self.job(*id))
    }

    /// The job sets of `queue` with the number of jobs each has stored (live or finished), in
    /// no particular order.
    pub fn stored_job_sets<'a>(&'a self, queue: &'a QueueName) -> impl Iterator<Item = (&'a JobSetName, u64)> + 'a {
        self.set_jobs.iter().filter(move |((q, _), _)| q == queue).map(|((_, s), n)| (s, *n))
    }

    /// Jobs stored per job set (live or finished), in no particular order.
    pub fn stored_jobs_per_set(&self) -> impl Iterator<Item = (&(QueueName, JobSetName), u64)> + '_ {
        self.set_jobs.iter().map(|(k, n)| (k, *n))
    }

    /// The last event sequence number of a job set.
    pub fn event_seq(&self, queue: &QueueName, job_set: &JobSetName) -> Option<u64> {
        self.event_seqs.get(&(queue.clone(), job_set.clone())).copied()
    }

    /// The last event sequence number of every job set, in no particular order.
    pub fn event_seqs(&self) -> impl Iterator<Item = (&(QueueName, JobSetName), u64)> + '_ {
        self.event_seqs.iter().map(|(k, n)| (k, *n))
    }

    /// The job a client id names in a queue.
    pub fn job_of_client_id(&self, queue: &QueueName, client_id: &str) -> Option<JobId> {
        self.client_ids.get(&(queue.clone(), client_id.to_string())).copied()
    }

    /// What the job policies did since this server started applying (for the metrics).
    pub fn policy_counts(&self) -> &super::PolicyCounts {
        &self.policy_counts
    }

    /// Every client id with its job, in no particular order.
    pub fn client_ids(&self) -> impl Iterator<Item = (&(QueueName, String), JobId)> + '_ {
        self.client_ids.iter().map(|(k, j)| (k, *j))
    }

    /// A known executor with its nodes.
    pub fn executor(&self, name: &ExecutorName) -> Option<&Executor> {
        self.executors.get(name)
    }

    /// Every known executor, in name order.
    pub fn executors(&self) -> impl ExactSizeIterator<Item = &Executor> + '_ {
        self.executors.values()
    }

    /// The failures and quarantine of a node.
    pub fn health_of(&self, executor: &ExecutorName, node: &NodeName) -> Option<&NodeHealth> {
        self.node_health.get(&(executor.clone(), node.clone()))
    }

    /// Every node with failures or a quarantine, by executor and node.
    pub fn node_health(&self) -> impl ExactSizeIterator<Item = (&(ExecutorName, NodeName), &NodeHealth)> + '_ {
        self.node_health.iter()
    }

    /// Largest amount of each resource on any known node (allocatable minus used by others).
    pub fn largest_node(&self) -> &Resources {
        &self.largest_node
    }

    /// The resources any known node has (with any amount).
    pub fn node_resource_names(&self) -> &Arc<BTreeSet<ResourceName>> {
        &self.node_resource_names
    }

    /// Nodes are known and all run jobs as processes.
    pub fn process_nodes_only(&self) -> bool {
        self.process_nodes_only
    }

    /// The queues' usage as the leader last recorded it.
    pub fn queue_usage(&self) -> &QueueUsage {
        &self.queue_usage
    }

    /// The scheduler configuration the leader last recorded, if any.
    pub fn scheduler_config(&self) -> Option<&SchedulerConfigRecord> {
        self.scheduler_config.as_ref()
    }

    /// The number of the last scheduling cycle recorded with its inputs.
    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    /// The index of the last log entry applied to this state.
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// The largest job id ever submitted.
    pub fn max_job_id(&self) -> Option<JobId> {
        self.max_job_id
    }

    /// Submission sequence number the next submitted job gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Purges applied so far.
    pub fn purges(&self) -> u64 {
        self.purges
    }
}
