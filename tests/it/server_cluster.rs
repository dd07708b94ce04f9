//! Three `convoy server` processes formed from `[cluster] peers`: one is killed (-9) while 20,000
//! jobs are submitted through the leader and the logs are purged behind snapshots; it restarts,
//! can only catch up by installing a snapshot, and then all three answer the same state digest
//! (`GET /v1/cluster/digest`) at the same applied index.

use crate::common::{Api, Server, procs};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// A member's configuration: its port, id and the peer list; small snapshot intervals so that a
/// few hundred writes purge the log.
fn member_config(dir: &Path, id: usize, ports: &[u16]) -> String {
    let port = ports[id - 1];
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{{ id = {}, addr = \"http://127.0.0.1:{p}\" }}", i + 1))
        .collect();
    let mut c = procs::config_on_port(dir, port, &format!("node_id = {id}\nadvertise = \"http://127.0.0.1:{port}\""));
    c.push_str(&format!(
        "\n[cluster]\npeers = [ {} ]\nsnapshot_every_entries = 200\nlog_entries_kept = 50\n",
        peers.join(", ")
    ));
    c
}

async fn status(api: &Api) -> Value {
    let (s, v) = api.get("/v1/cluster").await;
    assert_eq!(s, 200, "{v}");
    v
}

async fn digest(api: &Api) -> Value {
    let (s, v) = api.get("/v1/cluster/digest").await;
    assert_eq!(s, 200, "{v}");
    v
}

/// The leader's id, once every member in `members` names the same one.
async fn agreed_leader(members: &[&Server]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders = Vec::new();
        for m in members {
            leaders.push(status(m).await["leader"].as_u64());
        }
        if let Some(Some(l)) = leaders.first().copied()
            && leaders.iter().all(|x| *x == Some(l))
        {
            return l;
        }
        assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_catches_up_by_snapshot_and_the_digests_agree() {
    let ports: Vec<u16> = (0..3).map(|_| procs::free_port()).collect();
    let tmps: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("temp dir")).collect();
    let start = |i: usize| Server::start_in(tmps[i].path(), &member_config(tmps[i].path(), i + 1, &ports));
    let mut members: Vec<Option<Server>> = (0..3).map(|i| Some(start(i))).collect();
    let all: Vec<&Server> = members.iter().flatten().collect();
    for m in &all {
        m.ready().await;
    }
    let leader_id = agreed_leader(&all).await;
    let leader = &all[leader_id as usize - 1];
    leader.create_queue("q").await;

    // --- a follower dies; 20,000 jobs go in through the leader, 40 per request.
    let down = if leader_id == 1 { 2 } else { 1 };
    let down_last = status(all[down - 1]).await["last_log_index"].as_u64().unwrap_or(0);
    members[down - 1].as_mut().expect("running").kill9();
    let leader = members[leader_id as usize - 1].as_ref().expect("leader");
    let mut last_ids = Vec::new();
    for batch in 0..500 {
        let jobs: Vec<Value> = (0..40)
            .map(|i| json!({"client_id": format!("c-{batch}-{i}"), "pod_spec": crate::common::pod("10m", "true")}))
            .collect();
        last_ids = leader.submit("q", &format!("set-{}", batch % 10), jobs).await;
        assert_eq!(last_ids.len(), 40);
    }
    let purged = status(leader).await["purged_index"].as_u64().unwrap_or(0);
    assert!(purged > down_last, "the leader purged its log past the dead member ({purged} <= {down_last})");

    // --- it comes back and installs a snapshot.
    members[down - 1] = Some(start(down - 1));
    let all: Vec<&Server> = members.iter().flatten().collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let digests = loop {
        let mut d = Vec::new();
        for m in &all {
            d.push(digest(m).await);
        }
        let same_index = d.iter().all(|x| x["applied_index"] == d[0]["applied_index"]);
        if same_index && d.iter().all(|x| x["digest"] == d[0]["digest"]) {
            break d;
        }
        assert!(Instant::now() < deadline, "the members never agreed: {d:?}\n{}", all[down - 1].log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(digests[0]["applied_index"].as_u64().unwrap() > purged);
    assert_eq!(digests[0]["digest"].as_str().map(str::len), Some(64));
    let back = all[down - 1];
    let s = status(back).await;
    assert!(s["snapshots_installed"].as_u64() >= Some(1), "{s}");
    assert!(back.log().contains("raft snapshot installed"), "{}", back.log());
    // It serves what was written while it was down.
    assert_eq!(back.count_jobs("queue=q&job_set=set-3&limit=1000").await, 1000);
    for id in &last_ids {
        assert_eq!(back.job(id).await["state"], "queued", "{id}");
    }
}
