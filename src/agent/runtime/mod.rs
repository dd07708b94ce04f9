//! What the lease loop needs from a runtime (processes, fake nodes, Kubernetes pods), and the
//! channel runtimes report run state changes through. Each runtime is a room of its own below:
//! [`process`] (local processes), [`kubernetes`] (pods), [`fake`] (declared nodes, simulated
//! jobs).

pub mod fake;
pub mod kubernetes;
pub mod process;

use crate::model::api::{HeldRun, LeaseOrder, NodeReport, OutputChunk, OutputWanted, RunEventKind, RunEventReport};
use crate::model::{JobId, RunId, RunState};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest `log_tail` sent with a final event.
pub(crate) const LOG_TAIL_MAX_BYTES: usize = 64 * 1024;

/// Most output sent for one ask of followed output; the server asks again for the rest.
pub(crate) const OUTPUT_CHUNK_BYTES: usize = 256 * 1024;
/// How far back from the end "the last lines" of followed output start.
pub(crate) const OUTPUT_TAIL_BYTES: u64 = 64 * 1024;

/// Reason of a run whose directory's disk was full: given back when it could not start
/// ([`RuntimeError::DiskFull`]), or failed when its job ended (its output may be incomplete).
pub(crate) const REASON_DISK_FULL: &str = "run directory full";

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
    /// The run directory's disk is full: the run was not started, and goes back to the queue.
    #[error("the agent's run directory {dir} is full ({source}); the run was not started")]
    DiskFull {
        /// The directory of the agent's runs.
        dir: String,
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

    /// Up to `OUTPUT_CHUNK_BYTES` of a run's output from the offset asked, for someone
    /// following it; `unavailable` says why there is none (the runtime keeps none, no such run).
    fn output(&self, want: OutputWanted) -> impl Future<Output = OutputChunk> + Send;
}

/// An answer without output, saying why.
pub(crate) fn no_output(want: &OutputWanted, why: impl Into<String>) -> OutputChunk {
    let at = want.from.unwrap_or(0);
    OutputChunk {
        run_id: want.run_id,
        stream: want.stream,
        from: at,
        to: at,
        data: String::new(),
        done: true,
        unavailable: Some(why.into()),
    }
}

/// The chunk for `bytes` read at offset `start` of a stream (`done`: it will not grow). A chunk
/// that starts inside the stream because the last lines were asked for begins at a line; one
/// that is not the end stops before a character cut in two, which the next ask starts with.
pub(crate) fn output_chunk(want: &OutputWanted, start: u64, bytes: &[u8], done: bool) -> OutputChunk {
    let mut from = start;
    let mut body = bytes;
    if want.from.is_none()
        && start > 0
        && let Some(i) = body.iter().position(|b| *b == b'\n')
    {
        from += i as u64 + 1;
        body = &body[i + 1..];
    }
    if !done {
        // A UTF-8 sequence cut at the end: leave it for the next ask.
        let cut = match std::str::from_utf8(body) {
            Ok(_) => 0,
            Err(e) if e.error_len().is_none() => body.len() - e.valid_up_to(),
            Err(_) => {
                let tail_start = body.len().saturating_sub(3);
                match std::str::from_utf8(&body[tail_start..]) {
                    Err(e) if e.error_len().is_none() => body.len() - (tail_start + e.valid_up_to()),
                    _ => 0,
                }
            }
        };
        body = &body[..body.len() - cut];
    }
    OutputChunk {
        run_id: want.run_id,
        stream: want.stream,
        from,
        to: from + body.len() as u64,
        data: String::from_utf8_lossy(body).into_owned(),
        done,
        unavailable: None,
    }
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
pub(crate) fn run_event(run_id: RunId, job_id: JobId, kind: RunEventKind) -> RunEventReport {
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
        usage: None,
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The run state an event moves a run to.
pub(crate) fn state_after(kind: RunEventKind) -> RunState {
    match kind {
        RunEventKind::Pending => RunState::Pending,
        RunEventKind::Running => RunState::Running,
        RunEventKind::Succeeded => RunState::Succeeded,
        RunEventKind::Failed => RunState::Failed,
        RunEventKind::Returned => RunState::Lost,
    }
}

/// True for the kinds that end a run.
pub(crate) fn is_final(kind: RunEventKind) -> bool {
    matches!(kind, RunEventKind::Succeeded | RunEventKind::Failed | RunEventKind::Returned)
}

/// Cuts `text` to its last `max_bytes` bytes, on a line boundary where possible and never inside
/// a UTF-8 character.
pub(crate) fn tail_text(text: &str, max_bytes: usize) -> String {
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
    fn output_chunks_start_at_a_line_for_the_last_lines_and_never_split_a_character() {
        use crate::model::api::OutputStream;
        let want =
            |from: Option<u64>| OutputWanted { run_id: RunId::from_parts(1, 1), stream: OutputStream::Stdout, from };
        // From an offset: as read.
        let c = output_chunk(&want(Some(10)), 10, b"partial line\nnext\n", false);
        assert_eq!((c.from, c.to, c.data.as_str()), (10, 28, "partial line\nnext\n"));
        // The last lines, read from inside the stream: from the next line.
        let c = output_chunk(&want(None), 100, b"partial line\nnext\n", false);
        assert_eq!((c.from, c.to, c.data.as_str()), (113, 118, "next\n"));
        let c = output_chunk(&want(None), 0, b"first\n", false);
        assert_eq!((c.from, c.data.as_str()), (0, "first\n"));
        // "é" is two bytes: cut after the first, it waits for the next ask, unless the run is over.
        let bytes = "caf\u{e9}".as_bytes();
        let c = output_chunk(&want(Some(0)), 0, &bytes[..4], false);
        assert_eq!((c.to, c.data.as_str()), (3, "caf"));
        let c = output_chunk(&want(Some(3)), 3, &bytes[3..], false);
        assert_eq!((c.from, c.to, c.data.as_str()), (3, 5, "\u{e9}"));
        let c = output_chunk(&want(Some(0)), 0, &bytes[..4], true);
        assert_eq!((c.to, c.data.as_str()), (4, "caf\u{fffd}"));
        // Invalid bytes inside are replaced; offsets stay those of the stream.
        let c = output_chunk(&want(Some(0)), 0, b"a\xffb", false);
        assert_eq!((c.to, c.data.as_str()), (3, "a\u{fffd}b"));
        let n = no_output(&want(Some(7)), "none kept");
        assert_eq!((n.from, n.to, n.done, n.unavailable.as_deref()), (7, 7, true, Some("none kept")));
    }

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
