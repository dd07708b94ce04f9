//! What a pool's reservations are, as plain data ([`super::reservation`] decides them and
//! applies them in the cycle): the reserved nodes and jobs, the jobs' times they are judged by,
//! and the `gang_reservation_after` setting's defaults and spelling.

use crate::model::{ExecutorName, JobId, NodeName, PoolName, QueueName};
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// `max_reservations_per_pool` when not set.
pub(crate) const DEFAULT_MAX_PER_POOL: u32 = 1;

/// True for the default `max_reservations_per_pool` (left out of the serialized configuration).
pub(crate) fn is_default_max(n: &u32) -> bool {
    *n == DEFAULT_MAX_PER_POOL
}

/// Serde adapter for `gang_reservation_after`: `"off"`, humantime text or a number of seconds;
/// off (and 0) is a zero duration.
pub(crate) mod serde_after {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes the duration as humantime text.
    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        crate::model::duration::serde_text::serialize(d, s)
    }

    /// Reads `"off"`, humantime text or a non-negative number of seconds.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) if t.trim() == "off" => Ok(Duration::ZERO),
            Raw::Text(t) => crate::model::duration::parse_duration(&t)
                .map_err(|e| serde::de::Error::custom(format!("{e} (a duration such as \"10m\", or \"off\")"))),
            Raw::Num(n) => Duration::try_from_secs_f64(n).map_err(|_| {
                serde::de::Error::custom(format!("duration {n} must be a non-negative number of seconds"))
            }),
        }
    }
}

/// What the scheduler knows of one job's times (read only while reservations are on; the
/// snapshot's `job_times` is empty otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobTimes {
    /// A queued job: when it was last queued (submitted, or sent back when its last run ended).
    /// A running job: when its run started.
    pub since_ms: i64,
    /// Its active deadline in ms, if it has one: a running job ends by `since_ms + deadline_ms`;
    /// a queued job, once started, runs at most this long.
    pub deadline_ms: Option<i64>,
}

impl JobTimes {
    /// When a running job is expected to end at the latest.
    pub(super) fn expected_end(&self) -> Option<i64> {
        self.deadline_ms.map(|d| self.since_ms.saturating_add(d))
    }
}

/// A node held for a reservation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ReservedNode {
    /// The node's executor.
    pub executor: ExecutorName,
    /// The node.
    pub node: NodeName,
}

/// Nodes held for a job or gang that waited too long for room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reservation {
    /// The job the reservation is for (a gang's first member in queue order).
    pub job_id: JobId,
    /// Every job it holds the nodes for (the gang's queued members; the job alone otherwise).
    pub jobs: Vec<JobId>,
    /// The gang id, for a gang.
    pub gang: Option<String>,
    /// The job's queue.
    pub queue: QueueName,
    /// The pool of the nodes.
    pub pool: PoolName,
    /// The reserved nodes.
    pub nodes: Vec<ReservedNode>,
    /// When the job is expected to fit there (ms since the epoch), by the running jobs'
    /// deadlines; none if their ends are not known.
    pub expected_start_ms: Option<i64>,
    /// Since when the job has waited (ms since the epoch).
    pub queued_since_ms: i64,
    /// Jobs of this cycle that would have fitted on the reserved nodes and were kept off.
    pub kept_off: u32,
}

/// Formats a time (ms since the epoch) as RFC 3339 in UTC, to the second.
pub(crate) fn format_time(ms: i64) -> String {
    crate::model::human::rfc3339_seconds(ms)
}

/// A pool's reservations during its second pass.
#[derive(Debug, Clone)]
pub(crate) struct PoolReservations<'a> {
    pub(super) list: Vec<Reservation>,
    /// Per node of the pool: 0, or 1 + the index in `list` of the reservation holding it.
    pub(super) node_res: Vec<u32>,
    /// Per node type: the same (a type is wholly reserved for one reservation, or not at all).
    pub(super) type_res: Vec<u32>,
    /// The reserved jobs: 1 + the index of their reservation.
    pub(super) members: HashMap<JobId, u32>,
    /// The snapshot's job times (for backfill: queued jobs' deadlines).
    pub(super) times: &'a BTreeMap<JobId, JobTimes>,
    pub(super) now_ms: i64,
}

impl PoolReservations<'_> {
    /// Per node of the pool, 0 or 1 + its reservation's index (the node types are built on it).
    pub(super) fn node_marks(&self) -> &[u32] {
        &self.node_res
    }

    /// Records each node type's reservation.
    pub(super) fn set_types(&mut self, types: &super::node_types::NodeTypes) {
        self.type_res = types.types.iter().map(|t| self.node_res.get(t.rep as usize).copied().unwrap_or(0)).collect();
    }

    /// True if job `id` may use the nodes of reservation `r` (0: none, always).
    pub(super) fn may_use(&self, r: u32, id: JobId) -> bool {
        r == 0 || self.members.get(&id) == Some(&r) || self.backfills(r, id)
    }

    /// True if job `id`'s deadline ends before reservation `r`'s expected start.
    pub(super) fn backfills(&self, r: u32, id: JobId) -> bool {
        let Some(start) = self.list[r as usize - 1].expected_start_ms else { return false };
        self.times.get(&id).and_then(|t| t.deadline_ms).is_some_and(|d| self.now_ms.saturating_add(d) <= start)
    }

    /// True if job `id` may use some reserved node.
    pub(super) fn any_access(&self, id: JobId) -> bool {
        self.members.contains_key(&id) || (1..=self.list.len() as u32).any(|r| self.backfills(r, id))
    }
}
