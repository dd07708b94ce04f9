//! Retry back-off: a queued job whose `not_before_ms` is still ahead of the cycle's `now` is not
//! offered to the cycle ([`super::build`] counts it out like a job of another pool), and waits
//! with [`Reason::RetryBackoff`]. The rule is read where each queued job is looked at anyway, so
//! a cycle pays no extra pass and copies nothing for it.

use super::decisions::Reason;
use super::snapshot::JobInfo;

/// Until when `job` is held back at `now_ms`, if it is.
pub(super) fn held_until(job: &JobInfo, now_ms: i64) -> Option<i64> {
    job.not_before_ms.filter(|&t| t > now_ms)
}

/// Why a job held back until `until_ms` waits.
pub(super) fn reason(until_ms: i64) -> Reason {
    Reason::RetryBackoff { until_ms }
}
