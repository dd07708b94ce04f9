//! `convoy watch QUEUE JOB_SET [--from SEQ]`: follows a job set's event stream.

use super::http::Client;
use convoy::model::api::EventView;
use convoy::model::{JobSetName, QueueName};
use reqwest::Method;

/// Flags of `convoy watch`.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    queue: QueueName,
    job_set: JobSetName,
    #[arg(long, default_value_t = 1)]
    from: u64,
}

/// Prints one line per event until the server ends the stream.
pub async fn run(c: &Client, args: WatchArgs) -> anyhow::Result<()> {
    let path = format!("/v1/queues/{}/job-sets/{}/events?from={}", args.queue, args.job_set, args.from);
    let mut resp = c.send_raw(c.request(Method::GET, &path)).await?;
    let mut buf = String::new();
    while let Some(chunk) = resp.chunk().await? {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) {
                let e: EventView = serde_json::from_str(data.trim())?;
                println!("{}", line(&e));
            }
        }
    }
    Ok(())
}

/// `seq at kind job_id message`, the kind padded so the ids line up.
fn line(e: &EventView) -> String {
    format!(
        "{:>6} {} {:<18} {} {}",
        e.seq,
        e.at,
        kind_name(e),
        e.job_id,
        e.message.as_deref().unwrap_or("")
    )
}

/// The event kind as the API writes it (`cancel_requested`).
fn kind_name(e: &EventView) -> String {
    serde_json::to_value(e.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}
