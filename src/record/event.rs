//! Stored events: the `event_chunks` rows hold a job set's events, consecutive by sequence
//! number, as a `Vec<EventRecord>`.

use crate::model::{Event, EventKind, JobId, RunId};
use serde::{Deserialize, Serialize};

/// What happened to a job. Format: state schema 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The variants are `model::EventKind`'s.
pub enum EventKindRecord {
    Submitted,
    Queued,
    Leased,
    Pending,
    Running,
    Succeeded,
    Failed,
    CancelRequested,
    Cancelled,
    PreemptRequested,
    Preempted,
    Reprioritized,
    Requeued,
}

impl From<EventKind> for EventKindRecord {
    fn from(k: EventKind) -> Self {
        match k {
            EventKind::Submitted => Self::Submitted,
            EventKind::Queued => Self::Queued,
            EventKind::Leased => Self::Leased,
            EventKind::Pending => Self::Pending,
            EventKind::Running => Self::Running,
            EventKind::Succeeded => Self::Succeeded,
            EventKind::Failed => Self::Failed,
            EventKind::CancelRequested => Self::CancelRequested,
            EventKind::Cancelled => Self::Cancelled,
            EventKind::PreemptRequested => Self::PreemptRequested,
            EventKind::Preempted => Self::Preempted,
            EventKind::Reprioritized => Self::Reprioritized,
            EventKind::Requeued => Self::Requeued,
        }
    }
}

impl From<EventKindRecord> for EventKind {
    fn from(k: EventKindRecord) -> Self {
        match k {
            EventKindRecord::Submitted => Self::Submitted,
            EventKindRecord::Queued => Self::Queued,
            EventKindRecord::Leased => Self::Leased,
            EventKindRecord::Pending => Self::Pending,
            EventKindRecord::Running => Self::Running,
            EventKindRecord::Succeeded => Self::Succeeded,
            EventKindRecord::Failed => Self::Failed,
            EventKindRecord::CancelRequested => Self::CancelRequested,
            EventKindRecord::Cancelled => Self::Cancelled,
            EventKindRecord::PreemptRequested => Self::PreemptRequested,
            EventKindRecord::Preempted => Self::Preempted,
            EventKindRecord::Reprioritized => Self::Reprioritized,
            EventKindRecord::Requeued => Self::Requeued,
        }
    }
}

/// One event of a job set's stream. Format: state schema 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Dense sequence number within the (queue, job set) stream, from 1.
    pub seq: u64,
    /// The job it is about.
    pub job_id: JobId,
    /// When (ms since the epoch, the leader's clock).
    pub at_ms: i64,
    /// What happened.
    pub kind: EventKindRecord,
    /// The run it is about, if any.
    pub run_id: Option<RunId>,
    /// Details.
    pub message: Option<String>,
}

impl From<Event> for EventRecord {
    fn from(e: Event) -> Self {
        let Event { seq, job_id, at_ms, kind, run_id, message } = e;
        EventRecord { seq, job_id, at_ms, kind: kind.into(), run_id, message }
    }
}

impl From<EventRecord> for Event {
    fn from(e: EventRecord) -> Self {
        let EventRecord { seq, job_id, at_ms, kind, run_id, message } = e;
        Event { seq, job_id, at_ms, kind: kind.into(), run_id, message }
    }
}
