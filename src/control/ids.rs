//! Ids chosen by the leader: ULIDs, increasing within this process so ids from one submission
//! sort in submission order, and above every job id this server has applied, so that they keep
//! increasing across leader changes even when the new leader's clock is behind the old one's.

use crate::model::{JobId, RunId};
use std::sync::Mutex;

/// The last id handed out or seen applied.
static LAST: Mutex<Option<ulid::Ulid>> = Mutex::new(None);

fn next() -> ulid::Ulid {
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let fresh = ulid::Ulid::generate();
    let id = match *last {
        // Same millisecond, or the clock is behind an id already taken: one past it. The random
        // part has 80 bits, so running out within one millisecond cannot happen in practice;
        // should it, the timestamp part moves on.
        Some(prev) if fresh <= prev => prev.increment().unwrap_or_else(|overflow| overflow),
        _ => fresh,
    };
    *last = Some(id);
    id
}

/// Makes every later id larger than `id` (called with the largest applied job id).
pub(crate) fn observe(id: JobId) {
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if last.is_none_or(|l| l < id.ulid()) {
        *last = Some(id.ulid());
    }
}

/// A new job id.
pub(crate) fn job_id() -> JobId {
    JobId::from_ulid(next())
}

/// A new run id.
pub(crate) fn run_id() -> RunId {
    RunId::from_ulid(next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_increasing() {
        let ids: Vec<_> = (0..1000).map(|_| job_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn ids_stay_above_an_observed_id_from_a_clock_that_is_ahead() {
        // An id from a leader whose clock is an hour ahead of ours.
        let ahead = ulid::Ulid::from_parts(ulid::Ulid::generate().timestamp_ms() + 3_600_000, 7);
        observe(JobId::from_ulid(ahead));
        let next = job_id();
        assert!(next.ulid() > ahead, "{next:?} is not above {ahead:?}");
        // Observing an older id changes nothing.
        observe(JobId::from_parts(1, 1));
        assert!(job_id() > next);
    }
}
