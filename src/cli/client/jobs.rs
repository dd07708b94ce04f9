//! `convoy jobs [--queue Q] [--job-set S] [--state STATE] [--limit N]`: a table of jobs.

use super::http::Client;
use convoy::model::api::{JobList, JobView};
use std::io::Write;

/// Flags of `convoy jobs`.
#[derive(clap::Args, Debug)]
pub(crate) struct JobsArgs {
    #[arg(long)]
    queue: Option<String>,
    #[arg(long)]
    job_set: Option<String>,
    #[arg(long)]
    state: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: usize,
}

/// Lists jobs as a table; the server checks the filters and names a bad one.
pub(super) async fn run(c: &Client, args: JobsArgs) -> anyhow::Result<()> {
    let list: JobList = c.get(&format!("/v1/jobs?{}", query(&args))).await?;
    let mut out = std::io::stdout().lock();
    write_table(&mut out, &list.jobs)?;
    Ok(())
}

/// The filters as an encoded query string.
fn query(args: &JobsArgs) -> String {
    // Any base does: only the query it builds is used.
    let mut url = reqwest::Url::parse("http://convoy/").expect("a valid URL literal");
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("limit", &args.limit.to_string());
        for (k, v) in [("queue", &args.queue), ("job_set", &args.job_set), ("state", &args.state)] {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
    }
    url.query().unwrap_or_default().to_string()
}

/// One line per job under a header, in columns.
fn write_table(out: &mut impl Write, jobs: &[JobView]) -> std::io::Result<()> {
    writeln!(out, "{:<28} {:<12} {:<16} {:<10} REASON", "ID", "QUEUE", "JOB SET", "STATE")?;
    for j in jobs {
        writeln!(
            out,
            "{:<28} {:<12} {:<16} {:<10} {}",
            j.id.to_string(),
            j.queue.as_str(),
            j.job_set.as_str(),
            j.state.as_str(),
            j.reason.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}
