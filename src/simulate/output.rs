//! What `convoy simulate` prints: one JSON document with a record per round.

use crate::model::QueueName;
use crate::scheduler::Decisions;
use serde::Serialize;
use std::collections::BTreeMap;

/// The whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Output {
    pub rounds: Vec<RoundOutput>,
}

/// One round: counts per queue, jobs per node and queue, and every job's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundOutput {
    pub round: usize,
    pub scheduled: BTreeMap<QueueName, usize>,
    pub preempted: BTreeMap<QueueName, usize>,
    pub failed: BTreeMap<QueueName, usize>,
    pub running: BTreeMap<QueueName, usize>,
    pub queued: BTreeMap<QueueName, usize>,
    pub nodes: BTreeMap<String, BTreeMap<QueueName, usize>>,
    pub jobs: BTreeMap<String, JobOutput>,
    /// Finish or cancel entries that did not apply (e.g. finishing a job that is not running).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The raw decisions, for tests.
    #[serde(skip)]
    pub decisions: Option<Decisions>,
}

/// One job after the round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobOutput {
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
