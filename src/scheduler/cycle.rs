//! One scheduling cycle: for each pool, build its view ([`super::build`]), evict for fair share
//! ([`super::eviction`]), fill by progressive filling ([`super::fill`]) — or, in a pool with
//! another [`super::policy`], fill by that policy — then turn what happened into decisions
//! ([`super::outcome`]).

use super::config::SchedulerConfig;
use super::context::PoolCycle;
use super::decisions::{Decisions, Reason, Unscheduled};
use super::policy::PoolPolicy;
use super::rate_limit::RateLimits;
use super::snapshot::Snapshot;
use super::usage::QueueUsage;
use crate::model::{JobId, PoolName};
use rand_core::SeedableRng;
use rustc_hash::FxHashSet as HashSet;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Runs one scheduling cycle. Pure: the same snapshot, config, seed and `now_ms` always give the
/// same decisions.
pub fn schedule(snapshot: &Snapshot, cfg: &SchedulerConfig, seed: u64, now_ms: i64) -> Decisions {
    run(snapshot, cfg, seed, now_ms, false)
}

/// [`schedule`] through the queue tree's path even when every queue is flat (tests: it must
/// decide exactly as the flat path).
#[cfg(test)]
pub(crate) fn schedule_through_tree(snapshot: &Snapshot, cfg: &SchedulerConfig, seed: u64, now_ms: i64) -> Decisions {
    run(snapshot, cfg, seed, now_ms, true)
}

#[cfg_attr(not(test), allow(unused_variables))]
fn run(snapshot: &Snapshot, cfg: &SchedulerConfig, seed: u64, now_ms: i64, force_tree: bool) -> Decisions {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut rate = RateLimits::start(&snapshot.rate_limits, cfg, now_ms);
    let mut decisions = Decisions::default();
    let pools: BTreeSet<&PoolName> = snapshot.nodes.iter().map(|n| &n.pool).collect();
    let mut done: HashSet<JobId> = HashSet::default();
    let quarantined = snapshot.quarantined_at(cfg, now_ms);
    let mut usage = (!cfg.queue_usage_halftime.is_zero()).then(|| QueueUsage { at_ms: now_ms, ..Default::default() });
    let reserving = super::reservation::enabled(cfg);
    for pool in pools {
        // With reservations on, the first pass may end up thrown away: keep its start.
        let start = reserving.then(|| (rng.clone(), rate.clone()));
        let mut cycle = PoolCycle::new(snapshot, cfg, pool, &done, &quarantined, now_ms);
        run_pool(&mut cycle, snapshot, cfg, pool, now_ms, &mut rng, &mut rate, force_tree);
        let mut held = Vec::new();
        if let Some((rng0, rate0)) = start
            && let Some(plan) = cycle.plan_reservations(snapshot, now_ms)
        {
            (rng, rate) = (rng0, rate0);
            cycle = PoolCycle::new_reserving(snapshot, cfg, pool, &done, &quarantined, now_ms, Some(plan));
            run_pool(&mut cycle, snapshot, cfg, pool, now_ms, &mut rng, &mut rate, force_tree);
            held = cycle.finish_reservations();
        }
        if let Some(u) = usage.as_mut() {
            u.pools.insert(pool.clone(), cycle.outcome().usage_record());
        }
        cycle.outcome().finish(&mut decisions, &mut done);
        decisions.reservations.extend(held);
    }
    let held = unoffered(snapshot, now_ms, &mut decisions);
    decisions.unscheduled.extend(held);
    decisions.rate_limits = rate.finish();
    decisions.usage = usage;
    decisions
}

/// Notes the queued jobs no pool could take at all, and returns the jobs in retry back-off
/// (held out of every pool's cycle) with why each waits. One pass over the queued jobs.
fn unoffered(snapshot: &Snapshot, now_ms: i64, decisions: &mut Decisions) -> Vec<Unscheduled> {
    let pools: BTreeSet<&PoolName> = snapshot.nodes.iter().map(|n| &n.pool).collect();
    let no_pool = Arc::new(Reason::NoPool);
    let mut held = Vec::new();
    for qs in &snapshot.queues {
        let mut offered = false;
        for j in super::prefetch::ahead(&qs.queued, |j| &**j) {
            if let Some(until_ms) = super::backoff::held_until(j, now_ms) {
                held.push(Unscheduled { job_id: j.id, reason: Arc::new(super::backoff::reason(until_ms)) });
                continue;
            }
            offered = true;
            if !qs.queue.cordoned && !j.pools.is_empty() && !j.pools.iter().any(|p| pools.contains(p)) {
                decisions.unscheduled.push(Unscheduled { job_id: j.id, reason: no_pool.clone() });
            }
        }
        if !offered {
            continue;
        }
        if qs.queue.cordoned {
            let cordoned = Arc::new(Reason::QueueCordoned { queue: qs.queue.name.clone() });
            decisions.queue_notes.insert(qs.queue.name.clone(), cordoned);
        } else if pools.is_empty() {
            decisions.queue_notes.entry(qs.queue.name.clone()).or_insert_with(|| no_pool.clone());
        }
    }
    held
}

/// One pass of a pool's cycle: eviction and filling, or the pool's policy.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(test), allow(unused_variables))]
fn run_pool(
    cycle: &mut PoolCycle<'_>,
    snapshot: &Snapshot,
    cfg: &SchedulerConfig,
    pool: &PoolName,
    now_ms: i64,
    rng: &mut rand_pcg::Pcg64,
    rate: &mut RateLimits,
    force_tree: bool,
) {
    #[cfg(test)]
    if force_tree && cycle.tree.is_none() {
        cycle.force_tree();
    }
    cycle.start_usage(&snapshot.usage, now_ms);
    let policy = cfg.pools.get(pool);
    match policy.map(|p| p.policy).unwrap_or_default() {
        PoolPolicy::FairShare => {
            cycle.eviction().evict(rng);
            cycle.fill(rate);
            cycle.refill_earmarked(rate);
        }
        p @ PoolPolicy::Priority => {
            cycle.start_policy(p, policy.is_some_and(|c| c.preemption()), snapshot);
            cycle.fill_by_priority(rate);
        }
        p @ PoolPolicy::Proportional => {
            cycle.start_policy(p, policy.is_some_and(|c| c.preemption()), snapshot);
            cycle.fill_proportional(rate);
        }
    }
}
