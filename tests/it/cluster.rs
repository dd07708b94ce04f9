//! Three `convoy server` processes as one Raft cluster (the `Trio` harness, real processes on
//! 127.0.0.1), while its leader stays: formed from `[cluster] peers` alone; writes through any
//! member relayed to the leader and linearizable reads on every member; a member joining and
//! leaving, and a wiped member removed and added again, under a stream of writes; a member that
//! was down catching up by installing a snapshot, after which all three answer the same state
//! digest at the same applied index. Leaders that fail are `cluster_failover.rs`.

use crate::cli_client::ok;
use crate::common::trio::{Trio, member_config, peers_toml, status};
use crate::common::{Api, job};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Every job of queue `queue` as `member` lists them after a linearizable read: id → client id.
pub(crate) async fn all_jobs(api: &crate::common::Server, queue: &str) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!("/v1/jobs?queue={queue}&limit=1000&consistent=true");
        if let Some(a) = &after {
            path.push_str(&format!("&after={a}"));
        }
        let (st, v) = api.get(&path).await;
        if st != 200 {
            let log = api.log();
            let tail: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
            panic!(
                "{} {path}: {st} {v}\n{:?}\n{}",
                api.url,
                status(api).await,
                tail[tail.len().saturating_sub(60)..].join("\n")
            );
        }
        for j in v["jobs"].as_array().expect("jobs") {
            out.insert(j["id"].as_str().expect("id").to_string(), j["client_id"].as_str().map(str::to_string));
        }
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => return out,
        }
    }
}

/// Submits `jobs` (each with a client id) to the members in turn, starting with `first`, until
/// one acknowledges them; retries on 503 and on a lost connection, as the CLI does. The job ids,
/// or None if `deadline` passed.
pub(crate) async fn submit_retrying(
    apis: &[&Api],
    first: usize,
    body: &Value,
    deadline: Instant,
) -> Option<Vec<String>> {
    let mut i = first;
    while Instant::now() < deadline {
        let api = apis[i % apis.len()];
        let r =
            api.client.post(format!("{}/v1/jobs", api.url)).json(body).timeout(Duration::from_secs(10)).send().await;
        match r {
            Ok(r) if r.status().is_success() => {
                let v: Value = r.json().await.ok()?;
                return Some(v["job_ids"].as_array()?.iter().filter_map(|x| x.as_str().map(str::to_string)).collect());
            }
            Ok(r) => {
                let status = r.status().as_u16();
                assert!(
                    status == 503,
                    "a submission was refused with {status}: {}",
                    r.text().await.unwrap_or_default()
                );
            }
            Err(_) => {}
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// The state digest `api` answers (`GET /v1/cluster/digest`), with the index it was taken at.
async fn digest(api: &Api) -> Value {
    let (s, v) = api.get("/v1/cluster/digest").await;
    assert_eq!(s, 200, "{v}");
    v
}

/// Submits `body` as a client that retries a 503 (an election under way on this loaded machine)
/// on the members in `live` in turn with the same `client_id`s, as the CLI and agents do.
async fn submit_to_live_retrying(trio: &Trio, live: &[u64], body: &Value) -> Vec<String> {
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
async fn three_servers_form_one_cluster_and_serve_writes_and_consistent_reads_on_every_member() {
    let mut trio = Trio::start(3).await;
    let leader = trio.leader().await;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != leader).collect();
    // All three agree on one cluster of three voters.
    let st = status(trio.api(leader)).await.expect("status");
    assert_eq!(st["members"].as_array().map(Vec::len), Some(3), "{st}");
    assert!(st["members"].as_array().unwrap().iter().all(|m| m["voter"] == true), "{st}");

    // A queue created through a follower: relayed to the leader, answered as if sent there.
    let (s, v) = trio.api(followers[0]).post("/v1/queues", &json!({"name": "A"})).await;
    assert_eq!(s, 201, "{v}");
    // Writes through each member, each read back at once from the member it went through.
    let mut acked = Vec::new();
    for (n, id) in [1u64, 2, 3].iter().enumerate() {
        let body = json!({"queue": "A", "job_set": "s", "jobs": [
            {"client_id": format!("w{n}-0"), "pod_spec": job("100m")["pod_spec"]},
            {"client_id": format!("w{n}-1"), "pod_spec": job("100m")["pod_spec"]},
        ]});
        let (s, v) = trio.api(*id).post("/v1/jobs", &body).await;
        assert_eq!(s, 200, "through {id}: {v}");
        for j in v["job_ids"].as_array().unwrap() {
            let j = j.as_str().unwrap().to_string();
            let (s, got) = trio.api(*id).get(&format!("/v1/jobs/{j}")).await;
            assert_eq!(s, 200, "node {id} does not show the job it just acknowledged: {got}");
            acked.push(j);
        }
    }
    // Linearizable reads on every member see every acknowledged write.
    for id in [1u64, 2, 3] {
        let jobs = all_jobs(trio.api(id), "A").await;
        for j in &acked {
            assert!(jobs.contains_key(j), "node {id} misses {j}");
        }
        assert_eq!(jobs.len(), 6, "node {id}");
    }
    // Why a job waits, asked of every member: each runs the scheduler on its own copy of the
    // state and finds the same condition (no agent: a node must join the pool).
    let mut answers = Vec::new();
    for id in [1u64, 2, 3] {
        let (s, why) = trio.api(id).get(&format!("/v1/jobs/{}/why", acked[1])).await;
        assert_eq!(s, 200, "node {id}: {why}");
        assert_eq!(why["queue_position"], 2, "node {id}: {why}");
        answers.push(why["would_start_if"].clone());
        assert_eq!(why["would_start_if"][0]["kind"], "matching_node", "node {id}: {why}");
    }
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
    // Ids increase across the writes, whichever member took them.
    let mut sorted = acked.clone();
    sorted.sort();
    assert_eq!(sorted, acked);

    // The CLI's view, from a follower: the leader's progress for every member.
    let url = trio.api(followers[1]).url.clone();
    let text = ok(&url, &["cluster"]).await;
    assert!(text.contains(&format!("leader node {leader}")), "{text}");
    // Given several servers, the CLI moves on from one it cannot reach.
    let dead = format!("http://127.0.0.1:{}", crate::common::procs::free_port());
    let listed = ok(&format!("{dead},{url}"), &["jobs", "--queue", "A"]).await;
    assert_eq!(listed.lines().filter(|l| l.contains("queued")).count(), 6, "{listed}");
    assert_eq!(text.lines().filter(|l| l.contains("voter") || l.contains("leader  ")).count(), 3, "{text}");
    // The web UI's actions work from a follower too: relayed like the API's writes, and the
    // page it returns to already shows the outcome.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http.post(format!("{url}/ui/jobs/{}/cancel", acked[0])).send().await.unwrap();
    let to = r.headers().get("location").and_then(|l| l.to_str().ok()).map(str::to_string);
    assert_eq!((r.status().as_u16(), to), (303, Some(format!("/ui/jobs/{}?notice=cancelled", acked[0]))));
    let page = http.get(format!("{url}/ui/jobs/{}", acked[0])).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("<dd class=\"state cancelled\">cancelled</dd>"), "{page}");

    // A fourth server joins (its peers list names the members and itself, so it waits to be
    // added instead of forming a cluster), through a follower, then leaves again; all under a
    // stream of submissions.
    let (s, v) = trio.api(leader).post("/v1/queues", &json!({"name": "B"})).await;
    assert_eq!(s, 201, "{v}");
    let load = {
        let apis: Vec<Api> = [1u64, 2, 3].iter().map(|id| Api::new(trio.api(*id).url.clone())).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let refs: Vec<&Api> = apis.iter().collect();
            let mut acked = Vec::new();
            let mut n = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let jobs: Vec<Value> = (0..10)
                    .map(|k| json!({"client_id": format!("load-{n}-{k}"), "pod_spec": job("10m")["pod_spec"]}))
                    .collect();
                let body = json!({"queue": "B", "job_set": "load", "jobs": jobs});
                let got = submit_retrying(&refs, n, &body, Instant::now() + Duration::from_secs(20)).await;
                acked.extend(got.expect("a submission during a membership change was never acknowledged"));
                n += 1;
            }
            acked
        });
        (stop, task)
    };
    let dir4 = trio.members[0].dir.parent().unwrap().join("node-4");
    std::fs::create_dir_all(&dir4).unwrap();
    let (port4, peer4) = {
        let p = crate::common::procs::free_port();
        (p, p)
    };
    let ids: Vec<u64> = vec![1, 2, 3, 4];
    let peer_ports: Vec<u16> = trio.members.iter().map(|m| m.peer_port).chain([peer4]).collect();
    let config4 = member_config(&dir4, 4, port4, peer4, &peers_toml(&ids, &peer_ports), "");
    trio.members.push(crate::common::trio::Member {
        id: 4,
        port: port4,
        peer_port: peer4,
        dir: dir4,
        config: config4,
        server: None,
    });
    trio.member(4).start();
    // It does not form a cluster of its own: it finds that a peer belongs to one, and says it
    // will not form one (for good).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !trio.member(4).log().contains("a peer already belongs to a cluster: this server will not form one") {
        assert!(Instant::now() < deadline, "server 4 did not find the cluster:\n{}", trio.member(4).log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s4 = status(trio.api(4)).await.expect("status of 4");
    assert_eq!(s4["leader"], Value::Null, "{s4}");
    let text = ok(&url, &["cluster", "add", "4", &format!("http://127.0.0.1:{peer4}")]).await;
    assert!(text.contains("node 4") && text.contains("voting member"), "{text}");
    let st = status(trio.api(leader)).await.unwrap();
    assert_eq!(st["members"].as_array().unwrap().iter().filter(|m| m["voter"] == true).count(), 4, "{st}");
    assert_eq!(all_jobs(trio.api(4), "A").await.len(), 6);
    // Adding it again is a no-op; another address for its id is refused.
    let (s, v) = trio
        .api(leader)
        .post("/v1/cluster/members", &json!({"id": 4, "addr": format!("http://127.0.0.1:{peer4}")}))
        .await;
    assert_eq!((s, v["outcome"].as_str()), (200, Some("voter")), "{v}");
    let (s, v) = trio.api(leader).post("/v1/cluster/members", &json!({"id": 4, "addr": "http://127.0.0.1:1"})).await;
    assert_eq!(s, 409, "{v}");
    let (s, v) = trio.api(followers[0]).delete("/v1/cluster/members/4").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["cluster"]["members"].as_array().map(Vec::len), Some(3), "{v}");
    let (s, _) = trio.api(leader).delete("/v1/cluster/members/9").await;
    assert_eq!(s, 404);
    trio.member(4).kill9();
    load.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = load.1.await.unwrap();
    assert!(!acked.is_empty());
    for id in [1u64, 2, 3] {
        let jobs = all_jobs(trio.api(id), "B").await;
        assert_eq!(jobs.len(), acked.len(), "node {id}");
        assert!(acked.iter().all(|j| jobs.contains_key(j)), "node {id} misses acknowledged jobs");
    }

    // A member whose data dir is wiped does not form a second cluster, and the leader neither
    // crashes nor feeds it: it lost what it had acknowledged, so it must be removed and added
    // again, after which it catches up with everything.
    let wiped = followers[1];
    trio.member(wiped).kill9();
    std::fs::remove_dir_all(trio.member(wiped).dir.join("data")).unwrap();
    trio.member(wiped).start();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !trio.api(leader).log().contains("lost log entries it had acknowledged") {
        assert!(Instant::now() < deadline, "the leader did not notice the wiped member:\n{}", trio.api(leader).log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (s, v) = trio.api(leader).post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": [job("100m")]})).await;
    assert_eq!(s, 200, "the cluster still takes writes: {v}");
    assert!(!trio.member(wiped).log().contains("cluster formed"), "{}", trio.member(wiped).log());
    let addr = format!("http://127.0.0.1:{}", trio.member(wiped).peer_port);
    let via = trio.api(followers[0]).url.clone();
    ok(&via, &["cluster", "remove", &wiped.to_string()]).await;
    let text = ok(&via, &["cluster", "add", &wiped.to_string(), &addr]).await;
    assert!(text.contains("voting member"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, v) = trio.api(wiped).get("/v1/jobs?queue=A&limit=1000&consistent=true").await;
        if s == 200 && v["jobs"].as_array().map(Vec::len) == Some(7) {
            break;
        }
        assert!(Instant::now() < deadline, "the re-added member did not catch up: {s} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(trio.leader().await, leader, "the cluster kept its leader");

    // A node joins and the leader's scheduler leases jobs: the cycles it recorded replay
    // identically from the data directory of the leader and of a follower (`convoy replay`).
    let nodes = vec![crate::common::node("n1", "8")];
    trio.api(leader).poll("e1", &nodes, &[], 0.0).await;
    let v = trio.api(leader).poll("e1", &nodes, &[], 10.0).await;
    assert!(v["leases"].as_array().is_some_and(|l| !l.is_empty()), "{v}");
    for id in [leader, followers[0]] {
        let data = trio.member(id).dir.join("data").display().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
                .args(["replay", "--data-dir", &data])
                .output()
                .expect("convoy replay runs");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let cycles: Vec<&str> = text.lines().filter(|l| l.starts_with("cycle ")).collect();
            // Cycles that read a state older than a snapshot the log was purged behind are named so.
            let replayed =
                cycles.iter().all(|l| l.ends_with(": identical") || l.contains("older than the oldest snapshot"));
            if replayed && cycles.iter().any(|l| l.ends_with(": identical")) {
                break;
            }
            assert!(Instant::now() < deadline, "node {id}: {text}{}", String::from_utf8_lossy(&out.stderr));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // What if: every member writes its state as a simulate scenario, with the node and queue.
    for id in [leader, followers[0]] {
        let (st, v) = trio.api(id).get("/v1/scenario").await;
        assert_eq!(st, 200, "node {id}: {v}");
        assert_eq!(v["nodes"][0]["name"], "n1", "node {id}: {v}");
        assert!(v["queues"].as_array().is_some_and(|q| q.iter().any(|q| q["name"] == "A")), "node {id}: {v}");
    }
    assert!(!trio.api(leader).log().contains("panicked"), "{}", trio.api(leader).log());
}

/// A follower is killed (-9) while 100,000 jobs are submitted through the leader and the logs
/// are purged behind snapshots; it restarts, can only catch up by installing a snapshot, and
/// then all three answer the same state digest (`GET /v1/cluster/digest`) at the same applied
/// index.
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
        last_ids = submit_to_live_retrying(&trio, &live, &body).await;
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
