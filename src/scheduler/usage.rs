//! Usage decay (HTCondor's priority decay, as Armada's docs describe it): with
//! `queue_usage_halftime` `h` above 0, the cost that orders queues in progressive filling is not
//! a queue's current share of the pool but a moving average of it, so a queue that has just used
//! much of the pool goes after one that has not, even once its jobs have ended.
//!
//! After `Δt`, with `β = 0.5^(Δt/h)`: `usage ← usage·β + current·(1−β)`. The old value's weight
//! halves every `h`, so the average approaches the current usage with half-time `h`, and over a
//! long gap it becomes the current usage. (Armada's doc writes the weights the other way round,
//! `usage·(1−β) + current·β`; with that, a long gap would freeze the old value and a short one
//! replace it at once, the opposite of a decay with half-time `h`.)
//!
//! `current` is the share the queue held over `Δt`: a [`QueueUsage`] records, with the average,
//! the share each queue holds after the cycle that recorded it, which is what the average moves
//! towards until the next record. Over any stretch of constant usage one step is the same as many
//! (`β` multiplies), so a new record is needed only when some queue's share changed
//! ([`QueueUsage::differs_in_current`]): the leader records one then, through the Raft log, and
//! every member holds the same value.
//!
//! A queue's cost in a cycle is its average plus what the cycle's placements add to its share
//! (`PoolCycle::start_usage`, in `build.rs`; the record, `usage_record` in `outcome.rs`); with `h = 0` the average is the current share and the cost is
//! exactly the instantaneous one. Fair-share eviction and protection still judge actual shares.

use crate::model::{PoolName, QueueName};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// One queue's usage of one pool, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UsageSample {
    /// The moving average of the queue's share of the pool (unweighted, 0 to 1) at the record's
    /// time.
    pub usage: f64,
    /// The queue's share of the pool from the record's time on (after that cycle's decisions):
    /// what the average moves towards until the next record.
    pub current: f64,
}

/// Every queue's usage of every pool, as of one time. Part of the replicated state.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueUsage {
    /// When it was recorded (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// Per pool, per queue.
    pub pools: BTreeMap<PoolName, BTreeMap<QueueName, UsageSample>>,
}

/// Averages below this are dropped from records (a queue idle for about 30 half-times).
pub(super) const FORGOTTEN: f64 = 1e-9;

/// Two shares closer than this are the same (they come from the same integer amounts).
const SAME_SHARE: f64 = 1e-12;

/// The moving average `elapsed_ms` after it was `usage`, the queue having used `current` since:
/// `usage·β + current·(1−β)`, `β = 0.5^(Δt/h)`. With `h = 0`, `current`.
pub fn decay(usage: f64, current: f64, elapsed_ms: i64, halftime: Duration) -> f64 {
    if halftime.is_zero() {
        return current;
    }
    let beta = 0.5f64.powf(elapsed_ms.max(0) as f64 / 1000.0 / halftime.as_secs_f64());
    usage * beta + current * (1.0 - beta)
}

impl QueueUsage {
    /// The moving average of `queue`'s usage of `pool` at `now_ms`, if recorded.
    pub fn at(&self, pool: &PoolName, queue: &QueueName, now_ms: i64, halftime: Duration) -> Option<f64> {
        let s = self.pools.get(pool)?.get(queue)?;
        Some(decay(s.usage, s.current, now_ms - self.at_ms, halftime))
    }

    /// True if `next` has to be recorded instead of this: a queue's current usage changed, or a
    /// queue or pool came or went. Otherwise this record goes on giving the same averages.
    pub fn differs_in_current(&self, next: &QueueUsage) -> bool {
        self.pools.len() != next.pools.len()
            || self.pools.iter().zip(&next.pools).any(|((p, a), (q, b))| {
                p != q
                    || a.len() != b.len()
                    || a.iter().zip(b).any(|((x, s), (y, t))| x != y || (s.current - t.current).abs() > SAME_SHARE)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutorName, JobId, Node, NodeName, PriorityClassName, Queue, Requirements, Resources};
    use crate::scheduler::{JobInfo, QueueSnapshot, RunningJob, SchedulerConfig, Snapshot, schedule};
    use std::sync::Arc;

    const H: Duration = Duration::from_secs(3600);
    const H_MS: i64 = 3_600_000;

    #[test]
    fn decay_halves_the_old_value_every_halftime() {
        assert_eq!(decay(0.5, 0.0, H_MS, H), 0.25);
        assert_eq!(decay(0.5, 0.0, 2 * H_MS, H), 0.125);
        assert_eq!(decay(0.25, 0.0, H_MS, H), 0.125, "two steps of h are one of 2h");
        assert_eq!(decay(0.0, 0.8, H_MS, H), 0.4, "it approaches the current usage");
        assert_eq!(decay(0.3, 0.3, 17, H), 0.3, "constant usage stays");
        assert!(decay(0.9, 0.1, 100 * H_MS, H) - 0.1 < 1e-15, "a long gap forgets");
        assert_eq!(decay(0.9, 0.1, 0, H), 0.9);
        assert_eq!(decay(0.9, 0.1, 5, Duration::ZERO), 0.1, "no half-time: the current usage");
    }

    fn pool() -> PoolName {
        PoolName::default_pool()
    }
    fn q(name: &str) -> QueueName {
        QueueName::new(name).unwrap()
    }

    /// Two 4-cpu nodes; queue A runs `running` one-cpu jobs on node a; queue B queues one job so
    /// that cycles run.
    fn snapshot(running: u64, usage: &QueueUsage) -> Snapshot {
        let node = |name: &str| Node {
            name: NodeName::new(name).unwrap(),
            executor: ExecutorName::new("e").unwrap(),
            pool: pool(),
            labels: Default::default(),
            taints: vec![],
            allocatable: Resources::parse([("cpu", "4")]).unwrap(),
            unallocatable: Resources::new(),
            unschedulable: false,
        };
        let job = |id: u64, queue: &str| {
            Arc::new(JobInfo {
                id: JobId::from_u128(id.into()),
                queue: q(queue),
                priority_class: PriorityClassName::new("default").unwrap(),
                priority: 0,
                submit_seq: id,
                requirements: Requirements::new(crate::model::SchedulingRequirements {
                    requests: Resources::parse([("cpu", "1")]).unwrap(),
                    ..Default::default()
                }),
                gang: None,
                pools: vec![],
                not_before_ms: None,
            })
        };
        Snapshot {
            nodes: vec![node("a"), node("b")],
            queues: vec![
                QueueSnapshot { queue: Queue::new(q("A"), 1.0), queued: vec![], queued_demand: None },
                // B's job needs more than a node: it waits, and keeps the cycles running.
                QueueSnapshot {
                    queue: Queue::new(q("B"), 1.0),
                    queued: vec![Arc::new(JobInfo {
                        requirements: Requirements::new(crate::model::SchedulingRequirements {
                            requests: Resources::parse([("cpu", "64")]).unwrap(),
                            ..Default::default()
                        }),
                        ..(*job(100, "B")).clone()
                    })],
                    queued_demand: None,
                },
            ],
            running: (1..=running)
                .map(|i| RunningJob {
                    job: job(i, "A"),
                    executor: ExecutorName::new("e").unwrap(),
                    node: NodeName::new("a").unwrap(),
                    leased_at_ms: 0,
                })
                .collect(),
            usage: usage.clone(),
            ..Default::default()
        }
    }

    fn a_usage(d: &crate::scheduler::Decisions) -> (f64, f64) {
        let u = d.usage.as_ref().expect("usage recorded");
        let s = u.pools[&pool()][&q("A")];
        let shown = d.pools[0].queues.iter().find(|s| s.queue.as_str() == "A").map(|s| s.usage);
        if let Some(shown) = shown {
            assert_eq!(shown, s.usage, "the report shows the average the cycle ordered by");
        }
        (s.usage, s.current)
    }

    /// The worked example: a queue that has used half the cluster for a long time and then stops
    /// costs 0.25 one half-time later and 0.125 two half-times later.
    #[test]
    fn half_the_cluster_then_nothing_decays_to_a_quarter_then_an_eighth() {
        let cfg = SchedulerConfig { queue_usage_halftime: H, ..Default::default() };
        let t0 = 1_000_000_000;
        // First cycle: no record yet, so the average starts at A's current share.
        let d = schedule(&snapshot(4, &QueueUsage::default()), &cfg, 0, t0);
        assert_eq!(a_usage(&d), (0.5, 0.5));
        // Far later, A still running half the cluster: still 0.5.
        let d = schedule(&snapshot(4, d.usage.as_ref().unwrap()), &cfg, 0, t0 + 50 * H_MS);
        assert_eq!(a_usage(&d), (0.5, 0.5));
        // A's jobs end; the next cycle (at once) records that it uses nothing now.
        let stop = t0 + 50 * H_MS;
        let d = schedule(&snapshot(0, d.usage.as_ref().unwrap()), &cfg, 0, stop);
        assert_eq!(a_usage(&d), (0.5, 0.0));
        let recorded = d.usage.clone().unwrap();
        let after_h = schedule(&snapshot(0, &recorded), &cfg, 0, stop + H_MS);
        assert!((a_usage(&after_h).0 - 0.25).abs() < f64::EPSILON, "{:?}", a_usage(&after_h));
        // Two half-times from the same record, or one more from the record after one.
        let after_2h = schedule(&snapshot(0, &recorded), &cfg, 0, stop + 2 * H_MS);
        assert!((a_usage(&after_2h).0 - 0.125).abs() < f64::EPSILON, "{:?}", a_usage(&after_2h));
        let chained = schedule(&snapshot(0, after_h.usage.as_ref().unwrap()), &cfg, 0, stop + 2 * H_MS);
        assert!((a_usage(&chained).0 - 0.125).abs() < f64::EPSILON, "{:?}", a_usage(&chained));
        // The state holds the record; it says the same between cycles.
        assert_eq!(recorded.at(&pool(), &q("A"), stop + H_MS, H), Some(0.25));
    }

    #[test]
    fn no_halftime_records_nothing_and_costs_are_current_shares() {
        let d = schedule(&snapshot(4, &QueueUsage::default()), &SchedulerConfig::default(), 0, 5);
        assert_eq!(d.usage, None);
        let a = d.pools[0].queues.iter().find(|s| s.queue.as_str() == "A").unwrap();
        assert_eq!(a.usage, a.actual_share);
    }

    #[test]
    fn a_record_is_needed_only_when_a_current_share_changes() {
        let sample = |usage, current| UsageSample { usage, current };
        let rec = |at_ms, a: UsageSample| QueueUsage {
            at_ms,
            pools: [(pool(), [(q("A"), a)].into_iter().collect())].into_iter().collect(),
        };
        let old = rec(0, sample(0.1, 0.5));
        assert!(!old.differs_in_current(&rec(9, sample(0.4, 0.5))), "only the average moved");
        assert!(old.differs_in_current(&rec(9, sample(0.4, 0.25))));
        assert!(old.differs_in_current(&QueueUsage::default()));
        let mut two = rec(9, sample(0.1, 0.5));
        two.pools.get_mut(&pool()).unwrap().insert(q("B"), sample(0.0, 0.1));
        assert!(old.differs_in_current(&two));
    }
}
