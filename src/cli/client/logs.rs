//! `convoy logs ID [-f] [--stderr]`: a job's output, whole once the run is over, followed while
//! it goes on.

use super::http::Client;
use convoy::model::JobId;
use convoy::model::api::OutputPage;
use std::io::Write;
use std::time::{Duration, Instant};

/// Flags of `convoy logs`.
#[derive(clap::Args, Debug)]
pub(crate) struct LogsArgs {
    id: JobId,
    /// Keep printing output as the run writes it, until it ends.
    #[arg(short, long)]
    follow: bool,
    /// Standard error alone, instead of standard output (processes; a pod has one log).
    #[arg(long)]
    stderr: bool,
}

/// How long one request waits for output at the server.
const WAIT_SECONDS: u32 = 20;
/// Without --follow: how long the running job's agent has to send its last lines.
const FIRST_WAIT_SECONDS: u32 = 5;
/// Shortest time between two requests that brought nothing: a server that answers at once
/// (an older one, for a job not started) is not asked in a tight loop.
const EMPTY_PAUSE: Duration = Duration::from_secs(1);

/// Prints the output of the job's latest run: the whole of it once the run is over (while its
/// agent keeps it; else the tail the server kept, and says so), else its last lines, then (with
/// --follow) what follows until it ends.
pub(super) async fn run(c: &Client, args: LogsArgs) -> anyhow::Result<()> {
    let stream = if args.stderr { "stderr" } else { "stdout" };
    let how = Follow { from: None, follow: args.follow };
    follow_output(c, args.id, stream, how, &mut std::io::stdout(), |note| eprintln!("({note})")).await
}

/// Where to start and whether to go on while the run does.
#[derive(Debug, Clone, Copy)]
pub(super) struct Follow {
    /// Offset to start from; None: the last lines of a live run (the whole of an ended one).
    pub from: Option<u64>,
    /// Go on until the run ends.
    pub follow: bool,
}

/// Writes one output stream of the job's latest run to `out`, page after page, until it is
/// done (or, without `how.follow`, after the first page of a live run); each note the server
/// adds goes to `note`, once.
pub(super) async fn follow_output(
    c: &Client,
    id: JobId,
    stream: &str,
    how: Follow,
    out: &mut impl Write,
    mut note: impl FnMut(&str),
) -> anyhow::Result<()> {
    let mut from = how.from;
    let mut said: Option<String> = None;
    loop {
        let wait = if how.follow { WAIT_SECONDS } else { FIRST_WAIT_SECONDS };
        let mut path = format!("/v1/jobs/{id}/output?stream={stream}&wait={wait}");
        if let Some(f) = from {
            path.push_str(&format!("&from={f}"));
        }
        let asked = Instant::now();
        let page: OutputPage = c.get(&path).await?;
        out.write_all(page.data.as_bytes())?;
        out.flush()?;
        // Each note once, however often the server repeats it.
        if let Some(n) = &page.note
            && said.as_ref() != Some(n)
        {
            note(n);
            said = Some(n.clone());
        }
        let moved = page.next.is_some() && page.next != from;
        if page.next.is_some() {
            from = page.next;
        }
        // An ended run is read to its end; a live one only with --follow.
        if page.done || !(how.follow || page.run_over) {
            return Ok(());
        }
        if page.data.is_empty() && !moved {
            tokio::time::sleep(EMPTY_PAUSE.saturating_sub(asked.elapsed())).await;
        }
    }
}
