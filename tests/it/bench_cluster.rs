//! `convoy bench cluster`: three servers on loopback, the throughput clients spread over them or
//! all sent to the leader, and the latency of single requests by where they were sent.

use crate::common::bench::bench_json;
use crate::common::trio::Trio;
use serde_json::Value;

/// Runs a short bench (no failovers) with the clients sent to `send_to`; its JSON line.
fn bench(send_to: &str) -> Value {
    bench_json(&[
        "cluster",
        "--batched-jobs",
        "300",
        "--batch-clients",
        "3",
        "--single-requests",
        "90",
        "--single-clients",
        "6",
        "--failovers",
        "0",
        "--send-to",
        send_to,
    ])
}

fn ms(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is a number: {v}"))
}

#[test]
fn single_requests_are_timed_apart_by_whether_a_follower_relayed_them() {
    let spread = bench("all");
    assert_eq!(spread["send_to"], "all", "{spread}");
    // Said either way (a starved machine may replace the leader under load).
    assert!(spread["leader_changed_during_throughput"].is_boolean(), "{spread}");
    assert_eq!(spread["single_requests"], 90, "{spread}");
    assert_eq!(spread["batched_jobs"], 300, "{spread}");
    assert_eq!((spread["lost"].as_u64(), spread["duplicated"].as_u64()), (Some(0), Some(0)), "{spread}");
    // Six clients over three servers: two at the leader, four at followers.
    for key in ["single_ms_at_leader_p50", "single_ms_relayed_p50"] {
        assert!(ms(&spread, key) > 0.0, "{key}: {spread}");
    }
    assert!(ms(&spread, "single_ms_relayed_p99") >= ms(&spread, "single_ms_relayed_p50"), "{spread}");

    let leader = bench("leader");
    assert_eq!(leader["send_to"], "leader", "{leader}");
    assert_eq!(leader["single_requests"], 90, "{leader}");
    assert!(ms(&leader, "single_ms_at_leader_p50") > 0.0, "{leader}");
    // Nothing was relayed, so there is no relayed latency to report.
    assert_eq!(ms(&leader, "single_ms_relayed_p50"), 0.0, "{leader}");
    assert_eq!(ms(&leader, "single_ms_relayed_p99"), 0.0, "{leader}");
}

const ADMIN: &str = "bench-admin-token";

/// `--servers`: a running cluster with auth on is measured through a token, and keeps none of the
/// bench's jobs queued afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_cluster_is_measured_through_a_token_and_keeps_none_of_the_jobs() {
    let mut trio = Trio::prepare(3, false, "", "").await;
    let auth = format!(
        "[auth]\nenabled = true\ncluster_secret = \"bench-cluster-secret\"\n\
         tokens = [{{ token = \"{ADMIN}\", principal = \"root\", roles = [\"admin\"] }}]\n"
    );
    for m in &mut trio.members {
        assert!(m.config.contains("[auth]\nenabled = false\n"), "{}", m.config);
        m.config = m.config.replace("[auth]\nenabled = false\n", &auth);
    }
    trio.start_all();
    let urls: Vec<String> = trio.members.iter().map(|m| format!("http://127.0.0.1:{}", m.port)).collect();

    // Without a token the cluster refuses: the bench says so instead of measuring refusals.
    let (servers, args) = (urls.join(","), ["--failovers", "0", "--batched-jobs", "200", "--batch-clients", "2"]);
    let refused = tokio::task::spawn_blocking({
        let servers = servers.clone();
        move || bench_output(&[&["cluster", "--servers", &servers][..], &args[..]].concat())
    })
    .await
    .expect("bench");
    assert!(!refused.status.success(), "no token, no measure");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("401") && err.contains("--token"), "{err}");

    let run = [
        &["cluster", "--servers", &servers, "--token", ADMIN, "--queue", "load"][..],
        &args[..],
        &["--single-requests", "30", "--single-clients", "3"][..],
    ]
    .concat()
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    let out = tokio::task::spawn_blocking(move || bench_json(&run.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .expect("bench");
    assert_eq!(out["servers"], 3, "{out}");
    assert_eq!(out["queue"], "load", "{out}");
    assert_eq!((out["batched_jobs"].as_u64(), out["single_requests"].as_u64()), (Some(200), Some(30)), "{out}");
    // Three single clients over three servers: one at the leader, two relayed.
    for key in ["single_ms_at_leader_p50", "single_ms_relayed_p50"] {
        assert!(ms(&out, key) > 0.0, "{key}: {out}");
    }
    // No agent takes them: every job is still queued at the end, and cancelled then.
    assert_eq!(out["cancelled"], 230, "{out}");

    let http = reqwest::Client::new();
    let listed: Value = http
        .get(format!("{}/v1/jobs?queue=load&limit=1000", urls[0]))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("JSON");
    let jobs = listed["jobs"].as_array().unwrap_or_else(|| panic!("jobs: {listed}"));
    assert_eq!(jobs.len(), 230, "{listed}");
    assert!(jobs.iter().all(|j| j["state"] == "cancelled"), "{listed}");
}

/// `--servers` measures and cancels; it never kills servers it did not start.
#[test]
fn servers_it_did_not_start_are_never_killed() {
    let out = bench_output(&["cluster", "--servers", "http://127.0.0.1:9", "--failovers", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--failovers 0"), "{err}");
    let out = bench_output(&["cluster", "--servers", "127.0.0.1:9", "--failovers", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--servers") && err.contains("http://"), "{err}");
}

fn bench_output(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .env_remove("CONVOY_TOKEN")
        .arg("bench")
        .args(args)
        .output()
        .expect("convoy runs")
}
