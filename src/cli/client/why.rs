//! `convoy why ID`: where a job is and why; for a queued job, its place in its queue, what would
//! start it (each condition checked by the scheduler) and when it may start.

use super::http::Client;
use convoy::model::JobId;
use convoy::model::api::JobView;
use serde::Deserialize;

/// Flags of `convoy why`.
#[derive(clap::Args, Debug)]
pub(crate) struct WhyArgs {
    id: JobId,
}

/// `GET /v1/jobs/{id}/why`, as far as `convoy why` prints it.
#[derive(Debug, Deserialize)]
struct Answer {
    queue: String,
    queue_position: Option<u64>,
    jobs_ahead: Option<u64>,
    #[serde(default)]
    would_start_if: Vec<Condition>,
    estimated_start: Option<Estimate>,
}

#[derive(Debug, Deserialize)]
struct Condition {
    kind: String,
    detail: String,
}

#[derive(Debug, Deserialize)]
struct Estimate {
    at: String,
    method: String,
}

/// Prints `<id> is <state>: <reason>` (the scheduler's latest reason, or why the job ended),
/// with what the job's last run said when that says more; for a queued job, then its place,
/// what would start it and when.
pub(super) async fn run(c: &Client, args: WhyArgs) -> anyhow::Result<()> {
    let j: JobView = c.get(&format!("/v1/jobs/{}", args.id)).await?;
    println!("{}", explain(&j));
    if j.state == convoy::model::JobState::Queued {
        let a: Answer = c.get(&format!("/v1/jobs/{}/why", args.id)).await?;
        print!("{}", details(&a));
    }
    Ok(())
}

/// The first line `convoy why` prints.
fn explain(j: &JobView) -> String {
    let mut out = match &j.reason {
        Some(r) => format!("{} is {}: {r}", j.id, j.state),
        None => format!("{} is {}", j.id, j.state),
    };
    // "invalid job" alone says nothing of what to fix; the run's message does.
    let said = j.runs.last().and_then(|r| r.message.as_deref()).filter(|m| !m.is_empty());
    if j.state.is_terminal()
        && let Some(m) = said
        && !out.contains(m)
    {
        out.push_str(&format!(" ({m})"));
    }
    out
}

/// The lines after it, for a queued job.
fn details(a: &Answer) -> String {
    let mut out = String::new();
    if let Some(p) = a.queue_position {
        let ahead = a.jobs_ahead.map(|n| format!(", {n} ahead of it in its pools")).unwrap_or_default();
        out.push_str(&format!("  place in queue {}: {p}{ahead}\n", a.queue));
    }
    if a.would_start_if.is_empty() {
        out.push_str("  would start if: no single change the scheduler could confirm\n");
    } else {
        out.push_str("  would start if (any one, each checked by the scheduler):\n");
        for c in &a.would_start_if {
            out.push_str(&format!("    - {} [{}]\n", c.detail, c.kind));
        }
    }
    match &a.estimated_start {
        Some(e) => out.push_str(&format!("  estimated start: {} ({})\n", e.at, e.method)),
        None => out
            .push_str("  estimated start: unknown (no deadline or recorded runtime of the running jobs gets there)\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_job_shows_what_its_last_run_said() {
        let mut j: JobView = serde_json::from_value(serde_json::json!({
            "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "queue": "q", "job_set": "s", "state": "failed",
            "priority": 0, "priority_class": "default", "submitted_at": "2026-01-01T00:00:00Z",
            "requests": {}, "annotations": {}, "labels": {}, "reason": "invalid job",
            "runs": [{"run_id": "01ARZ3NDEKTSV4RRFFQ69G5FB1", "executor": "e", "node": "n", "pool": "default",
                      "state": "failed", "leased_at": "2026-01-01T00:00:00Z", "reason": "invalid job",
                      "message": "the process runtime runs containers[0].command, and the pod spec has none"}]
        }))
        .expect("a job view");
        assert_eq!(
            explain(&j),
            "01ARZ3NDEKTSV4RRFFQ69G5FAV is failed: invalid job (the process runtime runs containers[0].command, and the pod spec has none)"
        );
        j.runs[0].message = Some("invalid job".into());
        assert_eq!(explain(&j), "01ARZ3NDEKTSV4RRFFQ69G5FAV is failed: invalid job");
    }

    #[test]
    fn a_queued_job_shows_its_place_the_conditions_and_the_estimate() {
        let a: Answer = serde_json::from_value(serde_json::json!({
            "job_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "queue": "A", "state": "queued", "reason": "no room",
            "queue_position": 3, "jobs_ahead": 2,
            "would_start_if": [{"kind": "capacity", "detail": "2 cpu free on one node of pool default (the most free now is 1 cpu)"}],
            "estimated_start": {"at": "2026-11-26T14:02:00.000Z", "method": "when 1 running job ends (1 by its deadline), if nothing more urgent arrives first"},
            "scheduler_runs": 4
        }))
        .expect("an answer");
        assert_eq!(
            details(&a),
            "  place in queue A: 3, 2 ahead of it in its pools\n  would start if (any one, each checked by the scheduler):\n    - 2 cpu free on one node of pool default (the most free now is 1 cpu) [capacity]\n  estimated start: 2026-11-26T14:02:00.000Z (when 1 running job ends (1 by its deadline), if nothing more urgent arrives first)\n"
        );
    }
}
