//! What the lease loop needs from a runtime (processes, fake nodes, Kubernetes pods), and the
//! channel runtimes report run state changes through.

use crate::model::api::{HeldRun, LeaseOrder, NodeReport, RunEventKind, RunEventReport};
use crate::model::{JobId, RunId, RunState};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest `log_tail` sent with a final event.
pub const LOG_TAIL_MAX_BYTES: usize = 64 * 1024;

/// Why a runtime could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The job cannot run here as specified (bad pod spec, no command): the run fails.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// The leased node is not (or no longer) available: the run goes back to the queue.
    #[error("node unavailable: {0}")]
    NodeUnavailable(String),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. `creating <dir>`.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The client's error.
        source: Box<kube::Error>,
    },
    /// Setting up the runtime failed.
    #[error("{0}")]
    Setup(String),
}

impl RuntimeError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Io { context: context.into(), source }
    }
}

/// What `start` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// The run was started now.
    New,
    /// The runtime already has (or had) this run: nothing was started.
    AlreadyKnown,
}

/// A place that runs jobs. Every method is idempotent per run id; state changes are reported
/// through the [`EventSink`] the runtime was built with, in order per run.
pub trait Runtime: Send + Sync + 'static {
    /// The runtime's name for logs.
    fn name(&self) -> &'static str;

    /// Finds the runs left by an earlier agent, reports each one's current state through the sink
    /// (final events for runs that ended meanwhile) and returns them. Called once, before the
    /// first poll.
    fn recover(&self) -> impl Future<Output = Result<Vec<HeldRun>, RuntimeError>> + Send;

    /// The nodes this runtime offers, as reported to the server.
    fn nodes(&self) -> impl Future<Output = Result<Vec<NodeReport>, RuntimeError>> + Send;

    /// Starts a leased run. Starting a run the runtime already has does nothing.
    fn start(&self, lease: LeaseOrder) -> impl Future<Output = Result<Started, RuntimeError>> + Send;

    /// Stops a run: a graceful stop, then a forced one once `grace` has passed. Returns false when
    /// the runtime has no such run. The final event follows through the sink.
    fn kill(
        &self,
        run_id: RunId,
        grace: Duration,
        reason: &str,
    ) -> impl Future<Output = Result<bool, RuntimeError>> + Send;

    /// The server has the run's final event: the runtime may release what it keeps for it.
    fn forget(&self, run_id: RunId) -> impl Future<Output = Result<(), RuntimeError>> + Send;
}

/// Where runtimes send run events; the lease loop reads them and forwards them to the server.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<RunEventReport>,
}

/// The reading end of an [`EventSink`].
pub type EventReceiver = mpsc::UnboundedReceiver<RunEventReport>;

impl EventSink {
    /// A sink and the receiver its events arrive at.
    pub fn channel() -> (EventSink, EventReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink { tx }, rx)
    }

    /// Sends one event. Events sent after the agent stopped are dropped: a restarted agent
    /// rediscovers the run's state from the runtime.
    pub fn send(&self, event: RunEventReport) {
        let _ = self.tx.send(event);
    }
}

/// A bare event of `kind` for a run, stamped with the current time.
pub fn run_event(run_id: RunId, job_id: JobId, kind: RunEventKind) -> RunEventReport {
    RunEventReport {
        run_id,
        job_id,
        kind,
        time_ms: Some(now_ms()),
        exit_code: None,
        reason: None,
        message: None,
        log_tail: None,
        node_fault: None,
        pod: None,
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The run state an event moves a run to.
pub fn state_after(kind: RunEventKind) -> RunState {
    match kind {
        RunEventKind::Pending => RunState::Pending,
        RunEventKind::Running => RunState::Running,
        RunEventKind::Succeeded => RunState::Succeeded,
        RunEventKind::Failed => RunState::Failed,
        RunEventKind::Returned => RunState::Lost,
    }
}

/// True for the kinds that end a run.
pub fn is_final(kind: RunEventKind) -> bool {
    matches!(kind, RunEventKind::Succeeded | RunEventKind::Failed | RunEventKind::Returned)
}

/// Cuts `text` to its last `max_bytes` bytes, on a line boundary where possible and never inside
/// a UTF-8 character.
pub fn tail_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    match cut.find('\n') {
        Some(i) if i + 1 < cut.len() => cut[i + 1..].to_string(),
        _ => cut.to_string(),
    }
}

/// The last `lines` lines of `text`.
pub fn last_lines(text: &str, lines: usize) -> &str {
    let trimmed = text.strip_suffix('\n').unwrap_or(text);
    match trimmed.char_indices().rev().filter(|(_, c)| *c == '\n').nth(lines.saturating_sub(1)) {
        Some((i, _)) if lines > 0 => &text[i + 1..],
        _ if lines == 0 => "",
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 5), "a\nb\nc");
        assert_eq!(last_lines("a\nb\nc", 0), "");
        assert_eq!(tail_text("line1\nline2\nline3\n", 8), "line3\n");
        let s = "ééééé";
        let t = tail_text(s, 3);
        assert!(s.ends_with(&t) && t.len() <= 3);
    }
}
