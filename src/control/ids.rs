//! Ids chosen by the leader: ULIDs, monotonic within this process so ids from one submission
//! sort in submission order.

use crate::model::{JobId, RunId};
use std::sync::Mutex;

static GENERATOR: Mutex<Option<ulid::Generator>> = Mutex::new(None);

fn next() -> ulid::Ulid {
    let mut g = GENERATOR.lock().unwrap_or_else(|p| p.into_inner());
    let generator = g.get_or_insert_with(ulid::Generator::new);
    match generator.generate() {
        Ok(id) => id,
        // More than 2^80 ids in one millisecond: move on to the next one.
        Err(overflow) => overflow.commit_overflow_increment(),
    }
}

/// A new job id.
pub fn job_id() -> JobId {
    JobId(next())
}

/// A new run id.
pub fn run_id() -> RunId {
    RunId(next())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_increasing() {
        let ids: Vec<_> = (0..1000).map(|_| super::job_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
