//! The Prometheus exposition of a real server (`GET /metrics`): every family has `# HELP` and
//! `# TYPE` and one block of samples, requests are timed by route template, and `promtool check
//! metrics` accepts the whole text.

use crate::common::{Server, job, node};
use serde_json::json;

/// Checks the Prometheus text format: `# HELP` then `# TYPE` per family, each family's samples in
/// one block right after them, no family twice. Answers the family names.
fn exposition_families(text: &str) -> Result<Vec<String>, String> {
    let mut families: Vec<String> = Vec::new();
    let mut typed = false;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["#", "HELP", name, ..] = words.as_slice() {
            if families.iter().any(|f| f == name) {
                return Err(format!("family {name} appears twice"));
            }
            families.push(name.to_string());
            typed = false;
        } else if let ["#", "TYPE", name, _] = words.as_slice() {
            if families.last().map(String::as_str) != Some(*name) || typed {
                return Err(format!("TYPE of {name} does not follow its HELP"));
            }
            typed = true;
        } else {
            let full = line.split(['{', ' ']).next().unwrap_or("");
            // A histogram's samples are its name with _bucket, _sum or _count.
            let last = families.last().map(String::as_str);
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| full.strip_suffix(suffix).filter(|base| last == Some(*base)))
                .unwrap_or(full);
            if !typed || families.last().map(String::as_str) != Some(name) {
                return Err(format!("sample outside its family's block, or without HELP and TYPE: {line}"));
            }
        }
    }
    Ok(families)
}

/// Every family on /metrics has HELP and TYPE and one block of samples, also once the
/// scheduler has reported per-queue shares.
#[tokio::test]
async fn metrics_families_are_whole_blocks() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    let (st, v) = s.post("/v1/executors/e1/lease", &json!({"nodes": [node("n1", "16")], "wait_seconds": 0})).await;
    assert_eq!(st, 200, "{v}");
    s.submit("A", "s", vec![job("1")]).await;
    s.submit("B", "s", vec![job("1")]).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = s.client.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
        // The shares are reported as a cycle decides; the time its decisions took to commit,
        // once they are applied.
        let commits = text
            .lines()
            .find_map(|l| l.strip_prefix("convoy_scheduling_commit_duration_seconds_count ")?.parse::<u64>().ok());
        if text.lines().filter(|l| l.starts_with("convoy_queue_share{")).count() >= 2 && commits.is_some_and(|c| c > 0)
        {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "no per-queue shares or no decisions' commit timed:\n{text}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let families = exposition_families(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for f in ["convoy_jobs", "convoy_queue_fair_share", "convoy_queue_share", "convoy_leader"] {
        assert!(families.iter().any(|x| x == f), "{f} missing:\n{text}");
    }
    // Requests are timed by route template, not by raw path.
    let submits = "convoy_api_request_duration_seconds_count{route=\"/v1/jobs\",method=\"POST\",status=\"2xx\"} 2";
    assert!(text.lines().any(|l| l == submits), "{text}");
    assert!(text.contains("route=\"/v1/executors/{executor}/lease\""), "{text}");
    assert!(!text.contains("/v1/executors/e1"), "{text}");
    // The cycles that placed the jobs counted the CPU they took (what paces them).
    let cpu = text.lines().find_map(|l| l.strip_prefix("convoy_scheduling_cpu_seconds_total ")?.parse::<f64>().ok());
    assert!(cpu.is_some_and(|c| c > 0.0), "no scheduling CPU counted:\n{text}");
    promtool_accepts(&text);
}

/// Fails unless `promtool check metrics` (Debian package `prometheus`) accepts `text`; skips
/// with a message only when promtool is absent and CONVOY_REQUIRE_PROMTOOL is not 1.
fn promtool_accepts(text: &str) {
    use std::io::Write as _;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && !crate::common::root::required("CONVOY_REQUIRE_PROMTOOL") =>
        {
            eprintln!("SKIPPED promtool check: promtool is not installed (Debian package `prometheus`)");
            return;
        }
        Err(e) => panic!("promtool could not be started: {e}"),
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}
