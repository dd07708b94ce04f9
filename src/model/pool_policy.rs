//! How a pool is scheduled: the policy named in `[scheduler.pools.<pool>] policy`, shown in the
//! queue report.

use serde::{Deserialize, Serialize};

/// How a pool is scheduled (`[scheduler.pools.<pool>] policy`; docs/pool-policies.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PoolPolicy {
    /// Armada's dominant resource fairness by progressive filling, with fair-share eviction and
    /// urgency preemption by priority class.
    #[default]
    FairShare,
    /// Determined's priority scheduler: strict priority by job priority (lower number first)
    /// across all queues of the pool, with head-of-line blocking.
    Priority,
    /// Determined's fair-share scheduler: GPUs divided among queues in proportion to
    /// demand × weight, capped at demand.
    Proportional,
}

impl PoolPolicy {
    /// The policy's name as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolPolicy::FairShare => "fair_share",
            PoolPolicy::Priority => "priority",
            PoolPolicy::Proportional => "proportional",
        }
    }
}

impl std::fmt::Display for PoolPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
