//! `convoy logs ID [-f]`: a job's output, followed while its run goes on.

use super::http::Client;
use convoy::model::JobId;
use convoy::model::api::OutputPage;
use std::io::Write;

/// Flags of `convoy logs`.
#[derive(clap::Args, Debug)]
pub(crate) struct LogsArgs {
    id: JobId,
    /// Keep printing output as the run writes it, until it ends.
    #[arg(short, long)]
    follow: bool,
    /// Standard error instead of standard output (processes; a pod has one log).
    #[arg(long)]
    stderr: bool,
}

/// How long one request waits for output at the server.
const WAIT_SECONDS: u32 = 20;
/// Without --follow: how long the running job's agent has to send its last lines.
const FIRST_WAIT_SECONDS: u32 = 5;

/// Prints the last lines of the job's latest run, then (with --follow) what follows.
pub(super) async fn run(c: &Client, args: LogsArgs) -> anyhow::Result<()> {
    let stream = if args.stderr { "stderr" } else { "stdout" };
    let mut from: Option<u64> = None;
    let mut out = std::io::stdout();
    loop {
        let wait = if args.follow { WAIT_SECONDS } else { FIRST_WAIT_SECONDS };
        let mut path = format!("/v1/jobs/{}/output?stream={stream}&wait={wait}", args.id);
        if let Some(f) = from {
            path.push_str(&format!("&from={f}"));
        }
        let page: OutputPage = c.get(&path).await?;
        out.write_all(page.data.as_bytes())?;
        out.flush()?;
        if let Some(note) = &page.note {
            eprintln!("({note})");
        }
        if page.next.is_some() {
            from = page.next;
        }
        if page.done || !args.follow {
            return Ok(());
        }
    }
}
