//! Job commands from users: submit, cancel, reprioritize, preempt.

use super::changes::Change;
use super::command::{PolicyJob, RejectKind, Response};
use super::machine::{Applied, State, reject};
use super::transition::move_job;
use crate::model::{EventKind, Job, JobId, JobSetName, JobState, KillRequest, QueueName};

impl State {
    pub(super) fn submit(
        &mut self,
        queue: &QueueName,
        job_set: &JobSetName,
        at_ms: i64,
        jobs: Vec<PolicyJob>,
        owner: Option<&str>,
        out: &mut Applied,
    ) -> Response {
        let Some(q) = self.queues.get(queue) else {
            return reject(RejectKind::NotFound, Some("queue"), format!("queue {queue} does not exist"));
        };
        // A cordoned queue still takes jobs (as Armada's): the scheduler leaves them queued.
        if self.is_parent(queue) {
            return reject(
                RejectKind::Conflict,
                Some("queue"),
                format!("queue {queue} is a parent queue: jobs are submitted to leaf queues only"),
            );
        }
        let queue = q.queue.name.clone();
        if let Err(r) = self.check_dependencies(&queue, &jobs) {
            return r;
        }
        let mut ids = Vec::with_capacity(jobs.len());
        for PolicyJob { job: crate::record::NamespacedJob { job: nj, namespace }, policies } in jobs {
            if let Some(cid) = &nj.client_id
                && let Some(existing) = self.client_ids.get(&(queue.clone(), cid.clone()))
            {
                ids.push(*existing);
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.max_job_id = self.max_job_id.max(Some(nj.id));
            let (policies, unmet) = self.new_policies(policies);
            let mut record = Job {
                id: nj.id,
                queue: queue.clone(),
                job_set: job_set.clone(),
                priority: nj.priority,
                priority_class: nj.priority_class,
                submit_seq: seq,
                submitted_at_ms: at_ms,
                client_id: nj.client_id.clone(),
                annotations: nj.annotations,
                labels: nj.labels,
                requirements: crate::model::Requirements::new(nj.requirements.into()),
                gang: nj.gang.map(|g| std::sync::Arc::new(g.into())),
                termination_grace_period_ms: nj.termination_grace_period_ms,
                active_deadline_seconds: nj.active_deadline_seconds,
                state: JobState::Queued,
                state_reason: None,
                runs: vec![],
                event_seqs: Default::default(),
                namespace,
                policies,
            };
            if let Some(cid) = nj.client_id {
                self.client_ids.insert((queue.clone(), cid.clone()), nj.id);
                out.changes.push(Change::PutClientId { queue: queue.clone(), client_id: cid, job: nj.id });
            }
            out.changes.push(Change::PutPayload(nj.id, Box::new(nj.payload)));
            if let Some(owner) = owner {
                out.changes.push(Change::PutOwner { job: nj.id, owner: owner.to_string() });
            }
            out.changes.push(Change::AddToJobSet { queue: queue.clone(), job_set: job_set.clone(), job: nj.id });
            *self.set_jobs.entry((queue.clone(), job_set.clone())).or_default() += 1;
            let submitted = self.event(out, &record, at_ms, EventKind::Submitted, None, None);
            let waiting = record.waiting_on().filter(|_| unmet.is_none()).map(|d| d.waiting_reason());
            let queued = self.event(out, &record, at_ms, EventKind::Queued, None, waiting);
            record.event_seqs = [submitted, queued].into();
            self.add_job(out, record);
            if let Some((dep, end)) = unmet {
                self.end_unmet(out, nj.id, dep, end, at_ms);
            }
            ids.push(nj.id);
        }
        out.changes.push(Change::PutSubmitSeq(self.next_seq));
        out.effects.schedule = true;
        Response::JobIds(ids)
    }

    /// Live jobs of a job set, or the given ones (which must belong to it).
    fn select(
        &self,
        queue: &QueueName,
        job_set: &JobSetName,
        job_ids: Option<&[JobId]>,
    ) -> Result<Vec<JobId>, Response> {
        match job_ids {
            None => Ok(self
                .job_sets
                .get(&(queue.clone(), job_set.clone()))
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default()),
            Some(ids) => {
                let mut out = Vec::with_capacity(ids.len());
                for (i, id) in ids.iter().enumerate() {
                    match self.jobs.get(id) {
                        Some(j) if &j.record.queue == queue && &j.record.job_set == job_set => out.push(*id),
                        // Finished jobs (no longer live) are simply not selected.
                        None => {}
                        Some(_) => {
                            return Err(reject(
                                RejectKind::NotFound,
                                Some(&format!("job_ids[{i}]")),
                                format!("job {id} is not in job set {job_set} of queue {queue}"),
                            ));
                        }
                    }
                }
                Ok(out)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn cancel(
        &mut self,
        queue: &QueueName,
        job_set: &JobSetName,
        job_ids: Option<&[JobId]>,
        states: Option<&[JobState]>,
        reason: &str,
        at_ms: i64,
        out: &mut Applied,
    ) -> Response {
        let ids = match self.select(queue, job_set, job_ids) {
            Ok(ids) => ids,
            Err(r) => return r,
        };
        let mut cancelled = Vec::new();
        for id in ids {
            let Some(job) = self.jobs.get(&id) else { continue };
            let state = job.record.state;
            if state.is_terminal() || states.is_some_and(|s| !s.contains(&state)) {
                continue;
            }
            cancelled.push(id);
            self.stop_job(out, id, JobState::Cancelled, reason, at_ms);
        }
        Response::JobIds(cancelled)
    }

    /// Ends a live job as cancelled or preempted: a queued job at once, a job with a run by
    /// ordering its executor to kill the run (the run stays until the executor reports it over).
    pub(super) fn stop_job(&mut self, out: &mut Applied, id: JobId, to: JobState, reason: &str, at_ms: i64) {
        let Some(job) = self.jobs.get(&id) else { return };
        let record = job.record.clone();
        let executor = record.active_run().map(|r| r.executor.clone());
        let (requested, done) = match to {
            JobState::Preempted => (EventKind::PreemptRequested, EventKind::Preempted),
            _ => (EventKind::CancelRequested, EventKind::Cancelled),
        };
        self.event(out, &record, at_ms, requested, None, Some(reason.to_string()));
        self.update_job(out, id, at_ms, |r| {
            move_job(r, to);
            r.state_reason = Some(reason.to_string());
            let grace = r.termination_grace_period_ms;
            if let Some(run) = r.active_run_mut() {
                run.kill.get_or_insert(KillRequest { at_ms, grace_period_ms: grace, reason: reason.to_string() });
            }
        });
        match executor {
            Some(e) => {
                out.effects.executors.insert(e);
            }
            None => {
                self.event(out, &record, at_ms, done, None, Some(reason.to_string()));
            }
        }
        out.effects.schedule = true;
    }

    pub(super) fn reprioritize(
        &mut self,
        queue: &QueueName,
        job_set: &JobSetName,
        job_ids: Option<&[JobId]>,
        priority: u32,
        at_ms: i64,
        out: &mut Applied,
    ) -> Response {
        let ids = match self.select(queue, job_set, job_ids) {
            Ok(ids) => ids,
            Err(r) => return r,
        };
        let mut changed = Vec::new();
        for id in ids {
            let Some(job) = self.jobs.get(&id) else { continue };
            if job.record.state.is_terminal() || job.record.priority == priority {
                continue;
            }
            let record = job.record.clone();
            self.update_job(out, id, at_ms, |r| r.priority = priority);
            self.event(out, &record, at_ms, EventKind::Reprioritized, None, Some(format!("priority {priority}")));
            changed.push(id);
        }
        if !changed.is_empty() {
            out.effects.schedule = true;
        }
        Response::JobIds(changed)
    }

    pub(super) fn preempt(
        &mut self,
        queue: &QueueName,
        job_set: &JobSetName,
        job_ids: &[JobId],
        reason: &str,
        at_ms: i64,
        out: &mut Applied,
    ) -> Response {
        let ids = match self.select(queue, job_set, Some(job_ids)) {
            Ok(ids) => ids,
            Err(r) => return r,
        };
        let mut preempted = Vec::new();
        for id in ids {
            let Some(job) = self.jobs.get(&id) else { continue };
            // Only jobs holding a node can be preempted.
            if !job.record.state.is_active() {
                continue;
            }
            preempted.push(id);
            self.stop_job(out, id, JobState::Preempted, reason, at_ms);
        }
        Response::JobIds(preempted)
    }
}
