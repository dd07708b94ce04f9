//! Armada's gRPC API on a real server's REST port, driven by a tonic client over h2c: queue CRUD,
//! submission through the REST path (all or nothing, fields named as Armada names them), a job
//! set's events until success with a reconnect that resumes without gaps or duplicates (a real
//! agent on the fake runtime runs the jobs), job states, cancellation, auth and UNIMPLEMENTED.

use crate::common::{Server, config};
use convoy::grpc::k8s;
use convoy::grpc::pb::{
    self, event_client::EventClient, jobs_client::JobsClient, queue_service_client::QueueServiceClient,
    submit_client::SubmitClient,
};
use serde_json::json;
use std::collections::HashMap;
use std::process::Child;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;

async fn channel(s: &Server) -> Channel {
    Channel::from_shared(s.url.clone()).expect("server url").connect().await.expect("h2c connection")
}

/// A request carrying `authorization`, if any.
fn req<T>(msg: T, auth: Option<&str>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(a) = auth {
        r.metadata_mut().insert("authorization", a.parse().expect("ascii metadata"));
    }
    r
}

/// A job item running on the fake runtime for `seconds`.
fn item(cpu: &str, seconds: u32) -> pb::JobSubmitRequestItem {
    let spec = json!({"containers": [{"name": "main", "image": "busybox",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}}}]});
    let mut i =
        pb::JobSubmitRequestItem { pod_specs: vec![k8s::from_json(&spec).expect("pod spec")], ..Default::default() };
    i.annotations.insert("convoy.io/fake-runtime".into(), seconds.to_string());
    i.namespace = "default".into();
    i
}

fn submit_req(queue: &str, job_set: &str, items: Vec<pb::JobSubmitRequestItem>) -> pb::JobSubmitRequest {
    pb::JobSubmitRequest { queue: queue.into(), job_set_id: job_set.into(), job_request_items: items }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kind(m: &pb::EventStreamMessage) -> (&'static str, String) {
    use pb::event_message::Events as E;
    let events = m.message.as_ref().and_then(|m| m.events.as_ref()).expect("an event");
    match events {
        E::Submitted(e) => ("submitted", e.job_id.clone()),
        E::Queued(e) => ("queued", e.job_id.clone()),
        E::Leased(e) => ("leased", e.job_id.clone()),
        E::Pending(e) => ("pending", e.job_id.clone()),
        E::Running(e) => ("running", e.job_id.clone()),
        E::Succeeded(e) => ("succeeded", e.job_id.clone()),
        E::Failed(e) => ("failed", e.job_id.clone()),
        E::Cancelling(e) => ("cancelling", e.job_id.clone()),
        E::Cancelled(e) => ("cancelled", e.job_id.clone()),
        E::Preempting(e) => ("preempting", e.job_id.clone()),
        E::Preempted(e) => ("preempted", e.job_id.clone()),
        E::Reprioritized(e) => ("reprioritized", e.job_id.clone()),
        E::LeaseReturned(e) => ("lease_returned", e.job_id.clone()),
        E::LeaseExpired(e) => ("lease_expired", e.job_id.clone()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armada_clients_submit_watch_and_cancel_over_grpc() {
    let s = Server::start("");
    s.ready().await;
    let ch = channel(&s).await;
    let (mut queues, mut submit) = (QueueServiceClient::new(ch.clone()), SubmitClient::new(ch.clone()));
    let (mut jobs, mut events) = (JobsClient::new(ch.clone()), EventClient::new(ch.clone()));

    // Health, and queue CRUD.
    let h = submit.health(()).await.expect("health").into_inner();
    assert_eq!(h.status, pb::health_check_response::ServingStatus::Serving as i32);
    let q =
        pb::Queue { name: "A".into(), priority_factor: 1.0, user_owners: vec!["alice".into()], ..Default::default() };
    queues.create_queue(q.clone()).await.expect("create queue");
    let e = queues.create_queue(q.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    queues.update_queue(pb::Queue { priority_factor: 2.0, ..q.clone() }).await.expect("update queue");
    let got = queues.get_queue(pb::QueueGetRequest { name: "A".into() }).await.expect("get queue").into_inner();
    assert_eq!(
        (got.name.as_str(), got.priority_factor, got.user_owners.clone()),
        ("A", 2.0, vec!["alice".to_string()])
    );
    submit.create_queue(pb::Queue { name: "B".into(), ..Default::default() }).await.expect("create on Submit");
    let mut stream = queues.get_queues(pb::StreamingQueueGetRequest { num: 0 }).await.expect("get queues").into_inner();
    let mut listed = Vec::new();
    while let Some(m) = stream.message().await.expect("queue stream") {
        match m.event {
            Some(pb::streaming_queue_message::Event::Queue(q)) => listed.push(q.name),
            Some(pb::streaming_queue_message::Event::End(_)) => listed.push("<end>".into()),
            None => panic!("empty message"),
        }
    }
    assert_eq!(listed, ["A", "B", "<end>"]);
    // The same on api.Submit, at most `num`.
    let mut stream = submit.get_queues(pb::StreamingQueueGetRequest { num: 1 }).await.expect("get queues").into_inner();
    let first = stream.message().await.expect("queue stream").and_then(|m| m.event);
    assert!(matches!(first, Some(pb::streaming_queue_message::Event::Queue(ref q)) if q.name == "A"), "{first:?}");
    let end = stream.message().await.expect("queue stream").and_then(|m| m.event);
    assert!(matches!(end, Some(pb::streaming_queue_message::Event::End(_))), "{end:?}");
    assert!(stream.message().await.expect("queue stream").is_none());
    queues.delete_queue(pb::QueueDeleteRequest { name: "B".into() }).await.expect("delete queue");
    let e = queues.get_queue(pb::QueueGetRequest { name: "B".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // All or nothing: the second job has no requests, so neither is stored, and the refusal
    // names the field as Armada's request does.
    let mut bad = item("1", 1);
    bad.pod_specs = vec![k8s::from_json(&json!({"containers": [{"name": "x", "image": "busybox"}]})).unwrap()];
    let e = submit.submit_jobs(submit_req("A", "set-1", vec![item("1", 1), bad])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("job_request_items[1].pod_specs[0].containers[0].resources"), "{}", e.message());
    assert_eq!(s.count_jobs("queue=A").await, 0);
    let e = submit.submit_jobs(submit_req("nope", "set-1", vec![item("1", 1)])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = submit.submit_jobs(submit_req("A", "", vec![item("1", 1)])).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "job_set_id: is required"));

    // Two jobs succeed on the fake runtime; the event stream is read in two connections.
    let answer = submit.submit_jobs(submit_req("A", "set-1", vec![item("1", 1), item("1", 1)])).await.expect("submit");
    let ids: Vec<String> = answer.into_inner().job_response_items.into_iter().map(|i| i.job_id).collect();
    assert_eq!(ids.len(), 2);
    let agent = Killed(s.fake_agent(1, "8", "64Gi"));
    let set = |from: &str| pb::JobSetRequest {
        id: "set-1".into(),
        queue: "A".into(),
        watch: true,
        from_message_id: from.into(),
        error_if_missing: true,
    };
    let mut first = events.get_job_set_events(set("")).await.expect("events").into_inner();
    let mut seen: Vec<pb::EventStreamMessage> = Vec::new();
    for _ in 0..3 {
        seen.push(first.message().await.expect("event").expect("open stream"));
    }
    drop(first);
    let resume = seen.last().map(|m| m.id.clone()).unwrap_or_default();
    let mut second = events.get_job_set_events(set(&resume)).await.expect("events again").into_inner();
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let m = second.message().await.expect("event").expect("the watched stream stays open");
            seen.push(m);
            let succeeded = seen.iter().filter(|m| kind(m).0 == "succeeded").count();
            if succeeded == 2 {
                return;
            }
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "both jobs succeed in time; seen {:?}\n{}",
        seen.iter().map(kind).collect::<Vec<_>>(),
        s.log()
    );
    // Ids are dense from 1: nothing was lost or repeated across the reconnect.
    let numbers: Vec<u64> = seen.iter().map(|m| m.id.parse().expect("numeric id")).collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    for id in &ids {
        let of_job: Vec<&str> = seen.iter().map(kind).filter(|(_, j)| j == id).map(|(k, _)| k).collect();
        assert_eq!(of_job, ["submitted", "queued", "leased", "pending", "running", "succeeded"], "{id}");
    }
    let leased = seen.iter().find_map(|m| match m.message.as_ref()?.events.as_ref()? {
        pb::event_message::Events::Leased(l) => Some(l.clone()),
        _ => None,
    });
    assert_eq!(leased.map(|l| l.cluster_id), Some("fake".to_string()));

    // States: unknown ids are UNKNOWN, not an error.
    let unknown = "01ARZ3NDEKTSV4RRFFQ69G5FAV".to_string();
    let states = jobs
        .get_job_status(pb::JobStatusRequest {
            job_ids: vec![ids[0].clone(), ids[1].clone(), unknown.clone(), "x".into()],
        })
        .await
        .expect("status")
        .into_inner()
        .job_states;
    let want: HashMap<String, i32> = [
        (ids[0].clone(), pb::JobState::Succeeded as i32),
        (ids[1].clone(), pb::JobState::Succeeded as i32),
        (unknown, pb::JobState::Unknown as i32),
        ("x".to_string(), pb::JobState::Unknown as i32),
    ]
    .into();
    assert_eq!(states, want);

    // Cancellation: one job by id, then a job set by state. No node has the label they require,
    // so they stay queued.
    drop(agent);
    let waiting = || {
        let mut i = item("1", 600);
        i.required_node_labels.insert("convoy-test/nowhere".into(), "true".into());
        i
    };
    let more = submit
        .submit_jobs(submit_req("A", "set-2", vec![waiting(), waiting(), waiting()]))
        .await
        .expect("submit more")
        .into_inner();
    let more: Vec<String> = more.job_response_items.into_iter().map(|i| i.job_id).collect();
    let cancelled = submit
        .cancel_jobs(pb::JobCancelRequest {
            queue: "A".into(),
            job_set_id: "set-2".into(),
            job_ids: vec![more[0].clone()],
            reason: "not needed".into(),
            ..Default::default()
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(cancelled.cancelled_ids, [more[0].clone()]);
    let e = submit
        .cancel_job_set(pb::JobSetCancelRequest {
            queue: "A".into(),
            job_set_id: "set-2".into(),
            filter: Some(pb::JobSetFilter { states: vec![pb::JobState::Succeeded as i32] }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "filter.states[0]: SUCCEEDED jobs cannot be cancelled")
    );
    submit
        .cancel_job_set(pb::JobSetCancelRequest {
            queue: "A".into(),
            job_set_id: "set-2".into(),
            filter: Some(pb::JobSetFilter { states: vec![pb::JobState::Queued as i32] }),
            ..Default::default()
        })
        .await
        .expect("cancel job set");
    let states =
        jobs.get_job_status(pb::JobStatusRequest { job_ids: more.clone() }).await.expect("status").into_inner();
    for id in &more {
        assert_eq!(states.job_states.get(id), Some(&(pb::JobState::Cancelled as i32)), "{id}");
    }
    let e = events
        .get_job_set_events(pb::JobSetRequest {
            id: "never".into(),
            queue: "A".into(),
            error_if_missing: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // Without watch the stream ends after the stored events.
    let mut stored = events
        .get_job_set_events(pb::JobSetRequest { id: "set-2".into(), queue: "A".into(), ..Default::default() })
        .await
        .expect("events")
        .into_inner();
    let mut n = 0;
    while stored.message().await.expect("event").is_some() {
        n += 1;
    }
    assert_eq!(n, 3 * 2 + 3 * 2, "submitted, queued, cancelling and cancelled per job");
}

#[tokio::test]
async fn unknown_grpc_methods_and_services_are_unimplemented() {
    let s = Server::start("");
    s.ready().await;
    let mut grpc = tonic::client::Grpc::new(channel(&s).await);
    for path in ["/api.Jobs/NoSuchMethod", "/api.Nowhere/Anything"] {
        grpc.ready().await.expect("ready");
        let codec = tonic_prost::ProstCodec::<(), ()>::default();
        let e = grpc.unary(tonic::Request::new(()), path.parse().expect("path"), codec).await.expect_err("not served");
        assert_eq!(e.code(), Code::Unimplemented, "{path}: {e:?}");
    }
    // REST is untouched: a non-gRPC request to an unknown path is still a problem+json 404.
    let (st, v) = s.get("/api.Nowhere/Anything").await;
    assert_eq!(st, 404, "{v}");
}

const ADMIN: &str = "admin-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdefgh";

fn basic(user: &str, password: &str) -> String {
    // Base64 of "user:password", encoded here so the test does not trust the server's decoder.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

#[tokio::test]
async fn grpc_calls_authenticate_with_bearer_tokens_and_basic_credentials() {
    let tmp = tempfile::tempdir().unwrap();
    let text = config(tmp.path(), "").replace(
        "[auth]\nenabled = false\n",
        &format!(
            r#"[auth]
enabled = true
tokens = [
  {{ token = "{ADMIN}", principal = "root", roles = ["admin"] }},
  {{ token = "{BOB}", principal = "bob", roles = ["submitter"] }},
]
users = [ {{ name = "alice", password = "alice-password-1", groups = ["physics"], roles = ["submitter"] }} ]
"#
        ),
    );
    let s = Server::start_in(tmp.path(), &text);
    s.ready().await;
    let ch = channel(&s).await;
    let (mut queues, mut submit) = (QueueServiceClient::new(ch.clone()), SubmitClient::new(ch.clone()));
    let alice = basic("alice", "alice-password-1");
    let admin = format!("Bearer {ADMIN}");
    let bob = format!("Bearer {BOB}");

    let physics = pb::Queue { name: "physics".into(), group_owners: vec!["physics".into()], ..Default::default() };
    for (auth, code) in [
        (None, Code::Unauthenticated),
        (Some("Bearer not-a-token".to_string()), Code::Unauthenticated),
        (Some(basic("alice", "wrong-password")), Code::Unauthenticated),
        (Some(alice.clone()), Code::PermissionDenied),
    ] {
        let e = queues.create_queue(req(physics.clone(), auth.as_deref())).await.unwrap_err();
        assert_eq!(e.code(), code, "{auth:?}: {e:?}");
    }
    queues.create_queue(req(physics, Some(&admin))).await.expect("the admin creates a queue");
    let got = queues.get_queue(req(pb::QueueGetRequest { name: "physics".into() }, Some(&alice))).await;
    assert_eq!(got.expect("alice reads it").into_inner().group_owners, ["physics"]);

    // Alice is in the queue's group; Bob is not.
    let ok = submit.submit_jobs(req(submit_req("physics", "s", vec![item("1", 1)]), Some(&alice))).await;
    assert_eq!(ok.expect("alice submits").into_inner().job_response_items.len(), 1);
    let e = submit.submit_jobs(req(submit_req("physics", "s", vec![item("1", 1)]), Some(&bob))).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("bob is not an owner of queue physics"), "{}", e.message());
    let e = submit.submit_jobs(req(submit_req("physics", "s", vec![item("1", 1)]), None)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    // The REST API takes the same Basic credentials.
    let r = s.client.get(format!("{}/v1/queues/physics", s.url)).header("authorization", &alice).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn grpc_is_served_over_tls_through_alpn_h2() {
    use crate::common::tls::TestCa;
    use tonic::transport::{Certificate, ClientTlsConfig};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let cert = ca.issue(dir, "server", "convoy-test-server", 1);
    let s = Server::start_in(dir, &format!("{}{}", config(dir, ""), cert.section(&ca.path))).trusting(&ca.path);
    s.ready().await;
    let pem = std::fs::read_to_string(&ca.path).expect("CA file");
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)).domain_name("localhost");
    let ch = Channel::from_shared(s.url.clone())
        .unwrap()
        .tls_config(tls)
        .expect("tls")
        .connect()
        .await
        .expect("h2 over TLS");
    let mut queues = QueueServiceClient::new(ch.clone());
    queues.create_queue(pb::Queue { name: "A".into(), ..Default::default() }).await.expect("create over TLS");
    let h = EventClient::new(ch).health(()).await.expect("health over TLS").into_inner();
    assert_eq!(h.status, pb::health_check_response::ServingStatus::Serving as i32);
    // The REST API on the same port sees the queue.
    let (st, v) = s.get("/v1/queues/A").await;
    assert_eq!(st, 200, "{v}");
}

/// A follower relays gRPC writes to the leader and answers with the leader's answer, errors
/// included, once it has applied the write itself (a client reads its own writes there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_relay_grpc_writes_to_the_leader_and_read_their_own_writes() {
    use crate::common::trio::Trio;
    let trio = Trio::start(3).await;
    let leader = trio.leader().await;
    let follower = trio.running().into_iter().find(|id| *id != leader).expect("a follower");
    let mut on_leader = QueueServiceClient::new(channel(trio.api(leader)).await);
    on_leader.create_queue(pb::Queue { name: "A".into(), ..Default::default() }).await.expect("create on the leader");

    let ch = channel(trio.api(follower)).await;
    let mut queues = QueueServiceClient::new(ch.clone());
    queues.create_queue(pb::Queue { name: "B".into(), ..Default::default() }).await.expect("create through a follower");
    let b = queues.get_queue(pb::QueueGetRequest { name: "B".into() }).await.expect("the follower has applied it");
    assert_eq!(b.into_inner().name, "B");
    // The leader's refusal comes back through the relay with its code and message (a gRPC
    // status in trailers-only form).
    let e = queues.create_queue(pb::Queue { name: "A".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains('A'), "{}", e.message());

    // A submission through the follower (an answer with a body and trailers), then its status
    // read from the same follower.
    let answer = SubmitClient::new(ch.clone())
        .submit_jobs(submit_req("A", "s", vec![item("1", 1), item("1", 1)]))
        .await
        .expect("submit through a follower")
        .into_inner();
    let ids: Vec<String> = answer.job_response_items.iter().map(|r| r.job_id.clone()).collect();
    assert_eq!(ids.len(), 2, "{answer:?}");
    assert!(answer.job_response_items.iter().all(|r| r.error.is_empty()), "{answer:?}");
    let states = JobsClient::new(ch.clone())
        .get_job_status(pb::JobStatusRequest { job_ids: ids.clone() })
        .await
        .expect("status on the follower")
        .into_inner()
        .job_states;
    for id in &ids {
        assert_eq!(states.get(id), Some(&(pb::JobState::Queued as i32)), "{states:?}");
    }
    let e = SubmitClient::new(ch).submit_jobs(submit_req("nope", "s", vec![item("1", 1)])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}

/// Polls GetJobStatus until `id` is in `want` (60 s at most).
async fn wait_state(jobs: &mut JobsClient<Channel>, s: &Server, id: &str, want: pb::JobState) {
    let reached = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let st = jobs.get_job_status(pb::JobStatusRequest { job_ids: vec![id.to_string()] }).await.expect("status");
            if st.into_inner().job_states.get(id) == Some(&(want as i32)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "job {id} reaches {want:?}\n{}", s.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armada_clients_reprioritize_preempt_and_read_job_details_over_grpc() {
    let s = Server::start("");
    s.ready().await;
    let ch = channel(&s).await;
    let (mut queues, mut submit, mut jobs) =
        (QueueServiceClient::new(ch.clone()), SubmitClient::new(ch.clone()), JobsClient::new(ch.clone()));
    queues.create_queue(pb::Queue { name: "A".into(), ..Default::default() }).await.expect("create queue");

    // A long job (to preempt), a failing one, and one no node can take (to reprioritize).
    let mut failing = item("1", 0);
    failing.annotations.insert("convoy.io/fake-exit-code".into(), "3".into());
    let mut waiting = item("1", 600);
    waiting.required_node_labels.insert("convoy-test/nowhere".into(), "true".into());
    waiting.external_job_uri = "airflow://dag/run+1:2".into();
    waiting.client_id = "c-1".into();
    waiting.priority = 1.0;
    let answer =
        submit.submit_jobs(submit_req("A", "set-1", vec![item("1", 600), failing, waiting])).await.expect("submit");
    let ids: Vec<String> = answer.into_inner().job_response_items.into_iter().map(|i| i.job_id).collect();
    let (long, failed, queued) = (ids[0].clone(), ids[1].clone(), ids[2].clone());
    let _agent = Killed(s.fake_agent(1, "8", "64Gi"));
    wait_state(&mut jobs, &s, &long, pb::JobState::Running).await;
    wait_state(&mut jobs, &s, &failed, pb::JobState::Failed).await;

    // Reprioritize: per-job results, "" where it took effect; priorities round as Armada's.
    let r = submit
        .reprioritize_jobs(pb::JobReprioritizeRequest {
            queue: "A".into(),
            job_set_id: "set-1".into(),
            job_ids: vec![queued.clone(), failed.clone()],
            new_priority: 5.4,
        })
        .await
        .expect("reprioritize")
        .into_inner();
    let want: HashMap<String, String> = [
        (queued.clone(), String::new()),
        (failed.clone(), "not reprioritized: the job is over or already has priority 5".to_string()),
    ]
    .into();
    assert_eq!(r.reprioritization_results, want);
    let e = submit
        .reprioritize_jobs(pb::JobReprioritizeRequest {
            queue: "nope".into(),
            job_set_id: "set-1".into(),
            new_priority: 1.0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // Details with the spec: what was submitted, at the new priority.
    let d = jobs
        .get_job_details(pb::JobDetailsRequest {
            job_ids: vec![queued.clone(), "01ARZ3NDEKTSV4RRFFQ69G5FAV".into()],
            expand_job_spec: true,
            expand_job_run: true,
        })
        .await
        .expect("details")
        .into_inner()
        .job_details;
    assert_eq!(d.keys().collect::<Vec<_>>(), [&queued], "unknown ids are left out");
    let q = &d[&queued];
    assert_eq!((q.queue.as_str(), q.jobset.as_str(), q.state), ("A", "set-1", pb::JobState::Queued as i32));
    assert_eq!((q.job_runs.len(), q.latest_run_id.as_str(), q.cancel_ts), (0, "", None));
    let spec = q.job_spec.as_ref().expect("the spec, as asked");
    assert_eq!((spec.id.as_str(), spec.priority, spec.client_id.as_str()), (queued.as_str(), 5.0, "c-1"));
    assert_eq!(
        spec.annotations.get("armadaproject.io/externalJobUri").map(String::as_str),
        Some("airflow://dag/run+1:2")
    );
    let pod = k8s::to_json(&spec.pod_specs[0]).expect("pod spec");
    assert_eq!(pod["nodeSelector"], json!({"convoy-test/nowhere": "true"}));
    assert_eq!(pod["containers"][0]["resources"]["requests"], json!({"cpu": "1", "memory": "64Mi"}));

    // Preempt: the running job is, the queued one holds no node.
    let e = submit
        .preempt_jobs(pb::JobPreemptRequest { queue: "A".into(), job_set_id: "set-1".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "job_ids: name at least one job to preempt"));
    let r = submit
        .preempt_jobs(pb::JobPreemptRequest {
            queue: "A".into(),
            job_set_id: "set-1".into(),
            job_ids: vec![long.clone(), queued.clone()],
            reason: "maintenance".into(),
        })
        .await
        .expect("preempt")
        .into_inner();
    let want: HashMap<String, String> = [
        (long.clone(), String::new()),
        (
            queued.clone(),
            "not preempted: the job holds no node (only leased, pending and running jobs are preempted)".to_string(),
        ),
    ]
    .into();
    assert_eq!(r.preemption_results, want);
    wait_state(&mut jobs, &s, &long, pb::JobState::Preempted).await;

    // Runs, without the spec. The job is preempted at once; its run once the agent stopped it.
    let l = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let mut d = jobs
                .get_job_details(pb::JobDetailsRequest {
                    job_ids: vec![long.clone()],
                    expand_job_run: true,
                    ..Default::default()
                })
                .await
                .expect("details")
                .into_inner()
                .job_details;
            let l = d.remove(&long).expect("the job's details");
            if l.job_runs.first().is_some_and(|r| r.state != pb::JobRunState::RunStateRunning as i32) {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the preempted run ends");
    let l = &l;
    assert_eq!((l.state, l.job_spec.is_none(), l.job_runs.len()), (pb::JobState::Preempted as i32, true, 1));
    let run = &l.job_runs[0];
    assert_eq!((run.job_id.as_str(), run.run_id.as_str()), (long.as_str(), l.latest_run_id.as_str()));
    assert_eq!((run.state, run.cluster.as_str()), (pb::JobRunState::RunStatePreempted as i32, "fake"));
    assert!(run.node.starts_with("fake"), "{run:?}");
    assert!(run.leased_ts.is_some() && run.started_ts.is_some() && run.finished_ts.is_some(), "{run:?}");

    // Errors: the failed job's reason, "" for the others and for unknown ids.
    let errors = jobs
        .get_job_errors(pb::JobErrorsRequest { job_ids: vec![failed.clone(), long.clone(), "x".into()] })
        .await
        .expect("errors")
        .into_inner()
        .job_errors;
    let want: HashMap<String, String> =
        [(failed.clone(), "exit code 3".to_string()), (long.clone(), String::new()), ("x".into(), String::new())]
            .into();
    assert_eq!(errors, want);

    // Status by external URI, within the job set.
    let by_uri = |uri: &str, jobset: &str| pb::JobStatusUsingExternalJobUriRequest {
        queue: "A".into(),
        jobset: jobset.into(),
        external_job_uri: uri.into(),
    };
    let st = jobs
        .get_job_status_using_external_job_uri(by_uri("airflow://dag/run+1:2", "set-1"))
        .await
        .expect("by uri")
        .into_inner();
    assert_eq!(st.job_states, HashMap::from([(queued.clone(), pb::JobState::Queued as i32)]));
    let st = jobs
        .get_job_status_using_external_job_uri(by_uri("airflow://dag/run+1:2", "set-2"))
        .await
        .expect("by uri")
        .into_inner();
    assert!(st.job_states.is_empty(), "{st:?}");
    let e = jobs.get_job_status_using_external_job_uri(by_uri("u", "")).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "jobset: is required"));

    // Watch (Armada's older call) resumes after `from_id` and stays open for new events.
    let mut events = EventClient::new(ch.clone());
    let mut stored = events
        .get_job_set_events(pb::JobSetRequest { id: "set-1".into(), queue: "A".into(), ..Default::default() })
        .await
        .expect("events")
        .into_inner();
    let mut last = 0u64;
    while let Some(m) = stored.message().await.expect("event") {
        last = m.id.parse().expect("numeric id");
    }
    let mut watch = events
        .watch(pb::WatchRequest { queue: "A".into(), job_set_id: "set-1".into(), from_id: last.to_string() })
        .await
        .expect("watch")
        .into_inner();
    let mut first = events
        .watch(pb::WatchRequest { queue: "A".into(), job_set_id: "set-1".into(), from_id: String::new() })
        .await
        .expect("watch from the start")
        .into_inner();
    let m = first.message().await.expect("event").expect("stored events");
    assert_eq!((m.id.as_str(), kind(&m)), ("1", ("submitted", long.clone())));

    // A cancelled job's details carry the reason and time.
    submit
        .cancel_jobs(pb::JobCancelRequest {
            queue: "A".into(),
            job_set_id: "set-1".into(),
            job_id: queued.clone(),
            reason: "not needed".into(),
            ..Default::default()
        })
        .await
        .expect("cancel");
    let d = jobs
        .get_job_details(pb::JobDetailsRequest { job_ids: vec![queued.clone()], ..Default::default() })
        .await
        .expect("details")
        .into_inner()
        .job_details;
    let q = &d[&queued];
    assert_eq!((q.state, q.cancel_reason.as_str()), (pb::JobState::Cancelled as i32, "not needed"));
    assert!(q.cancel_ts.is_some() && q.cancel_ts == q.last_transition_ts, "{q:?}");
    let next = tokio::time::timeout(Duration::from_secs(10), watch.message()).await.expect("a new event");
    let m = next.expect("event").expect("the watched stream stays open");
    assert_eq!((m.id.clone(), kind(&m)), ((last + 1).to_string(), ("cancelling", queued.clone())));
}

#[tokio::test]
async fn batch_queue_creates_and_updates_answer_per_queue_failures() {
    let s = Server::start("");
    s.ready().await;
    let ch = channel(&s).await;
    let (mut queues, mut submit) = (QueueServiceClient::new(ch.clone()), SubmitClient::new(ch.clone()));
    let q = |name: &str, factor: f64| pb::Queue { name: name.into(), priority_factor: factor, ..Default::default() };
    queues.create_queue(q("A", 1.0)).await.expect("create A");

    // Each queue on its own: A exists and D is invalid, B and C are created.
    let r = queues
        .create_queues(pb::QueueList { queues: vec![q("A", 1.0), q("B", 2.0), q("D", -1.0), q("C", 1.0)] })
        .await
        .expect("create queues")
        .into_inner();
    let failed: Vec<(String, String)> = r
        .failed_queues
        .iter()
        .map(|f| (f.queue.as_ref().map(|q| q.name.clone()).unwrap_or_default(), f.error.clone()))
        .collect();
    assert_eq!(failed.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["A", "D"], "{failed:?}");
    assert_eq!(failed[0].1, "queue A already exists");
    assert!(failed[1].1.starts_with("priority_factor: "), "{failed:?}");
    let mut stream = queues.get_queues(pb::StreamingQueueGetRequest { num: 0 }).await.expect("get queues").into_inner();
    let mut listed = Vec::new();
    while let Some(m) = stream.message().await.expect("queue stream") {
        if let Some(pb::streaming_queue_message::Event::Queue(q)) = m.event {
            listed.push((q.name, q.priority_factor));
        }
    }
    assert_eq!(listed, [("A".to_string(), 1.0), ("B".to_string(), 2.0), ("C".to_string(), 1.0)]);

    // Updates, on api.Submit too: Z does not exist, B and C change.
    let r = submit
        .update_queues(pb::QueueList { queues: vec![q("B", 3.0), q("Z", 1.0), q("C", 4.0)] })
        .await
        .expect("update queues")
        .into_inner();
    let failed: Vec<(String, String)> = r
        .failed_queues
        .iter()
        .map(|f| (f.queue.as_ref().map(|q| q.name.clone()).unwrap_or_default(), f.error.clone()))
        .collect();
    assert_eq!(failed, [("Z".to_string(), "queue Z does not exist".to_string())]);
    for (name, factor) in [("B", 3.0), ("C", 4.0)] {
        let got = queues.get_queue(pb::QueueGetRequest { name: name.into() }).await.expect("get").into_inner();
        assert_eq!(got.priority_factor, factor, "{name}");
    }
    let r = submit.create_queues(pb::QueueList { queues: vec![q("E", 1.0)] }).await.expect("create on Submit");
    assert!(r.into_inner().failed_queues.is_empty());
}

/// Armada's ingress and service configs become the Service and Ingress objects of the stored job,
/// which its lease hands to the executor (placeholders for the pod and namespace included); a bad
/// config refuses the whole request, naming Armada's field.
#[tokio::test]
async fn ingress_and_service_configs_become_the_jobs_services_and_ingresses() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let nodes = vec![crate::common::node("n1", "4")];
    s.poll("e1", &nodes, &[], 0.0).await;
    let mut submit = SubmitClient::new(channel(&s).await);
    let spec = json!({"containers": [{"name": "main", "image": "busybox",
        "ports": [{"containerPort": 8080}, {"containerPort": 6000, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}}]});
    let with_configs = |ingress_port: u32| {
        let mut i = pb::JobSubmitRequestItem {
            pod_specs: vec![k8s::from_json(&spec).expect("pod spec")],
            ..Default::default()
        };
        i.ingress.push(pb::IngressConfig {
            ports: vec![ingress_port],
            annotations: [("a".to_string(), "b".to_string())].into(),
            tls_enabled: true,
            ..Default::default()
        });
        i.services.push(pb::ServiceConfig {
            r#type: pb::ServiceType::Headless as i32,
            ports: vec![6000],
            name: "".into(),
        });
        i
    };

    // All or nothing: the second item's ingress names a port no container exposes.
    let e = submit.submit_jobs(submit_req("A", "web", vec![with_configs(8080), with_configs(8081)])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(
        e.message(),
        "job_request_items[1].ingress[0].ports[0]: no container of the pod spec exposes port 8081 (without a hostPort)"
    );
    let ids = submit
        .submit_jobs(submit_req("A", "web", vec![with_configs(8080)]))
        .await
        .expect("submit with ingress and services")
        .into_inner()
        .job_response_items;
    assert_eq!(ids.len(), 1);

    let v = s.poll("e1", &nodes, &[], 20.0).await;
    let leases = v["leases"].as_array().cloned().unwrap_or_default();
    assert_eq!(leases.len(), 1, "only the accepted job was stored: {v}");
    let lease = &leases[0];
    assert_eq!(lease["job_id"], ids[0].job_id.as_str());
    assert_eq!(
        lease["services"],
        json!([
            {"metadata": {"name": "{pod}-service-0"},
             "spec": {"type": "ClusterIP", "clusterIP": "None", "ports": [{"name": "main-8080", "port": 8080}]}},
            {"metadata": {"name": "{pod}-service-1"},
             "spec": {"type": "ClusterIP", "clusterIP": "None",
                      "ports": [{"name": "main-6000", "port": 6000, "protocol": "TCP"}]}}
        ])
    );
    let host = "main-8080-{pod}.{namespace}{host_suffix}";
    assert_eq!(
        lease["ingresses"],
        json!([{"metadata": {"name": "{pod}-ingress-1", "annotations": {"a": "b"}},
                "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                            "backend": {"service": {"name": "{pod}-service-0", "port": {"number": 8080}}}}]}}],
                         "tls": [{"hosts": [host], "secretName": "{namespace}{cert_suffix}"}]}}])
    );
}

/// GetActiveQueues: per pool, the queues with a leased, pending or running job; a queue without
/// one (C) is not listed.
#[tokio::test]
async fn get_active_queues_lists_the_queues_holding_nodes_per_pool() {
    let s = Server::start("");
    s.ready().await;
    for q in ["A", "B", "C"] {
        s.create_queue(q).await;
    }
    let mut jobs = JobsClient::new(channel(&s).await);
    let active = |r: pb::GetActiveQueuesResponse| -> Vec<(String, Vec<String>)> {
        let mut v: Vec<(String, Vec<String>)> =
            r.active_queues_by_pool.into_iter().map(|(pool, q)| (pool, q.queues)).collect();
        v.sort();
        v
    };
    let got = jobs.get_active_queues(pb::GetActiveQueuesRequest {}).await.expect("active queues").into_inner();
    assert_eq!(active(got), vec![]);

    // One node of 4 CPUs in pool "gpu": A's and B's 1-CPU jobs are leased there.
    let nodes = vec![json!({"name": "n1", "pool": "gpu", "allocatable": {"cpu": "4", "memory": "64Gi"}})];
    s.poll("e1", &nodes, &[], 0.0).await;
    s.submit("A", "s", vec![crate::common::job("1")]).await;
    s.submit("B", "s", vec![crate::common::job("1")]).await;
    let mut leases = Vec::new();
    for _ in 0..20 {
        if leases.len() >= 2 {
            break;
        }
        let held: Vec<serde_json::Value> = leases
            .iter()
            .map(|l: &serde_json::Value| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "running"}))
            .collect();
        let v = s.poll("e1", &nodes, &held, 5.0).await;
        leases.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    assert_eq!(leases.len(), 2, "A's and B's jobs are leased: {leases:?}");
    let got = jobs.get_active_queues(pb::GetActiveQueuesRequest {}).await.expect("active queues").into_inner();
    assert_eq!(active(got), vec![("gpu".to_string(), vec!["A".to_string(), "B".to_string()])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_round_trip_and_runs_are_read_by_id() {
    let s = Server::start("");
    s.ready().await;
    let ch = channel(&s).await;
    let (mut queues, mut submit, mut jobs, mut events) = (
        QueueServiceClient::new(ch.clone()),
        SubmitClient::new(ch.clone()),
        JobsClient::new(ch.clone()),
        EventClient::new(ch.clone()),
    );
    queues.create_queue(pb::Queue { name: "A".into(), ..Default::default() }).await.expect("create queue");

    // A namespace that is no DNS-1123 label is refused, naming Armada's field; nothing is stored.
    let mut bad = item("1", 0);
    bad.namespace = "ML_team".into();
    let e = submit.submit_jobs(submit_req("A", "set-ns", vec![item("1", 0), bad])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("job_request_items[1].namespace: namespace \"ML_team\" is invalid"), "{e:?}");
    let (status, listed) = s.get("/v1/jobs?queue=A&job_set=set-ns").await;
    assert_eq!((status, listed["jobs"].as_array().map(Vec::len)), (200, Some(0)), "{listed}");

    // One job in its own namespace, one naming none (it runs in its agent's).
    let mut ml = item("1", 0);
    ml.namespace = "ml-team".into();
    let mut none = item("1", 0);
    none.namespace = String::new();
    let answer = submit.submit_jobs(submit_req("A", "set-ns", vec![ml, none])).await.expect("submit");
    let ids: Vec<String> = answer.into_inner().job_response_items.into_iter().map(|i| i.job_id).collect();
    let _agent = Killed(s.fake_agent(1, "8", "64Gi"));
    for id in &ids {
        wait_state(&mut jobs, &s, id, pb::JobState::Succeeded).await;
    }
    let d = jobs
        .get_job_details(pb::JobDetailsRequest { job_ids: ids.clone(), expand_job_spec: true, expand_job_run: true })
        .await
        .expect("details")
        .into_inner()
        .job_details;
    let namespaces: Vec<(&str, &str)> = ids
        .iter()
        .map(|id| (d[id].namespace.as_str(), d[id].job_spec.as_ref().map_or("?", |j| j.namespace.as_str())))
        .collect();
    assert_eq!(namespaces, [("ml-team", "ml-team"), ("", "")]);
    let runs: Vec<String> = ids.iter().map(|id| d[id].latest_run_id.clone()).collect();
    assert!(runs.iter().all(|r| !r.is_empty()), "{d:?}");

    // Runs by id: known ones with their job, unknown and malformed ids left out.
    let asked = vec![runs[0].clone(), runs[1].clone(), "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(), "not-a-run".into()];
    let r = jobs
        .get_job_run_details(pb::JobRunDetailsRequest { run_ids: asked })
        .await
        .expect("run details")
        .into_inner()
        .job_run_details;
    let mut keys: Vec<&String> = r.keys().collect();
    keys.sort();
    let mut want: Vec<&String> = runs.iter().collect();
    want.sort();
    assert_eq!(keys, want);
    for (run, id) in runs.iter().zip(&ids) {
        let rd = &r[run];
        assert_eq!(
            (rd.run_id.as_str(), rd.job_id.as_str(), rd.state, rd.cluster.as_str()),
            (run.as_str(), id.as_str(), pb::JobRunState::RunStateSucceeded as i32, "fake")
        );
        assert!(rd.leased_ts.is_some() && rd.finished_ts.is_some(), "{rd:?}");
        // The same run as GetJobDetails shows it.
        assert_eq!(Some(rd), d[id].job_runs.last());
    }
    let none = jobs.get_job_run_details(pb::JobRunDetailsRequest { run_ids: vec![] }).await.expect("empty");
    assert!(none.into_inner().job_run_details.is_empty());

    // The fake runtime has no pods: the events carry pod number 0 and empty pod fields.
    let mut stream = events
        .get_job_set_events(pb::JobSetRequest { id: "set-ns".into(), queue: "A".into(), ..Default::default() })
        .await
        .expect("events")
        .into_inner();
    let mut running = 0;
    while let Some(m) = stream.message().await.expect("event") {
        if let Some(pb::event_message::Events::Running(e)) = m.message.and_then(|m| m.events) {
            assert_eq!((e.pod_name.as_str(), e.pod_namespace.as_str(), e.pod_number), ("", "", 0));
            running += 1;
        }
    }
    assert_eq!(running, 2);

    // REST: the job's namespace, the run by id.
    let job = s.job(&ids[0]).await;
    assert_eq!((&job["namespace"], &job["runs"][0]["pod"]), (&json!("ml-team"), &json!(null)));
    assert_eq!(s.job(&ids[1]).await["namespace"], json!(null));
    let (status, run) = s.get(&format!("/v1/runs/{}", runs[0])).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(
        (
            &run["job_id"],
            &run["queue"],
            &run["job_set"],
            &run["namespace"],
            &run["run"]["run_id"],
            &run["run"]["state"]
        ),
        (&json!(ids[0]), &json!("A"), &json!("set-ns"), &json!("ml-team"), &json!(runs[0]), &json!("succeeded"))
    );
    let (status, p) = s.get("/v1/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV").await;
    assert_eq!(status, 404, "{p}");
    let (status, p) = s.get("/v1/runs/not-a-run").await;
    assert_eq!((status, &p["field"]), (400, &json!("run_id")), "{p}");
    // REST names the field its way.
    let body = json!({"queue": "A", "job_set": "set-ns", "jobs": [{"pod_spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}, "namespace": "-x"}]});
    let (status, p) = s.post("/v1/jobs", &body).await;
    assert_eq!((status, &p["field"]), (400, &json!("jobs[0].namespace")), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_an_agent_reports_reaches_runs_and_armada_events() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let nodes = vec![crate::common::node("n1", "4")];
    s.poll("e1", &nodes, &[], 0.0).await;
    let mut job = crate::common::job("1");
    job["namespace"] = json!("ml-team");
    let id = s.submit("A", "set-pod", vec![job]).await.remove(0);
    // The lease order names the job's namespace for the agent.
    let lease = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let v = s.poll("e1", &nodes, &[], 5.0).await;
            if let Some(l) = v["leases"].as_array().and_then(|l| l.first()).cloned() {
                return l;
            }
        }
    })
    .await
    .expect("a lease");
    assert_eq!((&lease["job_id"], &lease["namespace"]), (&json!(id), &json!("ml-team")));
    let name = format!("armada-{}-0", id.to_lowercase());
    let pod = json!({"name": name, "namespace": "ml-team", "uid": "0b6e-uid"});
    let report = |kind: &str| json!({"run_id": lease["run_id"], "job_id": id, "kind": kind, "pod": pod});
    assert_eq!(s.report("e1", vec![report("pending"), report("running")]).await, 2);
    let j = s.job(&id).await;
    assert_eq!((&j["state"], &j["runs"][0]["pod"]), (&json!("running"), &pod));

    let ch = channel(&s).await;
    let mut stream = EventClient::new(ch)
        .get_job_set_events(pb::JobSetRequest { id: "set-pod".into(), queue: "A".into(), ..Default::default() })
        .await
        .expect("events")
        .into_inner();
    let mut seen = vec![];
    while let Some(m) = stream.message().await.expect("event") {
        match m.message.and_then(|m| m.events) {
            Some(pb::event_message::Events::Pending(e)) => {
                seen.push(("pending", e.pod_name, e.pod_namespace, e.kubernetes_id, e.pod_number))
            }
            Some(pb::event_message::Events::Running(e)) => {
                seen.push(("running", e.pod_name, e.pod_namespace, e.kubernetes_id, e.pod_number))
            }
            _ => {}
        }
    }
    let want = |k| (k, name.clone(), "ml-team".to_string(), "0b6e-uid".to_string(), 0);
    assert_eq!(seen, vec![want("pending"), want("running")]);
}
