//! When a queued job may start: the earliest end of the running jobs after which the scheduler
//! would place it, where their deadlines or their job sets' recorded runtimes say when they end.
//!
//! The running jobs with a known end are taken in the order they end; the fewest that must end
//! is found by bisection over that order (ending more jobs only frees room), running the
//! scheduler at each step with the clock at the last one's end and full rate buckets. The
//! estimate assumes nothing more urgent arrives first.

use super::super::snapshot::Snapshot;
use super::{Runner, starts};
use crate::model::JobId;
use serde::Serialize;
use std::collections::BTreeSet;

/// What an expected end is based on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndBasis {
    /// The run's start plus the job's deadline (`activeDeadlineSeconds`).
    Deadline,
    /// The run's start plus the typical runtime of its job set's finished jobs.
    Runtime,
}

/// When a running job is expected to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    /// The running job.
    pub job: JobId,
    /// Its expected end (ms since the epoch).
    pub at_ms: i64,
    /// What the expectation rests on.
    pub basis: EndBasis,
}

/// An estimated start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Estimate {
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// How it was made.
    pub method: String,
}

/// The earliest end of running jobs after which the runner's job is placed, if the known ends get there.
pub(super) fn earliest(runner: &mut Runner<'_, '_>, snapshot: &Snapshot, ends: &[RunEnd]) -> Option<Estimate> {
    let running: BTreeSet<JobId> = snapshot.running.iter().map(|r| r.job.id).collect();
    let mut ends: Vec<RunEnd> = ends.iter().copied().filter(|e| running.contains(&e.job)).collect();
    ends.sort_by_key(|e| (e.at_ms, e.job));
    if ends.is_empty() {
        return None;
    }
    let placed_after = |runner: &mut Runner<'_, '_>, k: usize| {
        let gone: BTreeSet<JobId> = ends[..k].iter().map(|e| e.job).collect();
        let mut s = snapshot.clone();
        s.running.retain(|r| !gone.contains(&r.job.id));
        s.rate_limits = Default::default();
        let at = ends[k - 1].at_ms.max(runner.now_ms());
        starts(&runner.run_at(&s, at), runner.job())
    };
    // Bisection needs about log2(n) + 1 runs; give up rather than run past the budget.
    let needed = usize::BITS as usize - ends.len().leading_zeros() as usize + 1;
    if runner.runs_left() < needed || !placed_after(runner, ends.len()) {
        return None;
    }
    let (mut lo, mut hi) = (1, ends.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if placed_after(runner, mid) { hi = mid } else { lo = mid + 1 }
    }
    let ended = &ends[..lo];
    let by_deadline = ended.iter().filter(|e| e.basis == EndBasis::Deadline).count();
    let by_runtime = ended.len() - by_deadline;
    let mut bases = Vec::new();
    if by_deadline > 0 {
        bases.push(format!("{by_deadline} by {}", if by_deadline == 1 { "its deadline" } else { "their deadlines" }));
    }
    if by_runtime > 0 {
        bases.push(format!(
            "{by_runtime} by the recorded runtimes of {}",
            if by_runtime == 1 { "its job set" } else { "their job sets" }
        ));
    }
    let jobs = if lo == 1 { "running job ends" } else { "running jobs end" };
    Some(Estimate {
        at_ms: ended[lo - 1].at_ms.max(runner.now_ms()),
        method: format!("when {lo} {jobs} ({}), if nothing more urgent arrives first", bases.join(", ")),
    })
}
