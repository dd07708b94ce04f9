//! The job-set event stream: server-sent events, resumable, staying open for new events.

use crate::common::{Server, job};
use serde_json::{Value, json};
use std::time::Duration;

/// Parses an SSE body into (id, event, data) triples.
fn parse_sse(body: &str) -> Vec<(u64, String, Value)> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let (mut id, mut kind, mut data) = (None, String::new(), String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                kind = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim());
            }
        }
        if let Some(id) = id {
            out.push((id, kind, serde_json::from_str(&data).unwrap_or(Value::Null)));
        }
    }
    out
}

#[tokio::test]
async fn stream_resumes_and_follows() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let ids = s.submit("A", "s", vec![job("1"), job("1")]).await;
    let url = format!("{}/v1/queues/A/job-sets/s/events", s.url);

    // The backlog: submitted + queued per job, dense sequence numbers.
    let body = s.client.get(format!("{url}?follow=false")).send().await.unwrap().text().await.unwrap();
    let events = parse_sse(&body);
    assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert_eq!(events[0].1, "submitted");
    assert_eq!(events[1].1, "queued");
    assert_eq!(events[0].2["job_id"].as_str(), Some(ids[0].as_str()));

    // Resuming from a sequence number, by query or by Last-Event-ID.
    let body = s.client.get(format!("{url}?follow=false&from=3")).send().await.unwrap().text().await.unwrap();
    assert_eq!(parse_sse(&body).iter().map(|e| e.0).collect::<Vec<_>>(), vec![3, 4]);
    let r = s.client.get(format!("{url}?follow=false")).header("Last-Event-ID", "2").send().await.unwrap();
    assert_eq!(r.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("text/event-stream"));
    assert_eq!(parse_sse(&r.text().await.unwrap()).first().map(|e| e.0), Some(3));
    let (st, v) = s.get("/v1/queues/A/job-sets/s/events?from=x").await;
    assert_eq!(st, 400, "{v}");

    // Following: the stream stays open and delivers new events as they happen.
    let mut resp = s.client.get(format!("{url}?from=5")).send().await.unwrap();
    let canceller = {
        let client = s.client.clone();
        let base = s.url.clone();
        let id = ids[0].clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            client
                .post(format!("{base}/v1/jobs/cancel"))
                .json(&json!({"queue": "A", "job_set": "s", "job_ids": [id]}))
                .send()
                .await
                .unwrap();
        })
    };
    let mut buf = String::new();
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let chunk = resp.chunk().await.unwrap().expect("stream stays open");
            buf.push_str(&String::from_utf8_lossy(&chunk));
            let events = parse_sse(&buf);
            if events.iter().any(|e| e.1 == "cancelled") {
                return events;
            }
        }
    })
    .await
    .expect("new events arrive on the open stream");
    canceller.await.unwrap();
    assert_eq!(got[0].0, 5);
    assert_eq!(got[0].1, "cancel_requested");
    assert_eq!(got[1].1, "cancelled");
}
