//! What a fault run records: every client operation with when it was invoked and completed and
//! how it ended, every request it sent and to which server, every fault with when it began and
//! ended, and, after healing, what each server and each agent holds. Times are milliseconds
//! since the run began (one clock, the test's), except run times, which come from the servers'
//! and agents' own clocks (compared only with each other).

use serde::{Deserialize, Serialize};

/// A client operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// The client that made it (clients are sequential: one operation at a time).
    pub client: usize,
    /// What it asked.
    pub kind: OpKind,
    /// When it began.
    pub invoke_ms: f64,
    /// When its last answer came (or it gave up).
    pub complete_ms: f64,
    /// How it ended.
    pub outcome: Outcome,
    /// Every request sent for it (a retry is another one).
    pub attempts: Vec<Attempt>,
}

/// What an operation asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpKind {
    /// A submission of jobs; each job carries a key of its own (annotation), and a `client_id`
    /// equal to it when `with_client_ids`.
    Submit {
        /// The job set.
        job_set: String,
        /// The jobs' keys, in order.
        keys: Vec<String>,
        /// Whether the jobs carried client ids (only then is a retry safe).
        with_client_ids: bool,
    },
    /// A cancel of one job.
    Cancel {
        /// The job.
        job_id: String,
    },
    /// A change of one job's priority.
    Reprioritize {
        /// The job.
        job_id: String,
        /// The new priority.
        priority: u32,
    },
    /// A linearizable read of one job (`?consistent=true`).
    Read {
        /// The job.
        job_id: String,
    },
}

impl OpKind {
    /// True for operations that change state.
    pub fn is_write(&self) -> bool {
        !matches!(self, OpKind::Read { .. })
    }
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged.
    Ok {
        /// What the answer said.
        result: OpResult,
    },
    /// Refused: certainly not applied (a 4xx, a 507, a 503 that says nothing was applied).
    Failed {
        /// The last answer's status.
        status: u16,
    },
    /// No definite answer: it may or may not have been applied.
    Unknown,
}

/// What an acknowledged operation answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum OpResult {
    /// The submitted jobs' ids, in order.
    Submitted {
        /// Job ids.
        job_ids: Vec<String>,
    },
    /// Nothing more than "done".
    Done,
    /// A read found the job.
    Found {
        /// Its state.
        state: String,
        /// Its priority.
        priority: u32,
        /// How many runs it has had.
        runs: usize,
    },
    /// A read found no such job.
    NotFound,
}

/// One request sent for an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The server it went to (index).
    pub server: usize,
    /// When it was sent.
    pub start_ms: f64,
    /// When its answer came, or the client gave up.
    pub end_ms: f64,
    /// The answer's status; none without an answer.
    pub status: Option<u16>,
}

/// A fault, from injection to healing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// Its kind (`kill_leader`, `pause_follower`, …).
    pub kind: String,
    /// What it struck, in words (`server 2`, `servers 1, 3`, `agent 0`).
    pub target: String,
    /// Servers not on the majority side while it lasts (killed, paused, cut off with a minority):
    /// requests to them may wait, and are not held to the bound.
    pub minority: Vec<usize>,
    /// When it was injected.
    pub injected_ms: f64,
    /// When it was healed.
    pub healed_ms: f64,
}

/// A job as one server holds it after healing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredJob {
    /// Its id.
    pub id: String,
    /// Its key (the annotation every submitted job carries).
    pub key: Option<String>,
    /// Its client id.
    pub client_id: Option<String>,
    /// Its state.
    pub state: String,
    /// Its runs: id and when each was leased and ended (server clock, ms since the epoch).
    pub runs: Vec<StoredRun>,
    /// The kinds of its events, in order (`submitted`, `queued`, `leased`, …).
    pub events: Vec<String>,
}

/// A run as a server holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    /// Its id.
    pub run_id: String,
    /// When it was leased.
    pub leased_ms: Option<i64>,
    /// When it ended.
    pub finished_ms: Option<i64>,
}

/// A run as an agent ran it (its journal): when it really began and ended there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRun {
    /// The agent (index).
    pub agent: usize,
    /// The run.
    pub run_id: String,
    /// Its job.
    pub job_id: String,
    /// When it started (agent clock).
    pub start_ms: i64,
    /// When it ended (agent clock).
    pub end_ms: i64,
}

/// Everything recorded in one fault run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Client operations.
    pub ops: Vec<Op>,
    /// Faults, in order.
    pub faults: Vec<Fault>,
    /// After healing: each server's jobs (index, jobs).
    pub stored: Vec<(usize, Vec<StoredJob>)>,
    /// After healing: the runs every agent's journal records.
    pub agent_runs: Vec<AgentRun>,
}
