//! A retry policy as the API, the CLI, simulate and the stored records spell it, for a job or a
//! queue ([`super::job_policy::RetryPolicy`] is what the state machine applies).

use serde::{Deserialize, Serialize};

/// When a failed run is tried again (after Armada's retry policies). Only failed runs count as
/// attempts: a run lost or returned before it ran, or preempted, does not (those count against
/// the server's `max_attempted_runs`, which bounds every job's runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRetryPolicy {
    /// Most runs that may fail, the first one included (1 to 100).
    pub max_attempts: u32,
    /// Exit codes that are retried (non-zero).
    #[serde(default)]
    pub on_exit_codes: Vec<i32>,
    /// Retry a run the kernel killed for its memory (`OOMKilled`).
    #[serde(default)]
    pub on_oom: bool,
    /// Retry a run that failed because of its node.
    #[serde(default)]
    pub on_node_failure: bool,
    /// Seconds to wait before the second attempt, doubled before each later one (at most a
    /// day); 0 (default): none.
    #[serde(default)]
    pub backoff_seconds: u64,
}

impl JobRetryPolicy {
    /// "up to 3 attempts on exit codes [75], OOM kills, node failures, back-off 30 s": how the
    /// CLI and the UI show a queue's policy.
    pub fn summary(&self) -> String {
        let mut s = format!("up to {} attempts on exit codes {:?}", self.max_attempts, self.on_exit_codes);
        if self.on_oom {
            s.push_str(", OOM kills");
        }
        if self.on_node_failure {
            s.push_str(", node failures");
        }
        if self.backoff_seconds > 0 {
            s.push_str(&format!(", back-off {} s", self.backoff_seconds));
        }
        s
    }
}
