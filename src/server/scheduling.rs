//! The scheduling loop: on the leader only, a cycle runs when something changed (at most every
//! `schedule_interval_min`, sooner while cycles are cheap: `cycle_pace`) and at least every
//! `schedule_interval_max`. Each cycle reads a
//! snapshot of the in-memory indexes, runs the pure scheduler off the async runtime, and
//! proposes the decisions as one command carrying the leader's term.
//!
//! With `queue_usage_halftime`, cycles also run while nothing is queued (queues' usage moves on
//! whether or not anything waits), and a cycle that finds a queue's share changed since the last
//! record proposes the new record of the queues' usage with its decisions
//! (`scheduler::usage`).
//!
//! Each recorded cycle carries what it ran on beyond the replicated state (seed, the applied
//! index its snapshot was read at, the configuration's hash, the rate limiter's starting
//! buckets), and a leader records its configuration before its first cycle, so that
//! `convoy replay` can run any recorded cycle again from the log.
//!
//! A cycle whose node reservations changed since the previous one proposes the change with its
//! decisions (or alone), for the jobs' events (`reservation_events`).

use super::cycle_pace;
use super::reservation_events::{self, KeptReservations};
use crate::control::ids;
use crate::control::{Control, now_ms};
use crate::record::{RateLimiterRecord, ScheduleInputsRecord, SchedulerConfigRecord};
use crate::scheduler::{Decisions, RateLimiterState, SCHEDULER_VERSION, schedule};
use crate::state::{Command, JobVerdict, NewLease};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Runs until `shutdown` turns true.
pub(super) async fn run(app: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let cfg = app.config.scheduler.clone();
    let config_record = SchedulerConfigRecord::of(&cfg);
    // The buckets are recorded only when a rate applies: otherwise the scheduler ignores them.
    let rate_limited = cfg.maximum_scheduling_rate > 0.0 || cfg.maximum_per_queue_scheduling_rate > 0.0;
    let (min, max) = (cfg.schedule_interval_min, cfg.schedule_interval_max);
    let mut rate = RateLimiterState::default();
    let mut last = Instant::now().checked_sub(min).unwrap_or_else(Instant::now);
    // The CPU the last cycle took to read its snapshot and decide: it paces the next.
    let mut busy = Duration::ZERO;
    let mut cycle: u64 = 0;
    let mut leading = false;
    // The applied index the last cycle saw: an idle cycle is only worth running after a change.
    let mut seen_applied = 0;
    // The reservations whose changes were last committed (none for a new leader).
    let mut kept = KeptReservations::new();
    loop {
        let timer = tokio::select! {
            _ = app.notify.schedule.notified() => false,
            _ = tokio::time::sleep(max) => true,
            _ = shutdown.changed() => false,
        };
        if *shutdown.borrow() {
            break;
        }
        // With nothing queued a cycle can neither place nor usefully preempt anything; skipping
        // it keeps the next submission from waiting out the minimum interval. Usage decay needs
        // the cycles all the same: they record when a queue's share changes. The queue reports
        // come from cycles, so after runs ended an idle cycle still runs, on the slow timer only.
        let decay = !cfg.queue_usage_halftime.is_zero();
        let applied = app.cluster.applied_index();
        if !decay && app.state().queues().all(|q| q.queued.is_empty()) && !(timer && applied != seen_applied) {
            continue;
        }
        seen_applied = applied;
        let (since, hold) = (last.elapsed(), cycle_pace::hold(min, busy));
        if since < hold {
            tokio::time::sleep(hold - since).await;
        }
        last = Instant::now();
        // Only a leader that a majority follows and that applied everything committed before its
        // term decides: anything else may decide on a state that is already out of date.
        if !app.cluster.serving() {
            leading = false;
            kept.clear();
            continue;
        }
        if !leading {
            // A new leader starts with full token buckets: the old leader's are not replicated.
            rate = RateLimiterState::default();
            leading = true;
        }
        let term = app.cluster.term();
        // Replay finds each cycle's configuration in the state: record it before the first cycle
        // it governs (a new leader's, or a changed one's).
        if app.state().scheduler_config().map(|c| &c.hash) != Some(&config_record.hash) {
            let cmd = Command::RecordSchedulerConfig { term, config: config_record.clone() };
            if let Err(e) = app.write(cmd).await {
                tracing::warn!(error = %e, "the scheduler configuration was not recorded; no cycle runs until it is");
                continue;
            }
        }
        let read_from = Instant::now();
        let ((snapshot, snapshot_index, cycles), read_cpu) =
            crate::thread_cpu::measure(|| cycle_snapshot(&app, &cfg, &rate));
        let (c, now, seed) = (cfg.clone(), now_ms(), cycle ^ (term << 40));
        let inputs = ScheduleInputsRecord {
            cycle: cycles + 1,
            seed,
            snapshot_index,
            config_hash: config_record.hash.clone(),
            scheduler_version: SCHEDULER_VERSION,
            rate_limits: rate_limited.then(|| RateLimiterRecord::from(&rate)),
        };
        let started = Instant::now();
        let decide = move || crate::thread_cpu::measure(|| schedule(&snapshot, &c, seed, now));
        let (decisions, decide_cpu) = match tokio::task::spawn_blocking(decide).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "scheduling cycle failed");
                continue;
            }
        };
        let took = started.elapsed();
        busy = match read_cpu.zip(decide_cpu) {
            Some((read, decide)) => {
                crate::metrics::global().scheduling_cpu.inc_by((read + decide).as_secs_f64());
                read + decide
            }
            None => read_from.elapsed(),
        };
        cycle += 1;
        rate = decisions.rate_limits.clone();
        record(&app, &decisions, took);
        let usage = decisions
            .usage
            .as_ref()
            .filter(|u| app.state().queue_usage().differs_in_current(u))
            .map(|u| Command::RecordUsage { term, usage: u.clone().into() });
        let (reserved, next_kept) = reservation_events::changes(&kept, &decisions, term, now);
        if commit(&app, &decisions, decisions_command(&decisions, term, now, inputs), usage, reserved, took).await {
            kept = next_kept;
        }
    }
}

/// Proposes a cycle's decisions (`cmd`) with the usage record and the reservation changes that
/// follow from them, in one log entry; only the last two, if the cycle decided nothing. True when
/// the reservation changes (if any) were committed.
async fn commit(
    app: &Control,
    decisions: &Decisions,
    cmd: Command,
    usage: Option<Command>,
    reserved: Option<Command>,
    took: Duration,
) -> bool {
    if decisions.leases.is_empty() && decisions.preemptions.is_empty() && decisions.failures.is_empty() {
        if let Some(cmd) = usage
            && let Err(e) = app.propose(cmd).await
        {
            tracing::warn!(error = %e, "queue usage was not recorded");
        }
        let Some(cmd) = reserved else { return true };
        return match app.write(cmd).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "reservation changes were not recorded");
                false
            }
        };
    }
    let Command::Schedule { term, inputs, .. } = &cmd else { return false };
    tracing::info!(
        cycle = inputs.as_ref().map(|i| i.cycle),
        term,
        leases = decisions.leases.len(),
        preemptions = decisions.preemptions.len(),
        failures = decisions.failures.len(),
        reservation_changes = reserved.is_some(),
        cycle_ms = took.as_secs_f64() * 1000.0,
        "scheduling decisions"
    );
    // After the decisions: a job they leased gets no reservation event.
    let extra: Vec<Command> = usage.into_iter().chain(reserved).collect();
    let cmd = if extra.is_empty() { cmd } else { Command::Batch(std::iter::once(cmd).chain(extra).collect()) };
    // Counted once committed and accepted (a rejected write, e.g. of a stale term, is not).
    let proposed = Instant::now();
    match app.write(cmd).await {
        Ok(_) => {
            let m = crate::metrics::global();
            m.scheduling_commit.observe(proposed.elapsed().as_secs_f64());
            crate::metrics::count_decisions(m, decisions);
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "scheduling decisions were not committed");
            false
        }
    }
}

/// The snapshot a cycle runs on (with the job times reservations read, when they are on), the
/// applied index it was read at, and the cycles recorded so far.
fn cycle_snapshot(
    app: &Control,
    cfg: &crate::scheduler::SchedulerConfig,
    rate: &RateLimiterState,
) -> (crate::scheduler::Snapshot, u64, u64) {
    let started = Instant::now();
    let st = app.state();
    let mut snapshot = st.scheduling_snapshot(cfg.max_queue_lookback, rate.clone());
    st.add_job_times(&mut snapshot, cfg);
    let out = (snapshot, st.applied_index(), st.cycles());
    drop(st);
    crate::metrics::global().scheduling_snapshot.observe(started.elapsed().as_secs_f64());
    out
}

/// The command that records a cycle's decisions, with a fresh run id per lease.
fn decisions_command(decisions: &Decisions, term: u64, now: i64, inputs: ScheduleInputsRecord) -> Command {
    let verdict = |job_id, reason: String| JobVerdict { job_id, reason };
    Command::Schedule {
        term,
        at_ms: now,
        leases: decisions
            .leases
            .iter()
            .map(|l| NewLease {
                job_id: l.job_id,
                run_id: ids::run_id(),
                executor: l.executor.clone(),
                node: l.node.clone(),
                pool: l.pool.clone(),
            })
            .collect(),
        preemptions: decisions.preemptions.iter().map(|p| verdict(p.job_id, p.reason.to_string())).collect(),
        failures: decisions.failures.iter().map(|f| verdict(f.job_id, f.reason.to_string())).collect(),
        inputs: Some(inputs),
    }
}

/// Keeps the cycle's reasons and shares for the API.
fn record(app: &Control, d: &Decisions, took: Duration) {
    let mut view = app.scheduling.write().unwrap_or_else(|p| p.into_inner());
    view.reasons = d.unscheduled.iter().map(|u| (u.job_id, u.reason.clone())).collect();
    view.queue_notes = d.queue_notes.iter().map(|(q, r)| (q.clone(), r.clone())).collect();
    view.pools = d.pools.clone();
    view.cycles += 1;
    view.last_cycle_ms = took.as_secs_f64() * 1000.0;
    view.rate_limits = d.rate_limits.clone();
    view.reservations = d.reservations.clone();
    drop(view);
    crate::metrics::global().scheduling_cycle.observe(took.as_secs_f64());
}
