//! Counters of the Raft layer that openraft's metrics lack: peer RPC latency per peer and kind,
//! failed RPCs, and the leader changes this server saw.

use super::types::NodeId;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram's buckets; the last bucket is unbounded.
pub(crate) const LATENCY_BUCKETS: [f64; 12] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// A latency histogram: counts per bucket (not cumulative), count, sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    /// Observations at or below each of [`LATENCY_BUCKETS`], then above the last.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    /// Observations.
    pub count: u64,
    /// Sum of the observations, in seconds.
    pub sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        let i = LATENCY_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += seconds;
    }

    /// Observations at or below each bound, the last being all of them (Prometheus' `le`).
    #[cfg(test)]
    pub(crate) fn cumulative(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .scan(0, |acc, n| {
                *acc += n;
                Some(*acc)
            })
            .collect()
    }
}

/// Peer RPC figures of one server, shared by its network clients.
#[derive(Debug, Default)]
pub(crate) struct PeerStats {
    latency: Mutex<BTreeMap<(NodeId, &'static str), Histogram>>,
    failures: Mutex<BTreeMap<(NodeId, &'static str), u64>>,
    leader_changes: AtomicU64,
}

impl PeerStats {
    /// Records an RPC of `kind` to `peer` that got an answer after `took`.
    pub(crate) fn answered(&self, peer: NodeId, kind: &'static str, took: Duration) {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        l.entry((peer, kind)).or_default().observe(took.as_secs_f64());
    }

    /// Records an RPC of `kind` to `peer` that got no answer (unreachable, timeout, HTTP error).
    pub(crate) fn failed(&self, peer: NodeId, kind: &'static str) {
        *self.failures.lock().unwrap_or_else(|p| p.into_inner()).entry((peer, kind)).or_default() += 1;
    }

    /// Records that the leader this server knows changed.
    pub(crate) fn leader_changed(&self) {
        self.leader_changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Latency per peer and kind.
    pub(crate) fn latency(&self) -> BTreeMap<(NodeId, &'static str), Histogram> {
        self.latency.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Failed RPCs per peer and kind.
    pub(crate) fn failures(&self) -> BTreeMap<(NodeId, &'static str), u64> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Leader changes seen since this server started.
    pub(crate) fn leader_changes(&self) -> u64 {
        self.leader_changes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_add_up() {
        let s = PeerStats::default();
        s.answered(2, "append", Duration::from_micros(300));
        s.answered(2, "append", Duration::from_millis(3));
        s.answered(2, "append", Duration::from_secs(10));
        s.answered(3, "vote", Duration::from_millis(1));
        s.failed(3, "append");
        let l = s.latency();
        let h = &l[&(2, "append")];
        assert_eq!(h.count, 3);
        assert_eq!(h.buckets[0], 1); // <= 0.5 ms
        assert_eq!(h.buckets[3], 1); // <= 5 ms
        assert_eq!(h.buckets[LATENCY_BUCKETS.len()], 1); // above 2.5 s
        assert_eq!(*h.cumulative().last().unwrap(), 3);
        assert_eq!(h.cumulative()[3], 2);
        assert!((h.sum - 10.0033).abs() < 1e-9);
        assert_eq!(l[&(3, "vote")].buckets[1], 1); // exactly 1 ms is in the 1 ms bucket
        assert_eq!(s.failures()[&(3, "append")], 1);
    }
}
