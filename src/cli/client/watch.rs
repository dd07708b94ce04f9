//! `convoy watch QUEUE JOB_SET [--from SEQ] [--until-done]`: follows a job set's event stream.

use super::http::Client;
use anyhow::Context;
use convoy::model::api::{EventView, JobList, Problem};
use convoy::model::{EventKind, JobId, JobSetName, JobState, QueueName};
use reqwest::Method;
use std::collections::{BTreeMap, BTreeSet};

/// Flags of `convoy watch`.
#[derive(clap::Args, Debug)]
pub(crate) struct WatchArgs {
    queue: QueueName,
    job_set: JobSetName,
    /// The first event to print, by sequence number.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// End once every job of the set has ended; exit with status 1 if any failed.
    #[arg(long)]
    until_done: bool,
}

/// Prints one line per event until the server ends the stream (or, with --until-done, every
/// job of the set has ended). A queue that does not exist or a job set without jobs is an error
/// at once, not a wait for ever.
pub(super) async fn run(c: &Client, args: WatchArgs) -> anyhow::Result<()> {
    let mut tally = Tally { live: live_jobs(c, &args).await?, ended: BTreeMap::new() };
    let follow = !(args.until_done && tally.live.is_empty());
    let mut path = events_path(&args.queue, &args.job_set, args.from);
    if !follow {
        path.push_str("&follow=false");
    }
    let mut resp = c.send_raw(c.request(Method::GET, &path)).await?;
    let mut stream = EventData::default();
    'stream: while let Some(chunk) = resp.chunk().await? {
        for event in stream.push(&chunk) {
            if event.name.as_deref() == Some("error") {
                // The server ends a stream it cannot continue with a problem in an `error` event.
                let detail = serde_json::from_str::<Problem>(&event.data)
                    .map(|p| format!("{} (request {})", p.detail, p.request_id.unwrap_or_default()))
                    .unwrap_or(event.data);
                anyhow::bail!("the server ended the event stream with an error: {detail}");
            }
            let e: EventView = serde_json::from_str(&event.data).with_context(|| format!("event {}", event.data))?;
            println!("{}", line(&e));
            tally.see(&e);
            if args.until_done && tally.live.is_empty() {
                break 'stream;
            }
        }
    }
    if args.until_done {
        let failed = tally.summary();
        eprintln!("({})", tally.summary_text());
        if failed > 0 {
            anyhow::bail!("{failed} job(s) of job set {} failed", args.job_set);
        }
    }
    Ok(())
}

/// The jobs of the set that have not ended; an error when the queue does not exist (the
/// server's 404) or the set has no jobs.
async fn live_jobs(c: &Client, args: &WatchArgs) -> anyhow::Result<BTreeSet<JobId>> {
    let mut live = BTreeSet::new();
    let mut after: Option<JobId> = None;
    let mut any = false;
    loop {
        let mut url = reqwest::Url::parse("http://convoy/v1/jobs").expect("a valid URL literal");
        url.query_pairs_mut()
            .append_pair("queue", args.queue.as_str())
            .append_pair("job_set", args.job_set.as_str())
            .append_pair("limit", "1000");
        if let Some(a) = after {
            url.query_pairs_mut().append_pair("after", &a.to_string());
        }
        let page: JobList = c.get(&format!("/v1/jobs?{}", url.query().unwrap_or_default())).await?;
        any |= !page.jobs.is_empty();
        live.extend(page.jobs.iter().filter(|j| !j.state.is_terminal()).map(|j| j.id));
        match page.next {
            Some(n) if args.until_done => after = Some(n),
            _ => break,
        }
    }
    if !any {
        anyhow::bail!(
            "job set {} of queue {} has no jobs (none submitted yet, or all deleted after the server's job_retention)",
            args.job_set,
            args.queue
        );
    }
    Ok(live)
}

/// The jobs still live, and how the others ended.
struct Tally {
    live: BTreeSet<JobId>,
    ended: BTreeMap<JobId, JobState>,
}

impl Tally {
    fn see(&mut self, e: &EventView) {
        let end = match e.kind {
            EventKind::Succeeded => Some(JobState::Succeeded),
            EventKind::Failed => Some(JobState::Failed),
            EventKind::Cancelled => Some(JobState::Cancelled),
            EventKind::Preempted => Some(JobState::Preempted),
            _ => None,
        };
        match end {
            Some(state) => {
                self.live.remove(&e.job_id);
                self.ended.insert(e.job_id, state);
            }
            // A job submitted (or requeued) while watching is waited for too.
            None if matches!(e.kind, EventKind::Submitted | EventKind::Requeued) => {
                self.ended.remove(&e.job_id);
                self.live.insert(e.job_id);
            }
            None => {}
        }
    }

    /// How many failed.
    fn summary(&self) -> usize {
        self.ended.values().filter(|s| **s == JobState::Failed).count()
    }

    /// `3 succeeded, 1 failed`.
    fn summary_text(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in self.ended.values() {
            *counts.entry(s.as_str()).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        if parts.is_empty() { "every job had ended".to_string() } else { parts.join(", ") }
    }
}

/// The path of a job set's event stream, each name percent-encoded as one path segment (job
/// set names may hold `/`, `+`, `:`, spaces, any character but control characters).
fn events_path(queue: &QueueName, job_set: &JobSetName, from: u64) -> String {
    // Any base does: only the path it builds is used.
    let mut url = reqwest::Url::parse("http://convoy/").expect("a valid URL literal");
    url.path_segments_mut().expect("an http URL has path segments").extend([
        "v1",
        "queues",
        queue.as_str(),
        "job-sets",
        job_set.as_str(),
        "events",
    ]);
    format!("{}?from={from}", url.path())
}

/// One event of the stream: its `event:` name, if any, and its `data`.
#[derive(Debug, PartialEq)]
struct SseEvent {
    name: Option<String>,
    data: String,
}

/// Splits a server-sent event stream into the `data` of its events. Bytes wait until their
/// event is complete and are only then decoded, so a character split across network chunks
/// arrives whole.
#[derive(Default)]
struct EventData {
    buf: Vec<u8>,
}

impl EventData {
    /// Adds a chunk of the stream; the events it completed.
    fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block);
            // Several `data:` lines of one event are one value, joined by newlines.
            let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
            let name = text.lines().find_map(|l| l.strip_prefix("event:")).map(|n| n.trim().to_string());
            if !data.is_empty() {
                out.push(SseEvent { name, data: data.join("\n") });
            }
        }
        out
    }
}

/// `seq at kind job_id message`, the kind padded so the ids line up.
fn line(e: &EventView) -> String {
    format!("{:>6} {} {:<18} {} {}", e.seq, e.at, kind_name(e), e.job_id, e.message.as_deref().unwrap_or(""))
}

/// The event kind as the API writes it (`cancel_requested`).
fn kind_name(e: &EventView) -> String {
    serde_json::to_value(e.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_set_names_are_one_encoded_path_segment() {
        let q = QueueName::new("a").unwrap();
        let path = |s: &str| events_path(&q, &JobSetName::new(s).unwrap(), 4);
        assert_eq!(
            path("scheduled__2026-11-23T10:00:00+00:00"),
            "/v1/queues/a/job-sets/scheduled__2026-11-23T10:00:00+00:00/events?from=4"
        );
        assert_eq!(path("my run/1 50%?#"), "/v1/queues/a/job-sets/my%20run%2F1%2050%25%3F%23/events?from=4");
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    const EVENT: &str = r#"{"seq":3,"job_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","at":"2025-01-01T00:00:00Z","kind":"cancel_requested","run_id":null,"message":"arrêté — ✓ 🚀"}"#;

    /// Every split of the stream into two chunks, including inside each multi-byte character of
    /// the message, gives the event back unchanged.
    #[test]
    fn characters_split_across_chunks_are_decoded_whole() {
        let stream = format!("id: 3\nevent: cancel_requested\ndata: {EVENT}\n\n");
        let bytes = stream.as_bytes();
        let splits_inside_a_character = (1..bytes.len()).filter(|&i| !stream.is_char_boundary(i)).count();
        assert!(splits_inside_a_character >= 8, "the test splits inside characters");
        for at in 1..bytes.len() {
            let mut d = EventData::default();
            let mut got = d.push(&bytes[..at]);
            got.extend(d.push(&bytes[at..]));
            assert_eq!(data(&got), [EVENT], "split at byte {at}");
            assert_eq!(got[0].name.as_deref(), Some("cancel_requested"));
            let e: EventView = serde_json::from_str(&got[0].data).unwrap();
            assert_eq!(e.message.as_deref(), Some("arrêté — ✓ 🚀"));
        }
    }

    #[test]
    fn byte_by_byte_and_several_events_per_chunk() {
        let stream = format!("data: {EVENT}\n\n: keep-alive\n\ndata: {EVENT}\n\ndata: {{\"partial");
        let mut d = EventData::default();
        let mut got = Vec::new();
        for b in stream.as_bytes() {
            got.extend(d.push(std::slice::from_ref(b)));
        }
        assert_eq!(data(&got), [EVENT, EVENT]);
        let mut d = EventData::default();
        assert_eq!(data(&d.push(stream.as_bytes())), [EVENT, EVENT]);
    }

    #[test]
    fn an_error_event_is_told_apart() {
        let stream = format!("id: 3\ndata: {EVENT}\n\nevent: error\ndata: {{\"status\":500}}\n\n");
        let got = EventData::default().push(stream.as_bytes());
        assert_eq!(got[0].name, None);
        assert_eq!(got[1], SseEvent { name: Some("error".into()), data: "{\"status\":500}".into() });
    }

    #[test]
    fn the_tally_ends_when_every_job_seen_has_ended() {
        let job = |n: u64| JobId::from_parts(1_700_000_000_000, n.into());
        let ev = |id: JobId, kind: &str| -> EventView {
            serde_json::from_value(
                serde_json::json!({"seq": 1, "job_id": id.to_string(), "at": "2025-01-01T00:00:00Z", "kind": kind}),
            )
            .unwrap()
        };
        let mut t = Tally { live: BTreeSet::from([job(1)]), ended: BTreeMap::new() };
        t.see(&ev(job(2), "submitted"));
        t.see(&ev(job(1), "failed"));
        assert!(!t.live.is_empty());
        t.see(&ev(job(2), "running"));
        t.see(&ev(job(2), "succeeded"));
        assert!(t.live.is_empty());
        assert_eq!((t.summary(), t.summary_text().as_str()), (1, "1 failed, 1 succeeded"));
    }

    #[test]
    fn lines_line_up() {
        let e: EventView = serde_json::from_str(EVENT).unwrap();
        assert_eq!(line(&e), "     3 2025-01-01T00:00:00Z cancel_requested   01ARZ3NDEKTSV4RRFFQ69G5FAV arrêté — ✓ 🚀");
    }
}
