//! Three members with the server's own state machine (`server::machine::ServerMachine` on a
//! real store), over HTTP on loopback: one member is stopped, many submissions are written and
//! the others purge their logs behind snapshots, the member returns and catches up by installing
//! a snapshot file, and all three end with the same state digest at the same applied index.

use super::eventually;
use super::{install_crypto_provider, open_db};
use crate::control::Notifier;
use crate::model::{
    JobId, JobPayload, JobSetName, PriorityClassName, Queue, QueueName, Resources, SchedulingRequirements,
};
use crate::raft::{Node, NodeId, RaftNode, RaftSettings, RequestError};
use crate::scheduler::SchedulerConfig;
use crate::server::machine::ServerMachine;
use crate::state::{Command, NamespacedJob, NewJob, PolicyJob, Response, StateSettings};
use crate::store::{Store, StoreError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tempfile::TempDir;
use tokio::net::TcpListener;

/// Bound on every wait: generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

fn settings() -> RaftSettings {
    RaftSettings {
        heartbeat_interval: Duration::from_millis(100),
        election_timeout_min: Duration::from_millis(500),
        election_timeout_max: Duration::from_millis(1000),
        // Snapshot and purge often, so a member that was down must catch up by snapshot; chunks
        // small enough that a snapshot takes many of them.
        snapshot_every_logs: 40,
        max_in_snapshot_log_to_keep: 0,
        snapshot_chunk_size: 16 * 1024,
        ..RaftSettings::default()
    }
}

fn state_settings() -> StateSettings {
    StateSettings::from_config(&SchedulerConfig::default())
}

struct Member {
    id: NodeId,
    addr: String,
    dir: PathBuf,
    store: Store,
    state: Arc<RwLock<crate::state::State>>,
    node: RaftNode,
    serving: super::Serving,
}

/// Opens the store at `path`, waiting while the previous run of the member still holds it.
async fn open_store(path: &Path) -> Store {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Store::open(path) {
            Ok(s) => return s,
            Err(StoreError::Database(redb::Error::DatabaseAlreadyOpen)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot open {}: {e}", path.display()),
        }
    }
}

async fn start_member(id: NodeId, listener: TcpListener, dir: &Path) -> Member {
    let addr = format!("http://{}", listener.local_addr().expect("bound listener"));
    let store = open_store(&dir.join("convoy.redb")).await;
    let state = Arc::new(RwLock::new(store.load_state(state_settings()).expect("state loads")));
    let machine = ServerMachine::new(store.clone(), state.clone(), Arc::new(Notifier::default()), state_settings());
    let log = open_db(&dir.join("raft.redb")).await;
    let node = RaftNode::start(id, addr.clone(), log, dir.join("snapshots"), machine, settings())
        .await
        .expect("raft node starts");
    let serving = super::serve(listener, node.router());
    Member { id, addr, dir: dir.to_path_buf(), store, state, node, serving }
}

async fn stop_member(m: Member) -> (NodeId, String, PathBuf) {
    m.serving.stop(&m.node).await;
    (m.id, m.addr, m.dir)
}

async fn leader_of<'a>(members: &[&'a Member]) -> &'a Member {
    eventually("a leader", WAIT, || async { members.iter().copied().find(|m| m.node.is_leader()) }).await
}

async fn write(members: &[&Member], cmd: Command) -> Response {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leader = leader_of(members).await;
        match leader.node.write(cmd.clone()).await {
            Ok(r) => return r,
            Err(RequestError::NoLeader | RequestError::ForwardToLeader { .. }) => {}
            Err(e) => panic!("write failed: {e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out writing");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn submit(batch: u64, jobs: u64) -> Command {
    let new_job = |i: u64| NewJob {
        id: JobId::from_u128(u128::from(batch * 1000 + i + 1)),
        client_id: Some(format!("c-{batch}-{i}")),
        priority: 0,
        priority_class: PriorityClassName::new("default").expect("valid"),
        requirements: SchedulingRequirements {
            requests: Resources::parse([("cpu", "100m")]).expect("valid"),
            ..Default::default()
        }
        .into(),
        gang: None,
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_ms: 1000,
        active_deadline_seconds: 60,
        payload: JobPayload {
            pod_spec: format!(r#"{{"containers":[{{"name":"j{i}"}}]}}"#),
            services: vec![],
            ingresses: vec![],
        }
        .into(),
    };
    Command::Submit {
        queue: QueueName::new("q").expect("valid"),
        job_set: JobSetName::new(&format!("set-{}", batch % 7)).expect("valid"),
        at_ms: batch as i64,
        owner: None,
        jobs: (0..jobs).map(|i| PolicyJob::from(NamespacedJob { job: new_job(i), namespace: None })).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_was_down_catches_up_by_snapshot_and_all_digests_agree() {
    install_crypto_provider();
    let tmp = TempDir::new().unwrap();
    let mut members = Vec::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dir = tmp.path().join(format!("node-{id}"));
        members.push(start_member(id, listener, &dir).await);
    }
    let first = &members[0];
    first.node.initialize(BTreeMap::from([(first.id, Node { addr: first.addr.clone() })])).await.unwrap();
    leader_of(&[first]).await;
    for m in &members[1..] {
        first.node.add_learner(m.id, m.addr.clone(), true).await.expect("learner added");
    }
    first.node.change_membership(members.iter().map(|m| m.id).collect(), false).await.expect("three voters");
    let all: Vec<&Member> = members.iter().collect();
    let queue = Queue::new(QueueName::new("q").unwrap(), 1.0);
    write(&all, Command::create_queue(queue)).await;
    for b in 0..10 {
        assert!(matches!(write(&all, submit(b, 5)).await, Response::JobIds(_)));
    }

    // --- a follower stops; many more submissions; the others snapshot and purge past it.
    let leader_id = leader_of(&all).await.id;
    let pos = members.iter().position(|m| m.id != leader_id).unwrap();
    let down = members.remove(pos);
    let down_last = down.node.metrics().borrow().last_log_index.unwrap_or(0);
    let stopped = stop_member(down).await;
    let rest: Vec<&Member> = members.iter().collect();
    for b in 10..250 {
        write(&rest, submit(b, 8)).await;
    }
    let leader = leader_of(&rest).await;
    leader
        .node
        .raft()
        .wait(Some(WAIT))
        .metrics(
            |m| m.purged.map(|p| p.index) > Some(down_last + 40),
            "the leader purged what the stopped member lacks",
        )
        .await
        .expect("the leader purges behind its snapshots");
    // One snapshot file at a time (a build in progress may briefly add its own).
    let dir = leader.dir.join("snapshots");
    eventually("one snapshot file", WAIT, || async { (std::fs::read_dir(&dir).unwrap().count() == 1).then_some(()) })
        .await;

    // --- it comes back on its address, and can only catch up by snapshot.
    let (id, addr, dir) = stopped;
    let port = addr.trim_start_matches("http://").to_string();
    let listener = eventually("the old port", WAIT, || async { TcpListener::bind(&port).await.ok() }).await;
    members.push(start_member(id, listener, &dir).await);
    let all: Vec<&Member> = members.iter().collect();
    // One more write, so that every member has something after the snapshot to apply.
    write(&all, submit(999, 3)).await;
    let leader = leader_of(&all).await;
    let last = leader.node.metrics().borrow().last_log_index.unwrap();
    for m in &all {
        m.node
            .raft()
            .wait(Some(WAIT))
            .applied_index_at_least(Some(last), format!("node {} applies up to {last}", m.id))
            .await
            .expect("member catches up");
    }
    let back = members.iter().find(|m| m.id == id).unwrap();
    assert!(back.node.snapshots_installed() >= 1, "the member caught up by installing a snapshot");
    let digests: Vec<_> = members.iter().map(|m| (m.id, m.store.digest().unwrap())).collect();
    for (id, d) in &digests {
        assert_eq!(d.applied_index(), last, "node {id}");
        assert_eq!(d.sha256, digests[0].1.sha256, "node {id} holds another state than node {}", digests[0].0);
    }
    // Its memory was rebuilt from the installed state too.
    let live = |m: &Member| m.state.read().unwrap().live_jobs();
    assert_eq!(live(back), live(leader));
    assert_eq!(live(back), 10 * 5 + 240 * 8 + 3);
    for m in members {
        stop_member(m).await;
    }
}
