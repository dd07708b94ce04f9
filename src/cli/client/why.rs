//! `convoy why ID`: where a job is and why.

use super::http::Client;
use convoy::model::JobId;
use convoy::model::api::JobView;

/// Flags of `convoy why`.
#[derive(clap::Args, Debug)]
pub(crate) struct WhyArgs {
    id: JobId,
}

/// Prints `<id> is <state>: <reason>` (the scheduler's latest reason, or why the job ended),
/// with what the job's last run said when that says more.
pub(super) async fn run(c: &Client, args: WhyArgs) -> anyhow::Result<()> {
    let j: JobView = c.get(&format!("/v1/jobs/{}", args.id)).await?;
    println!("{}", explain(&j));
    Ok(())
}

/// The line `convoy why` prints.
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
}
