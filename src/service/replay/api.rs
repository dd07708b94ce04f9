//! Replay for callers of the API and the web UI: this server's own data directory, read through
//! copies, one replay at a time, for admins (a cycle's decisions name every queue's jobs).

use super::{CycleReport, CycleSelector, ReplayRequest, Verdict, replay};
use crate::config::Role;
use crate::control::{Control, rfc3339};
use crate::model::JobId;
use crate::service::access::Principal;
use crate::service::error::ServiceError;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// One replay at a time per server: each copies the log and rebuilds states.
static REPLAYS: Semaphore = Semaphore::const_new(1);

/// Which cycles to replay, as a query string: at most one of `cycle`, `index` and `at`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayQuery {
    /// The cycle with this number.
    pub cycle: Option<u64>,
    /// The cycle recorded at this log index, or the first after it.
    pub index: Option<u64>,
    /// The last cycle at or before this time (RFC 3339).
    pub at: Option<String>,
    /// Explain this job's fate (with no cycle chosen: in every cycle whose decisions name it).
    pub job: Option<String>,
}

/// A replay's answer.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct ReplayView {
    /// The chosen cycles, in log order.
    pub cycles: Vec<ReplayedCycleView>,
    /// The first and last log entries the server holds.
    pub log: Option<[u64; 2]>,
    /// The applied index of the snapshot replay started from (`null`: the empty state before
    /// the log's first entry, or nothing replayed).
    pub base_index: Option<u64>,
    /// Cycles replayed identically.
    pub identical: usize,
    /// Cycles whose replay differs.
    pub differ: usize,
    /// Cycles that could not be replayed.
    pub not_replayable: usize,
}

/// One replayed cycle.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct ReplayedCycleView {
    /// Its number (`null`: recorded before log format 10).
    pub cycle: Option<u64>,
    /// The log index of its decisions.
    pub index: u64,
    /// The applied index of the state it read.
    pub snapshot_index: Option<u64>,
    /// When it ran (RFC 3339).
    pub at: String,
    /// The term of the leader that ran it.
    pub term: u64,
    /// Its decisions did not apply (the leader had lost its term).
    pub stale: bool,
    /// `identical`, `differs` or `not_replayable`.
    pub verdict: &'static str,
    /// The first difference, or why it could not be replayed.
    pub detail: Option<String>,
    /// The job's fate, with `job`.
    pub job: Option<JobFateView>,
}

/// A job's fate in one cycle.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct JobFateView {
    /// Where it stood as the cycle began.
    pub before: String,
    /// What the cycle did with it.
    pub outcome: String,
    /// For a queued job, each node of its pools and what it said.
    pub nodes: Vec<NodeVerdictView>,
}

/// One node's verdict on the job.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct NodeVerdictView {
    /// `executor/node`.
    pub node: String,
    /// Its pool.
    pub pool: String,
    /// What it said.
    pub verdict: String,
}

/// Replays this server's recorded cycles that `q` chooses (admins only).
pub(crate) async fn replay_here(app: &Control, p: &Principal, q: &ReplayQuery) -> Result<ReplayView, ServiceError> {
    p.require(Role::Admin)?;
    let req = request(app, q)?;
    let _permit = REPLAYS.acquire().await.map_err(|e| ServiceError::internal(e.to_string()))?;
    let report = tokio::task::spawn_blocking(move || replay(&req))
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?
        .map_err(|e| ServiceError::internal(crate::service::error_chain(&e)))?;
    let (identical, differ, not_replayable) = report.counts();
    Ok(ReplayView {
        cycles: report.cycles.iter().map(view).collect(),
        log: report.held.map(|(f, l)| [f, l]),
        base_index: report.base.flatten(),
        identical,
        differ,
        not_replayable,
    })
}

fn request(app: &Control, q: &ReplayQuery) -> Result<ReplayRequest, ServiceError> {
    let chosen = [q.cycle.is_some(), q.index.is_some(), q.at.is_some()].iter().filter(|c| **c).count();
    if chosen > 1 {
        return Err(ServiceError::invalid("cycle", "give at most one of cycle, index and at"));
    }
    let select = match (q.cycle, q.index, &q.at) {
        (Some(n), _, _) => CycleSelector::Cycle(n),
        (_, Some(i), _) => CycleSelector::Index(i),
        (_, _, Some(t)) => {
            let at = humantime::parse_rfc3339_weak(t)
                .map_err(|e| ServiceError::invalid("at", format!("not an RFC 3339 time: {e}")))?;
            let ms = at.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            CycleSelector::At(i64::try_from(ms).unwrap_or(i64::MAX))
        }
        _ => CycleSelector::All,
    };
    let job = match &q.job {
        Some(id) => Some(id.parse::<JobId>().map_err(|e| ServiceError::invalid("job", e.to_string()))?),
        None => None,
    };
    Ok(ReplayRequest { data_dir: app.config.server.data_dir.clone(), select, job, config: None })
}

fn view(c: &CycleReport) -> ReplayedCycleView {
    let (verdict, detail) = match &c.verdict {
        Verdict::Identical => ("identical", None),
        Verdict::Differs(d) => ("differs", Some(d.clone())),
        Verdict::NotReplayable(why) => ("not_replayable", Some(why.clone())),
    };
    ReplayedCycleView {
        cycle: c.cycle,
        index: c.index,
        snapshot_index: c.snapshot_index,
        at: rfc3339(c.at_ms),
        term: c.term,
        stale: c.stale,
        verdict,
        detail,
        job: c.fate.as_ref().map(|f| JobFateView {
            before: f.before.clone(),
            outcome: f.outcome.clone(),
            nodes: f
                .nodes
                .iter()
                .map(|n| NodeVerdictView {
                    node: format!("{}/{}", n.executor, n.node),
                    pool: n.pool.to_string(),
                    verdict: n.verdict.to_string(),
                })
                .collect(),
        }),
    }
}
