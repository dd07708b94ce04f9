//! `convoy jobs [--queue Q] [--job-set S] [--state STATE] [--since AGE] [--limit N | --all]
//! [--after ID] [-o json]`: jobs newest first, as a table.

use super::http::Client;
use super::output::{Format, elapsed, short_time};
use convoy::model::JobId;
use convoy::model::api::{JobList, JobView};
use convoy::model::human;
use std::io::Write;
use std::time::{Duration, SystemTime};

/// Flags of `convoy jobs`.
#[derive(clap::Args, Debug)]
pub(crate) struct JobsArgs {
    /// Only jobs of this queue (which must exist).
    #[arg(long)]
    queue: Option<String>,
    /// Only jobs of this job set (with --queue).
    #[arg(long)]
    job_set: Option<String>,
    /// Only jobs in these states, comma-separated (`failed`, `queued,running`).
    #[arg(long)]
    state: Option<String>,
    /// Only jobs submitted within this long (`1h`, `30m`, `2d`).
    #[arg(long, value_parser = humantime::parse_duration)]
    since: Option<Duration>,
    /// How many jobs to list, newest first (1 to 1000).
    #[arg(long, default_value_t = 100, conflicts_with = "all")]
    limit: usize,
    /// Every job that matches, page after page.
    #[arg(long)]
    all: bool,
    /// The page after this job id (the id the previous page said to continue from).
    #[arg(long)]
    after: Option<JobId>,
    /// `table` (default) or `json` (the API's pages, one JSON document).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Largest page the server gives.
const PAGE: usize = 1000;

/// Lists jobs; the server checks the filters and names a bad one (or a queue that does not
/// exist).
pub(super) async fn run(c: &Client, args: JobsArgs) -> anyhow::Result<()> {
    let cutoff = args.since.map(|s| SystemTime::now() - s);
    let mut jobs: Vec<JobView> = Vec::new();
    let mut after = args.after;
    let mut more;
    loop {
        let want = if args.all { PAGE } else { (args.limit - jobs.len()).min(PAGE) };
        let page: JobList = c.get(&format!("/v1/jobs?{}", query(&args, want, after))).await?;
        let before = jobs.len();
        let mut older = false;
        for j in page.jobs {
            if cutoff.is_some_and(|t| submitted(&j).is_some_and(|s| s < t)) {
                older = true;
                break;
            }
            jobs.push(j);
        }
        more = if older { None } else { page.next };
        after = page.next;
        let full = !args.all && jobs.len() >= args.limit;
        if more.is_none() || full || jobs.len() == before {
            break;
        }
    }
    let mut out = std::io::stdout().lock();
    match args.output {
        Format::Json => {
            let list = JobList { jobs, next: more };
            writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        }
        Format::Table => {
            write_table(&mut out, &jobs, SystemTime::now())?;
            if jobs.is_empty() {
                eprintln!("(no jobs match)");
            }
            if let Some(next) = more {
                eprintln!("(more jobs: --after {next} lists the next ones, --all lists them all)");
            }
        }
    }
    Ok(())
}

/// When the job was submitted.
fn submitted(j: &JobView) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(&j.submitted_at).ok()
}

/// The filters as an encoded query string, newest first.
fn query(args: &JobsArgs, limit: usize, after: Option<JobId>) -> String {
    // Any base does: only the query it builds is used.
    let mut url = reqwest::Url::parse("http://convoy/").expect("a valid URL literal");
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("limit", &limit.max(1).to_string());
        q.append_pair("order", "newest");
        for (k, v) in [("queue", &args.queue), ("job_set", &args.job_set), ("state", &args.state)] {
            if let Some(v) = v {
                q.append_pair(k, v);
            }
        }
        if let Some(a) = after {
            q.append_pair("after", &a.to_string());
        }
    }
    url.query().unwrap_or_default().to_string()
}

/// One line per job under a header, in columns: times in UTC, the last run's node, exit code
/// and time running.
fn write_table(out: &mut impl Write, jobs: &[JobView], now: SystemTime) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<26} {:<12} {:<16} {:<10} {:<19} {:<19} {:<19} {:>9} {:<12} {:>4} {:>9} {:>9} REASON",
        "ID",
        "QUEUE",
        "JOB SET",
        "STATE",
        "SUBMITTED (UTC)",
        "STARTED",
        "ENDED",
        "ELAPSED",
        "NODE",
        "EXIT",
        "CPU",
        "MAX MEM"
    )?;
    for j in jobs {
        let run = j.runs.last();
        let started = run.and_then(|r| r.running_at.as_deref());
        let ended = run.and_then(|r| r.finished_at.as_deref());
        let used = run.and_then(|r| r.usage.as_ref()).map_or(("-".to_string(), "-".to_string()), human::usage);
        writeln!(
            out,
            "{:<26} {:<12} {:<16} {:<10} {:<19} {:<19} {:<19} {:>9} {:<12} {:>4} {:>9} {:>9} {}",
            j.id.to_string(),
            j.queue.as_str(),
            j.job_set.as_str(),
            j.state.as_str(),
            short_time(Some(&j.submitted_at)),
            short_time(started),
            short_time(ended),
            elapsed(started, ended, now),
            run.map(|r| r.node.as_str()).unwrap_or("-"),
            run.and_then(|r| r.exit_code).map_or("-".to_string(), |c| c.to_string()),
            used.0,
            used.1,
            j.reason.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_times_node_exit_code_and_elapsed() {
        let j: JobView = serde_json::from_value(serde_json::json!({
            "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "queue": "q", "job_set": "s", "state": "failed",
            "priority": 0, "priority_class": "default", "submitted_at": "2026-11-26T07:00:00.000Z",
            "requests": {}, "annotations": {}, "labels": {}, "reason": "exit code 3",
            "runs": [{"run_id": "01ARZ3NDEKTSV4RRFFQ69G5FB1", "executor": "e", "node": "n1", "pool": "default",
                      "state": "failed", "leased_at": "2026-11-26T07:00:01.000Z",
                      "running_at": "2026-11-26T07:00:02.000Z", "finished_at": "2026-11-26T08:02:05.500Z",
                      "exit_code": 3, "usage": {"cpu_ms": 1500, "peak_memory_bytes": 536870912}}]
        }))
        .expect("a job view");
        let mut out = Vec::new();
        write_table(&mut out, &[j], SystemTime::now()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(line.contains("2026-11-26 07:00:00 2026-11-26 07:00:02 2026-11-26 08:02:05"), "{line}");
        assert!(line.contains(" 1h02m03s n1") && line.contains("    3      1.5s   512 MiB exit code 3"), "{line}");
    }
}
