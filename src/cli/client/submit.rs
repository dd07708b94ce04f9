//! `convoy submit FILE`: a submission file, or a bare PodSpec with `--queue` and `--job-set`.

use super::doc;
use super::http::{Client, print_json};
use anyhow::bail;
use convoy::model::api::{SubmitItem, SubmitRequest, SubmitResponse};
use convoy::model::{JobSetName, QueueName};
use reqwest::Method;
use std::path::PathBuf;

/// Flags of `convoy submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    file: PathBuf,
    #[arg(long)]
    queue: Option<QueueName>,
    #[arg(long)]
    job_set: Option<JobSetName>,
    /// With a bare PodSpec: how many copies.
    #[arg(long, default_value_t = 1)]
    count: u32,
    #[arg(long)]
    priority_class: Option<String>,
}

/// Submits the jobs and prints their ids.
pub async fn run(c: &Client, args: SubmitArgs) -> anyhow::Result<()> {
    let body = request(args)?;
    let answer: SubmitResponse = c.send_json(Method::POST, "/v1/jobs", &body).await?;
    print_json(&answer)
}

/// The submission the file and flags describe. A file with `jobs` is a whole submission (the
/// flags are not used); anything else is one PodSpec, submitted `--count` times.
fn request(args: SubmitArgs) -> anyhow::Result<SubmitRequest> {
    let value = doc::read_value(&args.file)?;
    if value.get("jobs").is_some() {
        return doc::decode(value, &args.file);
    }
    let (Some(queue), Some(job_set)) = (args.queue, args.job_set) else {
        bail!("{} holds a bare PodSpec: give --queue and --job-set", args.file.display());
    };
    let pod_spec = serde_json::value::to_raw_value(&value)?;
    let item = SubmitItem {
        priority: 0,
        priority_class: args.priority_class,
        pod_spec,
        annotations: Default::default(),
        labels: Default::default(),
        services: Vec::new(),
        ingresses: Vec::new(),
        client_id: None,
    };
    Ok(SubmitRequest { queue, job_set, jobs: vec![item; args.count as usize] })
}
