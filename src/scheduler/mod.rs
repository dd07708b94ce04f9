//! The scheduling algorithm as a pure, deterministic function: no I/O, no clock, no randomness
//! except the seeded generator built from the `seed` argument.
//!
//! `schedule(snapshot, config, seed, now_ms) -> Decisions` (`cycle.rs`) runs one cycle per pool:
//! 1. `build.rs`: the pool's view of the snapshot (`view.rs`: nodes, layout, levels, node types,
//!    interned requirements, cost model) and the cycle's jobs and queues;
//! 2. `eviction.rs`: preemptible jobs of queues above their protected share are evicted in the
//!    scheduler's view (fair-share preemption);
//! 3. `fill.rs`: progressive filling — the most urgent next gang first, then the queue whose cost
//!    ([`fairness`]: fair shares, water filling) after scheduling it is lowest — with
//!    `queue_order.rs` inside each queue; `fill_tree.rs` when the queues form a tree;
//! 4. `placement.rs`, `gang.rs` and `gang_domains.rs`: node choice through the node db
//!    (`nodedb.rs`: priority levels, tiers, best fit), the places of the evicted jobs that would
//!    return last (`return_order.rs` ranks them, `return_walk.rs` walks them), urgency
//!    preemption, limits and [`rate_limit`]s; gangs all or nothing through the ledger's undo log;
//! 5. `outcome.rs`: the [`decisions`] — leases, preemptions, failures and a reason for every job
//!    that waits — and the queues' usage record.
//!
//! The files fall in four floors, each importing only the ones below it:
//! - the steps that take the whole cycle (`impl PoolCycle` blocks): `build.rs`, `fill.rs`,
//!   `fill_tree.rs`, `placement.rs`, `gang.rs`, `earmark_placement.rs` and the other policies in
//!   `policy/`. Each of them places jobs, and one placement may displace jobs, break gangs and
//!   give room away, so it reads and changes nearly all the cycle holds (`placement.rs` says
//!   what); the build fills the cycle in;
//! - the cycle (`context.rs`): `PoolCycle` owns the pool's read-only view (`view.rs`) beside what
//!   the cycle changes: its jobs (`job.rs`), queues (`queue.rs`), the node db, the evicted jobs'
//!   return order (`return_walk.rs`), and the ledger of changes to undo or re-examine
//!   (`ledger.rs`). It lends the step objects below only the parts they use, by split borrows;
//! - the step objects with narrow borrows, which know nothing of the cycle: `Eviction`
//!   (`eviction.rs`: reads the view, jobs, gangs and queue tree; changes the queues, node db,
//!   return order, ledger and its own rounds), `Outcome` (`outcome.rs`: reads the finished
//!   cycle), `GangDomains` (`gang_domains.rs`: reads the view, jobs and node db) and the return
//!   order (`return_order.rs`, a function of the view, jobs and queues);
//! - plain data and pure algorithms, which know nothing of the cycle: inputs and outputs
//!   (`config.rs`, `snapshot.rs`, `decisions.rs`), resource vectors (`resvec.rs`), the pool's
//!   view, the jobs, queues and ledger, node types, the node db, fairness, queue order, rate
//!   limits, quarantine, usage decay, earmarks (`earmark.rs`), the queue tree (`hierarchy.rs`),
//!   a policy's per-cycle state (`policy_state.rs`) and the hint that asks the cache for the
//!   queued jobs' records ahead of the build's reads (`prefetch.rs`).
//!
//! Above the cycle, [`why`] asks the scheduler what would start a waiting job: it runs
//! `schedule` on changed copies of a snapshot and keeps the conditions that place the job.
//!
//! Nodes under [`quarantine`] at `now_ms` take no new placements, like cordoned ones.
//!
//! Queues may form a tree (`hierarchy.rs`, filled by `fill_tree.rs`): hierarchical fair shares,
//! priority offsets and fences (YuniKorn); a pool whose queues are all flat runs the flat path
//! unchanged. A pool may be scheduled by another [`policy`] (`[scheduler.pools.<pool>] policy`):
//! Determined's `priority` or `proportional`, in place of steps 2 and 3.
//!
//! Earmarked nodes (reserved for some queues, open to others' preemptible jobs as guests) are in
//! `earmark.rs` (the rules and the pool's earmarks) and `earmark_placement.rs` (the steps); the
//! decayed usage that may order queues instead of their current share, in [`usage`].
//!
//! With `gang_reservation_after` set, a pool's cycle whose first pass leaves a job waiting too
//! long for room at the head of its queue runs again with nodes reserved for it ([`reservation`]).

mod backoff;
pub(crate) mod build;
pub mod config;
pub(crate) mod context;
pub(crate) mod cycle;
pub mod decisions;
pub(crate) mod earmark;
pub(crate) mod earmark_placement;
pub(crate) mod eviction;
pub mod fairness;
pub(crate) mod fence;
pub(crate) mod fill;
pub(crate) mod fill_tree;
pub mod floating;
pub(crate) mod floating_placement;
pub(crate) mod free_max;
pub(crate) mod gang;
pub(crate) mod gang_domains;
pub(crate) mod guarantee;
pub(crate) mod hierarchy;
pub(crate) mod job;
pub(crate) mod key_set;
pub(crate) mod ledger;
pub(crate) mod min_runtime;
pub(crate) mod node_types;
pub(crate) mod nodedb;
pub(crate) mod outcome;
pub(crate) mod placement;
pub mod policy;
pub(crate) mod policy_state;
mod prefetch;
pub mod quarantine;
pub(crate) mod queue;
pub(crate) mod queue_order;
pub mod rate_limit;
pub mod reservation;
pub(crate) mod reservation_plan;
pub(crate) mod resvec;
pub(crate) mod return_order;
pub(crate) mod return_walk;
pub mod snapshot;
pub mod usage;
pub(crate) mod view;
pub mod why;

pub use config::{FairnessModel, FloatingResourceConfig, SchedulerConfig};

/// The version of the scheduling algorithm, recorded with every cycle (`convoy replay`): raise it
/// when the same snapshot, configuration, seed and time (or the same state, read into a
/// snapshot) may give other decisions, so that a replay by another binary says why it differs.
/// `tests/scenarios/` pin the decisions of this version (`simulate` tests).
///
/// 2: runs being stopped hold only the room their node has left beside its running jobs.
/// 3: evicted jobs of a queue within its guarantee floor return before other queues' (and so
/// give their places up last).
pub const SCHEDULER_VERSION: u32 = 3;
pub use cycle::schedule;
pub use decisions::{
    Decisions, Failure, FloatingUse, Lease, PoolReport, Preemption, PreemptionReason, QueueShare, Reason, Unscheduled,
};
pub use policy::{PoolPolicy, PoolPolicyConfig};
pub use quarantine::{NodeFailure, NodeHealth, Quarantine, QuarantineConfig, QuarantinePolicy};
pub use queue_order::QueueOrderKey;
pub use rate_limit::{RateLimiterState, TokenBucket};
pub use reservation_plan::{JobTimes, Reservation, ReservedNode};
pub use snapshot::{JobInfo, QueueSnapshot, RunningJob, Snapshot};
pub use usage::{QueueUsage, UsageSample};

#[cfg(test)]
mod tests;
