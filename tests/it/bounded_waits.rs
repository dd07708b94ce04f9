//! No request waits on a leader that is gone. A leader paused (SIGSTOP) or cut off from its peers
//! by a blackhole keeps its socket open, so a request relayed to it is never answered nor refused:
//! the follower that relayed it must notice the new leader and either send the request there
//! (when that is safe) or answer 503 saying it may have been applied. A leader that lost its
//! majority answers at once. Each test keeps the fault in place until the requests have
//! answered, so an answer that waited for the old leader to come back cannot pass.
//!
//! `write_timeout` is set far above the tests' deadlines: an answer that only came because a
//! timeout ran out fails them.

use crate::common::trio::{Trio, status};
use crate::common::{Api, job, node};
use serde_json::{Value, json};
use std::time::Duration;

/// Every member's `[server]` keys: writes may wait long, so only the bounded relay ends them.
const SLOW_WRITES: &str = "write_timeout = \"120s\"\n";

/// How long a test lets a request run; far below `write_timeout`.
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

/// A client whose requests give up after [`REQUEST_DEADLINE`].
fn client() -> reqwest::Client {
    crate::common::install_crypto();
    reqwest::Client::builder().timeout(REQUEST_DEADLINE).build().expect("client")
}

/// `POST url/path` with `body`: status, `Retry-After` and body, or the client's error.
async fn post(
    client: &reqwest::Client,
    url: &str,
    path: &str,
    body: &Value,
) -> Result<(u16, Option<String>, Value), String> {
    let r = client.post(format!("{url}{path}")).json(body).send().await.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let v = r.json().await.unwrap_or(Value::Null);
    Ok((status, retry, v))
}

/// A submission of one job with `client_id` (or none).
fn submission(client_id: Option<&str>) -> Value {
    let mut item = json!({"pod_spec": job("100m")["pod_spec"]});
    if let Some(c) = client_id {
        item["client_id"] = json!(c);
    }
    json!({"queue": "A", "job_set": "s", "jobs": [item]})
}

/// SIGSTOP or SIGCONT to a member's process.
fn signal(trio: &mut Trio, id: u64, sig: i32) {
    let pid = trio.member(id).api().child.id() as i32;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, sig) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_leader_paused_writes_reads_and_polls_sent_to_a_follower_answer_before_it_wakes() {
    let mut trio = Trio::start_configured(3, false, SLOW_WRITES, "").await;
    let old = trio.leader().await;
    trio.api(old).create_queue("A").await;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != old).collect();
    let urls: Vec<String> = followers.iter().map(|f| trio.api(*f).url.clone()).collect();
    let acked = trio.api(followers[0]).submit("A", "s", vec![job("100m")]).await;

    signal(&mut trio, old, libc::SIGSTOP);
    // Sent at once, before the others elected a new leader: each is first relayed to the paused
    // leader and must end without it.
    let http = client();
    let with_id = tokio::spawn({
        let (h, u) = (http.clone(), urls[0].clone());
        async move { post(&h, &u, "/v1/jobs", &submission(Some("through-a-pause"))).await }
    });
    let without_id = tokio::spawn({
        let (h, u) = (http.clone(), urls[1].clone());
        async move { post(&h, &u, "/v1/jobs", &submission(None)).await }
    });
    let lease = tokio::spawn({
        let (h, u) = (http.clone(), urls[1].clone());
        let body = json!({"nodes": [node("n1", "8")], "runs": [], "wait_seconds": 0.0});
        async move { post(&h, &u, "/v1/executors/e1/lease", &body).await }
    });
    let read = tokio::spawn({
        let (h, u, id) = (http.clone(), urls[0].clone(), acked[0].clone());
        async move {
            let r = h.get(format!("{u}/v1/jobs/{id}?consistent=true")).send().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(r.status().as_u16())
        }
    });
    // A run report of an executor the server does not know: answered (nothing to apply) by the
    // new leader, not held for the old one.
    let report = tokio::spawn({
        let (h, u) = (http.clone(), urls[0].clone());
        let body = json!({"events": []});
        async move { post(&h, &u, "/v1/executors/e2/events", &body).await }
    });
    // The web UI's cancel of the acknowledged job: the follower relays the form like the API's
    // writes, and answers with the leader's redirect.
    let ui = tokio::spawn({
        let (u, id) = (urls[1].clone(), acked[0].clone());
        async move {
            let h = reqwest::Client::builder()
                .timeout(REQUEST_DEADLINE)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| e.to_string())?;
            let r = h.post(format!("{u}/ui/jobs/{id}/cancel")).send().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(r.status().as_u16())
        }
    });
    // Armada's SubmitJobs over gRPC, with a client id: relayed and sent on to the new leader.
    #[cfg(feature = "grpc")]
    let grpc = tokio::spawn({
        let u = urls[1].clone();
        async move { grpc_submit(&u, "through-a-pause-grpc").await }
    });
    let with_id = with_id.await.unwrap();
    let without_id = without_id.await.unwrap();
    let lease = lease.await.unwrap();
    let read = read.await.unwrap();
    let report = report.await.unwrap();
    let ui = ui.await.unwrap();
    #[cfg(feature = "grpc")]
    let grpc = grpc.await.unwrap();
    // Every answer came while the old leader was still stopped.
    signal(&mut trio, old, libc::SIGCONT);

    // Safe to send again (it has a client id): it followed the new leader and was stored.
    let (s, _, v) = with_id.expect("the submission with a client id got no answer");
    assert_eq!(s, 200, "{v}");
    // Not safe to send again: stored, or a 503 that says it may have been and when to retry.
    let (s, retry, v) = without_id.expect("the submission without a client id got no answer");
    assert!(s == 200 || s == 503, "{s} {v}");
    if s == 503 {
        assert_eq!(retry.as_deref(), Some("1"), "{v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("may") && detail.contains("client_id"), "{detail}");
    }
    let (s, _, v) = lease.expect("the lease poll got no answer");
    assert_eq!(s, 200, "a lease poll relayed through the failover: {v}");
    assert_eq!(read.expect("the consistent read got no answer"), 200);
    let (s, _, v) = report.expect("the run report got no answer");
    assert_eq!(s, 200, "{v}");
    assert_eq!(ui.expect("the web UI's cancel got no answer"), 303);
    #[cfg(feature = "grpc")]
    assert_eq!(grpc.expect("the gRPC submission got no answer").len(), 1);

    // The job stored through the pause is on every member, once.
    let id = v_id(&with_id_job(&trio, followers[0]).await);
    for m in [1u64, 2, 3] {
        let (s, j) = trio.api(m).get(&format!("/v1/jobs/{id}?consistent=true")).await;
        assert_eq!(s, 200, "node {m}: {j}");
    }
}

/// Submits one job with `client_id` through Armada's gRPC `SubmitJobs` at `url`; its job ids,
/// or the error.
#[cfg(feature = "grpc")]
async fn grpc_submit(url: &str, client_id: &str) -> Result<Vec<String>, String> {
    use convoy::grpc::pb;
    let channel = tonic::transport::Channel::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .timeout(REQUEST_DEADLINE)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let spec = job("100m")["pod_spec"].clone();
    let item = pb::JobSubmitRequestItem {
        pod_specs: vec![convoy::grpc::k8s::from_json(&spec).map_err(|e| e.to_string())?],
        client_id: client_id.into(),
        namespace: "default".into(),
        ..Default::default()
    };
    let req = pb::JobSubmitRequest { queue: "A".into(), job_set_id: "s".into(), job_request_items: vec![item] };
    let answer = pb::submit_client::SubmitClient::new(channel).submit_jobs(req).await.map_err(|e| e.to_string())?;
    Ok(answer.into_inner().job_response_items.into_iter().map(|i| i.job_id).collect())
}

/// The job submitted with client id `through-a-pause`, as `member` lists it.
async fn with_id_job(trio: &Trio, member: u64) -> Value {
    let (s, v) = trio.api(member).get("/v1/jobs?queue=A&consistent=true").await;
    assert_eq!(s, 200, "{v}");
    let jobs: Vec<Value> =
        v["jobs"].as_array().unwrap().iter().filter(|j| j["client_id"] == "through-a-pause").cloned().collect();
    assert_eq!(jobs.len(), 1, "the job sent through the pause is stored once: {v}");
    jobs[0].clone()
}

fn v_id(j: &Value) -> String {
    j["id"].as_str().expect("id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_leader_blackholed_a_write_to_the_majority_follows_the_new_leader_and_the_old_answers_at_once() {
    let trio = Trio::start_configured(3, true, SLOW_WRITES, "").await;
    let old = trio.leader().await;
    trio.api(old).create_queue("A").await;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != old).collect();
    let proxy = trio.proxy.as_ref().expect("proxy");
    proxy.blackhole(old);
    let http = client();
    let through_follower = tokio::spawn({
        let (h, u) = (http.clone(), trio.api(followers[0]).url.clone());
        async move { post(&h, &u, "/v1/jobs", &submission(Some("through-a-cut"))).await }
    });
    // Sent to the cut-off leader itself once it knows it lost its majority: it may no longer
    // commit, so it says so without waiting out the write timeout.
    let to_old = tokio::spawn({
        let (h, api) = (http.clone(), Api::new(trio.api(old).url.clone()));
        async move {
            let deadline = std::time::Instant::now() + REQUEST_DEADLINE;
            while status(&api).await.is_some_and(|s| s["serving"] == true) {
                assert!(std::time::Instant::now() < deadline, "the cut-off leader kept serving");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            post(&h, &api.url, "/v1/jobs", &submission(Some("to-the-cut-leader"))).await
        }
    });
    let (s, _, v) = through_follower.await.unwrap().expect("the write through a follower got no answer");
    assert_eq!(s, 200, "{v}");
    let (s, retry, v) = to_old.await.unwrap().expect("the cut-off leader did not answer");
    assert_eq!((s, retry.as_deref()), (503, Some("1")), "{v}");
    // A consistent read on the cut-off leader fails as promptly.
    let r = http.get(format!("{}/v1/jobs?queue=A&consistent=true", trio.api(old).url)).send().await;
    assert_eq!(r.expect("the consistent read on the cut-off leader got no answer").status().as_u16(), 503);
    proxy.heal();
    let new = trio.leader().await;
    assert_ne!(new, old);
    let st = status(trio.api(new)).await.expect("status");
    assert_eq!(st["serving"], true, "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_majority_vanishes_mid_write_answers_at_once_that_the_write_may_have_applied() {
    // Two followers paused: the leader is left alone with writes in flight.
    let mut trio = Trio::start_configured(3, false, SLOW_WRITES, "").await;
    let leader = trio.leader().await;
    trio.api(leader).create_queue("A").await;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != leader).collect();
    for f in &followers {
        signal(&mut trio, *f, libc::SIGSTOP);
    }
    let http = client();
    let url = trio.api(leader).url.clone();
    let answers: Vec<_> = (0..3)
        .map(|i| {
            let (h, u) = (http.clone(), url.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100 * i)).await;
                post(&h, &u, "/v1/jobs", &submission(Some(&format!("alone-{i}")))).await
            })
        })
        .collect();
    for a in answers {
        let (s, retry, v) = a.await.unwrap().expect("a write to a leader without a majority got no answer");
        assert_eq!((s, retry.as_deref()), (503, Some("1")), "{v}");
    }
    for f in &followers {
        signal(&mut trio, *f, libc::SIGCONT);
    }
    trio.leader().await;
}

#[test]
fn convoy_up_is_ready_only_once_its_default_queue_exists() {
    use crate::common::procs::{free_port, signal_and_wait, spawn_listening};
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"));
    cmd.args(["up", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"]).arg(dir.path().join("data"));
    // Poll /readyz from before the process starts, as a script that waits for it would.
    let checker = std::thread::spawn({
        let url = url.clone();
        move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let api = Api::new(url);
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                loop {
                    assert!(std::time::Instant::now() < deadline, "convoy up never became ready");
                    let ready = api.client.get(format!("{}/readyz", api.url)).send().await;
                    if ready.is_ok_and(|r| r.status().is_success()) {
                        // The first 200: the queue must be there.
                        return api.submit("default", "s", vec![job("100m")]).await;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        }
    });
    let (mut child, _) = spawn_listening(cmd, &dir.path().join("up.log"));
    let ids = checker.join().expect("a submission right after readiness worked");
    assert_eq!(ids.len(), 1);
    assert_eq!(signal_and_wait(&mut child, libc::SIGTERM, 20), Some(0));
}
