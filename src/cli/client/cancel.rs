//! `convoy cancel QUEUE JOB_SET [JOB_ID…] [--states s1,s2]`.

use super::http::{Client, print_json};
use convoy::model::api::{CancelRequest, JobIdsResponse};
use convoy::model::{JobId, JobSetName, JobState, QueueName};
use reqwest::Method;

/// Flags of `convoy cancel`.
#[derive(clap::Args, Debug)]
pub(crate) struct CancelArgs {
    queue: QueueName,
    job_set: JobSetName,
    job_ids: Vec<JobId>,
    /// Only jobs in these states (comma-separated).
    #[arg(long)]
    states: Option<String>,
}

/// Cancels the named jobs, or the whole job set; prints the jobs cancelled.
pub(super) async fn run(c: &Client, args: CancelArgs) -> anyhow::Result<()> {
    let states = args.states.as_deref().map(parse_states).transpose()?;
    let body = CancelRequest {
        queue: args.queue,
        job_set: args.job_set,
        job_ids: (!args.job_ids.is_empty()).then_some(args.job_ids),
        states,
        reason: None,
    };
    let answer: JobIdsResponse = c.send_json(Method::POST, "/v1/jobs/cancel", &body).await?;
    print_json(&answer)
}

/// `queued, running` → the states; an unknown one is refused naming the flag and the choices.
pub(super) fn parse_states(text: &str) -> anyhow::Result<Vec<JobState>> {
    text.split(',')
        .map(str::trim)
        .map(|s| {
            JobState::parse(s).ok_or_else(|| {
                let known: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                anyhow::anyhow!("--states: unknown state {s:?} (known: {})", known.join(", "))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_parsed_or_refused_naming_the_flag() {
        assert_eq!(parse_states("queued, running").unwrap(), [JobState::Queued, JobState::Running]);
        let e = parse_states("queued,lost").unwrap_err().to_string();
        assert!(e.contains("--states") && e.contains("\"lost\"") && e.contains("cancelled"), "{e}");
    }
}
