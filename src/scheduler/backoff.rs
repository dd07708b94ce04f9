//! Retry back-off: a queued job whose `not_before_ms` is still ahead of the cycle's `now` is not
//! offered to the cycle, and waits with [`Reason::RetryBackoff`]. The snapshot is copied without
//! those jobs only when there are any, so a cycle without back-offs pays one look per queued job.

use super::decisions::{Reason, Unscheduled};
use super::snapshot::Snapshot;
use std::sync::Arc;

/// The snapshot without the queued jobs held back at `now_ms`, with why each waits; `None` when
/// no job is held back.
pub(super) fn hold_back(snapshot: &Snapshot, now_ms: i64) -> Option<(Snapshot, Vec<Unscheduled>)> {
    let held = |t: Option<i64>| t.is_some_and(|t| t > now_ms);
    if !snapshot.queues.iter().any(|q| q.queued.iter().any(|j| held(j.not_before_ms))) {
        return None;
    }
    let mut waiting = Vec::new();
    let mut copy = snapshot.clone();
    for q in &mut copy.queues {
        q.queued.retain(|j| match j.not_before_ms {
            Some(until_ms) if until_ms > now_ms => {
                waiting.push(Unscheduled { job_id: j.id, reason: Arc::new(Reason::RetryBackoff { until_ms }) });
                false
            }
            _ => true,
        });
    }
    Some((copy, waiting))
}
