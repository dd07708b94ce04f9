//! The fake runtime through `convoy::agent::run`, and failover between server addresses.

use super::control_plane::{ControlPlane, is_final};
use super::harness::{InProcessAgent, config, lease};
use crate::common::wait::wait_for;
use convoy::agent::RuntimeKind;
use convoy::agent::config::FakeNodeGroup;
use convoy::model::api::{LeaseOrder, RunEventKind};
use convoy::model::{PoolName, QueueName, RESERVED_FOR_LABEL, Resources, Taint, TaintEffect};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn groups() -> Vec<FakeNodeGroup> {
    vec![
        FakeNodeGroup {
            count: 3,
            name_prefix: "cpu".into(),
            pool: PoolName::default_pool(),
            allocatable: Resources::parse([("cpu", "16"), ("memory", "64Gi")]).expect("resources"),
            labels: [("kind".to_string(), "cpu".to_string())].into(),
            taints: vec![],
            reserved_for: vec![],
        },
        FakeNodeGroup {
            count: 2,
            name_prefix: "gpu".into(),
            pool: PoolName::new("gpu").expect("pool"),
            allocatable: Resources::parse([("cpu", "8"), ("nvidia.com/gpu", "4")]).expect("resources"),
            labels: Default::default(),
            taints: vec![Taint { key: "gpu".into(), value: "true".into(), effect: TaintEffect::NoSchedule }],
            reserved_for: vec![QueueName::new("ml").expect("queue"), QueueName::new("physics").expect("queue")],
        },
    ]
}

fn fake_lease(node: &str, runtime: &str, exit_code: &str) -> LeaseOrder {
    let mut l = lease(node, serde_json::json!({"containers": [{"name": "main", "image": "none"}]}));
    l.annotations.insert("convoy.io/fake-runtime".into(), runtime.into());
    l.annotations.insert("convoy.io/fake-exit-code".into(), exit_code.into());
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_nodes_are_reported_and_jobs_follow_their_annotations() {
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(vec![cp.url()], RuntimeKind::Fake, dir.path());
    cfg.fake.node_groups = groups();
    let agent = InProcessAgent::start(cfg);
    let poll = wait_for(T, "a poll", || cp.last_poll()).await;
    let names: Vec<&str> = poll.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["cpu-0", "cpu-1", "cpu-2", "gpu-0", "gpu-1"]);
    let gpu = &poll.nodes[3];
    assert_eq!((gpu.pool.as_str(), gpu.allocatable.get("nvidia.com/gpu"), gpu.taints.len()), ("gpu", 4000, 1));
    assert_eq!(poll.nodes[0].labels.get("kind").map(String::as_str), Some("cpu"));
    // Earmarked nodes carry the label the scheduler reads.
    assert_eq!(gpu.labels.get(RESERVED_FOR_LABEL).map(String::as_str), Some("ml,physics"));
    assert!(!poll.nodes[0].labels.contains_key(RESERVED_FOR_LABEL));

    let ok = fake_lease("cpu-0", "0.3", "0");
    let bad = fake_lease("gpu-1", "0", "2");
    let invalid = fake_lease("cpu-1", "soon", "0");
    let nowhere = fake_lease("tpu-0", "0", "0");
    let began = Instant::now();
    for l in [&ok, &bad, &invalid, &nowhere] {
        cp.push_lease(l.clone());
    }
    let fin = cp.wait_final(ok.run_id, T).await;
    assert_eq!((fin.kind, fin.exit_code), (RunEventKind::Succeeded, Some(0)));
    assert!(began.elapsed() >= Duration::from_millis(300), "ran for its declared time");
    let kinds: Vec<_> = cp.events_of(ok.run_id).iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [RunEventKind::Pending, RunEventKind::Running, RunEventKind::Succeeded]);
    let fin = cp.wait_final(bad.run_id, T).await;
    assert_eq!((fin.kind, fin.exit_code), (RunEventKind::Failed, Some(2)));
    let fin = cp.wait_final(invalid.run_id, T).await;
    assert_eq!((fin.kind, fin.reason.as_deref()), (RunEventKind::Failed, Some("invalid job")));
    assert!(fin.message.is_some_and(|m| m.contains("convoy.io/fake-runtime")));
    let fin = cp.wait_final(nowhere.run_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Returned);

    // A long job killed: failed as killed; repeated kill orders are harmless.
    let long = fake_lease("cpu-2", "600", "0");
    cp.push_lease(long.clone());
    cp.wait_kind(long.run_id, RunEventKind::Running, T).await;
    cp.push_kill(long.run_id, long.job_id, 5.0, "preempted");
    let fin = cp.wait_final(long.run_id, T).await;
    assert_eq!(
        (fin.kind, fin.reason.as_deref(), fin.message.as_deref()),
        (RunEventKind::Failed, Some("killed"), Some("preempted"))
    );
    // The order again, then a job that ends at once: its end comes after anything the repeated
    // order could have made (events go out in order).
    cp.push_kill(long.run_id, long.job_id, 5.0, "preempted again");
    let sentinel = fake_lease("cpu-3", "0", "0");
    cp.push_lease(sentinel.clone());
    cp.wait_final(sentinel.run_id, T).await;
    assert_eq!(cp.events_of(long.run_id).iter().filter(|e| is_final(e.kind)).count(), 1);
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_jobs_flow_in_batches() {
    const JOBS: usize = 3000;
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(vec![cp.url()], RuntimeKind::Fake, dir.path());
    cfg.fake.node_groups = vec![FakeNodeGroup { count: 1000, ..groups().remove(0) }];
    cfg.max_leases = 500;
    let agent = InProcessAgent::start(cfg);
    let mut want = HashMap::new();
    for i in 0..JOBS {
        let exit = if i % 10 == 0 { "1" } else { "0" };
        let l = fake_lease(&format!("cpu-{}", i % 1000), &format!("{}", (i % 5) as f64 * 0.1), exit);
        want.insert(l.run_id, exit == "0");
        cp.push_lease(l);
    }
    // How fast is for `convoy bench e2e`; this checks that they all flow, in batches.
    wait_for(Duration::from_secs(120), "every final event", || {
        let s = cp.script();
        (s.events.iter().filter(|e| is_final(e.kind)).count() >= JOBS).then_some(())
    })
    .await;
    {
        let s = cp.script();
        let finals: HashMap<_, _> = s.events.iter().filter(|e| is_final(e.kind)).map(|e| (e.run_id, e.kind)).collect();
        assert_eq!(finals.len(), JOBS, "one final event per run");
        for (run_id, ok) in &want {
            assert_eq!(finals[run_id], if *ok { RunEventKind::Succeeded } else { RunEventKind::Failed });
        }
        assert_eq!(s.events.len(), JOBS * 3, "pending, running and final, once each");
        assert!(
            s.event_requests * 20 < s.events.len(),
            "events go in batches: {} requests for {} events",
            s.event_requests,
            s.events.len()
        );
        assert!(s.polls.iter().all(|p| p.nodes.len() == 1000));
    }
    agent.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_moves_to_the_next_server_when_one_is_down() {
    // An address where nothing listens.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let mut first = ControlPlane::start(None);
    let second = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(vec![dead_url, first.url(), second.url()], RuntimeKind::Fake, dir.path());
    cfg.fake.node_groups = groups();
    let agent = InProcessAgent::start(cfg);
    // The dead address is skipped: the first live server gets the polls.
    let a = fake_lease("cpu-0", "0", "0");
    first.push_lease(a.clone());
    assert_eq!(first.wait_final(a.run_id, T).await.kind, RunEventKind::Succeeded);
    assert_eq!(second.script().poll_count, 0, "the agent stays with a server that answers");
    // The first server goes down: the agent moves on to the second.
    first.stop();
    let b = fake_lease("cpu-1", "0", "3");
    second.push_lease(b.clone());
    let fin = second.wait_final(b.run_id, T).await;
    assert_eq!((fin.kind, fin.exit_code), (RunEventKind::Failed, Some(3)));
    assert_eq!(second.script().executors, ["test-executor"]);
    agent.stop().await.expect("clean stop");
}
