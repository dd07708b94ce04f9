//! Keeping the indexes in step with a changed live job, touching only the indexes whose part of
//! the job changed. Most changes move a run on (leased, pending, running): the job's job set,
//! gang and place in its queue stay as they were. Taking the job out of every index and putting
//! it back was most of the in-memory cost of applying a cycle's leases and the executors'
//! reports, and executors learn of their leases only after that apply.
//!
//! The invariant: every live job in `State::jobs` sits in the indexes exactly where its
//! [`Footprint`] says (`State::index_job` puts it there; `unindex_job` takes it out).

use super::live_jobs::LiveJob;
use super::machine::{ActiveRunView, QueueKey, State};
use crate::model::{ExecutorName, Job, JobId, JobState, NodeName, QueueName, RunId, RunState};
use crate::scheduler::JobInfo;
use std::sync::Arc;

/// Where a live job sits in the indexes that a change to it may move it in (its job set and
/// gang never change while it lives).
pub(super) struct Footprint {
    state: JobState,
    /// The scheduler's view that the queue order and the executor's index hold.
    info: Arc<JobInfo>,
    /// A queued job's place in its queue's order, and the jobs it still waits for (while it
    /// waits, it is not in the order).
    queued: Option<(QueueKey, Vec<JobId>)>,
    /// The active run's place.
    run: Option<RunPlace>,
}

/// What the run indexes hold of an active run.
#[derive(PartialEq)]
struct RunPlace {
    run_id: RunId,
    executor: ExecutorName,
    node: NodeName,
    leased_at_ms: i64,
    stopping: bool,
    /// Leased and not yet reported by its executor.
    unacked: bool,
}

impl State {
    /// Where `job` sits in the indexes (or will, once indexed).
    pub(super) fn footprint(&self, job: &LiveJob) -> Footprint {
        let r = &job.record;
        let queued = (r.state == JobState::Queued).then(|| (self.queue_key(r), waits_on(r)));
        let run = r.active_run().map(|run| RunPlace {
            run_id: run.run_id,
            executor: run.executor.clone(),
            node: run.node.clone(),
            leased_at_ms: run.leased_at_ms,
            stopping: run.kill.is_some(),
            unacked: run.kill.is_none() && run.state == RunState::Leased,
        });
        Footprint { state: r.state, info: job.info.clone(), queued, run }
    }

    /// Moves job `id` of `queue` from where `before` put it in the indexes to where `after`
    /// does, touching only what differs. A new scheduler view (`info`) moves the job wherever a
    /// view is held.
    pub(super) fn shift(&mut self, id: JobId, queue: &QueueName, before: &Footprint, after: &Footprint) {
        let new_view = !Arc::ptr_eq(&before.info, &after.info);
        if before.run != after.run || (new_view && after.run.is_some()) {
            self.unplace_run(id, before.run.as_ref());
            self.place_run(id, after.run.as_ref(), &after.info);
        }
        if before.queued != after.queued || (new_view && after.queued.is_some()) {
            self.unplace_queued(id, queue, before);
            self.place_queued(id, queue, after);
        }
        if before.state != after.state
            && let Some(q) = self.queues.get_mut(queue)
        {
            if let Some(c) = q.counts.get_mut(&before.state) {
                *c = c.saturating_sub(1);
            }
            *q.counts.entry(after.state).or_default() += 1;
        }
    }

    /// Puts job `id` of `queue` where `at` says, save its job set and gang (see `index_job`).
    pub(super) fn place(&mut self, id: JobId, queue: &QueueName, at: &Footprint) {
        self.place_run(id, at.run.as_ref(), &at.info);
        self.place_queued(id, queue, at);
        if let Some(q) = self.queues.get_mut(queue) {
            *q.counts.entry(at.state).or_default() += 1;
        }
    }

    /// Takes job `id` of `queue` out of the indexes `before` put it in, save its job set and
    /// gang (see `unindex_membership`).
    pub(super) fn unplace(&mut self, id: JobId, queue: &QueueName, before: &Footprint) {
        self.unplace_run(id, before.run.as_ref());
        self.unplace_queued(id, queue, before);
        if let Some(c) = self.queues.get_mut(queue).and_then(|q| q.counts.get_mut(&before.state)) {
            *c = c.saturating_sub(1);
        }
    }

    fn unplace_run(&mut self, id: JobId, run: Option<&RunPlace>) {
        let Some(run) = run else { return };
        self.runs.remove(&run.run_id);
        if let Some(s) = self.by_executor.get_mut(&run.executor) {
            s.remove(&id);
        }
        if let Some(s) = self.unacked.get_mut(&run.executor) {
            s.remove(&id);
        }
        if let Some(s) = self.killing.get_mut(&run.executor) {
            s.remove(&id);
        }
    }

    fn place_run(&mut self, id: JobId, run: Option<&RunPlace>, info: &Arc<JobInfo>) {
        let Some(run) = run else { return };
        self.runs.insert(run.run_id, id);
        let view = ActiveRunView {
            info: info.clone(),
            node: run.node.clone(),
            leased_at_ms: run.leased_at_ms,
            stopping: run.stopping,
        };
        self.by_executor.entry(run.executor.clone()).or_default().insert(id, view);
        if run.stopping {
            self.killing.entry(run.executor.clone()).or_default().insert(id);
        } else if run.unacked {
            self.unacked.entry(run.executor.clone()).or_default().insert(id, run.run_id);
        }
    }

    fn unplace_queued(&mut self, id: JobId, queue: &QueueName, at: &Footprint) {
        let Some((key, waits_on)) = &at.queued else { return };
        for d in waits_on {
            if let Some(s) = self.dependents.get_mut(d) {
                s.remove(&id);
                if s.is_empty() {
                    self.dependents.remove(d);
                }
            }
        }
        if let Some(q) = self.queues.get_mut(queue)
            && q.queued.remove(key).is_some()
        {
            q.demand.sub(&at.info.requirements.requests);
        }
    }

    fn place_queued(&mut self, id: JobId, queue: &QueueName, at: &Footprint) {
        let Some((key, waits_on)) = &at.queued else { return };
        for d in waits_on {
            self.dependents.entry(*d).or_default().insert(id);
        }
        // A job waiting for another is not in its queue's order: the scheduler never sees it.
        if waits_on.is_empty()
            && let Some(q) = self.queues.get_mut(queue)
        {
            q.queued.insert(*key, at.info.clone());
            q.demand.add(&at.info.requirements.requests);
        }
    }
}

/// The jobs a job waits for: its dependencies not met yet.
fn waits_on(r: &Job) -> Vec<JobId> {
    let Some(p) = &r.policies else { return Vec::new() };
    p.depends_on.iter().filter(|d| !d.met).map(|d| d.job_id).collect()
}
