//! `convoy bench cluster`: three servers on loopback, the throughput clients spread over them or
//! all sent to the leader, and the latency of single requests by where they were sent.

use crate::common::bench::bench_json;
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
