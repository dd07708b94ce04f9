//! Rebuilding the state from storage (start-up, snapshot install): the narrow writes the store's
//! loader makes, each putting back what applying commands once built. Nothing else writes the
//! indexes from outside the state module.

use super::machine::{Executor, QueueState, State};
use crate::model::{JobId, JobSetName, Queue, QueueName};
use crate::record::SchedulerConfigRecord;
use crate::scheduler::QueueUsage;
use std::collections::{BTreeMap, HashMap};

impl State {
    /// Puts back the submission sequence number and the number of purges.
    pub fn restore_counters(&mut self, next_seq: u64, purges: u64) {
        self.next_seq = next_seq;
        self.purges = purges;
    }

    /// Puts back the recorded scheduler configuration and the last recorded cycle's number.
    pub fn restore_scheduling_record(&mut self, config: Option<SchedulerConfigRecord>, cycles: u64) {
        self.scheduler_config = config;
        self.cycles = cycles;
    }

    /// The settings the state was built with.
    pub fn settings(&self) -> &super::StateSettings {
        &self.settings
    }

    /// Changes the settings and orders every queue's queued jobs by them again (replay: a
    /// recorded configuration whose priority classes differ from the ones the state was loaded
    /// with).
    pub fn change_settings(&mut self, settings: super::StateSettings) {
        self.settings = settings;
        let mut queues = std::mem::take(&mut self.queues);
        for qs in queues.values_mut() {
            let ids: Vec<JobId> = qs.queued.values().map(|j| j.id).collect();
            qs.queued = ids
                .into_iter()
                .filter_map(|id| {
                    let job = self.jobs.get(&id)?;
                    Some((self.queue_key(&job.record), job.info.clone()))
                })
                .collect();
        }
        self.queues = queues;
    }

    /// Sets the index of the last log entry applied: by the Raft adapter after each apply, under
    /// the same lock, and by the loader from the stored bookkeeping.
    pub fn set_applied_index(&mut self, index: u64) {
        self.applied_index = index;
    }

    /// Puts back the queues' usage as last recorded.
    pub fn restore_queue_usage(&mut self, usage: QueueUsage) {
        self.queue_usage = usage;
    }

    /// Puts back a queue, with no jobs yet (they come with [`State::restore_job`]).
    pub fn restore_queue(&mut self, queue: Queue) {
        self.queues.insert(
            queue.name.clone(),
            QueueState { queue, queued: BTreeMap::new(), demand: Default::default(), counts: BTreeMap::new() },
        );
    }

    /// Puts back an executor (call [`State::refresh_largest_node`] once all are back).
    pub fn restore_executor(&mut self, executor: Executor) {
        self.executors.insert(executor.name.clone(), executor);
    }

    /// Puts back a job set's last event sequence number.
    pub fn restore_event_seq(&mut self, queue: QueueName, job_set: JobSetName, seq: u64) {
        self.event_seqs.insert((queue, job_set), seq);
    }

    /// Puts back the job a client id names in a queue.
    pub fn restore_client_id(&mut self, queue: QueueName, client_id: String, job: JobId) {
        self.client_ids.insert((queue, client_id), job);
    }

    /// Puts back the number of jobs stored per job set.
    pub fn restore_stored_jobs_per_set(&mut self, sizes: HashMap<(QueueName, JobSetName), u64>) {
        self.set_jobs = sizes.into_iter().collect();
    }

    /// Raises the largest job id ever submitted to `id` (if larger).
    pub fn restore_max_job_id(&mut self, id: Option<JobId>) {
        self.max_job_id = self.max_job_id.max(id);
    }

    /// Makes room for `n` live jobs about to be restored.
    pub fn reserve_jobs(&mut self, n: usize) {
        self.jobs.reserve(n);
    }

    /// Rebuilds the per-job ordered indexes (queue order, job sets) once every job is back.
    /// Jobs come back in id order, and inserting in key order leaves the B-tree's nodes a little
    /// over half full (a full node splits six to five, and the left one is never filled again),
    /// while a tree built from sorted entries fills its nodes: about half the index memory.
    pub fn pack_indexes(&mut self) {
        for q in self.queues.values_mut() {
            q.queued = std::mem::take(&mut q.queued).into_iter().collect();
        }
        for set in self.job_sets.values_mut() {
            *set = std::mem::take(set).into_iter().collect();
        }
    }
}
