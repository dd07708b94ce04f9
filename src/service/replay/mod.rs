//! Replay of recorded scheduling cycles (`convoy replay`). Every cycle a leader records carries
//! what it ran on beyond the replicated state ([`crate::record::ScheduleInputsRecord`]: seed, the
//! applied index its snapshot was read at, the configuration's hash, the rate limiter's starting
//! buckets). Replay copies a data directory's log and snapshot files, starts from the newest
//! state at or before the first chosen cycle (a snapshot file, or the empty state when the log
//! still starts at its first entry), applies the log's entries as the servers applied them, and at
//! each chosen cycle's applied index runs [`crate::scheduler::schedule`] again with the recorded
//! inputs, comparing its decisions with the recorded ones.
//!
//! Exact only with the same scheduler version (`SCHEDULER_VERSION`, recorded per cycle) on the
//! same architecture: the fair-share arithmetic is floating point.

pub(crate) mod api;
mod compare;
mod log;

use crate::model::JobId;
use crate::record::{SchedulerConfigRecord, short_hex};
use crate::scheduler::why::{NodeVerdict, node_verdicts};
use crate::scheduler::{Decisions, RateLimiterState, SCHEDULER_VERSION, SchedulerConfig, schedule};
use crate::service::data_dir::DataDirError;
use crate::state::{ApplyContext, State, StateSettings};
use crate::store::StoreError;
use log::{Base, Copied, LoggedCycle};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Which recorded cycles to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleSelector {
    /// Every cycle the log still holds.
    All,
    /// The cycle with this number.
    Cycle(u64),
    /// The cycle recorded at this log index, or the first after it.
    Index(u64),
    /// The last cycle run at or before this time (ms since the epoch).
    At(i64),
}

/// What to replay.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// A server's data directory (live or a copy; it is only read).
    pub data_dir: PathBuf,
    /// Which cycles.
    pub select: CycleSelector,
    /// Explain this job's fate in each replayed cycle (with [`CycleSelector::All`]: only the
    /// cycles whose decisions name it).
    pub job: Option<JobId>,
    /// Replay every cycle under this configuration instead of the recorded ones.
    pub config: Option<SchedulerConfig>,
}

/// How a cycle's replay went.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The same decisions.
    Identical,
    /// The first difference, in words.
    Differs(String),
    /// Why it could not be replayed.
    NotReplayable(String),
}

/// One replayed cycle.
#[derive(Debug, Clone)]
pub struct CycleReport {
    /// The index of the log entry holding its decisions.
    pub index: u64,
    /// The term of the leader that ran it.
    pub term: u64,
    /// When it ran (ms since the epoch).
    pub at_ms: i64,
    /// Its number (`None`: recorded before log format 10).
    pub cycle: Option<u64>,
    /// The applied index its snapshot was read at.
    pub snapshot_index: Option<u64>,
    /// The decisions did not apply: the leader had lost its term when they were committed.
    pub stale: bool,
    /// How the replay went.
    pub verdict: Verdict,
    /// The job's fate in the replayed cycle (with [`ReplayRequest::job`]).
    pub fate: Option<JobFate>,
}

/// One job's fate in a replayed cycle.
#[derive(Debug, Clone)]
pub struct JobFate {
    /// Where the job stood as the cycle began.
    pub before: String,
    /// What the cycle did with it.
    pub outcome: String,
    /// For a queued job: every node of its pools, and what each said.
    pub nodes: Vec<NodeVerdict>,
}

/// What a replay covered.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// Each chosen cycle, in log order.
    pub cycles: Vec<CycleReport>,
    /// The entries the log holds.
    pub held: Option<(u64, u64)>,
    /// The state replay started from: the applied index of a snapshot, or `None` for the empty
    /// state.
    pub base: Option<Option<u64>>,
    /// The configuration given instead of the recorded ones, with its hash.
    pub override_hash: Option<String>,
}

impl ReplayReport {
    /// Cycles replayed identically, differing, and not replayable.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for r in &self.cycles {
            match r.verdict {
                Verdict::Identical => c.0 += 1,
                Verdict::Differs(_) => c.1 += 1,
                Verdict::NotReplayable(_) => c.2 += 1,
            }
        }
        c
    }
}

/// Why a replay could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The data directory could not be read or copied.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// The copy of the log could not be read.
    #[error("reading the copy of the raft log")]
    Log(#[source] std::io::Error),
    /// The state of a snapshot could not be rebuilt.
    #[error("rebuilding a snapshot's state")]
    Store(#[source] StoreError),
    /// A snapshot file could not be read.
    #[error("reading a snapshot file: {0}")]
    Snapshot(String),
}

/// Replays the chosen cycles of `req.data_dir`.
pub fn replay(req: &ReplayRequest) -> Result<ReplayReport, ReplayError> {
    let copied = Copied::take(&req.data_dir)?;
    let (logged, mut configs) = copied.scan()?;
    let chosen = choose(&logged, req);
    let mut report = ReplayReport {
        cycles: vec![],
        held: copied.held,
        base: None,
        override_hash: req.config.as_ref().map(|c| short_hex(&SchedulerConfigRecord::of(c).hash, 8)),
    };
    // The cycles that can run, by the applied index they read.
    let mut pending: BTreeMap<u64, Vec<&LoggedCycle>> = BTreeMap::new();
    for c in &chosen {
        match &c.inputs {
            Some(i) => pending.entry(i.snapshot_index).or_default().push(c),
            None => report.cycles.push(not_replayable(c, "recorded before log format 10: its inputs are unknown")),
        }
    }
    let Some(first) = pending.keys().next().copied() else { return Ok(finish(report)) };
    // A base serves if the log holds every entry after it. The newest such base at or before the
    // first cycle's read; failing that, the oldest (the cycles before it cannot be run).
    let usable = |b: &&Base| {
        let start = b.index.map_or(0, |i| i + 1);
        copied.held.is_some_and(|(f, l)| f <= start && start <= l + 1)
    };
    let base = copied.bases.iter().filter(usable).rfind(|b| b.index.is_none_or(|i| i <= first));
    let Some(base) = base.or_else(|| copied.bases.iter().find(usable)) else {
        for c in pending.into_values().flatten() {
            report.cycles.push(not_replayable(c, "the log no longer holds the entries after any snapshot kept"));
        }
        return Ok(finish(report));
    };
    report.base = Some(base.index);
    let mut state = copied.load(base)?;
    if let Some(c) = state.scheduler_config() {
        configs.insert(c.hash.clone(), c.clone());
    }
    let book = ConfigBook::new(&configs, req.config.as_ref());
    if let Some(b) = base.index {
        let early: Vec<u64> = pending.range(..b).map(|(k, _)| *k).collect();
        for c in early.into_iter().flat_map(|k| pending.remove(&k).unwrap_or_default()) {
            report.cycles.push(not_replayable(c, "it read a state older than the oldest snapshot kept"));
        }
    }
    let start = base.index.map_or(0, |i| i + 1);
    let end = pending.keys().next_back().copied().unwrap_or(start);
    let held_from_start = copied.held.is_some_and(|(f, _)| f <= start);
    let mut run = |state: &mut State, at: u64, report: &mut ReplayReport| {
        for c in pending.remove(&at).unwrap_or_default() {
            report.cycles.push(run_cycle(state, c, &book, req.job));
        }
    };
    if let Some(b) = base.index {
        run(&mut state, b, &mut report);
    }
    if held_from_start && start <= end {
        let end = end.min(copied.held.map_or(0, |(_, l)| l));
        let mut next = start;
        copied.each_command(start, end, |index, term, cmd| {
            // The cycles that read the state as of the entries before this one.
            while next < index {
                run(&mut state, next, &mut report);
                next += 1;
            }
            state.apply(cmd, ApplyContext { term });
            state.set_applied_index(index);
        })?;
        while next <= end {
            run(&mut state, next, &mut report);
            next += 1;
        }
    }
    let gap = (!held_from_start).then_some(start);
    for c in pending.into_values().flatten() {
        let why = match gap {
            Some(i) => format!("the log does not hold entry {i}, which follows the snapshot"),
            None => "the log does not hold the entries up to the state it read".to_string(),
        };
        report.cycles.push(not_replayable(c, &why));
    }
    Ok(finish(report))
}

fn finish(mut report: ReplayReport) -> ReplayReport {
    report.cycles.sort_by_key(|c| c.index);
    report
}

/// The cycles `req` chooses, in log order.
fn choose<'l>(logged: &'l [LoggedCycle], req: &ReplayRequest) -> Vec<&'l LoggedCycle> {
    match req.select {
        CycleSelector::All => match req.job {
            Some(job) => logged.iter().filter(|c| names(c, job)).collect(),
            None => logged.iter().collect(),
        },
        CycleSelector::Cycle(n) => logged.iter().filter(|c| c.inputs.as_ref().is_some_and(|i| i.cycle == n)).collect(),
        CycleSelector::Index(i) => logged.iter().find(|c| c.index >= i).into_iter().collect(),
        CycleSelector::At(t) => logged.iter().rfind(|c| c.at_ms <= t).into_iter().collect(),
    }
}

/// Whether the cycle's decisions name `job`.
fn names(c: &LoggedCycle, job: JobId) -> bool {
    let r = &c.recorded;
    r.leases.iter().any(|l| l.job_id == job)
        || r.preemptions.iter().any(|p| p.job_id == job)
        || r.failures.iter().any(|f| f.job_id == job)
}

fn not_replayable(c: &LoggedCycle, why: &str) -> CycleReport {
    CycleReport {
        index: c.index,
        term: c.term,
        at_ms: c.at_ms,
        cycle: c.inputs.as_ref().map(|i| i.cycle),
        snapshot_index: c.inputs.as_ref().map(|i| i.snapshot_index),
        stale: c.term != c.entry_term,
        verdict: Verdict::NotReplayable(why.to_string()),
        fate: None,
    }
}

/// The configurations cycles ran with, read (and their state settings made) once each; or the one
/// given instead of them.
struct ConfigBook {
    recorded: BTreeMap<Vec<u8>, Result<(SchedulerConfig, StateSettings), String>>,
    instead: Option<(SchedulerConfig, StateSettings)>,
}

impl ConfigBook {
    fn new(records: &log::Configs, instead: Option<&SchedulerConfig>) -> ConfigBook {
        let with_settings = |c: SchedulerConfig| {
            let settings = StateSettings::from_config(&c);
            (c, settings)
        };
        ConfigBook {
            recorded: records
                .iter()
                .map(|(hash, r)| (hash.clone(), r.config().map(with_settings).map_err(|e| e.to_string())))
                .collect(),
            instead: instead.cloned().map(with_settings),
        }
    }

    /// The configuration of a cycle recorded with `hash`, or why there is none.
    fn get(&self, hash: &[u8]) -> Result<&(SchedulerConfig, StateSettings), String> {
        if let Some(c) = &self.instead {
            return Ok(c);
        }
        match self.recorded.get(hash) {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!(
                "its configuration {} is neither in the log nor in the snapshot it starts from",
                short_hex(hash, 8)
            )),
        }
    }
}

/// Runs one cycle on `state` (as of the cycle's applied index) and compares.
fn run_cycle(state: &mut State, c: &LoggedCycle, book: &ConfigBook, job: Option<JobId>) -> CycleReport {
    let Some(inputs) = &c.inputs else { return not_replayable(c, "no inputs") };
    let (cfg, settings) = match book.get(&inputs.config_hash) {
        Ok(c) => c,
        Err(why) => return not_replayable(c, &why),
    };
    if state.settings() != settings {
        state.change_settings(settings.clone());
    }
    let rate = inputs.rate_limits.as_ref().map(RateLimiterState::from).unwrap_or_default();
    let mut snapshot = state.scheduling_snapshot(cfg.max_queue_lookback, rate);
    // Reservations are not recorded: the times they rest on are the state's, recomputed here.
    state.add_job_times(&mut snapshot, cfg);
    let decisions = schedule(&snapshot, cfg, inputs.seed, c.at_ms);
    let mut verdict = match compare::first_difference(&c.recorded, &decisions) {
        None => Verdict::Identical,
        Some(d) => Verdict::Differs(d),
    };
    if inputs.scheduler_version != SCHEDULER_VERSION
        && let Verdict::Differs(d) = &mut verdict
    {
        d.push_str(&format!(
            " (recorded by scheduler version {}, replayed by version {SCHEDULER_VERSION})",
            inputs.scheduler_version
        ));
    }
    let fate = job.map(|job| fate(state, &snapshot, cfg, &decisions, job, c.at_ms));
    CycleReport {
        index: c.index,
        term: c.term,
        at_ms: c.at_ms,
        cycle: Some(inputs.cycle),
        snapshot_index: Some(inputs.snapshot_index),
        stale: c.term != c.entry_term,
        verdict,
        fate,
    }
}

/// `job`'s fate in a replayed cycle.
fn fate(
    state: &State,
    snapshot: &crate::scheduler::Snapshot,
    cfg: &SchedulerConfig,
    d: &Decisions,
    job: JobId,
    now_ms: i64,
) -> JobFate {
    let running = snapshot.running.iter().find(|r| r.job.id == job);
    let queued = snapshot.queues.iter().flat_map(|q| &q.queued).find(|j| j.id == job);
    let before = match (running, state.queue_place(job)) {
        (Some(r), _) => format!("running on {}/{}", r.executor, r.node),
        (None, Some(place)) => {
            let lookback = cfg.max_queue_lookback;
            let within = if lookback == 0 || place.position <= lookback as u64 {
                "within the lookback".to_string()
            } else {
                format!("beyond the lookback of {lookback}: not tried")
            };
            format!(
                "queued, position {} in its queue ({} ahead in its pools), {within}",
                place.position, place.ahead_in_its_pools
            )
        }
        (None, None) => "neither queued nor running".to_string(),
    };
    let outcome = if let Some(l) = d.leases.iter().find(|l| l.job_id == job) {
        format!("placed on {}/{} in pool {}", l.executor, l.node, l.pool)
    } else if let Some(p) = d.preemptions.iter().find(|p| p.job_id == job) {
        format!("{} (it ran on {}/{})", p.reason, p.executor, p.node)
    } else if let Some(f) = d.failures.iter().find(|f| f.job_id == job) {
        format!("failed: {}", f.reason)
    } else if let Some(u) = d.unscheduled.iter().find(|u| u.job_id == job) {
        format!("tried, stays queued: {}", u.reason)
    } else if running.is_some() {
        "kept running".to_string()
    } else if let Some(note) = queued.and_then(|j| d.queue_notes.get(&j.queue)) {
        format!("not tried: {note}")
    } else {
        "not tried".to_string()
    };
    let nodes = queued.map(|j| node_verdicts(snapshot, cfg, j, now_ms)).unwrap_or_default();
    JobFate { before, outcome, nodes }
}
