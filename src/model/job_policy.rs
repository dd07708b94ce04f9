//! What a job asks beyond its pod: the jobs it waits for (`depends_on`, Slurm's
//! `--dependency=afterok|afternotok|afterany`) and when a failed run is tried again (`retry`,
//! after Armada's retry policies). The rules here are pure, so the state machine and
//! `convoy simulate` judge dependencies and retries alike.

use super::job::JobState;
use super::names::{JobId, QueueName};
use super::queue::Queue;
use serde::{Deserialize, Serialize};

/// The outcome of the job depended on that lets the dependent start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DependencyCondition {
    /// The job succeeded (Slurm's `afterok`).
    Succeeded,
    /// The job failed (Slurm's `afternotok`); a cancelled or preempted job did not fail.
    Failed,
    /// The job ended in any way (Slurm's `afterany`).
    Ended,
}

/// What a dependency's job ending in a given state means for the dependent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependencyVerdict {
    /// The dependency is met.
    Met,
    /// The dependency can never be met: the dependent fails.
    Never,
    /// The dependency can never be met because its job was cancelled: the dependent is
    /// cancelled with it.
    Cancelled,
}

impl DependencyCondition {
    /// The name used in the API, the CLI and simulate.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyCondition::Succeeded => "succeeded",
            DependencyCondition::Failed => "failed",
            DependencyCondition::Ended => "ended",
        }
    }

    /// Parses a condition by its name, or Slurm's (`ok`, `notok`, `any`).
    pub fn parse(s: &str) -> Option<DependencyCondition> {
        match s {
            "succeeded" | "ok" | "afterok" => Some(DependencyCondition::Succeeded),
            "failed" | "notok" | "afternotok" => Some(DependencyCondition::Failed),
            "ended" | "any" | "afterany" => Some(DependencyCondition::Ended),
            _ => None,
        }
    }

    /// What the job depended on ending as `end` (a terminal state) means for the dependent.
    pub fn verdict(self, end: JobState) -> DependencyVerdict {
        match (self, end) {
            (DependencyCondition::Ended, _)
            | (DependencyCondition::Succeeded, JobState::Succeeded)
            | (DependencyCondition::Failed, JobState::Failed) => DependencyVerdict::Met,
            (_, JobState::Cancelled) => DependencyVerdict::Cancelled,
            _ => DependencyVerdict::Never,
        }
    }

    /// "to succeed", "to fail", "to end": how reasons and events name the wait.
    pub fn wait_phrase(self) -> &'static str {
        match self {
            DependencyCondition::Succeeded => "to succeed",
            DependencyCondition::Failed => "to fail",
            DependencyCondition::Ended => "to end",
        }
    }
}

impl std::fmt::Display for DependencyCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One job a job waits for, and whether the wait is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dependency {
    /// The job waited for (submitted before the dependent).
    pub job_id: JobId,
    /// The outcome that lets the dependent start.
    pub on: DependencyCondition,
    /// Set once the job waited for ended as `on` asks.
    pub met: bool,
}

impl Dependency {
    /// "waiting for 01J… to succeed".
    pub fn waiting_reason(&self) -> String {
        format!("waiting for {} {}", self.job_id, self.on.wait_phrase())
    }

    /// Why the dependent cannot start any more, the job waited for having ended as `end`.
    pub fn unmet_reason(&self, end: JobState) -> String {
        format!("dependency {} ended {end}; it had {}", self.job_id, self.on.wait_phrase())
    }
}

/// When a failed run is tried again (Armada's retry policy, Kueue's back-off, HTCondor's
/// `max_retries`). Only failures the job is not to blame for in another way count: a run lost
/// or returned before it ran, or preempted, costs no attempt (those have `max_attempted_runs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Most runs that may fail before the job fails, the first one included.
    pub max_attempts: u32,
    /// Exit codes that are retried.
    pub on_exit_codes: Vec<i32>,
    /// Retry a run the kernel killed for using too much memory.
    pub on_oom: bool,
    /// Retry a run that failed because of its node.
    pub on_node_failure: bool,
    /// Wait before the second attempt, in ms; doubled before each later one (0: none).
    pub backoff_ms: u64,
}

/// Most runs a retry policy may allow.
const MAX_ATTEMPTS: u32 = 100;
/// Longest first back-off, in seconds (a day).
const MAX_BACKOFF_SECONDS: u64 = 24 * 3600;
/// Most exit codes one retry policy may name: the list is stored with the job.
const MAX_EXIT_CODES: usize = 256;

impl RetryPolicy {
    /// A policy as the API and simulate give it, checked; the error names the field within it.
    pub fn check(r: &super::job_retry::JobRetryPolicy) -> Result<RetryPolicy, super::queue::FieldError> {
        if !(1..=MAX_ATTEMPTS).contains(&r.max_attempts) {
            return Err(super::queue::FieldError::new("max_attempts", format!("must be 1 to {MAX_ATTEMPTS}")));
        }
        if r.on_exit_codes.len() > MAX_EXIT_CODES {
            return Err(super::queue::FieldError::new("on_exit_codes", format!("at most {MAX_EXIT_CODES} exit codes")));
        }
        if let Some(i) = r.on_exit_codes.iter().position(|c| *c == 0) {
            return Err(super::queue::FieldError::new(
                format!("on_exit_codes[{i}]"),
                "exit code 0 is a success, never retried",
            ));
        }
        if r.backoff_seconds > MAX_BACKOFF_SECONDS {
            return Err(super::queue::FieldError::new(
                "backoff_seconds",
                format!("at most {MAX_BACKOFF_SECONDS} (a day)"),
            ));
        }
        Ok(RetryPolicy::from(r))
    }
}

/// A policy as given, unchecked: for one [`RetryPolicy::check`] accepted before it was stored
/// (a queue's).
impl From<&super::job_retry::JobRetryPolicy> for RetryPolicy {
    fn from(r: &super::job_retry::JobRetryPolicy) -> Self {
        RetryPolicy {
            max_attempts: r.max_attempts,
            on_exit_codes: r.on_exit_codes.clone(),
            on_oom: r.on_oom,
            on_node_failure: r.on_node_failure,
            backoff_ms: r.backoff_seconds.saturating_mul(1000),
        }
    }
}

/// The retry policy a job without its own takes from its queue `leaf`: the queue's, else the
/// nearest ancestor's up the queue tree that has one (as a Slurm partition's or an Armada
/// queue's default applies to every job in it), with the name of the queue it comes from.
/// `queue` looks a queue up by name.
pub fn queue_retry_policy<'q>(
    leaf: &'q Queue,
    queue: impl Fn(&QueueName) -> Option<&'q Queue>,
) -> Option<(&'q QueueName, RetryPolicy)> {
    let mut q = leaf;
    // The tree has no cycles (a parent must exist and not be a descendant); the bound only keeps
    // a broken one from looping.
    for _ in 0..MAX_TREE_DEPTH {
        if let Some(r) = &q.retry {
            return Some((&q.name, RetryPolicy::from(r)));
        }
        q = queue(q.parent.as_ref()?)?;
    }
    None
}

/// Most queues walked up the tree looking for a retry policy.
const MAX_TREE_DEPTH: usize = 1024;

/// RFC 3339 text (to the second) of a back-off's end, for reasons and events.
pub fn retry_time(ms: i64) -> String {
    super::human::rfc3339_seconds(ms)
}

/// The most a back-off grows to: one day.
const MAX_BACKOFF_MS: u64 = 24 * 3600 * 1000;

/// How a run failed, as far as retrying goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFailure {
    /// The exit code, if one was reported.
    pub exit_code: Option<i32>,
    /// The kernel killed it for its memory.
    pub oom: bool,
    /// Its node is to blame.
    pub node_failure: bool,
}

impl RunFailure {
    /// What the retry reason says caused it: "exit code 75", "an OOM kill", "a node failure".
    pub fn cause(&self) -> String {
        if self.oom {
            "an OOM kill".to_string()
        } else if self.node_failure {
            "a node failure".to_string()
        } else if let Some(c) = self.exit_code {
            format!("exit code {c}")
        } else {
            "a failure".to_string()
        }
    }

    /// The metric label of the cause: `exit_code`, `oom` or `node_failure`.
    pub fn category(&self) -> &'static str {
        if self.oom {
            "oom"
        } else if self.node_failure {
            "node_failure"
        } else {
            "exit_code"
        }
    }
}

/// True when a run's reported reason says the kernel killed it for its memory (the process
/// runtime's `OOMKilled`, Kubernetes' `OOMKilled` or `oom killed`).
pub fn is_oom_reason(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.eq_ignore_ascii_case("OOMKilled") || r.eq_ignore_ascii_case("oom killed"))
}

impl RetryPolicy {
    /// Whether this failure is one the policy retries at all.
    pub fn covers(&self, failure: &RunFailure) -> bool {
        (failure.oom && self.on_oom)
            || (failure.node_failure && self.on_node_failure)
            || failure.exit_code.is_some_and(|c| c != 0 && self.on_exit_codes.contains(&c))
    }

    /// The attempt to start after `failed` runs failed (counting this one), if the policy
    /// retries this failure: `Some(next attempt number)`.
    pub fn next_attempt(&self, failure: &RunFailure, failed: u32) -> Option<u32> {
        (self.covers(failure) && failed < self.max_attempts).then_some(failed + 1)
    }

    /// The wait before attempt `attempt` (2 or more): `backoff_ms`, doubled per later attempt,
    /// at most a day.
    pub fn backoff_before(&self, attempt: u32) -> u64 {
        if self.backoff_ms == 0 {
            return 0;
        }
        let doublings = attempt.saturating_sub(2).min(32);
        self.backoff_ms.saturating_mul(1u64 << doublings).min(MAX_BACKOFF_MS)
    }
}

/// A job's dependencies and retry policy, with their progress. Most jobs have none, so a job
/// holds this boxed, or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobPolicies {
    /// The jobs it waits for, in the order submitted.
    pub depends_on: Vec<Dependency>,
    /// When a failed run is retried.
    pub retry: Option<RetryPolicy>,
    /// Not to be scheduled before this time (ms since the epoch, the leader's clock): a retry's
    /// back-off.
    pub not_before_ms: Option<i64>,
}

impl JobPolicies {
    /// The first dependency not met yet: while there is one the job waits.
    pub fn waiting_on(&self) -> Option<&Dependency> {
        self.depends_on.iter().find(|d| !d.met)
    }

    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.depends_on.is_empty() && self.retry.is_none() && self.not_before_ms.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_condition_is_met_by_its_outcomes_only() {
        use DependencyCondition::*;
        use DependencyVerdict as V;
        let ends = [JobState::Succeeded, JobState::Failed, JobState::Cancelled, JobState::Preempted];
        let got: Vec<Vec<V>> =
            [Succeeded, Failed, Ended].iter().map(|c| ends.iter().map(|e| c.verdict(*e)).collect()).collect();
        assert_eq!(
            got,
            vec![
                vec![V::Met, V::Never, V::Cancelled, V::Never],
                vec![V::Never, V::Met, V::Cancelled, V::Never],
                vec![V::Met, V::Met, V::Met, V::Met],
            ]
        );
    }

    #[test]
    fn slurm_names_parse() {
        assert_eq!(DependencyCondition::parse("ok"), Some(DependencyCondition::Succeeded));
        assert_eq!(DependencyCondition::parse("notok"), Some(DependencyCondition::Failed));
        assert_eq!(DependencyCondition::parse("any"), Some(DependencyCondition::Ended));
        assert_eq!(DependencyCondition::parse("later"), None);
    }

    fn policy() -> RetryPolicy {
        RetryPolicy { max_attempts: 3, on_exit_codes: vec![75], on_oom: false, on_node_failure: true, backoff_ms: 0 }
    }

    #[test]
    fn a_policy_retries_what_it_names_until_its_attempts_are_spent() {
        let p = policy();
        let code = |c| RunFailure { exit_code: Some(c), oom: false, node_failure: false };
        assert_eq!(p.next_attempt(&code(75), 1), Some(2));
        assert_eq!(p.next_attempt(&code(75), 2), Some(3));
        assert_eq!(p.next_attempt(&code(75), 3), None);
        assert_eq!(p.next_attempt(&code(1), 1), None);
        let oom = RunFailure { exit_code: Some(137), oom: true, node_failure: false };
        assert_eq!(p.next_attempt(&oom, 1), None);
        let node = RunFailure { exit_code: None, oom: false, node_failure: true };
        assert_eq!(p.next_attempt(&node, 1), Some(2));
    }

    proptest::proptest! {
        /// A queue chain root → … → leaf, each with or without a policy (its max_attempts is
        /// its depth + 1): the leaf's jobs take the policy of the nearest queue up from the leaf
        /// that has one, named, or none when no queue on the way has one.
        #[test]
        fn the_nearest_queue_up_the_tree_with_a_policy_gives_it(has in proptest::collection::vec(proptest::bool::ANY, 1..8)) {
            let name = |i: usize| QueueName::new(&format!("q{i}")).unwrap();
            let queues: Vec<Queue> = has
                .iter()
                .enumerate()
                .map(|(i, &with)| Queue {
                    parent: (i > 0).then(|| name(i - 1)),
                    retry: with.then(|| super::super::job_retry::JobRetryPolicy {
                        max_attempts: i as u32 + 1,
                        on_exit_codes: vec![75],
                        on_oom: false,
                        on_node_failure: false,
                        backoff_seconds: 0,
                    }),
                    ..Queue::new(name(i), 1.0)
                })
                .collect();
            let leaf = &queues[queues.len() - 1];
            let got = queue_retry_policy(leaf, |n| queues.iter().find(|q| &q.name == n))
                .map(|(from, p)| (from.clone(), p.max_attempts));
            let expected = has.iter().rposition(|h| *h).map(|i| (name(i), i as u32 + 1));
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn backoff_doubles_per_attempt_up_to_a_day() {
        let p = RetryPolicy { backoff_ms: 10_000, ..policy() };
        assert_eq!([2, 3, 4].map(|a| p.backoff_before(a)), [10_000, 20_000, 40_000]);
        assert_eq!(p.backoff_before(40), MAX_BACKOFF_MS);
        assert_eq!(policy().backoff_before(5), 0);
    }
}
