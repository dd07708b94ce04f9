//! Retention: deleting finished jobs once `job_retention` has passed since they finished.
//!
//! Finished jobs are on disk only, so the leader reads which ones are due from its `finished`
//! index and names them in the command; applying checks the list is still current (no purge
//! applied since it was read) and deletes each job with everything that refers to it.

use super::changes::Change;
use super::command::{PurgeTarget, RejectKind, Response};
use super::machine::{Applied, State, reject};
use std::collections::HashSet;

impl State {
    pub(super) fn purge_finished(
        &mut self,
        purges: u64,
        before_ms: i64,
        jobs: Vec<PurgeTarget>,
        out: &mut Applied,
    ) -> Response {
        // A list read before another purge applied may name jobs that are gone already; deleting
        // them again would count them twice out of their job sets. Refused, it is read again.
        if purges != self.purges {
            return reject(
                RejectKind::Conflict,
                None,
                format!(
                    "the purge was planned after {purges} purges and {} were applied since then: plan it again",
                    self.purges
                ),
            );
        }
        let mut seen = HashSet::with_capacity(jobs.len());
        let mut purged = Vec::with_capacity(jobs.len());
        for t in jobs {
            // The leader sends only finished jobs of its index; these checks keep a faulty list
            // from deleting a live or recent job, or one twice.
            if t.finished_ms >= before_ms || self.jobs.contains_key(&t.job_id) || !seen.insert(t.job_id) {
                continue;
            }
            out.changes.push(Change::PurgeJob {
                job: t.job_id,
                queue: t.queue.clone(),
                job_set: t.job_set.clone(),
                finished_ms: t.finished_ms,
            });
            if let Some(client_id) = t.client_id {
                let key = (t.queue.clone(), client_id);
                // The queue may have been deleted (its client ids with it) and the id reused.
                if self.client_ids.get(&key) == Some(&t.job_id) {
                    self.client_ids.remove(&key);
                    out.changes.push(Change::DeleteClientId { queue: key.0, client_id: key.1 });
                }
            }
            let set = (t.queue, t.job_set);
            let left = match self.set_jobs.get_mut(&set) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    *n
                }
                None => 0,
            };
            if left == 0 && !self.job_sets.contains_key(&set) {
                self.set_jobs.remove(&set);
                self.event_seqs.remove(&set);
                out.changes.push(Change::ForgetJobSet { queue: set.0, job_set: set.1 });
            }
            purged.push(t.job_id);
        }
        self.purges += 1;
        out.changes.push(Change::PutPurges(self.purges));
        // The jobs table no longer tells the largest id ever used once its last job may be gone.
        if let Some(max) = self.max_job_id {
            out.changes.push(Change::PutMaxJobId(max));
        }
        Response::JobIds(purged)
    }
}
