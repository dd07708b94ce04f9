//! Runs: scheduling decisions, what executors report, and executors going away.

use super::changes::Change;
use super::command::{JobVerdict, NewLease, ReportedEvent, Response, RunReport, RunReportKind};
use super::log_tail::{MAX_LOG_TAIL, last_bytes};
use super::machine::{Applied, Executor, State};
use super::transition::{move_job, move_run};
use crate::model::{EventKind, ExecutorName, JobId, JobState, Run, RunState, annotations};
use crate::record::{ExecutorRecord, NodeRecord};
use crate::scheduler::{NodeFailure, QuarantinePolicy};

impl State {
    pub(super) fn schedule(
        &mut self,
        at_ms: i64,
        leases: Vec<NewLease>,
        preemptions: Vec<JobVerdict>,
        failures: Vec<JobVerdict>,
        out: &mut Applied,
    ) -> Response {
        let (mut leased, mut preempted, mut failed) = (0u32, 0u32, 0u32);
        for l in leases {
            let Some(job) = self.jobs.get(&l.job_id) else { continue };
            // The job may have been cancelled since the snapshot, or the node may be gone.
            if job.record.state != JobState::Queued || self.runs.contains_key(&l.run_id) {
                continue;
            }
            let node_known = self.executors.get(&l.executor).is_some_and(|e| e.has_node(&l.node));
            if !node_known {
                continue;
            }
            let set = (job.record.queue.clone(), job.record.job_set.clone());
            let run = Run {
                run_id: l.run_id,
                executor: l.executor.clone(),
                node: l.node.clone(),
                pool: l.pool.clone(),
                state: RunState::Leased,
                leased_at_ms: at_ms,
                pending_at_ms: None,
                running_at_ms: None,
                finished_at_ms: None,
                exit_code: None,
                reason: None,
                message: None,
                kill: None,
                log_tail: None,
                pod: None,
            };
            self.update_job(out, l.job_id, at_ms, |r| {
                move_job(r, JobState::Leased);
                r.state_reason = None;
                r.runs.push(run);
            });
            out.changes.push(Change::IndexRun { run: l.run_id, job: l.job_id });
            self.event_of(
                out,
                l.job_id,
                set,
                at_ms,
                EventKind::Leased,
                Some(l.run_id),
                Some(format!("node {} of executor {}", l.node, l.executor)),
            );
            out.effects.executors.insert(l.executor);
            leased += 1;
        }
        for p in preemptions {
            let active = self.jobs.get(&p.job_id).is_some_and(|j| j.record.state.is_active());
            if active {
                self.stop_job(out, p.job_id, JobState::Preempted, &p.reason, at_ms);
                preempted += 1;
            }
        }
        for f in failures {
            let Some(job) = self.jobs.get(&f.job_id) else { continue };
            if job.record.state != JobState::Queued {
                continue;
            }
            let record = job.record.clone();
            self.update_job(out, f.job_id, at_ms, |r| {
                move_job(r, JobState::Failed);
                r.state_reason = Some(f.reason.clone());
            });
            self.event(out, &record, at_ms, EventKind::Failed, None, Some(f.reason));
            failed += 1;
        }
        Response::Scheduled { leased, preempted, failed }
    }

    pub(super) fn upsert_executor(
        &mut self,
        name: ExecutorName,
        nodes: Vec<NodeRecord>,
        at_ms: i64,
        out: &mut Applied,
    ) -> Response {
        let record = ExecutorRecord { name: name.clone(), nodes, updated_at_ms: at_ms };
        out.changes.push(Change::PutExecutor(record.clone()));
        self.executors.insert(name, Executor::from(record));
        self.refresh_largest_node();
        out.effects.schedule = true;
        Response::Ok
    }

    /// Applies run events; a failure its node is to blame for (`Some` fault) counts against the
    /// node under `policy`, unless the run was being stopped (its end is then the stop's).
    pub(super) fn run_events(
        &mut self,
        executor: &ExecutorName,
        at_ms: i64,
        events: Vec<ReportedEvent>,
        max_attempted_runs: u32,
        policy: QuarantinePolicy,
        out: &mut Applied,
    ) -> Response {
        let mut accepted = 0u32;
        for ReportedEvent { report: ev, node_fault, pod, usage } in events {
            let Some(&id) = self.runs.get(&ev.run_id) else { continue };
            let Some(job) = self.jobs.get(&id) else { continue };
            let Some(run) = job.record.active_run() else { continue };
            if &run.executor != executor || ev.job_id != id {
                continue;
            }
            accepted += 1;
            let record = job.record.clone();
            let run_id = run.run_id;
            let killing = run.kill.is_some();
            let node_failure = node_fault.is_some();
            // Counted once the event is applied (below); a stopped run's end is the stop's doing.
            let against_node = node_fault
                .filter(|_| !killing && matches!(ev.kind, RunReportKind::Failed | RunReportKind::Returned))
                .map(|fault| (fault, (run.executor.clone(), run.node.clone())));
            // The pod, whenever the agent names one (it does with `pending` and `running`).
            if let Some(pod) = pod.filter(|p| run.pod.as_ref() != Some(p)) {
                self.update_job(out, id, at_ms, |r| {
                    if let Some(run) = r.active_run_mut() {
                        run.pod = Some(pod);
                    }
                });
            }
            let Some(run) = self.jobs.get(&id).and_then(|j| j.record.active_run()) else { continue };
            match ev.kind {
                RunReportKind::Pending => {
                    if run.state != RunState::Leased {
                        continue;
                    }
                    self.update_job(out, id, at_ms, |r| {
                        if let Some(run) = r.active_run_mut() {
                            move_run(run, RunState::Pending);
                            run.pending_at_ms = Some(at_ms);
                        }
                        if r.state == JobState::Leased {
                            move_job(r, JobState::Pending);
                        }
                    });
                    self.event(out, &record, at_ms, EventKind::Pending, Some(run_id), ev.message.clone());
                }
                RunReportKind::Running => {
                    if run.state == RunState::Running {
                        continue;
                    }
                    self.update_job(out, id, at_ms, |r| {
                        if let Some(run) = r.active_run_mut() {
                            move_run(run, RunState::Running);
                            run.pending_at_ms.get_or_insert(at_ms);
                            run.running_at_ms = Some(at_ms);
                        }
                        if matches!(r.state, JobState::Leased | JobState::Pending) {
                            move_job(r, JobState::Running);
                        }
                    });
                    self.event(out, &record, at_ms, EventKind::Running, Some(run_id), ev.message.clone());
                }
                RunReportKind::Failed
                    if let Some(retry) =
                        self.retry_of(&record, &ev, killing, node_failure, at_ms, max_attempted_runs) =>
                {
                    self.retry_run(out, id, &ev, retry, usage, at_ms);
                }
                RunReportKind::Succeeded | RunReportKind::Failed => {
                    let succeeded = ev.kind == RunReportKind::Succeeded;
                    let mut final_state = record.state;
                    let tail = ev.log_tail.as_deref().map(truncate_tail);
                    self.update_job(out, id, at_ms, |r| {
                        let stopped_as = r.state;
                        if let Some(run) = r.active_run_mut() {
                            move_run(run, ended_run_state(killing, stopped_as, succeeded));
                            run.finished_at_ms = Some(at_ms);
                            run.exit_code = ev.exit_code;
                            run.reason = ev.reason.clone();
                            run.message = ev.message.clone();
                            run.log_tail = tail;
                        }
                        if !r.state.is_terminal() {
                            move_job(r, if succeeded { JobState::Succeeded } else { JobState::Failed });
                            if !succeeded {
                                r.state_reason = Some(failure_reason(&ev));
                            }
                        }
                        final_state = r.state;
                    });
                    let kind = match final_state {
                        JobState::Succeeded => EventKind::Succeeded,
                        JobState::Cancelled => EventKind::Cancelled,
                        JobState::Preempted => EventKind::Preempted,
                        _ => EventKind::Failed,
                    };
                    let message =
                        if succeeded && kind == EventKind::Succeeded { None } else { Some(failure_reason(&ev)) };
                    self.event(out, &record, at_ms, kind, Some(run_id), message);
                    if let Some(usage) = usage {
                        out.changes.push(Change::PutRunUsage { run: run_id, usage });
                    }
                    out.effects.schedule = true;
                }
                RunReportKind::Returned => {
                    let reason = ev.reason.clone().unwrap_or_else(|| "the run never started on its node".to_string());
                    self.lose_run(out, id, at_ms, &reason, max_attempted_runs);
                }
            }
            if let Some((fault, node)) = against_node {
                self.count_node_failure(node, NodeFailure { at_ms, fault, job: id }, &policy, out);
            }
        }
        Response::Accepted(accepted)
    }

    /// Ends a job's active run as lost: the job goes back to the queue (a new run next time)
    /// unless it has had `max_attempted_runs` runs, in which case it fails.
    fn lose_run(&mut self, out: &mut Applied, id: JobId, at_ms: i64, reason: &str, max_attempted_runs: u32) {
        let Some(job) = self.jobs.get(&id) else { return };
        let record = job.record.clone();
        let Some(run) = record.active_run() else { return };
        let run_id = run.run_id;
        let attempts = record.attempts();
        // Armada's failFast: a run that is lost is not retried (the annotation was checked at
        // submission, so reading it here is deterministic).
        let fail_fast = annotations::is_fail_fast(&record.annotations);
        let give_up = if fail_fast {
            Some(format!("{reason}; not retried: the job is fail-fast ({})", annotations::FAIL_FAST.armada))
        } else if attempts >= max_attempted_runs as usize {
            Some(format!("{reason}; gave up after {attempts} attempted runs (max_attempted_runs)"))
        } else {
            None
        };
        let mut outcome = record.state;
        self.update_job(out, id, at_ms, |r| {
            if let Some(run) = r.active_run_mut() {
                move_run(run, RunState::Lost);
                run.finished_at_ms = Some(at_ms);
                run.reason = Some(reason.to_string());
            }
            if !r.state.is_terminal() {
                if let Some(why) = give_up.clone() {
                    move_job(r, JobState::Failed);
                    r.state_reason = Some(why);
                } else {
                    move_job(r, JobState::Queued);
                    r.state_reason = None;
                }
            }
            outcome = r.state;
        });
        let (kind, message) = match outcome {
            JobState::Queued => (EventKind::Requeued, format!("run lost: {reason}")),
            JobState::Failed if fail_fast => {
                (EventKind::Failed, format!("run lost: {reason}; not retried: the job is fail-fast"))
            }
            JobState::Failed => {
                (EventKind::Failed, format!("run lost: {reason}; gave up after {attempts} attempted runs"))
            }
            JobState::Cancelled => (EventKind::Cancelled, format!("run lost: {reason}")),
            _ => (EventKind::Preempted, format!("run lost: {reason}")),
        };
        self.event(out, &record, at_ms, kind, Some(run_id), Some(message));
        out.effects.schedule = true;
    }

    pub(super) fn executor_lost(
        &mut self,
        executor: &ExecutorName,
        at_ms: i64,
        max_attempted_runs: u32,
        out: &mut Applied,
    ) -> Response {
        let jobs: Vec<JobId> = self.by_executor.get(executor).map(|s| s.keys().copied().collect()).unwrap_or_default();
        for id in jobs {
            self.lose_run(out, id, at_ms, &format!("executor {executor} lost"), max_attempted_runs);
        }
        self.by_executor.remove(executor);
        if self.executors.remove(executor).is_some() {
            out.changes.push(Change::DeleteExecutor(executor.clone()));
            self.refresh_largest_node();
        }
        out.effects.schedule = true;
        Response::Ok
    }
}

fn failure_reason(ev: &RunReport) -> String {
    match (&ev.reason, ev.exit_code, &ev.message) {
        (Some(r), Some(c), _) => format!("{r} (exit code {c})"),
        (Some(r), None, _) => r.clone(),
        (None, Some(c), _) => format!("exit code {c}"),
        (None, None, Some(m)) => m.clone(),
        (None, None, None) => "failed".to_string(),
    }
}

fn truncate_tail(s: &str) -> String {
    last_bytes(s, MAX_LOG_TAIL).to_string()
}

/// How a run its executor reported over ends: as its job's stop if it was being stopped, else as
/// it exited.
fn ended_run_state(killing: bool, stopped_as: JobState, succeeded: bool) -> RunState {
    match (killing, stopped_as, succeeded) {
        (true, JobState::Preempted, _) => RunState::Preempted,
        (true, JobState::Cancelled, _) => RunState::Cancelled,
        (_, _, true) => RunState::Succeeded,
        _ => RunState::Failed,
    }
}
