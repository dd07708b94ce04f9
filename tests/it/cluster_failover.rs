//! Failover in a cluster of three `convoy server` processes (the `Trio` harness): a leader killed
//! (-9) under load, cut off from its peers, or stopped (SIGSTOP) is replaced, and nothing
//! acknowledged is lost, stored twice or run twice; writers, agents and event streams carry on
//! through the change. A follower cut off from the leader alone does not depose it (pre-vote).
//! How long a request may wait on a leader that is gone is `bounded_waits.rs`.

use crate::cluster::{all_jobs, submit_retrying};
use crate::common::trio::{Trio, status};
use crate::common::{Api, job, node};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_under_load_loses_and_duplicates_nothing() {
    let mut trio = Trio::start(3).await;
    let first = trio.leader().await;
    let (s, v) = trio.api(first).post("/v1/queues", &json!({"name": "A"})).await;
    assert_eq!(s, 201, "{v}");
    let apis: Vec<Api> = trio.members.iter().map(|m| Api::new(m.api().url.clone())).collect();
    let apis = std::sync::Arc::new(apis);
    // Batches acknowledged so far, by all clients; the clients go on until told to stop.
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4usize {
        let (apis, progress, stop) = (apis.clone(), progress.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let refs: Vec<&Api> = apis.iter().collect();
            let mut acked: Vec<(String, String)> = Vec::new();
            let mut batch = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let ids: Vec<String> = (0..20).map(|k| format!("c{c}-b{batch}-{k}")).collect();
                let jobs: Vec<Value> =
                    ids.iter().map(|id| json!({"client_id": id, "pod_spec": job("10m")["pod_spec"]})).collect();
                let body = json!({"queue": "A", "job_set": format!("set{c}"), "jobs": jobs});
                let deadline = Instant::now() + Duration::from_secs(30);
                let got = submit_retrying(&refs, c + batch, &body, deadline)
                    .await
                    .expect("a submission was never acknowledged");
                acked.extend(ids.into_iter().zip(got));
                progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                batch += 1;
            }
            acked
        }));
    }
    // Waits until the clients had `n` more batches acknowledged.
    let more = |n: usize| {
        let progress = progress.clone();
        async move {
            let from = progress.load(std::sync::atomic::Ordering::Relaxed);
            let deadline = Instant::now() + Duration::from_secs(60);
            while progress.load(std::sync::atomic::Ordering::Relaxed) < from + n {
                assert!(
                    Instant::now() < deadline,
                    "writes did not go on: {} batches",
                    progress.load(std::sync::atomic::Ordering::Relaxed)
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // Two failovers under load: kill -9 the leader, wait for the next one, bring the dead one
    // back; each time writes must go on.
    let mut leader = first;
    for _ in 0..2 {
        more(10).await;
        trio.member(leader).kill9();
        let others: Vec<u64> = trio.running();
        let next = trio.leader_among(&others, Duration::from_secs(30)).await;
        assert_ne!(next, leader);
        more(10).await;
        trio.member(leader).start();
        leader = next;
    }
    more(10).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked: HashMap<String, String> = HashMap::new();
    for c in clients {
        for (cid, jid) in c.await.expect("client task") {
            assert!(acked.insert(cid.clone(), jid).is_none(), "client id {cid} acknowledged twice");
        }
    }
    trio.leader().await;
    for id in [1u64, 2, 3] {
        let jobs = all_jobs(trio.api(id), "A").await;
        let mut by_client: HashMap<&str, &str> = HashMap::new();
        for (jid, cid) in &jobs {
            let cid = cid.as_deref().expect("every job has a client id");
            assert!(by_client.insert(cid, jid).is_none(), "node {id}: two jobs for client id {cid}");
        }
        for (cid, jid) in &acked {
            assert_eq!(by_client.get(cid.as_str()), Some(&jid.as_str()), "node {id}: acknowledged {cid} lost");
        }
    }
    // Scheduling and leasing resume: an executor polling any member gets leases.
    let leader = trio.leader().await;
    let poller = trio.api(if leader == 1 { 2 } else { 1 });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, v) = poller
            .post("/v1/executors/e1/lease", &json!({"nodes": [node("n1", "64")], "runs": [], "wait_seconds": 1}))
            .await;
        assert!(s == 200 || s == 503, "{s} {v}");
        if v["leases"].as_array().is_some_and(|l| !l.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "no lease after the failovers: {v}");
    }
}

/// Polls the lease endpoint as executor `e1` with one big node, on member `id`; the answer.
async fn poll(api: &Api, held: &HashMap<String, String>) -> (u16, Value) {
    let runs: Vec<Value> = held.iter().map(|(r, j)| json!({"run_id": r, "job_id": j, "state": "running"})).collect();
    api.post("/v1/executors/e1/lease", &json!({"nodes": [node("n1", "64")], "runs": runs, "wait_seconds": 0.2})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_peers_stops_leasing_and_every_job_runs_once() {
    let trio = Trio::start_with_proxy(3).await;
    let old = trio.leader().await;
    let (s, v) = trio.api(old).post("/v1/queues", &json!({"name": "A"})).await;
    assert_eq!(s, 201, "{v}");
    let ids = trio.api(old).submit("A", "s", (0..6).map(|_| job("1")).collect()).await;
    // An agent holding the six runs on the old leader, reporting them running.
    let mut held: HashMap<String, String> = HashMap::new(); // run id -> job id
    let deadline = Instant::now() + Duration::from_secs(20);
    while held.len() < 6 {
        let (s, v) = poll(trio.api(old), &held).await;
        assert_eq!(s, 200, "{v}");
        for l in v["leases"].as_array().unwrap() {
            held.insert(l["run_id"].as_str().unwrap().into(), l["job_id"].as_str().unwrap().into());
        }
        assert!(Instant::now() < deadline, "the six jobs were not leased: {held:?}");
    }
    let running: Vec<Value> =
        held.iter().map(|(r, j)| json!({"run_id": r, "job_id": j, "kind": "running", "time_ms": 0})).collect();
    let (s, v) = trio.api(old).post("/v1/executors/e1/events", &json!({"events": running})).await;
    assert_eq!(s, 200, "{v}");

    // Cut the leader off from its peers (the agent still reaches it).
    let proxy = trio.proxy.as_ref().unwrap();
    proxy.isolate(old);
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != old).collect();
    // How fast is `convoy bench cluster`'s and `convoy bench chaos`'s to say.
    let new = trio.leader_among(&others, Duration::from_secs(30)).await;
    // The old leader neither leases nor takes writes any more.
    let (s, v) = poll(trio.api(old), &held).await;
    assert_eq!(s, 503, "the cut-off leader still answers lease polls: {v}");
    let (s, v) = trio.api(old).post("/v1/jobs", &json!({"queue": "A", "job_set": "s", "jobs": [job("1")]})).await;
    assert_eq!(s, 503, "the cut-off leader still takes writes: {v}");
    // The agent turns to the new leader and carries on with the runs it holds: nothing is
    // leased again, and the executor is not declared lost.
    let (s, v) = poll(trio.api(new), &held).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["leases"].as_array().map(Vec::len), Some(0), "jobs leased twice: {v}");
    let done: Vec<Value> = held
        .iter()
        .map(|(r, j)| json!({"run_id": r, "job_id": j, "kind": "succeeded", "time_ms": 0, "exit_code": 0}))
        .collect();
    let (s, v) = trio.api(new).post("/v1/executors/e1/events", &json!({"events": done})).await;
    assert_eq!((s, v["accepted"].as_u64()), (200, Some(6)), "{v}");

    // Heal: the old leader follows the new one, and every member has each job succeeded with
    // exactly one run.
    proxy.heal();
    let leader = trio.leader().await;
    assert_eq!(leader, new);
    for member in [1u64, 2, 3] {
        for id in &ids {
            let (s, j) = trio.api(member).get(&format!("/v1/jobs/{id}?consistent=true")).await;
            assert_eq!(s, 200, "{j}");
            assert_eq!(j["state"], "succeeded", "node {member}: {j}");
            assert_eq!(j["runs"].as_array().map(Vec::len), Some(1), "node {member}: {j}");
        }
    }
    let st = status(trio.api(old)).await.unwrap();
    assert_eq!((st["state"].as_str(), st["leader"].as_u64()), (Some("Follower"), Some(new)), "{st}");
    let (s, text) = trio.api(new).text("/metrics").await;
    assert_eq!(s, 200);
    assert!(text.contains("convoy_raft_peer_rpc_seconds_bucket"), "{text}");
    let seen: HashSet<&str> = text.lines().filter(|l| l.starts_with("convoy_raft_leader_changes_total")).collect();
    assert_eq!(seen.len(), 1, "{text}");
}

/// Reads a following event stream until `want` events arrived or `within` passed; their ids.
async fn stream_ids(api: &Api, path: &str, want: usize, within: Duration) -> Vec<u64> {
    use futures::StreamExt;
    let resp = api.client.get(format!("{}{path}", api.url)).timeout(within).send().await.expect("stream");
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp.bytes_stream();
    let (mut text, mut ids) = (String::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + within;
    while ids.len() < want {
        let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, body.next()).await else { break };
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            if let Some(id) = block.lines().find_map(|l| l.strip_prefix("id:")).and_then(|v| v.trim().parse().ok()) {
                ids.push(id);
            }
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_is_replaced_and_steps_down_on_waking_while_event_streams_go_on() {
    let mut trio = Trio::start(3).await;
    let old = trio.leader().await;
    let follower = if old == 1 { 2 } else { 1 };
    let (s, v) = trio.api(old).post("/v1/queues", &json!({"name": "A"})).await;
    assert_eq!(s, 201, "{v}");
    let before = trio.api(old).submit("A", "s", (0..5).map(|_| job("1")).collect()).await;
    // Each submitted job makes one event; cancelling makes another.
    let want = 5 + 5 + 5;
    let streams: Vec<_> = [follower, old]
        .into_iter()
        .map(|id| {
            let api = Api::new(trio.api(id).url.clone());
            tokio::spawn(async move {
                stream_ids(&api, "/v1/queues/A/job-sets/s/events?from=1", want, Duration::from_secs(40)).await
            })
        })
        .collect();

    let pid = trio.member(old).api().child.id() as i32;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // A submission sent to the stopped leader waits in its socket until it wakes.
    let to_old = {
        let api = Api::new(trio.api(old).url.clone());
        tokio::spawn(async move {
            let body = json!({"queue": "A", "job_set": "s", "jobs": [{"client_id": "sent-to-stopped", "pod_spec": job("1")["pod_spec"]}]});
            api.post("/v1/jobs", &body).await
        })
    };
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != old).collect();
    let new = trio.leader_among(&others, Duration::from_secs(30)).await;
    assert_ne!(new, old);
    let after = trio.api(follower).submit("A", "s", (0..4).map(|_| job("1")).collect()).await;
    unsafe { libc::kill(pid, libc::SIGCONT) };

    // Awake, the old leader follows the new one.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = status(trio.api(old)).await;
        if st.as_ref().is_some_and(|s| s["state"] == "Follower" && s["leader"].as_u64() == Some(new)) {
            break;
        }
        assert!(Instant::now() < deadline, "the old leader did not step down: {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What it answered for the submission it held: done means done on the majority.
    let (s, v) = to_old.await.unwrap();
    assert!(s == 200 || s == 503, "{s} {v}");
    let mut all: Vec<String> = before.iter().chain(&after).cloned().collect();
    if s == 200 {
        all.push(v["job_ids"][0].as_str().unwrap().to_string());
    }
    for id in &all {
        let (s, j) = trio.api(new).get(&format!("/v1/jobs/{id}?consistent=true")).await;
        assert_eq!(s, 200, "acknowledged job {id} is not on the new leader: {j}");
    }
    // One more job if the held submission was refused, so every stream expects the same count.
    if s != 200 {
        all.extend(trio.api(new).submit("A", "s", vec![job("1")]).await);
    }
    let (s, v) = trio
        .api(new)
        .post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s", "job_ids": all[..5].to_vec()}))
        .await;
    assert_eq!(s, 200, "{v}");
    // The streams, on a follower and on the old leader, saw every event once, in order.
    for (n, stream) in streams.into_iter().enumerate() {
        let ids = stream.await.unwrap();
        assert_eq!(ids, (1..=want as u64).collect::<Vec<_>>(), "stream {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_agent_listing_all_servers_carries_its_runs_through_a_leader_kill() {
    let mut trio = Trio::start(3).await;
    let leader = trio.leader().await;
    let (s, v) = trio.api(leader).post("/v1/queues", &json!({"name": "A"})).await;
    assert_eq!(s, 201, "{v}");
    // The agent lists every server, the leader last so that it starts on a follower.
    let mut servers: Vec<String> =
        [1u64, 2, 3].iter().filter(|i| **i != leader).map(|i| trio.api(*i).url.clone()).collect();
    servers.push(trio.api(leader).url.clone());
    let dir = trio.members[0].dir.parent().unwrap().join("agent");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("agent.toml");
    let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    std::fs::write(
        &cfg,
        format!(
            "executor = \"fake\"\nservers = [{}]\ndata_dir = \"{}\"\nruntime = \"fake\"\nmax_backoff = \"1s\"\npoll_wait = \"2s\"\n\
             [[fake.node_groups]]\ncount = 4\nname_prefix = \"fake\"\nallocatable = {{ cpu = \"8\", memory = \"64Gi\" }}\n",
            list.join(", "),
            dir.join("data").display()
        ),
    )
    .unwrap();
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["agent", "--config"])
        .arg(&cfg)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(std::fs::File::create(dir.join("agent.log")).unwrap()))
        .spawn()
        .expect("convoy agent starts");
    // 64 jobs of 2 s on 32 cores: two waves, the kill in the middle of the first.
    let job = json!({"pod_spec": {"containers": [{"name": "fake", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
        "annotations": {"convoy.io/fake-runtime": "2"}});
    let ids = trio.api(leader).submit("A", "s", vec![job; 64]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while all_jobs_in(trio.api(leader), "running").await < 16 {
        assert!(Instant::now() < deadline, "the jobs did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A running job's output asked of a follower: relayed to the leader, which asks the agent;
    // fake runs have none, and the agent says so.
    let follower = servers[0].clone();
    let (_, j) = trio.api(leader).get("/v1/jobs?queue=A&state=running&limit=1").await;
    let running = j["jobs"][0]["id"].as_str().expect("a running job").to_string();
    let page: Value = reqwest::get(format!("{follower}/v1/jobs/{running}/output?wait=10"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(page["done"], true, "{page}");
    assert!(page["note"].as_str().is_some_and(|n| n.contains("fake runs")), "{page}");
    trio.member(leader).kill9();
    let others: Vec<u64> = trio.running();
    let new = trio.leader_among(&others, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, v) = trio.api(new).get("/v1/jobs?queue=A&limit=1000&consistent=true").await;
        let done = if s == 200 {
            v["jobs"].as_array().unwrap().iter().filter(|j| j["state"] == "succeeded").count()
        } else {
            0
        };
        if done == ids.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} succeeded; agent log:\n{}",
            ids.len(),
            std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &ids {
        let (_, j) = trio.api(new).get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(j["runs"].as_array().map(Vec::len), Some(1), "a job ran twice: {j}");
    }
    let log = trio.api(new).log();
    assert!(!log.contains("executor lost"), "{log}");
    let _ = agent.kill();
    let _ = agent.wait();
}

/// How many jobs of queue `A` are in `state`, as `api` lists them.
async fn all_jobs_in(api: &Api, state: &str) -> usize {
    let (s, v) = api.get(&format!("/v1/jobs?queue=A&state={state}&limit=1000")).await;
    if s != 200 {
        return 0;
    }
    v["jobs"].as_array().map_or(0, Vec::len)
}

/// Pre-vote: a follower that cannot reach the leader, while the other follower can, finds no
/// majority that would vote for it. It never raises the term, so when the link comes back the
/// leader is not deposed; and writes go on throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_leader_alone_does_not_depose_it() {
    let trio = Trio::start_with_proxy(3).await;
    let leader = trio.leader().await;
    let (s, v) = trio.api(leader).post("/v1/queues", &json!({"name": "A"})).await;
    assert_eq!(s, 201, "{v}");
    let term = status(trio.api(leader)).await.and_then(|s| s["term"].as_u64()).expect("term");
    let cut_off = if leader == 1 { 2 } else { 1 };
    let proxy = trio.proxy.as_ref().expect("proxied trio");
    proxy.cut(leader, cut_off);
    // Several election timeouts (600 ms in these tests) with writes going on.
    let until = Instant::now() + Duration::from_secs(4);
    let mut written = Vec::new();
    while Instant::now() < until {
        written.extend(trio.api(leader).submit("A", "s", vec![job("1")]).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.heal();
    // The cut-off member catches up from the same leader, in the same term.
    let last = written.last().expect("writes").clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, _) = trio.api(cut_off).get(&format!("/v1/jobs/{last}")).await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the cut-off member did not catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in 1..=3 {
        let s = status(trio.api(id)).await.expect("status");
        assert_eq!(s["term"].as_u64(), Some(term), "member {id} moved to another term: {s}");
        assert_eq!(s["leader"].as_u64(), Some(leader), "member {id} follows another leader: {s}");
    }
    assert!(
        trio.api(cut_off).log().contains("pre-vote lost"),
        "the cut-off member never asked for a pre-vote:\n{}",
        trio.api(cut_off).log()
    );
}
