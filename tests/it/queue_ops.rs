//! Queue cordon as Armada means it (a cordoned queue takes jobs, none of which is scheduled until
//! it is uncordoned), the queue-wide cancel and preempt with their filters, and job set names
//! with any characters, through REST, gRPC and the CLI, against a real server whose executor is
//! played by lease polls.

use crate::cli_client::{convoy, ok};
use crate::common::{Server, config};
use convoy::grpc::k8s;
use convoy::grpc::pb::{self, queue_service_client::QueueServiceClient, submit_client::SubmitClient};
use serde_json::{Value, json};
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;

async fn channel(s: &Server) -> Channel {
    Channel::from_shared(s.url.clone()).expect("server url").connect().await.expect("h2c connection")
}

/// A one-cpu job of `class` (none: the default), placeable only on a node labelled `place=here`
/// when `placeable`, else on no node.
fn job(class: Option<&str>, placeable: bool) -> Value {
    let mut spec = json!({
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}],
        "nodeSelector": {"place": if placeable { "here" } else { "nowhere" }}
    });
    if let Some(c) = class {
        spec["priorityClassName"] = json!(c);
    }
    json!({"pod_spec": spec})
}

/// Registers executor e1 with one 8-cpu node labelled `place=here`.
async fn node(s: &Server) {
    s.poll(
        "e1",
        &[json!({"name": "n1", "labels": {"place": "here"}, "allocatable": {"cpu": "8", "memory": "64Gi"}})],
        &[],
        0.0,
    )
    .await;
}

const WAIT: Duration = Duration::from_secs(20);
const CORDONED: &str = "queue A is cordoned: its queued jobs wait until it is uncordoned";

async fn leased(s: &Server, id: &str) {
    s.wait_job(id, WAIT, "leased", |j| j["state"] == "leased").await;
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn a_cordoned_queue_takes_jobs_that_wait_until_it_is_uncordoned() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    node(&s).await;

    let (st, q) = s.post("/v1/queues/A/cordon", &json!(null)).await;
    assert_eq!((st, &q["cordoned"]), (200, &json!(true)), "{q}");
    // Cordoning twice changes nothing.
    let (st, q) = s.post("/v1/queues/A/cordon", &json!(null)).await;
    assert_eq!((st, &q["cordoned"]), (200, &json!(true)), "{q}");
    assert_eq!(s.get("/v1/queues/A").await.1["cordoned"], json!(true));

    // The cordoned queue takes the job; another queue's job runs beside it while it waits.
    let a = s.submit("A", "s", vec![job(None, true)]).await;
    let b = s.submit("B", "s", vec![job(None, true)]).await;
    leased(&s, &b[0]).await;
    let j = s.wait_job(&a[0], WAIT, "held by the cordon", |j| j["reason"] == json!(CORDONED)).await;
    assert_eq!(j["state"], "queued", "{j:#}");
    // Two more scheduling cycles leave it queued.
    let cycles = |text: String| {
        text.lines().find_map(|l| l.strip_prefix("convoy_scheduling_cycles_total ")?.trim().parse::<u64>().ok())
    };
    let from = cycles(s.text("/metrics").await.1).expect("cycles");
    let deadline = std::time::Instant::now() + WAIT;
    while cycles(s.text("/metrics").await.1).expect("cycles") < from + 2 {
        assert!(std::time::Instant::now() < deadline, "no scheduling cycles");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.job(&a[0]).await["state"], "queued");

    let (st, q) = s.post("/v1/queues/A/uncordon", &json!(null)).await;
    assert_eq!((st, &q["cordoned"]), (200, &json!(false)), "{q}");
    leased(&s, &a[0]).await;

    // Through the CLI too.
    let q: Value = serde_json::from_str(&ok(&s.url, &["queue", "cordon", "B"]).await).expect("JSON");
    assert_eq!(q["cordoned"], json!(true));
    let c = s.submit("B", "s", vec![job(None, true)]).await;
    s.wait_job(&c[0], WAIT, "held by the cordon", |j| {
        j["reason"] == json!("queue B is cordoned: its queued jobs wait until it is uncordoned")
    })
    .await;
    let q: Value = serde_json::from_str(&ok(&s.url, &["queue", "uncordon", "B"]).await).expect("JSON");
    assert_eq!(q["cordoned"], json!(false));
    leased(&s, &c[0]).await;

    let (st, v) = s.post("/v1/queues/Z/cordon", &json!(null)).await;
    assert_eq!(st, 404, "{v}");
}

#[tokio::test]
async fn queue_wide_cancel_and_preempt_reach_exactly_the_jobs_their_filters_select() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    s.create_queue("B").await;
    node(&s).await;
    // Set s1: a default and a preemptible job that get a node. Set s2: a default and a
    // preemptible job that stay queued. Queue B: one queued job nothing here may touch.
    let s1 = s.submit("A", "s1", vec![job(None, true), job(Some("preemptible"), true)]).await;
    let s2 = s.submit("A", "s2", vec![job(None, false), job(Some("preemptible"), false)]).await;
    let other = s.submit("B", "s1", vec![job(Some("preemptible"), false)]).await;
    leased(&s, &s1[0]).await;
    leased(&s, &s1[1]).await;

    // Refusals name the field.
    for (body, field) in [
        (json!({"states": ["succeeded"]}), "states[0]"),
        (json!({"priority_classes": ["gold"]}), "priority_classes[0]"),
    ] {
        let (st, v) = s.post("/v1/queues/A/cancel", &body).await;
        assert_eq!((st, &v["field"]), (400, &json!(field)), "{v}");
    }
    let (st, v) = s.post("/v1/queues/A/preempt", &json!({"priority_classes": ["gold"]})).await;
    assert_eq!((st, &v["field"]), (400, &json!("priority_classes[0]")), "{v}");
    let (st, v) = s.post("/v1/queues/Z/cancel", &json!({})).await;
    assert_eq!((st, &v["field"]), (404, &json!("queue")), "{v}");

    // Queued preemptible jobs of A: only s2's second job.
    let (st, v) =
        s.post("/v1/queues/A/cancel", &json!({"states": ["queued"], "priority_classes": ["preemptible"]})).await;
    assert_eq!((st, &v["job_ids"]), (200, &json!([s2[1]])), "{v}");
    // Preempting the default class reaches the running default job, not the queued one.
    let (st, v) = s.post("/v1/queues/A/preempt", &json!({"priority_classes": ["default"], "reason": "drain"})).await;
    assert_eq!((st, &v["job_ids"]), (200, &json!([s1[0]])), "{v}");
    let j = s.job(&s1[0]).await;
    assert_eq!((&j["state"], &j["reason"]), (&json!("preempted"), &json!("drain")), "{j:#}");
    // Everything else of A, in every job set, through the CLI.
    let out: Value = serde_json::from_str(&ok(&s.url, &["queue", "cancel", "A"]).await).expect("JSON");
    assert_eq!(
        sorted(serde_json::from_value(out["job_ids"].clone()).unwrap()),
        sorted(vec![s1[1].clone(), s2[0].clone()])
    );
    for id in [&s1[1], &s2[0], &s2[1]] {
        assert_eq!(s.job(id).await["state"], "cancelled", "{id}");
    }
    // Queue B was not touched; nothing is left in A.
    assert_eq!(s.job(&other[0]).await["state"], "queued");
    let (st, v) = s.post("/v1/queues/A/cancel", &json!({})).await;
    assert_eq!((st, &v["job_ids"]), (200, &json!([])), "{v}");
    let out = convoy(&s.url, &["queue", "cancel", "A", "--states", "done"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--states: unknown state \"done\""));
}

#[tokio::test]
async fn armada_clients_cordon_cancel_and_preempt_on_a_queue_over_grpc() {
    let s = Server::start("");
    s.ready().await;
    let ch = channel(&s).await;
    let (mut queues, mut submit) = (QueueServiceClient::new(ch.clone()), SubmitClient::new(ch));
    for name in ["A", "B"] {
        queues.create_queue(pb::Queue { name: name.into(), ..Default::default() }).await.expect("create queue");
    }
    node(&s).await;
    let item = |class: Option<&str>, placeable: bool| pb::JobSubmitRequestItem {
        pod_specs: vec![k8s::from_json(&job(class, placeable)["pod_spec"]).expect("pod spec")],
        ..Default::default()
    };
    let submit_ids = async |submit: &mut SubmitClient<Channel>,
                            queue: &str,
                            set: &str,
                            items: Vec<pb::JobSubmitRequestItem>|
           -> Vec<String> {
        let r = submit
            .submit_jobs(pb::JobSubmitRequest { queue: queue.into(), job_set_id: set.into(), job_request_items: items })
            .await
            .expect("submit")
            .into_inner();
        r.job_response_items.into_iter().map(|i| i.job_id).collect()
    };

    // Cordoned: A takes a job that stays queued while B's runs; uncordoned, it runs.
    queues.cordon_queue(pb::QueueCordonRequest { name: "A".into() }).await.expect("cordon");
    assert!(queues.get_queue(pb::QueueGetRequest { name: "A".into() }).await.expect("get").into_inner().cordoned);
    let run_id = "scheduled__2026-11-23T10:00:00+00:00";
    let a = submit_ids(&mut submit, "A", run_id, vec![item(None, true)]).await;
    let b = submit_ids(&mut submit, "B", "s", vec![item(None, true)]).await;
    leased(&s, &b[0]).await;
    s.wait_job(&a[0], WAIT, "held by the cordon", |j| j["reason"] == json!(CORDONED)).await;
    queues.uncordon_queue(pb::QueueUncordonRequest { name: "A".into() }).await.expect("uncordon");
    leased(&s, &a[0]).await;
    assert_eq!(s.job(&a[0]).await["job_set"], json!(run_id));
    let e = queues.cordon_queue(pb::QueueCordonRequest { name: "Z".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // CancelOnQueue with a state and a priority class filter.
    let q1 = submit_ids(&mut submit, "A", "t", vec![item(Some("preemptible"), false), item(None, false)]).await;
    let p1 = submit_ids(&mut submit, "A", "t", vec![item(Some("preemptible"), true)]).await;
    leased(&s, &p1[0]).await;
    queues
        .cancel_on_queue(pb::QueueCancelRequest {
            name: "A".into(),
            priority_classes: vec!["preemptible".into()],
            job_states: vec![pb::JobState::Queued as i32],
            pools: vec![],
        })
        .await
        .expect("cancel on queue");
    assert_eq!(s.job(&q1[0]).await["state"], "cancelled");
    assert_eq!(s.job(&q1[1]).await["state"], "queued");
    assert_eq!(s.job(&p1[0]).await["state"], "leased");
    let e = queues
        .cancel_on_queue(pb::QueueCancelRequest {
            name: "A".into(),
            job_states: vec![pb::JobState::Succeeded as i32],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "jobStates[0]: SUCCEEDED jobs cannot be cancelled"));
    let e = queues
        .preempt_on_queue(pb::QueuePreemptRequest {
            name: "A".into(),
            priority_classes: vec!["gold".into()],
            pools: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("priorityClasses[0]: unknown priority class \"gold\""), "{}", e.message());

    // PreemptOnQueue of the preemptible class: the leased preemptible job only.
    queues
        .preempt_on_queue(pb::QueuePreemptRequest {
            name: "A".into(),
            priority_classes: vec!["preemptible".into()],
            pools: vec![],
        })
        .await
        .expect("preempt on queue");
    assert_eq!(s.job(&p1[0]).await["state"], "preempted");
    assert_eq!(s.job(&a[0]).await["state"], "leased");
    assert_eq!(s.job(&q1[1]).await["state"], "queued");
    assert_eq!(s.job(&b[0]).await["state"], "leased");
}

#[tokio::test]
async fn cordon_needs_an_admin_and_queue_wide_cancel_an_owner() {
    const ADMIN: &str = "admin-token-0123456789abcdef";
    const BOB: &str = "bob-token-0123456789abcdefgh";
    let tmp = tempfile::tempdir().unwrap();
    let text = config(tmp.path(), "").replace(
        "[auth]\nenabled = false\n",
        &format!(
            "[auth]\nenabled = true\ntokens = [\n  {{ token = \"{ADMIN}\", principal = \"root\", roles = [\"admin\"] }},\n  {{ token = \"{BOB}\", principal = \"bob\", roles = [\"submitter\"] }},\n]\n"
        ),
    );
    let s = Server::start_in(tmp.path(), &text);
    s.ready().await;
    let post = async |path: &str, token: &str| s.call(reqwest::Method::POST, path, Some(token), Some(&json!({}))).await;
    let (st, v) =
        s.call(reqwest::Method::POST, "/v1/queues", Some(ADMIN), Some(&json!({"name": "A", "owners": ["bob"]}))).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.call(reqwest::Method::POST, "/v1/queues", Some(ADMIN), Some(&json!({"name": "C"}))).await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = post("/v1/queues/A/cordon", BOB).await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = post("/v1/queues/A/cordon", ADMIN).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = post("/v1/queues/A/cancel", BOB).await;
    assert_eq!(st, 200, "bob owns A: {v}");
    let (st, v) = post("/v1/queues/C/cancel", BOB).await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = post("/v1/queues/C/preempt", BOB).await;
    assert_eq!(st, 403, "{v}");
    // gRPC: the same rules.
    let ch = channel(&s).await;
    let mut queues = QueueServiceClient::new(ch);
    let mut r = tonic::Request::new(pb::QueueUncordonRequest { name: "A".into() });
    r.metadata_mut().insert("authorization", format!("Bearer {BOB}").parse().unwrap());
    assert_eq!(queues.uncordon_queue(r).await.unwrap_err().code(), Code::PermissionDenied);
    let mut r = tonic::Request::new(pb::QueueCancelRequest { name: "C".into(), ..Default::default() });
    r.metadata_mut().insert("authorization", format!("Bearer {BOB}").parse().unwrap());
    assert_eq!(queues.cancel_on_queue(r).await.unwrap_err().code(), Code::PermissionDenied);
}

#[tokio::test]
async fn job_set_names_with_any_characters_work_through_rest_cli_and_grpc() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let names = ["scheduled__2026-11-23T10:00:00+00:00", "my run/1 of 2 (50%)", "été ✓"];
    for name in names {
        let ids = s.submit("A", name, vec![job(None, false)]).await;
        let j = s.job(&ids[0]).await;
        assert_eq!(j["job_set"], json!(name));
        // The event stream, its name percent-encoded as one path segment.
        let mut url = reqwest::Url::parse(&s.url).unwrap();
        url.path_segments_mut().unwrap().extend(["v1", "queues", "A", "job-sets", name, "events"]);
        let (st, text) = s.text(&format!("{}?follow=false", url.path())).await;
        assert_eq!(st, 200, "{name}: {text}");
        assert!(text.contains("\"kind\":\"submitted\"") && text.contains(&ids[0]), "{name}: {text}");
        // The CLI lists and watches it.
        let listed = ok(&s.url, &["jobs", "--queue", "A", "--job-set", name]).await;
        assert!(listed.contains(&ids[0]), "{name}: {listed}");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["--server", &s.url, "watch", "A", name])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("convoy watch runs");
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(WAIT, lines.next_line()).await.expect("in time").expect("read");
        let first = first.unwrap_or_else(|| panic!("{name}: the watch printed nothing"));
        assert!(first.contains(" submitted ") && first.contains(&ids[0]), "{name}: {first}");
        let _ = child.kill().await;
        // And cancels it by name.
        let out: Value =
            serde_json::from_str(&ok(&s.url, &["cancel", "--queue", "A", "--job-set", name, "-o", "json"]).await)
                .expect("JSON");
        assert_eq!(out["job_ids"], json!([ids[0]]), "{name}");
    }
    // Control characters stay out, named as the job set's rule.
    let (st, v) = s.post("/v1/jobs", &json!({"queue": "A", "job_set": "a\nb", "jobs": [job(None, false)]})).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["detail"].as_str().unwrap_or("").contains("except control characters"), "{v}");

    // gRPC: submitted and streamed back under the same name.
    let ch = channel(&s).await;
    let mut submit = SubmitClient::new(ch.clone());
    let name = names[1];
    let item = pb::JobSubmitRequestItem {
        pod_specs: vec![k8s::from_json(&job(None, false)["pod_spec"]).expect("pod spec")],
        ..Default::default()
    };
    let r = submit
        .submit_jobs(pb::JobSubmitRequest { queue: "A".into(), job_set_id: name.into(), job_request_items: vec![item] })
        .await
        .expect("submit")
        .into_inner();
    let id = r.job_response_items[0].job_id.clone();
    let mut events = pb::event_client::EventClient::new(ch);
    let mut stream = events
        .get_job_set_events(pb::JobSetRequest { id: name.into(), queue: "A".into(), ..Default::default() })
        .await
        .expect("events")
        .into_inner();
    let mut seen = Vec::new();
    while let Some(m) = tokio::time::timeout(WAIT, stream.message()).await.expect("in time").expect("stream") {
        if let Some(pb::event_message::Events::Submitted(e)) = m.message.and_then(|m| m.events) {
            assert_eq!(e.job_set_id, name);
            seen.push(e.job_id);
        }
    }
    assert!(seen.contains(&id), "{seen:?}");
}
