//! A job's output, whatever the transport: what its run's agent sends while it runs (see
//! [`crate::control::output`]), the whole output of an ended run while the agent keeps it, or the
//! end the server kept. Only the leader hears from agents, so a follower relays the request there.

use super::error::ServiceError;
use crate::control::Control;
use crate::control::output::Piece;
use crate::model::api::{OutputPage, OutputStream, STDERR_MARKER};
use crate::model::{Job, JobId, Run};
use serde::Deserialize;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;

/// Query of `GET /v1/jobs/{id}/output`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct OutputParams {
    /// `stdout` (default; a pod's log) or `stderr`.
    pub stream: Option<String>,
    /// Byte offset to read from (the `next` of the previous answer); absent: the last lines.
    pub from: Option<u64>,
    /// Longest to wait for output, in seconds, when there is none yet (default 0; at most the
    /// server's `max_lease_wait`).
    pub wait: Option<f64>,
}

/// The output page for job `id`, as the API and the web UI answer it.
pub(crate) async fn job_output(app: &Control, id: JobId, q: &OutputParams) -> Result<OutputPage, ServiceError> {
    let stream = match q.stream.as_deref().map(str::trim) {
        None | Some("") | Some("stdout") => OutputStream::Stdout,
        Some("stderr") => OutputStream::Stderr,
        Some(other) => return Err(ServiceError::invalid("stream", format!("{other:?} is not stdout or stderr"))),
    };
    let wait = match q.wait {
        None => Duration::ZERO,
        Some(w) if w.is_finite() && w >= 0.0 => Duration::from_secs_f64(w).min(app.config.server.max_lease_wait),
        Some(_) => return Err(ServiceError::invalid("wait", "must be a number of seconds >= 0")),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let job = job_once_started(app, id, deadline).await?;
    let empty = |note: &str, done: bool| OutputPage {
        run_id: None,
        stream,
        from: q.from.unwrap_or(0),
        next: q.from,
        data: String::new(),
        done,
        run_over: done,
        note: Some(note.to_string()),
    };
    let Some(run) = job.runs.last() else {
        let done = job.state.is_terminal();
        return Ok(empty(if done { "the job ended without running" } else { "the job has not started yet" }, done));
    };
    let over = run.state.is_terminal();
    let page = |p: Piece| OutputPage {
        run_id: Some(run.run_id),
        stream,
        from: p.from,
        next: Some(p.to),
        data: p.data,
        done: p.done,
        run_over: over,
        note: p.unavailable,
    };
    if over {
        // The whole output while the agent keeps the run (`keep_finished`), from the start.
        let from = Some(q.from.unwrap_or(0));
        let bound = deadline.max(tokio::time::Instant::now() + FINISHED_ASK);
        // An executor that is gone (lost, or removed) is not waited for.
        let known = app.state().executor(&run.executor).is_some();
        if known
            && app.cluster.is_leader()
            && let Some(p) = from_agent(app, run, stream, from, bound).await
            && p.unavailable.is_none()
        {
            let mut out = page(p);
            out.note = (out.from == 0).then(|| format!("the whole output, from the agent {}", run.executor));
            return Ok(out);
        }
        return Ok(kept_tail(app, run, stream, q.from));
    }
    if !app.cluster.is_leader() {
        return Err(ServiceError::unavailable(
            "only the leader hears from agents, and this server no longer leads; retry",
        ));
    }
    match from_agent(app, run, stream, q.from, deadline).await {
        Some(p) => Ok(page(p)),
        None => {
            let mut out = empty("no output yet", false);
            out.run_id = Some(run.run_id);
            out.note = None;
            Ok(out)
        }
    }
}

/// How long the agent of an ended run gets to answer before the server answers from the tail
/// it kept.
const FINISHED_ASK: Duration = Duration::from_secs(3);

/// The job, once it has a run or has ended, or as it is at `deadline`: a follower of a queued
/// job waits here, woken by the changes of its job set, instead of asking again at once.
async fn job_once_started(app: &Control, id: JobId, deadline: tokio::time::Instant) -> Result<Job, ServiceError> {
    // Subscribed before reading, so a change between the read and the wait is not missed.
    let mut changes = app.notify.subscribe_job_sets();
    loop {
        let job = app.store.job(id)?.ok_or_else(|| ServiceError::not_found(format!("job {id} does not exist")))?;
        if !job.runs.is_empty() || job.state.is_terminal() || tokio::time::Instant::now() >= deadline {
            return Ok(job);
        }
        let set = (job.queue.clone(), job.job_set.clone());
        loop {
            tokio::select! {
                changed = changes.recv() => match changed {
                    Ok(s) if s != set => continue,
                    Ok(_) | Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return Ok(job),
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
    }
}

/// What the run's agent sends of `stream` from `from` (None: its last lines), waiting for it
/// until `deadline`; None when nothing came by then.
async fn from_agent(
    app: &Control,
    run: &Run,
    stream: OutputStream,
    from: Option<u64>,
    deadline: tokio::time::Instant,
) -> Option<Piece> {
    loop {
        match app.output.want(run.run_id, stream, &run.executor, from, Instant::now()) {
            Ok(p) => return Some(p),
            Err(arrived) => {
                let arrived = arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                // The executor's open poll returns now with the ask.
                app.notify.executor(&run.executor).notify_waiters();
                if tokio::time::Instant::now() >= deadline {
                    return None;
                }
                tokio::select! {
                    _ = arrived => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
            }
        }
    }
}

/// An ended run's output from what the server kept of it: the tail its agent shipped when it
/// ended (`server.finished_output_tail`), of `stream` alone.
fn kept_tail(app: &Control, run: &Run, stream: OutputStream, from: Option<u64>) -> OutputPage {
    let kept = crate::model::human::bytes(i64::try_from(app.config.server.finished_output_tail).unwrap_or(i64::MAX));
    let mut out = OutputPage {
        run_id: Some(run.run_id),
        stream,
        from: 0,
        next: from,
        data: String::new(),
        done: true,
        run_over: true,
        note: None,
    };
    if from.is_some_and(|f| f > 0) {
        out.note = Some(format!(
            "the agent {} no longer answers for this run: the server keeps only the last {kept} of its output",
            run.executor
        ));
        return out;
    }
    let (stdout, stderr) = split_tail(run.log_tail.as_deref().unwrap_or_default());
    out.data = match stream {
        OutputStream::Stdout => stdout.to_string(),
        OutputStream::Stderr => stderr.to_string(),
    };
    out.note = Some(format!(
        "the run is over and its agent {} no longer keeps its output: this is the last of it (at most {kept}) that the server kept",
        run.executor
    ));
    out
}

/// A shipped tail split into standard output and standard error: agents send stdout, then
/// stderr under [`STDERR_MARKER`] (a pod's one log is stdout).
pub(crate) fn split_tail(tail: &str) -> (&str, &str) {
    if let Some(err) = tail.strip_prefix(STDERR_MARKER) {
        return ("", err);
    }
    match tail.rfind(&format!("\n{STDERR_MARKER}")) {
        Some(at) => (&tail[..=at], &tail[at + 1 + STDERR_MARKER.len()..]),
        None => (tail, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shipped_tail_splits_into_its_two_streams() {
        assert_eq!(split_tail("out 1\nout 2\n--- stderr ---\nboom\n"), ("out 1\nout 2\n", "boom\n"));
        assert_eq!(split_tail("--- stderr ---\nboom\n"), ("", "boom\n"));
        assert_eq!(split_tail("only out\n"), ("only out\n", ""));
        assert_eq!(split_tail(""), ("", ""));
        // The marker inside a line is output, not the separator.
        assert_eq!(split_tail("say --- stderr ---\nx\n"), ("say --- stderr ---\nx\n", ""));
    }
}
