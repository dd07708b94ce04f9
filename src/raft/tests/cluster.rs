//! Three Raft members in one process, talking over real HTTP on loopback: election, writes
//! through the leader, forwarding answers, fail-over, and a member that was down catching up by
//! snapshot after the others purged their logs. Also the cluster-secret and protocol-version
//! checks of the RPC routes.

use super::eventually;
use super::test_state::QueueNames;
use super::{install_crypto_provider, open_db, snapshots};
use crate::model::{Queue, QueueName};
use crate::raft::network::SECRET_HEADER;
use crate::raft::network::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use crate::raft::{Node, NodeId, RaftNode, RaftSettings, RequestError};
use crate::state::{Command, Response};
use redb::Database;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tempfile::TempDir;
use tokio::net::TcpListener;

const SECRET: &str = "test-cluster-secret";
/// Bound on every wait of the test: generous for a loaded 2-core machine; normally far shorter.
const WAIT: Duration = Duration::from_secs(20);

fn settings() -> RaftSettings {
    RaftSettings {
        heartbeat_interval: Duration::from_millis(100),
        election_timeout_min: Duration::from_millis(500),
        election_timeout_max: Duration::from_millis(1000),
        install_snapshot_timeout: Duration::from_secs(5),
        // Snapshot and purge often, so a member that was down must catch up by snapshot.
        snapshot_every_logs: 10,
        max_in_snapshot_log_to_keep: 0,
        cluster_secret: Some(SECRET.to_string()),
        ..RaftSettings::default()
    }
}

/// A running member: its Raft node, its database and its HTTP server.
struct Member {
    id: NodeId,
    addr: String,
    path: PathBuf,
    db: Arc<Database>,
    node: RaftNode,
    imports: Arc<AtomicUsize>,
    serving: super::Serving,
}

async fn start_member(id: NodeId, listener: TcpListener, path: &Path) -> Member {
    let addr = format!("http://{}", listener.local_addr().expect("bound listener"));
    let db = open_db(path).await;
    let state = QueueNames::open(db.clone()).expect("test state opens");
    let imports = state.imports.clone();
    let node = RaftNode::start(id, addr.clone(), db.clone(), snapshots(path), state, settings())
        .await
        .expect("raft node starts");
    let serving = super::serve(listener, node.router());
    Member { id, addr, path: path.to_path_buf(), db, node, imports, serving }
}

/// Stops a member as a crash would look to its peers: Raft stops, its port closes. Returns what
/// is needed to start it again.
async fn stop_member(m: Member) -> (NodeId, String, PathBuf) {
    m.serving.stop(&m.node).await;
    (m.id, m.addr, m.path)
}

/// The leader all `members` agree on.
async fn agreed_leader(members: &[&Member]) -> NodeId {
    eventually("a leader all members agree on", WAIT, || async {
        let leaders: Vec<_> = members.iter().map(|m| m.node.leader().map(|(id, _)| id)).collect();
        let first = leaders[0]?;
        let leader = members.iter().find(|m| m.id == first)?;
        (leaders.iter().all(|l| *l == Some(first)) && leader.node.is_leader()).then_some(first)
    })
    .await
}

fn create_queue(name: &str) -> Command {
    Command::create_queue(Queue::new(QueueName::new(name).expect("valid queue name"), 1.0))
}

/// Writes through whichever member leads, retrying while leadership moves.
async fn write(members: &[&Member], cmd: Command) -> Response {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(leader) = members.iter().find(|m| m.node.is_leader()) {
            match leader.node.write(cmd.clone()).await {
                Ok(r) => return r,
                Err(RequestError::NoLeader | RequestError::ForwardToLeader { .. }) => {}
                Err(e) => panic!("write failed: {e}"),
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out writing {cmd:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_applied(m: &Member, index: u64) {
    m.node
        .raft()
        .wait(Some(WAIT))
        .applied_index_at_least(Some(index), format!("node {} applies up to {index}", m.id))
        .await
        .expect("member catches up");
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    let mut v: Vec<String> = range.map(|i| format!("q-{i:03}")).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_replicate_fail_over_and_catch_up() {
    install_crypto_provider();
    let dir = TempDir::new().unwrap();
    let mut members = Vec::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.push(start_member(id, listener, &dir.path().join(format!("node-{id}.redb"))).await);
    }
    // Grow the cluster the way an operator does: one member, then learners, then voters.
    let first = &members[0];
    let initial = BTreeMap::from([(first.id, Node { addr: first.addr.clone() })]);
    first.node.initialize(initial.clone()).await.unwrap();
    // Initializing again (e.g. on every start) is harmless.
    first.node.initialize(initial).await.unwrap();
    agreed_leader(&[first]).await;
    for m in &members[1..] {
        first.node.add_learner(m.id, m.addr.clone(), true).await.expect("learner added and caught up");
    }
    first.node.change_membership(members.iter().map(|m| m.id).collect(), false).await.expect("all three become voters");
    let voters: Vec<NodeId> = first.node.metrics().borrow().membership_config.membership().voter_ids().collect();
    assert_eq!(voters, [1, 2, 3]);

    // --- election, writes through the leader, replication to all three.
    let all: Vec<&Member> = members.iter().collect();
    let leader_id = agreed_leader(&all).await;
    for i in 0..5 {
        assert_eq!(write(&all, create_queue(&format!("q-{i:03}"))).await, Response::Ok);
    }
    let leader = members.iter().find(|m| m.id == leader_id).unwrap();
    leader.node.ensure_linearizable().await.expect("the leader answers linearizable reads");
    let last = leader.node.metrics().borrow().last_log_index.unwrap();
    for m in &members {
        wait_applied(m, last).await;
        assert_eq!(QueueNames::names(&m.db).unwrap(), names(0..5), "node {}", m.id);
    }

    // --- a follower refuses writes and says where the leader is.
    let follower = members.iter().find(|m| m.id != leader_id).unwrap();
    match follower.node.write(create_queue("refused")).await {
        Err(RequestError::ForwardToLeader { leader_id: id, addr }) => {
            assert_eq!(id, leader_id);
            assert_eq!(addr, leader.addr);
        }
        other => panic!("a follower must forward writes, got {other:?}"),
    }
    assert!(matches!(follower.node.ensure_linearizable().await, Err(RequestError::ForwardToLeader { .. })));

    // --- the leader goes down: the other two elect a new one and writes continue.
    let old_last = last;
    let pos = members.iter().position(|m| m.id == leader_id).unwrap();
    let old_leader = stop_member(members.remove(pos)).await;
    let rest: Vec<&Member> = members.iter().collect();
    let new_leader_id = agreed_leader(&rest).await;
    assert_ne!(new_leader_id, leader_id);
    let new_leader = members.iter().find(|m| m.id == new_leader_id).unwrap();
    assert!(new_leader.node.current_term() > 1, "a new term started");
    for i in 5..35 {
        assert_eq!(write(&rest, create_queue(&format!("q-{i:03}"))).await, Response::Ok);
    }
    let last = new_leader.node.metrics().borrow().last_log_index.unwrap();
    for m in &members {
        wait_applied(m, last).await;
        assert_eq!(QueueNames::names(&m.db).unwrap(), names(0..35), "node {}", m.id);
    }
    // The new leader snapshots and purges past everything the stopped member has.
    new_leader
        .node
        .raft()
        .wait(Some(WAIT))
        .metrics(|m| m.purged.map(|p| p.index) > Some(old_last), "leader purged the log the stopped member lacks")
        .await
        .expect("leader purges behind its snapshot");

    // --- the old leader comes back on its address and catches up by snapshot.
    let (id, addr, path) = old_leader;
    let port_addr = addr.trim_start_matches("http://").to_string();
    let listener =
        eventually("the old port to be free", WAIT, || async { TcpListener::bind(&port_addr).await.ok() }).await;
    let back = start_member(id, listener, &path).await;
    wait_applied(&back, last).await;
    assert_eq!(QueueNames::names(&back.db).unwrap(), names(0..35));
    assert!(back.imports.load(Ordering::SeqCst) >= 1, "the member caught up by installing a snapshot");
    members.push(back);

    // --- all three keep working together.
    let all: Vec<&Member> = members.iter().collect();
    assert_eq!(write(&all, create_queue("q-999")).await, Response::Ok);
    let leader_id = agreed_leader(&all).await;
    let last = members.iter().find(|m| m.id == leader_id).unwrap().node.metrics().borrow().last_log_index.unwrap();
    for m in &members {
        wait_applied(m, last).await;
        assert!(QueueNames::names(&m.db).unwrap().contains(&"q-999".to_string()));
    }
    for m in members {
        stop_member(m).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_routes_require_the_cluster_secret_and_protocol_version() {
    install_crypto_provider();
    let dir = TempDir::new().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let m = start_member(1, listener, &dir.path().join("node.redb")).await;
    let client = reqwest::Client::new();
    let url = format!("{}/raft/vote", m.addr);

    let missing = client.post(&url).body(vec![1u8, 2, 3]).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let wrong = client.post(&url).header(SECRET_HEADER, "nope").body(vec![1u8, 2, 3]).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    // With the secret, an undecodable body is a 400 (and the node keeps running).
    let garbage = client.post(&url).header(SECRET_HEADER, SECRET).body(vec![0xffu8; 3]).send().await.unwrap();
    assert_eq!(garbage.status(), 400);
    // A peer of another protocol version is refused before its body is read, and told why.
    let newer = client
        .post(&url)
        .header(SECRET_HEADER, SECRET)
        .header(PROTOCOL_HEADER, (PROTOCOL_VERSION + 1).to_string())
        .body(vec![0xffu8; 3])
        .send()
        .await
        .unwrap();
    assert_eq!(newer.status(), 400);
    let text = newer.text().await.unwrap();
    assert!(text.contains(&format!("request version {}", PROTOCOL_VERSION + 1)), "{text}");
    stop_member(m).await;
}
