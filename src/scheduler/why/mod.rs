//! Why a queued job waits, and what would start it: the scheduler's own answer, checked by
//! running it.
//!
//! [`explain`] runs [`schedule`] on the snapshot as it is (a job the next cycle would place needs
//! nothing), then on changed copies of it, one per condition the job's reason points to: a node
//! with room for it ([`conditions`]), its queue below its fair share, its queue uncordoned, a limit
//! lifted, the rate limit refilled, the lookback reached, the rest of its gang submitted. A
//! condition is reported only if, with it met, the scheduler places the job. When none does on
//! its own, all of them together are tried. [`estimate`] then looks for the earliest end of the
//! running jobs after which the job would be placed.
//!
//! Pure, like the scheduler: the same question gives the same answer.

mod conditions;
mod estimate;
mod nodes;
#[cfg(test)]
mod tests;

use super::config::SchedulerConfig;
use super::cycle::schedule;
use super::decisions::{Decisions, Reason};
use super::snapshot::{JobInfo, Snapshot};
use crate::model::{JobId, PoolName};
use serde::Serialize;
use std::sync::Arc;

pub use estimate::{EndBasis, Estimate, RunEnd};
pub use nodes::{NodeVerdict, Verdict, node_verdicts};

/// Scheduler runs one question may cost at most (the conditions, their union, the estimate's
/// bisection), so that a why stays cheap beside a cycle.
const MAX_RUNS: usize = 32;

/// What kind of change a condition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConditionKind {
    /// Nothing: the next cycle places the job.
    NextCycle,
    /// Room for the job on one node of a pool it may use.
    Capacity,
    /// Room for a gang's members together (on nodes sharing its uniformity label, if it has one).
    GangCapacity,
    /// The rest of the job's gang submitted.
    GangComplete,
    /// The job's queue below its fair share.
    FairShare,
    /// The job's queue uncordoned.
    QueueUncordoned,
    /// The queue's resource limit lifted.
    QueueLimit,
    /// The queue's limit within the job's priority class lifted.
    PriorityClassLimit,
    /// The scheduling rate limit refilled.
    RateLimit,
    /// Fewer of its queue's jobs ahead of it than the lookback.
    Lookback,
    /// A node that passes the job's selector, affinity and tolerations.
    MatchingNode,
    /// A node offering a resource the job requests.
    Resource,
    /// Several conditions, none enough alone.
    AllOf,
}

/// One checked condition: with it met, the scheduler places the job.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Condition {
    /// What kind of change.
    pub kind: ConditionKind,
    /// The condition in words, with the figures behind it.
    pub detail: String,
    /// For `all_of`: the conditions that together start the job.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(no_recursion)]
    pub parts: Vec<Condition>,
}

impl Condition {
    pub(crate) fn new(kind: ConditionKind, detail: String) -> Self {
        Condition { kind, detail, parts: Vec::new() }
    }
}

/// The question: a queued job, and the scheduler's inputs.
#[derive(Debug, Clone, Copy)]
pub struct WhyQuestion<'a> {
    /// The state as the scheduler sees it (with the job's whole queue: no lookback cut).
    pub snapshot: &'a Snapshot,
    /// The scheduler's configuration.
    pub cfg: &'a SchedulerConfig,
    /// The seed of the runs.
    pub seed: u64,
    /// Now, in ms since the epoch.
    pub now_ms: i64,
    /// The queued job.
    pub job: JobId,
    /// When running jobs are expected to end, where known.
    pub ends: &'a [RunEnd],
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Why the job waits now, by this run of the scheduler (none if it would be placed, or is
    /// not queued in the snapshot).
    pub reason: Option<Arc<Reason>>,
    /// Conditions that would start it, each checked.
    pub would_start_if: Vec<Condition>,
    /// When it may start, if the running jobs' ends allow an estimate.
    pub estimated_start: Option<Estimate>,
    /// Scheduler runs the answer took.
    pub runs: usize,
}

/// Explains why `q.job` waits and what would start it. A job not queued in the snapshot gets an
/// empty explanation.
pub fn explain(q: &WhyQuestion<'_>) -> Explanation {
    let mut out = Explanation { reason: None, would_start_if: Vec::new(), estimated_start: None, runs: 0 };
    let Some(info) = queued_job(q.snapshot, q.job) else { return out };
    let scoped = scope_to_pools(q.snapshot, &info.pools);
    let snapshot = scoped.as_ref().unwrap_or(q.snapshot);
    let mut runner = Runner { q, runs: 0 };
    let base = runner.run(snapshot, q.cfg);
    if starts(&base, q.job) {
        out.would_start_if.push(Condition::new(
            ConditionKind::NextCycle,
            "nothing: the next scheduling cycle places it (room was freed, or it arrived after the last cycle)"
                .to_string(),
        ));
        out.estimated_start = Some(Estimate { at_ms: q.now_ms, method: "the next scheduling cycle".to_string() });
        out.runs = runner.runs;
        return out;
    }
    let reason = reason_of(&base, &info);
    let changes = conditions::candidates(snapshot, q.cfg, &base, &info, reason.as_deref());
    let mut met = each_alone(&mut runner, snapshot, q.cfg, &changes);
    if met.is_empty() {
        met.extend(behind_a_gate(&mut runner, snapshot, q.cfg, &info, &changes, reason.as_deref()));
    }
    if met.is_empty() && changes.len() > 1 && !runner.exhausted() {
        let all: Vec<&conditions::Change> = changes.iter().map(conditions::Change::widest).collect();
        let (s, c) = conditions::apply(snapshot, q.cfg, &all);
        if starts(&runner.run(&s, &c), q.job) {
            met.push(all_of(all.iter().map(|c| c.condition.clone()).collect()));
        }
    }
    out.reason = reason;
    out.would_start_if = met;
    out.estimated_start = estimate::earliest(&mut runner, snapshot, q.ends);
    out.runs = runner.runs;
    out
}

/// The changes that start the job on their own: each, or failing it its wider rungs.
fn each_alone(
    runner: &mut Runner<'_, '_>,
    snapshot: &Snapshot,
    cfg: &SchedulerConfig,
    changes: &[conditions::Change],
) -> Vec<Condition> {
    let mut met = Vec::new();
    for change in changes {
        let mut rung = Some(change);
        while let Some(c) = rung {
            if runner.exhausted() {
                return met;
            }
            let (s, cfg) = conditions::apply(snapshot, cfg, &[c]);
            if starts(&runner.run(&s, &cfg), runner.job()) {
                met.push(c.condition.clone());
                break;
            }
            rung = c.wider.as_deref();
        }
    }
    met
}

/// A condition that opens a gate (a cordon, a limit, the rate limit, the lookback) may only
/// show the next reason the job waits: with the gate open, the conditions of that reason. The
/// first pair that starts the job, as one `all_of`.
fn behind_a_gate(
    runner: &mut Runner<'_, '_>,
    snapshot: &Snapshot,
    cfg: &SchedulerConfig,
    info: &JobInfo,
    changes: &[conditions::Change],
    reason: Option<&Reason>,
) -> Option<Condition> {
    for gate in changes.iter().map(conditions::Change::widest) {
        if runner.exhausted() {
            return None;
        }
        let (s, c) = conditions::apply(snapshot, cfg, &[gate]);
        let opened = runner.run(&s, &c);
        let next = reason_of(&opened, info);
        if next.is_none() || next.as_deref() == reason {
            continue;
        }
        let behind = conditions::candidates(&s, &c, &opened, info, next.as_deref());
        if let Some(then) = each_alone(runner, &s, &c, &behind).into_iter().next() {
            return Some(all_of(vec![gate.condition.clone(), then]));
        }
    }
    None
}

/// Conditions that start the job together.
fn all_of(parts: Vec<Condition>) -> Condition {
    let detail = parts.iter().map(|p| p.detail.as_str()).collect::<Vec<_>>().join("; and ");
    Condition { kind: ConditionKind::AllOf, detail, parts }
}

/// Runs the scheduler for one question, counting the runs.
pub(crate) struct Runner<'q, 'a> {
    q: &'q WhyQuestion<'a>,
    runs: usize,
}

impl Runner<'_, '_> {
    fn run(&mut self, snapshot: &Snapshot, cfg: &SchedulerConfig) -> Decisions {
        self.runs += 1;
        schedule(snapshot, cfg, self.q.seed, self.q.now_ms)
    }

    fn run_at(&mut self, snapshot: &Snapshot, now_ms: i64) -> Decisions {
        self.runs += 1;
        schedule(snapshot, self.q.cfg, self.q.seed, now_ms)
    }

    fn exhausted(&self) -> bool {
        self.runs >= MAX_RUNS
    }

    fn job(&self) -> JobId {
        self.q.job
    }

    fn now_ms(&self) -> i64 {
        self.q.now_ms
    }

    fn runs_left(&self) -> usize {
        MAX_RUNS.saturating_sub(self.runs)
    }
}

/// True if the decisions place `job`.
fn starts(d: &Decisions, job: JobId) -> bool {
    d.leases.iter().any(|l| l.job_id == job)
}

/// The job, if it is queued in the snapshot.
fn queued_job(snapshot: &Snapshot, job: JobId) -> Option<Arc<JobInfo>> {
    snapshot.queues.iter().flat_map(|q| q.queued.iter()).find(|j| j.id == job).cloned()
}

/// Why the run left the job waiting: its own reason, or its queue's note.
fn reason_of(d: &Decisions, info: &JobInfo) -> Option<Arc<Reason>> {
    d.unscheduled
        .iter()
        .find(|u| u.job_id == info.id)
        .map(|u| u.reason.clone())
        .or_else(|| d.queue_notes.get(&info.queue).cloned())
}

/// The snapshot with only the nodes (and their running jobs) of `pools`, when the job may run in
/// only some pools: the other pools cannot start it, and skipping them keeps each run short.
fn scope_to_pools(snapshot: &Snapshot, pools: &[PoolName]) -> Option<Snapshot> {
    if pools.is_empty() || snapshot.nodes.iter().all(|n| pools.contains(&n.pool)) {
        return None;
    }
    let mut s = snapshot.clone();
    s.nodes.retain(|n| pools.contains(&n.pool));
    let kept: std::collections::BTreeSet<(&str, &str)> =
        s.nodes.iter().map(|n| (n.executor.as_str(), n.name.as_str())).collect();
    let running = std::mem::take(&mut s.running);
    s.running = running.into_iter().filter(|r| kept.contains(&(r.executor.as_str(), r.node.as_str()))).collect();
    Some(s)
}
