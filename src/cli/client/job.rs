//! `convoy job ID [-o json]`: a job with its runs and events.

use super::http::{Client, print_json};
use super::output::{Format, elapsed, short_time};
use convoy::model::JobId;
use convoy::model::api::JobView;
use convoy::model::human;
use std::fmt::Write;
use std::time::SystemTime;

/// Flags of `convoy job`.
#[derive(clap::Args, Debug)]
pub(crate) struct JobArgs {
    id: JobId,
    /// `table` (default: a summary, its runs and events) or `json` (the API's view).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Prints the job.
pub(super) async fn run(c: &Client, args: JobArgs) -> anyhow::Result<()> {
    let j: JobView = c.get(&format!("/v1/jobs/{}", args.id)).await?;
    match args.output {
        Format::Json => print_json(&j),
        Format::Table => {
            print!("{}", summary(&j, SystemTime::now()));
            Ok(())
        }
    }
}

/// The job as people read it: what it is, where it stands, its runs and its events.
fn summary(j: &JobView, now: SystemTime) -> String {
    let mut out = String::new();
    let requests: Vec<String> =
        j.requests.iter().map(|(r, _)| format!("{r}={}", j.requests.quantity_string(r.as_str()))).collect();
    let _ = writeln!(out, "Job:        {}", j.id);
    let _ = writeln!(out, "Queue:      {}    Job set: {}", j.queue, j.job_set);
    let _ =
        writeln!(out, "State:      {}{}", j.state, j.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default());
    let _ = writeln!(out, "Priority:   {} (class {})", j.priority, j.priority_class);
    let _ = writeln!(out, "Requests:   {}", requests.join(", "));
    let _ = writeln!(
        out,
        "Submitted:  {} UTC{}",
        short_time(Some(&j.submitted_at)),
        j.owner.as_deref().map(|o| format!(" by {o}")).unwrap_or_default()
    );
    for d in &j.depends_on {
        let _ = writeln!(out, "After:      {} {}{}", d.job_id, d.on, if d.met { " (met)" } else { "" });
    }
    if let Some(r) = &j.retry {
        let _ = writeln!(
            out,
            "Retry:      up to {} attempts on exit codes {:?}{}{}",
            r.max_attempts,
            r.on_exit_codes,
            if r.on_oom { ", OOM kills" } else { "" },
            if r.on_node_failure { ", node failures" } else { "" }
        );
    }
    if j.runs.is_empty() {
        let _ = writeln!(out, "Runs:       none yet");
    } else {
        let _ = writeln!(out, "Runs:");
        let _ = writeln!(
            out,
            "  {:>2} {:<30} {:<16} {:<10} {:<19} {:<19} {:>9} {:>4} {:>9} {:>9} REASON",
            "#", "RUN", "NODE", "STATE", "STARTED", "ENDED", "ELAPSED", "EXIT", "CPU", "MAX MEM"
        );
        for r in &j.runs {
            let (started, ended) = (r.running_at.as_deref(), r.finished_at.as_deref());
            let used = r.usage.as_ref().map_or(("-".to_string(), "-".to_string()), human::usage);
            let _ = writeln!(
                out,
                "  {:>2} {:<30} {:<16} {:<10} {:<19} {:<19} {:>9} {:>4} {:>9} {:>9} {}",
                r.attempt,
                r.run_id.to_string(),
                r.node.as_str(),
                serde_json::to_value(r.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
                short_time(started),
                short_time(ended),
                elapsed(started, ended, now),
                r.exit_code.map_or("-".to_string(), |c| c.to_string()),
                used.0,
                used.1,
                [r.reason.as_deref(), r.message.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": ")
            );
        }
    }
    if let Some(events) = j.events.as_ref().filter(|e| !e.is_empty()) {
        let _ = writeln!(out, "Events:");
        for e in events {
            let kind =
                serde_json::to_value(e.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:>4} {} {:<18} {}",
                e.seq,
                short_time(Some(&e.at)),
                kind,
                e.message.as_deref().unwrap_or("")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_shows_state_runs_and_events() {
        let j: JobView = serde_json::from_value(serde_json::json!({
            "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "queue": "q", "job_set": "s", "state": "failed",
            "priority": 2, "priority_class": "default", "submitted_at": "2026-11-26T07:00:00.000Z",
            "requests": {"cpu": "1", "memory": "64Mi"}, "annotations": {}, "labels": {}, "reason": "exit code 3",
            "runs": [{"run_id": "01ARZ3NDEKTSV4RRFFQ69G5FB1", "executor": "e", "node": "n1", "pool": "default",
                      "state": "failed", "leased_at": "2026-11-26T07:00:01.000Z",
                      "running_at": "2026-11-26T07:00:02.000Z", "finished_at": "2026-11-26T07:00:07.000Z",
                      "exit_code": 3, "usage": {"cpu_ms": 61250, "peak_memory_bytes": 3_221_225_472u64}}],
            "events": [{"seq": 1, "job_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "at": "2026-11-26T07:00:00.000Z", "kind": "submitted"}]
        }))
        .expect("a job view");
        let text = summary(&j, SystemTime::now());
        assert!(text.contains("State:      failed (exit code 3)"), "{text}");
        assert!(text.contains("Requests:   cpu=1, memory=64Mi"), "{text}");
        assert!(text.contains(" n1 ") && text.contains("5.0s    3     1m01s     3 GiB"), "{text}");
        assert!(
            text.contains("     1 2026-11-26 07:00:00 submitted")
                || text.contains("   1 2026-11-26 07:00:00 submitted"),
            "{text}"
        );
    }
}
