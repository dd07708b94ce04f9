//! `convoy replay`: run recorded scheduling cycles again from a server's data directory and say,
//! per cycle, whether the scheduler decides the same; with `--job`, explain that job's fate.

use anyhow::Context;
use convoy::model::JobId;
use convoy::server::{CycleReport, CycleSelector, ReplayReport, ReplayRequest, ReplayVerdict, replay};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Flags of `convoy replay`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("selector").args(["cycle", "index", "at"])))]
pub(crate) struct ReplayArgs {
    /// The server's data directory (`server.data_dir`), live or a copy: it is only read (its
    /// log and snapshot files are copied first).
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Only the cycle with this number.
    #[arg(long, value_name = "N")]
    cycle: Option<u64>,
    /// Only the cycle recorded at this log index, or the first after it.
    #[arg(long, value_name = "I")]
    index: Option<u64>,
    /// Only the last cycle run at or before TIME: RFC 3339 (`2026-11-26T14:02:00Z`), or `HH:MM`
    /// (up to the end of that minute) or `HH:MM:SS` today (UTC).
    #[arg(long, value_name = "TIME")]
    at: Option<String>,
    /// Explain this job's fate in the chosen cycle (with no selector: in every cycle whose
    /// decisions name it): where it stood, what the cycle did with it, and each node of its pools.
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// Replay under the [scheduler] section of this server configuration file instead of the
    /// configuration each cycle recorded (what a changed configuration would have decided).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Runs `convoy replay`: fails (exit 1) unless every chosen cycle replays identically.
pub(crate) fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let select = match (&args.cycle, &args.index, &args.at) {
        (Some(n), _, _) => CycleSelector::Cycle(*n),
        (_, Some(i), _) => CycleSelector::Index(*i),
        (_, _, Some(t)) => CycleSelector::At(parse_time(t).with_context(|| format!("--at {t}"))?),
        _ => CycleSelector::All,
    };
    let job = match &args.job {
        Some(id) => Some(id.parse::<JobId>().map_err(|e| anyhow::anyhow!("--job {id}: {e}"))?),
        None => None,
    };
    let config = match &args.config {
        Some(path) => Some(convoy::config::Config::load(Some(path))?.scheduler),
        None => None,
    };
    let req = ReplayRequest { data_dir: args.data_dir.clone(), select, job, config };
    let report = replay(&req).with_context(|| format!("replaying {}", args.data_dir.display()))?;
    for c in &report.cycles {
        println!("{}", line(c));
        if let Some(f) = &c.fate {
            println!("  job {}: {}", job.map(|j| j.to_string()).unwrap_or_default(), f.before);
            println!("  outcome: {}", f.outcome);
            for n in &f.nodes {
                println!("    {}/{} (pool {}): {}", n.executor, n.node, n.pool, n.verdict);
            }
        }
    }
    println!("{}", summary(&report));
    let (identical, differ, not_replayable) = report.counts();
    if report.cycles.is_empty() {
        anyhow::bail!("no recorded cycle matches");
    }
    if differ + not_replayable > 0 {
        anyhow::bail!("{differ} cycle(s) differ and {not_replayable} could not be replayed ({identical} identical)");
    }
    Ok(())
}

/// One cycle's line.
fn line(c: &CycleReport) -> String {
    let cycle = c.cycle.map_or("cycle ?".to_string(), |n| format!("cycle {n}"));
    let read = c.snapshot_index.map_or(String::new(), |i| format!(" (state of index {i})"));
    let stale = if c.stale { " [not applied: the leader had lost its term]" } else { "" };
    let verdict = match &c.verdict {
        ReplayVerdict::Identical => "identical".to_string(),
        ReplayVerdict::Differs(d) => format!("differs: {d}"),
        ReplayVerdict::NotReplayable(why) => format!("not replayable: {why}"),
    };
    format!("{cycle} index {}{read} {} term {}{stale}: {verdict}", c.index, time(c.at_ms), c.term)
}

fn summary(r: &ReplayReport) -> String {
    let (identical, differ, not_replayable) = r.counts();
    let held = r.held.map_or("an empty log".to_string(), |(f, l)| format!("log entries {f}..={l}"));
    let base = match r.base {
        None => String::new(),
        Some(None) => ", from the empty state before the log's first entry".to_string(),
        Some(Some(i)) => format!(", from the snapshot at index {i}"),
    };
    let config = r.override_hash.as_ref().map_or(String::new(), |h| format!(", under --config (hash {h}…)"));
    format!(
        "{} cycle(s) of {held}{base}{config}: {identical} identical, {differ} differ, {not_replayable} not replayable",
        r.cycles.len()
    )
}

fn time(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// RFC 3339, or a time of day today (UTC), in ms since the epoch.
fn parse_time(text: &str) -> anyhow::Result<i64> {
    let at = if text.len() <= 8 && text.contains(':') && !text.contains('T') {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let day = secs / 86_400 * 86_400;
        let mut parts = text.split(':').map(str::parse::<u64>);
        // `HH:MM` means up to the end of that minute, `HH:MM:SS` of that second.
        let (h, m, s) = (parts.next(), parts.next(), parts.next().unwrap_or(Ok(59)));
        let (Some(Ok(h)), Some(Ok(m)), Ok(s)) = (h, m, s) else {
            anyhow::bail!("a time of day is HH:MM or HH:MM:SS");
        };
        if h > 23 || m > 59 || s > 59 || parts.next().is_some() {
            anyhow::bail!("a time of day is HH:MM or HH:MM:SS, within a day");
        }
        UNIX_EPOCH + Duration::from_secs(day + h * 3600 + m * 60 + s) + Duration::from_millis(999)
    } else {
        humantime::parse_rfc3339_weak(text).map_err(|e| anyhow::anyhow!("not an RFC 3339 time: {e}"))?
    };
    let ms = at.duration_since(UNIX_EPOCH).context("a time before 1970")?.as_millis();
    i64::try_from(ms).context("a time too far ahead")
}
