//! Three `convoy server` processes formed from `[cluster] peers` (the `Trio` harness): one is
//! killed (-9) while 100,000 jobs are submitted through the leader and the logs are purged behind
//! snapshots; it restarts, can only catch up by installing a snapshot, and then all three answer
//! the same state digest (`GET /v1/cluster/digest`) at the same applied index.

use crate::common::Api;
use crate::common::trio::{Trio, status};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn digest(api: &Api) -> Value {
    let (s, v) = api.get("/v1/cluster/digest").await;
    assert_eq!(s, 200, "{v}");
    v
}

/// Submits `body` as a client that retries a 503 (an election under way on this loaded machine)
/// on the members in `live` in turn with the same `client_id`s, as the CLI and agents do.
async fn submit_retrying(trio: &Trio, live: &[u64], body: &Value) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for attempt in 0usize.. {
        let (s, v) = trio.api(live[attempt % live.len()]).post("/v1/jobs", body).await;
        if s == 200 {
            return crate::common::api::ids(&v);
        }
        assert!(s == 503 && Instant::now() < deadline, "{s} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!("the loop returns or panics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_catches_up_by_snapshot_and_the_digests_agree() {
    // Small snapshot intervals, so that a few hundred writes purge the log. Slow timings: this
    // tests catching up, and a debug build applying 100-job entries on a loaded machine can hold
    // a member's Raft thread longer than the harness's 150 ms append timeout.
    let cluster = "heartbeat_interval = \"500ms\"\nelection_timeout = \"2s\"\nsnapshot_every_entries = 100\nlog_entries_kept = 20";
    let mut trio = Trio::start_opts(3, false, cluster).await;
    let leader = trio.leader().await;
    trio.api(leader).create_queue("q").await;

    // --- a follower dies; 100,000 jobs go in through the leader, 100 per request.
    let down = if leader == 1 { 2 } else { 1 };
    let down_last = status(trio.api(down)).await.and_then(|s| s["last_log_index"].as_u64()).unwrap_or(0);
    trio.member(down).kill9();
    let live: Vec<u64> = (1..=3).filter(|id| *id != down).collect();
    let mut last_ids = Vec::new();
    for batch in 0..1000 {
        let jobs: Vec<Value> = (0..100)
            .map(|i| json!({"client_id": format!("c-{batch}-{i}"), "pod_spec": crate::common::pod("10m", "true")}))
            .collect();
        let body = json!({"queue": "q", "job_set": format!("set-{}", batch % 200), "jobs": jobs});
        last_ids = submit_retrying(&trio, &live, &body).await;
        assert_eq!(last_ids.len(), 100);
    }
    let leader = trio.leader_among(&live, Duration::from_secs(10)).await;
    let purged = status(trio.api(leader)).await.and_then(|s| s["purged_index"].as_u64()).unwrap_or(0);
    assert!(purged > down_last, "the leader purged its log past the dead member ({purged} <= {down_last})");

    // --- it comes back and installs a snapshot; then every member holds the same state.
    trio.member(down).start();
    let deadline = Instant::now() + Duration::from_secs(300);
    let digests = loop {
        let mut d = Vec::new();
        for id in 1..=3 {
            d.push(digest(trio.api(id)).await);
        }
        let same_index = d.iter().all(|x| x["applied_index"] == d[0]["applied_index"]);
        if same_index && d.iter().all(|x| x["digest"] == d[0]["digest"]) {
            break d;
        }
        assert!(Instant::now() < deadline, "the members never agreed: {d:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(digests[0]["applied_index"].as_u64().unwrap_or(0) > purged);
    assert_eq!(digests[0]["digest"].as_str().map(str::len), Some(64));
    let back = trio.api(down);
    let s = status(back).await.expect("status");
    assert!(s["snapshots_installed"].as_u64() >= Some(1), "{s}");
    assert!(trio.member(down).log().contains("raft snapshot installed"));
    // It serves what was written while it was down.
    let back = trio.api(down);
    assert_eq!(back.count_jobs("queue=q&job_set=set-3&limit=1000").await, 500);
    for id in &last_ids {
        assert_eq!(back.job(id).await["state"], "queued", "{id}");
    }
}
