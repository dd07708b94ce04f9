//! The live jobs by id: a hash table of boxed jobs keyed by the id inside each job.
//!
//! A `HashMap<JobId, Box<LiveJob>>` spends 32 bytes a slot (the 16-byte id, aligned to 16, and
//! the pointer), and at half load two slots a job: the id is in the record already. This table
//! holds the pointer alone (8 bytes a slot) and finds a job by the id in its record.

use crate::model::{Job, JobId};
use crate::scheduler::JobInfo;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::Arc;

/// A job that is not over (or whose last run is still being stopped).
///
/// To keep memory per queued job small, the record's requirements are interned (one allocation
/// for all the live jobs asking the same) and shared with `info`, as is its gang; names are
/// shared with the queue and job-set indexes.
#[derive(Debug, Clone)]
pub struct LiveJob {
    /// The job.
    pub record: Job,
    /// The scheduler's view, shared with snapshots.
    pub info: Arc<JobInfo>,
}

impl LiveJob {
    /// The job's requests.
    pub fn requests(&self) -> &crate::model::Resources {
        &self.info.requirements.requests
    }
}

/// Live jobs, each found by its record's id.
#[derive(Clone, Default)]
pub(super) struct LiveJobs {
    table: HashTable<Box<LiveJob>>,
    hasher: foldhash::fast::RandomState,
}

impl LiveJobs {
    fn hash(&self, id: &JobId) -> u64 {
        self.hasher.hash_one(id)
    }

    /// The live job `id`, if any.
    pub(super) fn get(&self, id: &JobId) -> Option<&LiveJob> {
        self.table.find(self.hash(id), |j| j.record.id == *id).map(|j| &**j)
    }

    /// The live job `id`, to change in place (its id must stay the same).
    pub(super) fn get_mut(&mut self, id: &JobId) -> Option<&mut LiveJob> {
        let hash = self.hash(id);
        self.table.find_mut(hash, |j| j.record.id == *id).map(|j| &mut **j)
    }

    /// True if `id` is a live job.
    pub(super) fn contains_key(&self, id: &JobId) -> bool {
        self.get(id).is_some()
    }

    /// Adds `job`, replacing the live job of the same id if there is one.
    pub(super) fn insert(&mut self, job: Box<LiveJob>) {
        let id = job.record.id;
        let hash = self.hash(&id);
        let hasher = &self.hasher;
        match self.table.entry(hash, |j| j.record.id == id, |j| hasher.hash_one(j.record.id)) {
            hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = job,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(job);
            }
        }
    }

    /// Takes the live job `id` out, if any.
    pub(super) fn remove(&mut self, id: &JobId) -> Option<Box<LiveJob>> {
        let hash = self.hash(id);
        self.table.find_entry(hash, |j| j.record.id == *id).ok().map(|e| e.remove().0)
    }

    /// Makes room for `n` more jobs.
    pub(super) fn reserve(&mut self, n: usize) {
        let hasher = &self.hasher;
        self.table.reserve(n, |j| hasher.hash_one(j.record.id));
    }

    /// Number of live jobs.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// True if no job is live.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Every live job, in no particular order.
    pub(super) fn values(&self) -> impl ExactSizeIterator<Item = &LiveJob> {
        self.table.iter().map(|j| &**j)
    }
}

impl std::fmt::Debug for LiveJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.values().map(|j| (j.record.id, j))).finish()
    }
}

#[cfg(test)]
impl std::ops::Index<&JobId> for LiveJobs {
    type Output = LiveJob;

    fn index(&self, id: &JobId) -> &LiveJob {
        self.get(id).expect("a live job of that id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Job, JobSetName, JobState, PriorityClassName, QueueName, Requirements};
    use crate::scheduler::JobInfo;
    use std::sync::Arc;

    fn job(n: u128, priority: u32) -> Box<LiveJob> {
        let id = JobId::from_u128(n);
        let queue = QueueName::new("q").unwrap();
        let priority_class = PriorityClassName::new("default").unwrap();
        let requirements = Requirements::new(Default::default());
        let record = Job {
            id,
            queue: queue.clone(),
            job_set: JobSetName::new("s").unwrap(),
            priority,
            priority_class: priority_class.clone(),
            submit_seq: 0,
            submitted_at_ms: 0,
            client_id: None,
            annotations: Default::default(),
            labels: Default::default(),
            requirements: requirements.clone(),
            gang: None,
            termination_grace_period_ms: 1000,
            active_deadline_seconds: 60,
            state: JobState::Queued,
            state_reason: None,
            runs: vec![],
            event_seqs: Default::default(),
            namespace: None,
            policies: None,
        };
        let info = Arc::new(JobInfo {
            id,
            queue,
            priority_class,
            priority,
            submit_seq: 0,
            requirements,
            gang: None,
            pools: vec![],
            not_before_ms: None,
        });
        Box::new(LiveJob { record, info })
    }

    #[test]
    fn finds_changes_replaces_and_removes_jobs_by_the_id_in_their_record() {
        let mut jobs = LiveJobs::default();
        for n in 0..1000 {
            jobs.insert(job(n, 0));
        }
        assert_eq!(jobs.len(), 1000);
        assert!(jobs.contains_key(&JobId::from_u128(999)));
        assert!(jobs.get(&JobId::from_u128(1000)).is_none());
        jobs.get_mut(&JobId::from_u128(7)).unwrap().record.priority = 3;
        assert_eq!(jobs[&JobId::from_u128(7)].record.priority, 3);
        // The same id again replaces the job rather than adding one.
        jobs.insert(job(7, 5));
        assert_eq!((jobs.len(), jobs[&JobId::from_u128(7)].record.priority), (1000, 5));
        let taken = jobs.remove(&JobId::from_u128(7)).map(|j| j.record.id);
        assert_eq!(taken, Some(JobId::from_u128(7)));
        assert!(jobs.remove(&JobId::from_u128(7)).is_none());
        assert_eq!(jobs.len(), 999);
        let mut ids: Vec<u128> = jobs.values().map(|j| j.record.id.as_u128()).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..1000).filter(|n| *n != 7).collect::<Vec<_>>());
        jobs.reserve(10_000);
        assert_eq!(jobs.len(), 999);
        assert!(jobs.contains_key(&JobId::from_u128(0)));
    }
}
