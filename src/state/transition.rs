//! One owner for job and run state transitions. Every change of a live job's state (and of its
//! active run's) is written by [`move_job`] or [`move_run`], which check it against one table of
//! legal moves, drawn from what applying commands does: a job is leased, failed or cancelled from
//! the queue; a job with a run moves on with its run's reports, is stopped, ends, or goes back
//! to the queue when the run is lost; an ended job never moves again. The indexes (per-queue
//! counts, queued order, runs per executor) follow in [`State::update_job`], the only place
//! these functions are called from.
//!
//! An illegal move is a bug in the state machine, not in its input. It must not take the server
//! down, nor make replicas disagree: it is logged as an error and written all the same (the
//! outcome before this check existed), and debug builds (the tests) stop at it.
//!
//! [`State::update_job`]: super::machine::State::update_job

use crate::model::{Job, JobState, Run, RunState};

/// The table of legal job-state moves.
fn job_move_is_legal(from: JobState, to: JobState) -> bool {
    use JobState::*;
    match from {
        Queued => matches!(to, Leased | Failed | Cancelled),
        Leased => matches!(to, Pending | Running | Succeeded | Failed | Cancelled | Preempted | Queued),
        Pending => matches!(to, Running | Succeeded | Failed | Cancelled | Preempted | Queued),
        Running => matches!(to, Succeeded | Failed | Cancelled | Preempted | Queued),
        Succeeded | Failed | Cancelled | Preempted => false,
    }
}

/// The table of legal moves of a job's active run (a run is created leased).
fn run_move_is_legal(from: RunState, to: RunState) -> bool {
    use RunState::*;
    match from {
        Leased => matches!(to, Pending | Running | Succeeded | Failed | Cancelled | Preempted | Lost),
        Pending => matches!(to, Running | Succeeded | Failed | Cancelled | Preempted | Lost),
        Running => matches!(to, Succeeded | Failed | Cancelled | Preempted | Lost),
        Succeeded | Failed | Cancelled | Preempted | Lost => false,
    }
}

/// Moves a job to `to`.
pub(super) fn move_job(job: &mut Job, to: JobState) {
    if !job_move_is_legal(job.state, to) {
        tracing::error!(job = %job.id, from = %job.state, to = %to, "illegal job state transition");
        debug_assert!(false, "illegal job state transition of {}: {} -> {}", job.id, job.state, to);
    }
    job.state = to;
}

/// Moves a job's run to `to`.
pub(super) fn move_run(run: &mut Run, to: RunState) {
    if !run_move_is_legal(run.state, to) {
        tracing::error!(run = %run.run_id, from = ?run.state, to = ?to, "illegal run state transition");
        debug_assert!(false, "illegal run state transition of {}: {:?} -> {:?}", run.run_id, run.state, to);
    }
    run.state = to;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_job_or_run_never_moves_again() {
        for from in JobState::ALL.into_iter().filter(|s| s.is_terminal()) {
            assert!(JobState::ALL.into_iter().all(|to| !job_move_is_legal(from, to)), "{from}");
        }
        use RunState::*;
        for from in [Succeeded, Failed, Cancelled, Preempted, Lost] {
            for to in [Leased, Pending, Running, Succeeded, Failed, Cancelled, Preempted, Lost] {
                assert!(!run_move_is_legal(from, to), "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn a_queued_job_is_leased_failed_or_cancelled_only() {
        let to: Vec<_> = JobState::ALL.into_iter().filter(|to| job_move_is_legal(JobState::Queued, *to)).collect();
        assert_eq!(to, vec![JobState::Leased, JobState::Failed, JobState::Cancelled]);
    }
}
