//! What a scheduling cycle ran on beyond the replicated state, so that it can be run again
//! (`convoy replay`): the inputs a [`super::Command::Schedule`] carries from log format 10, and the
//! scheduler configuration a leader records before its first cycle ([`super::Command::RecordSchedulerConfig`],
//! kept in the `scheduler_config` meta row).

use crate::model::QueueName;
use crate::scheduler::{RateLimiterState, SchedulerConfig, TokenBucket};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The inputs of one scheduling cycle that the state does not hold. Format: log format 10.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleInputsRecord {
    /// The cycle's number in the cluster: one more than the last recorded cycle's.
    pub cycle: u64,
    /// The seed the scheduler's random draws came from.
    pub seed: u64,
    /// The index of the last log entry applied to the state the cycle read: replay rebuilds the
    /// state as of that entry (later entries, even of the same batch, came after the read).
    pub snapshot_index: u64,
    /// SHA-256 of the scheduler configuration's canonical JSON ([`SchedulerConfigRecord::of`]).
    pub config_hash: Vec<u8>,
    /// [`crate::scheduler::SCHEDULER_VERSION`] of the binary that ran the cycle.
    pub scheduler_version: u32,
    /// The rate limiter's buckets as the cycle started, when a scheduling rate is set (they live
    /// in the leader's memory only).
    pub rate_limits: Option<RateLimiterRecord>,
}

/// The rate limiter's token buckets. Format: log format 10.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimiterRecord {
    /// The global bucket.
    pub global: TokenBucketRecord,
    /// Each queue's bucket.
    pub queues: BTreeMap<QueueName, TokenBucketRecord>,
}

/// One token bucket. Format: log format 10.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBucketRecord {
    /// Tokens left, in thousandths.
    pub milli_tokens: i64,
    /// When it was last refilled (ms since the epoch); `None`: never used.
    pub updated_ms: Option<i64>,
}

/// A scheduler configuration as a leader ran cycles with it. Format: log format 10, state schema
/// 10 (the `scheduler_config` meta row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerConfigRecord {
    /// SHA-256 of `json`.
    pub hash: Vec<u8>,
    /// [`crate::scheduler::SCHEDULER_VERSION`] of the binary that recorded it.
    pub scheduler_version: u32,
    /// The version of the binary that recorded it (`CARGO_PKG_VERSION`).
    pub binary_version: String,
    /// The `[scheduler]` section as canonical JSON: serde's field order, maps sorted. JSON rather
    /// than a positional record: the section gains keys from release to release, and a newer
    /// binary still reads an older one's (missing keys take their defaults).
    pub json: String,
}

/// Why a recorded configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigRecordError {
    /// The JSON does not hash to the recorded hash.
    #[error("the recorded scheduler configuration does not match its hash")]
    HashMismatch,
    /// The JSON is not a configuration this binary knows (a newer binary's key, a bad value).
    #[error("the recorded scheduler configuration cannot be read by this binary: {0}")]
    Unreadable(String),
}

impl SchedulerConfigRecord {
    /// The record of `cfg`.
    pub fn of(cfg: &SchedulerConfig) -> Self {
        // Serializing a config of plain fields and sorted maps cannot fail.
        let json = serde_json::to_string(cfg).unwrap_or_default();
        SchedulerConfigRecord {
            hash: sha256(json.as_bytes()),
            scheduler_version: crate::scheduler::SCHEDULER_VERSION,
            binary_version: env!("CARGO_PKG_VERSION").to_string(),
            json,
        }
    }

    /// The configuration, checked against its hash.
    pub fn config(&self) -> Result<SchedulerConfig, ConfigRecordError> {
        if sha256(self.json.as_bytes()) != self.hash {
            return Err(ConfigRecordError::HashMismatch);
        }
        serde_json::from_str(&self.json).map_err(|e| ConfigRecordError::Unreadable(e.to_string()))
    }
}

/// The SHA-256 of the canonical JSON of `cfg`, as [`SchedulerConfigRecord::of`] records it.
pub fn config_hash(cfg: &SchedulerConfig) -> Vec<u8> {
    SchedulerConfigRecord::of(cfg).hash
}

/// A hash as lower-case hex, shortened to its first `n` bytes.
pub fn short_hex(hash: &[u8], n: usize) -> String {
    hash.iter().take(n).map(|b| format!("{b:02x}")).collect()
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().to_vec()
}

impl From<TokenBucket> for TokenBucketRecord {
    fn from(b: TokenBucket) -> Self {
        let TokenBucket { milli_tokens, updated_ms } = b;
        TokenBucketRecord { milli_tokens, updated_ms }
    }
}

impl From<TokenBucketRecord> for TokenBucket {
    fn from(b: TokenBucketRecord) -> Self {
        let TokenBucketRecord { milli_tokens, updated_ms } = b;
        TokenBucket { milli_tokens, updated_ms }
    }
}

impl From<&RateLimiterState> for RateLimiterRecord {
    fn from(r: &RateLimiterState) -> Self {
        RateLimiterRecord {
            global: r.global.into(),
            queues: r.queues.iter().map(|(q, b)| (q.clone(), (*b).into())).collect(),
        }
    }
}

impl From<&RateLimiterRecord> for RateLimiterState {
    fn from(r: &RateLimiterRecord) -> Self {
        RateLimiterState {
            global: r.global.into(),
            queues: r.queues.iter().map(|(q, b)| (q.clone(), (*b).into())).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_reads_back_from_its_record_as_itself() {
        let mut cfg = SchedulerConfig {
            node_eviction_probability: 0.1 + 0.2,
            protected_fraction_of_fair_share: 1.0 / 3.0,
            maximum_scheduling_rate: 7.3,
            ..Default::default()
        };
        let record = SchedulerConfigRecord::of(&cfg);
        assert_eq!(record.hash.len(), 32);
        assert_eq!(record.config().unwrap(), cfg);
        // Canonical: the same config hashes the same, another config differently.
        assert_eq!(config_hash(&cfg), record.hash);
        cfg.max_queue_lookback += 1;
        assert_ne!(config_hash(&cfg), record.hash);
    }

    #[test]
    fn a_record_from_before_the_minimum_runtime_and_floating_resources_reads_with_their_defaults() {
        // The keys of issue 31 sections 5 and 6 are left out while unset, so a configuration
        // without them records (and hashes) as before they existed...
        let json = SchedulerConfigRecord::of(&SchedulerConfig::default()).json;
        for key in ["min_runtime_before_preemption", "min_runtime_before_urgency_preemption", "floating_resources"] {
            assert!(!json.contains(key), "{key} in {json}");
        }
        // ...and an older record, which has none of them, reads with their defaults.
        let old = r#"{"priority_classes":[{"name":"default","priority":30000,"preemptible":false,"max_resource_fraction_per_queue":{}},{"name":"preemptible","priority":20000,"preemptible":true,"max_resource_fraction_per_queue":{}}],"default_priority_class":"default","node_eviction_probability":1.0,"protected_fraction_of_fair_share":1.0,"max_queue_lookback":1000,"maximum_scheduling_rate":0.0,"maximum_scheduling_burst":0,"maximum_per_queue_scheduling_rate":0.0,"maximum_per_queue_scheduling_burst":0,"dominant_resource_fairness_resources":["cpu","memory","nvidia.com/gpu"],"fairness_model":"dominant_resource","resource_cost_weights":{"cpu":1.0,"memory":0.0,"nvidia.com/gpu":0.0},"indexed_resources":["nvidia.com/gpu","cpu","memory"],"schedule_interval_min":"100ms","schedule_interval_max":"5s","quarantine":{"max_failures":0,"window":"10m","duration":"30m"},"queue_usage_halftime":"0s"}"#;
        let record = SchedulerConfigRecord {
            hash: sha256(old.as_bytes()),
            scheduler_version: 1,
            binary_version: "0.1.0".into(),
            json: old.into(),
        };
        let cfg = record.config().unwrap();
        assert_eq!(cfg.min_runtime_before_preemption, std::time::Duration::ZERO);
        assert_eq!(cfg.min_runtime_before_urgency_preemption, std::time::Duration::ZERO);
        assert!(cfg.floating_resources.is_empty());
        assert!(cfg.priority_classes.iter().all(|pc| pc.min_runtime_before_preemption.is_none()));
        // With them set, they read back as themselves.
        let mut set = SchedulerConfig {
            min_runtime_before_preemption: std::time::Duration::from_secs(60),
            min_runtime_before_urgency_preemption: std::time::Duration::from_secs(5),
            floating_resources: vec![crate::scheduler::FloatingResourceConfig {
                name: "licence/matlab".parse().unwrap(),
                pools: [("default".parse().unwrap(), "3".to_string())].into_iter().collect(),
            }],
            ..Default::default()
        };
        set.priority_classes[1].min_runtime_before_preemption = Some(std::time::Duration::from_secs(120));
        assert_eq!(SchedulerConfigRecord::of(&set).config().unwrap(), set);
    }

    #[test]
    fn a_tampered_record_is_refused() {
        let mut record = SchedulerConfigRecord::of(&SchedulerConfig::default());
        record.json = record.json.replace("1000", "1001");
        assert!(matches!(record.config(), Err(ConfigRecordError::HashMismatch)));
    }
}
