//! Job dependencies: a job that waits for another stays `queued` out of its queue's order (the
//! scheduler never sees it) until every job it waits for has ended as it asks; when one ends
//! otherwise, it fails naming that dependency (or, when that job was cancelled, is cancelled
//! with it). Judged when a job leaves memory, at the end of the command that ended it, so every
//! replica releases and fails the same dependents in the same order.

use super::command::{RejectKind, Response};
use super::machine::{Applied, State, reject};
use super::transition::move_job;
use crate::model::{
    Dependency, DependencyCondition, DependencyVerdict, EventKind, Job, JobId, JobPolicies, JobState, QueueName,
};
use crate::record::{PolicyJob, SubmitPoliciesRecord};
use std::collections::HashSet;

impl State {
    /// Checks a submission's dependencies before anything is stored: each names a live job, a
    /// job that had ended when the leader read it (with how), or an earlier job the command
    /// creates (not one whose client id makes it an earlier submission's job).
    pub(super) fn check_dependencies(&self, queue: &QueueName, jobs: &[PolicyJob]) -> Result<(), Response> {
        let mut earlier: HashSet<JobId> = HashSet::new();
        let mut client_ids: HashSet<&str> = HashSet::new();
        for (i, j) in jobs.iter().enumerate() {
            for (k, d) in j.policies.depends_on.iter().enumerate() {
                let known = self.jobs.contains_key(&d.job_id) || d.ended.is_some() || earlier.contains(&d.job_id);
                if !known {
                    return Err(reject(
                        RejectKind::Conflict,
                        Some(&format!("jobs[{i}].depends_on[{k}].job_id")),
                        format!(
                            "job {} is neither live nor known to have ended (it may have ended while this submission \
                             was made): submit again",
                            d.job_id
                        ),
                    ));
                }
            }
            let new = match j.job.job.client_id.as_deref() {
                Some(c) => !self.client_ids.contains_key(&(queue.clone(), c.to_string())) && client_ids.insert(c),
                None => true,
            };
            if new {
                earlier.insert(j.job.job.id);
            }
        }
        Ok(())
    }

    /// A new job's policies: each dependency on a live job waits; one on an ended job is judged
    /// at once. Answers the policies and the first dependency that can never be met, with how its
    /// job ended.
    pub(super) fn new_policies(
        &self,
        p: SubmitPoliciesRecord,
    ) -> (Option<Box<JobPolicies>>, Option<(Dependency, JobState)>) {
        if p.is_empty() {
            return (None, None);
        }
        let mut unmet = None;
        let mut depends_on = Vec::with_capacity(p.depends_on.len());
        for d in p.depends_on {
            let on = DependencyCondition::from(d.on);
            let mut dep = Dependency { job_id: d.job_id, on, met: false };
            let ended = if self.jobs.contains_key(&d.job_id) { None } else { d.ended.map(JobState::from) };
            if let Some(end) = ended {
                match on.verdict(end) {
                    DependencyVerdict::Met => dep.met = true,
                    _ => {
                        unmet.get_or_insert((dep, end));
                    }
                }
            }
            depends_on.push(dep);
        }
        let policies = JobPolicies { depends_on, retry: p.retry.map(Into::into), not_before_ms: None };
        (Some(Box::new(policies)), unmet)
    }

    /// Judges the dependents of every job that ended in this command (and of those that end in
    /// turn because of it), in the order they ended.
    pub(super) fn judge_dependents(&mut self, out: &mut Applied) {
        let mut next = 0;
        while next < out.ended_parents.len() {
            let (parent, end, at_ms) = out.ended_parents[next];
            next += 1;
            let waiting: Vec<JobId> =
                self.dependents.get(&parent).map(|s| s.iter().copied().collect()).unwrap_or_default();
            for id in waiting {
                self.judge_dependency(out, id, parent, end, at_ms);
            }
        }
        out.ended_parents.clear();
    }

    /// Judges job `id`'s dependency on `parent`, which ended as `end`.
    fn judge_dependency(&mut self, out: &mut Applied, id: JobId, parent: JobId, end: JobState, at_ms: i64) {
        let Some(job) = self.jobs.get(&id) else { return };
        let Some(dep) = job.record.waiting_on_job(parent) else { return };
        match dep.on.verdict(end) {
            DependencyVerdict::Met => {
                let record = job.record.clone();
                self.update_job(out, id, at_ms, |r| {
                    if let Some(p) = r.policies.as_mut() {
                        p.depends_on.iter_mut().filter(|d| d.job_id == parent).for_each(|d| d.met = true);
                    }
                });
                let still = self.jobs.get(&id).and_then(|j| j.record.waiting_on().copied());
                let message = match still {
                    Some(d) => format!("dependency {parent} ended {end}; {}", d.waiting_reason()),
                    None => format!("dependency {parent} ended {end}: dependencies met"),
                };
                self.event(out, &record, at_ms, EventKind::Queued, None, Some(message));
                out.effects.schedule = true;
            }
            DependencyVerdict::Cancelled | DependencyVerdict::Never => self.end_unmet(out, id, dep, end, at_ms),
        }
    }

    /// Ends a waiting job whose dependency `dep` can no longer be met, its job having ended as
    /// `end`: cancelled with a cancelled job, failed otherwise.
    pub(super) fn end_unmet(&mut self, out: &mut Applied, id: JobId, dep: Dependency, end: JobState, at_ms: i64) {
        if dep.on.verdict(end) == DependencyVerdict::Cancelled {
            let reason = format!("dependency {} was cancelled", dep.job_id);
            self.stop_job(out, id, JobState::Cancelled, &reason, at_ms);
        } else {
            self.fail_dependent(out, id, dep.unmet_reason(end), at_ms);
        }
    }

    /// Fails a waiting job whose dependency can no longer be met.
    fn fail_dependent(&mut self, out: &mut Applied, id: JobId, reason: String, at_ms: i64) {
        let Some(job) = self.jobs.get(&id) else { return };
        let record = job.record.clone();
        tracing::debug!(job = %id, %reason, "dependency can no longer be met");
        self.update_job(out, id, at_ms, |r| {
            move_job(r, JobState::Failed);
            r.state_reason = Some(reason.clone());
        });
        self.event(out, &record, at_ms, EventKind::Failed, None, Some(reason));
        self.policy_counts.dependency_failures += 1;
    }
}

impl Job {
    /// This job's dependency on `parent`, if it still waits for it.
    fn waiting_on_job(&self, parent: JobId) -> Option<Dependency> {
        self.policies.as_ref()?.depends_on.iter().find(|d| d.job_id == parent && !d.met).copied()
    }
}

impl State {
    /// The queued jobs waiting for another job (out of the scheduler's view), in submission
    /// order.
    pub fn waiting_jobs(&self) -> Vec<&super::LiveJob> {
        let ids: std::collections::BTreeSet<JobId> = self.dependents.values().flatten().copied().collect();
        let mut jobs: Vec<&super::LiveJob> = ids.iter().filter_map(|id| self.jobs.get(id)).collect();
        jobs.retain(|j| j.record.state == JobState::Queued && j.record.waiting_on().is_some());
        jobs.sort_by_key(|j| j.record.submit_seq);
        jobs
    }
}
