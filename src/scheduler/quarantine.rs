//! Node quarantine: a node whose runs fail for reasons of the node ([`NodeFault`]) at least
//! `max_failures` times within `window` gets no new placements for `duration`.
//!
//! The counting is pure and takes its times from the caller: the state machine passes the time
//! of the command that reported the failure (chosen by the leader), the simulator its round
//! clock. A quarantine is judged at a time too: it holds while `now < until`.

use crate::model::duration::serde_text;
use crate::model::{FieldError, JobId, NodeFault};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// `[scheduler.quarantine]` (and `quarantine` in a simulation's config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuarantineConfig {
    /// Failures of a node (for reasons of the node) within `window` that quarantine it; 0 turns
    /// quarantine off.
    pub max_failures: u32,
    /// How far back failures count.
    #[serde(with = "serde_text", alias = "window_seconds")]
    pub window: Duration,
    /// How long a quarantine lasts.
    #[serde(with = "serde_text", alias = "duration_seconds")]
    pub duration: Duration,
}

impl Default for QuarantineConfig {
    fn default() -> Self {
        Self { max_failures: 0, window: Duration::from_secs(600), duration: Duration::from_secs(1800) }
    }
}

impl QuarantineConfig {
    /// True unless `max_failures` is 0.
    pub fn enabled(&self) -> bool {
        self.max_failures > 0
    }

    /// The policy as commands carry it (whole milliseconds).
    pub fn policy(&self) -> QuarantinePolicy {
        QuarantinePolicy {
            max_failures: self.max_failures,
            window_ms: u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX),
            duration_ms: u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Checks the rules; the error names the key (within `quarantine`).
    pub fn validate(&self) -> Result<(), FieldError> {
        if !self.enabled() {
            return Ok(());
        }
        if self.window.as_millis() < 1 {
            return Err(FieldError::new("quarantine.window", "must be at least 1ms when max_failures is set"));
        }
        if self.duration.as_millis() < 1 {
            return Err(FieldError::new("quarantine.duration", "must be at least 1ms when max_failures is set"));
        }
        Ok(())
    }
}

/// The quarantine settings in force when a failure was reported, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuarantinePolicy {
    /// Failures within the window that quarantine the node (0: off, nothing is counted).
    pub max_failures: u32,
    /// Length of the window.
    pub window_ms: u64,
    /// Length of a quarantine.
    pub duration_ms: u64,
}

/// One failure of a node, as counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    /// When it was reported (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// What went wrong.
    pub fault: NodeFault,
    /// The job whose run failed.
    pub job: JobId,
}

/// A node's quarantine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    /// When it began (ms since the epoch).
    pub since_ms: i64,
    /// When it ends: the node takes new runs again from then on.
    pub until_ms: i64,
    /// Why, for people: the failures that led to it.
    pub reason: String,
}

/// A node's recent failures and quarantine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeHealth {
    /// Failures counted since the last quarantine began (or was lifted), oldest first; those
    /// older than the window are dropped when the next one comes.
    pub failures: Vec<NodeFailure>,
    /// The latest quarantine (it may be over: see [`NodeHealth::quarantined_at`]).
    pub quarantine: Option<Quarantine>,
}

/// Ends `at + len` ms, saturating.
fn after(at_ms: i64, len_ms: u64) -> i64 {
    at_ms.saturating_add(i64::try_from(len_ms).unwrap_or(i64::MAX))
}

impl NodeHealth {
    /// The quarantine in force at `now_ms`, if any.
    pub fn quarantined_at(&self, now_ms: i64) -> Option<&Quarantine> {
        self.quarantine.as_ref().filter(|q| now_ms < q.until_ms)
    }

    /// Failures within the window ending at `now_ms`.
    pub fn failures_within(&self, now_ms: i64, window_ms: u64) -> usize {
        let from = now_ms.saturating_sub(i64::try_from(window_ms).unwrap_or(i64::MAX));
        self.failures.iter().filter(|f| f.at_ms > from && f.at_ms <= now_ms).count()
    }

    /// Counts a failure reported at `failure.at_ms` under `policy`. Failures older than the
    /// window (`at_ms <= now - window`) are dropped first. Reaching `max_failures` quarantines
    /// the node from now until `now + duration` and starts the count afresh. A node in
    /// quarantine counts nothing (its runs from before may still fail). Returns true if this
    /// failure began a quarantine.
    pub fn record(&mut self, failure: NodeFailure, policy: &QuarantinePolicy) -> bool {
        let now = failure.at_ms;
        if policy.max_failures == 0 || self.quarantined_at(now).is_some() {
            return false;
        }
        if self.quarantine.is_some() {
            // Over: nothing left to show.
            self.quarantine = None;
        }
        let from = now.saturating_sub(i64::try_from(policy.window_ms).unwrap_or(i64::MAX));
        self.failures.retain(|f| f.at_ms > from);
        self.failures.push(failure);
        if self.failures.len() < policy.max_failures as usize {
            return false;
        }
        let reason = describe(&self.failures, policy.window_ms);
        self.quarantine = Some(Quarantine { since_ms: now, until_ms: after(now, policy.duration_ms), reason });
        self.failures.clear();
        true
    }

    /// True when nothing is left worth keeping at `now_ms`: no quarantine in force and no
    /// failure within the window.
    pub fn is_spent(&self, now_ms: i64, window_ms: u64) -> bool {
        self.quarantined_at(now_ms).is_none() && self.failures_within(now_ms, window_ms) == 0
    }
}

/// "3 failures of the node within 10m: image_pull ×2, not_started ×1; the last of job …".
fn describe(failures: &[NodeFailure], window_ms: u64) -> String {
    let mut by_fault: BTreeMap<NodeFault, usize> = BTreeMap::new();
    for f in failures {
        *by_fault.entry(f.fault).or_default() += 1;
    }
    let window = crate::model::duration::format_duration(Duration::from_millis(window_ms));
    let mut out = format!("{} failures of the node within {window}:", failures.len());
    for (i, (fault, n)) in by_fault.iter().enumerate() {
        let _ = write!(out, "{} {fault} ×{n}", if i == 0 { "" } else { "," });
    }
    if let Some(last) = failures.last() {
        let _ = write!(out, "; the last one: job {}", last.job);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn policy(max: u32) -> QuarantinePolicy {
        QuarantinePolicy { max_failures: max, window_ms: 10 * MIN as u64, duration_ms: 30 * MIN as u64 }
    }

    fn fail(at_ms: i64, fault: NodeFault) -> NodeFailure {
        NodeFailure { at_ms, fault, job: JobId::from_u128(at_ms as u128) }
    }

    #[test]
    fn threshold_within_the_window_quarantines_for_the_duration() {
        let p = policy(3);
        let mut h = NodeHealth::default();
        assert!(!h.record(fail(0, NodeFault::ImagePull), &p));
        assert!(!h.record(fail(5 * MIN, NodeFault::NotStarted), &p));
        assert_eq!(h.failures_within(5 * MIN, p.window_ms), 2);
        assert!(h.quarantined_at(5 * MIN).is_none());
        // The third within 10 minutes of the first: quarantined from now for 30 minutes.
        assert!(h.record(fail(10 * MIN - 1, NodeFault::ImagePull), &p));
        let q = h.quarantined_at(10 * MIN - 1).expect("quarantined");
        assert_eq!((q.since_ms, q.until_ms), (10 * MIN - 1, 40 * MIN - 1));
        assert_eq!(
            q.reason,
            format!(
                "3 failures of the node within 10m: not_started ×1, image_pull ×2; the last one: job {}",
                JobId::from_u128((10 * MIN - 1) as u128)
            )
        );
        assert!(h.failures.is_empty(), "the count starts afresh");
        // In force up to the last millisecond before `until`, over at `until`.
        assert!(h.quarantined_at(40 * MIN - 2).is_some());
        assert!(h.quarantined_at(40 * MIN - 1).is_none());
        assert!(h.is_spent(40 * MIN - 1, p.window_ms));
    }

    #[test]
    fn failures_older_than_the_window_do_not_count() {
        let p = policy(3);
        let mut h = NodeHealth::default();
        h.record(fail(0, NodeFault::NodeLost), &p);
        h.record(fail(MIN, NodeFault::NodeLost), &p);
        // Exactly one window after the first: the first no longer counts (the window is
        // (now - 10m, now]).
        assert!(!h.record(fail(10 * MIN, NodeFault::NodeLost), &p));
        assert_eq!(h.failures.iter().map(|f| f.at_ms).collect::<Vec<_>>(), vec![MIN, 10 * MIN]);
        assert!(h.record(fail(10 * MIN + 1, NodeFault::NodeLost), &p));
    }

    #[test]
    fn nothing_counts_during_a_quarantine_and_counting_resumes_after_it() {
        let p = policy(2);
        let mut h = NodeHealth::default();
        h.record(fail(0, NodeFault::NodePressure), &p);
        assert!(h.record(fail(1, NodeFault::NodePressure), &p));
        // During the quarantine (until 30m + 1ms): ignored.
        assert!(!h.record(fail(2, NodeFault::NodePressure), &p));
        assert!(!h.record(fail(30 * MIN, NodeFault::NodePressure), &p));
        assert!(h.failures.is_empty());
        // After it: counted again from zero; the old quarantine is gone from the record.
        assert!(!h.record(fail(30 * MIN + 1, NodeFault::NodePressure), &p));
        assert!(h.quarantine.is_none());
        assert!(h.record(fail(30 * MIN + 2, NodeFault::NodePressure), &p));
        assert_eq!(h.quarantined_at(30 * MIN + 2).map(|q| q.until_ms), Some(60 * MIN + 2));
    }

    #[test]
    fn off_counts_nothing() {
        let mut h = NodeHealth::default();
        for t in 0..10 {
            assert!(!h.record(fail(t, NodeFault::NotStarted), &policy(0)));
        }
        assert_eq!(h, NodeHealth::default());
        // One failure is enough with max_failures = 1.
        assert!(h.record(fail(0, NodeFault::NotStarted), &policy(1)));
    }

    #[test]
    fn config_keys_and_defaults() {
        let c = QuarantineConfig::default();
        assert!(!c.enabled());
        assert_eq!(c.policy(), QuarantinePolicy { max_failures: 0, window_ms: 600_000, duration_ms: 1_800_000 });
        // The server's keys (durations as text) and the simulator's (seconds).
        let c: QuarantineConfig = toml::from_str("max_failures = 3\nwindow = \"5m\"\nduration = \"1h\"").unwrap();
        assert_eq!(c.policy(), QuarantinePolicy { max_failures: 3, window_ms: 300_000, duration_ms: 3_600_000 });
        let c: QuarantineConfig =
            serde_yaml_ng::from_str("{max_failures: 3, window_seconds: 600, duration_seconds: 1800}").unwrap();
        assert_eq!(c.policy(), QuarantinePolicy { max_failures: 3, window_ms: 600_000, duration_ms: 1_800_000 });
        assert!(serde_yaml_ng::from_str::<QuarantineConfig>("{max_failure: 3}").is_err());
        let c = QuarantineConfig { max_failures: 1, window: Duration::ZERO, ..Default::default() };
        assert_eq!(c.validate().unwrap_err().field, "quarantine.window");
    }
    mod properties {
        use super::*;
        use crate::model::SchedulingRequirements;
        use crate::model::{ExecutorName, Node, NodeName, PoolName, Queue, QueueName, Requirements, Resources};
        use crate::scheduler::{JobInfo, QueueSnapshot, SchedulerConfig, Snapshot, schedule};
        use proptest::prelude::*;
        use std::sync::Arc;

        proptest! {
            /// Against the rule stated plainly: a failure at `t` outside any quarantine begins one
            /// exactly when the failures counted so far (those within the window ending at `t`,
            /// since the last quarantine began, and not during one) reach `max_failures`; every
            /// quarantine lasts `duration`; and no failure is counted during a quarantine.
            #[test]
            fn quarantines_follow_the_rule(
                gaps in prop::collection::vec(0i64..50, 1..60),
                max in 1u32..5,
                window in 1u64..120,
                duration in 1u64..200,
            ) {
                let p = QuarantinePolicy { max_failures: max, window_ms: window, duration_ms: duration };
                let mut h = NodeHealth::default();
                let mut t = 0i64;
                // The failures that count: at their times, outside quarantines, since the last
                // quarantine began.
                let mut counted: Vec<i64> = Vec::new();
                let mut until = i64::MIN;
                for (i, gap) in gaps.iter().enumerate() {
                    t += gap;
                    let began = h.record(NodeFailure { at_ms: t, fault: NodeFault::NotStarted, job: JobId::from_u128(i as u128) }, &p);
                    if t < until {
                        prop_assert!(!began, "counted during a quarantine at {}", t);
                        continue;
                    }
                    counted.push(t);
                    let within = counted.iter().filter(|&&c| c > t - window as i64).count();
                    prop_assert_eq!(began, within >= max as usize, "at {}: {} within the window", t, within);
                    if began {
                        until = t + duration as i64;
                        counted.clear();
                        let q = h.quarantined_at(t).expect("quarantined");
                        prop_assert_eq!((q.since_ms, q.until_ms), (t, until));
                    }
                    prop_assert!(h.failures.len() < max as usize, "at most max - 1 failures are kept");
                }
            }

            /// No new job ever goes to a node whose quarantine holds at the cycle's time, whatever
            /// the cluster; and the quarantine is ignored when it is off or over.
            #[test]
            fn no_placement_on_a_quarantined_node(
                quarantined in prop::collection::vec(prop::option::of(0i64..2_000), 1..6),
                jobs in 1usize..30,
                now in 0i64..2_000,
                on in any::<bool>(),
            ) {
                let nodes: Vec<Node> = (0..quarantined.len())
                    .map(|i| Node {
                        name: NodeName::new(&format!("n{i}")).unwrap(),
                        executor: ExecutorName::new("e").unwrap(),
                        pool: PoolName::default_pool(),
                        labels: Default::default(),
                        taints: vec![],
                        allocatable: Resources::parse([("cpu", "4")]).unwrap(),
                        unallocatable: Resources::new(),
                        unschedulable: false,
                    })
                    .collect();
                let reqs = Requirements::new(SchedulingRequirements {
                    requests: Resources::parse([("cpu", "1")]).unwrap(),
                    ..Default::default()
                });
                let queue = QueueName::new("A").unwrap();
                let queued = (0..jobs)
                    .map(|i| {
                        Arc::new(JobInfo {
                            id: JobId::from_u128(i as u128 + 1),
                            queue: queue.clone(),
                            priority_class: "default".parse().unwrap(),
                            priority: 0,
                            submit_seq: i as u64,
                            requirements: reqs.clone(),
                            gang: None,
                            pools: vec![],
                            not_before_ms: None,
                        })
                    })
                    .collect();
                let snapshot = Snapshot {
                    nodes: nodes.clone(),
                    queues: vec![QueueSnapshot { queue: Queue::new(queue, 1.0), queued, queued_demand: None }],
                    running: vec![],
                    rate_limits: Default::default(),
                    usage: Default::default(),
                    quarantined: quarantined
                        .iter()
                        .zip(&nodes)
                        .filter_map(|(u, n)| u.map(|u| ((n.executor.clone(), n.name.clone()), u)))
                        .collect(),
                    job_times: Default::default(),
                };
                let mut cfg = SchedulerConfig::default();
                cfg.quarantine.max_failures = u32::from(on);
                let d = schedule(&snapshot, &cfg, 1, now);
                let barred = |n: &NodeName| {
                    let i: usize = n.as_str()[1..].parse().unwrap();
                    on && quarantined[i].is_some_and(|u| now < u)
                };
                for l in &d.leases {
                    prop_assert!(!barred(&l.node), "a job went to quarantined node {}", l.node);
                }
                // Every node that may take jobs is used as far as it can be.
                let free = nodes.iter().filter(|n| !barred(&n.name)).count() * 4;
                prop_assert_eq!(d.leases.len(), jobs.min(free));
            }
        }
    }
}
