//! `convoy job ID`: a job with its runs and events.

use super::http::{Client, print_json};
use convoy::model::JobId;
use convoy::model::api::JobView;

/// Flags of `convoy job`.
#[derive(clap::Args, Debug)]
pub(crate) struct JobArgs {
    id: JobId,
}

/// Prints the job as JSON.
pub(super) async fn run(c: &Client, args: JobArgs) -> anyhow::Result<()> {
    print_json(&c.get::<JobView>(&format!("/v1/jobs/{}", args.id)).await?)
}
