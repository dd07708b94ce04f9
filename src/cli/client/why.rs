//! `convoy why ID`: where a job is and why.

use super::http::Client;
use convoy::model::JobId;
use convoy::model::api::JobView;

/// Flags of `convoy why`.
#[derive(clap::Args, Debug)]
pub(crate) struct WhyArgs {
    id: JobId,
}

/// Prints `<id> is <state>: <reason>` (the scheduler's latest reason, or why the job ended).
pub(super) async fn run(c: &Client, args: WhyArgs) -> anyhow::Result<()> {
    let j: JobView = c.get(&format!("/v1/jobs/{}", args.id)).await?;
    match &j.reason {
        Some(r) => println!("{} is {}: {r}", args.id, j.state),
        None => println!("{} is {}", args.id, j.state),
    }
    Ok(())
}
