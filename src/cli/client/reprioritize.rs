//! `convoy reprioritize QUEUE JOB_SET PRIORITY [JOB_ID…]`.

use super::http::{Client, print_json};
use convoy::model::api::{JobIdsResponse, ReprioritizeRequest};
use convoy::model::{JobId, JobSetName, QueueName};
use reqwest::Method;

/// Flags of `convoy reprioritize`.
#[derive(clap::Args, Debug)]
pub(crate) struct ReprioritizeArgs {
    queue: QueueName,
    job_set: JobSetName,
    priority: u32,
    job_ids: Vec<JobId>,
}

/// Changes the priority of the named jobs, or of the whole job set; prints the jobs changed.
pub(super) async fn run(c: &Client, args: ReprioritizeArgs) -> anyhow::Result<()> {
    let body = ReprioritizeRequest {
        queue: args.queue,
        job_set: args.job_set,
        job_ids: (!args.job_ids.is_empty()).then_some(args.job_ids),
        priority: args.priority,
    };
    let answer: JobIdsResponse = c.send_json(Method::POST, "/v1/jobs/reprioritize", &body).await?;
    print_json(&answer)
}
