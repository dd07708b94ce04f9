//! Storage tests: openraft's conformance suite on the redb log store and the state-machine
//! adapter, snapshots across a reopen, decode errors, and a
//! single-node restart.

use super::test_state::QueueNames;
use super::{install_crypto_provider, open_db};
use crate::model::{ExecutorName, Queue, QueueName};
use crate::raft::{Entry, LogId, LogStore, RaftNode, RaftSettings, StateMachine, StorageError, TypeConfig};
use crate::state::{Command, Response};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder};
use redb::{Database, TableDefinition};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

struct RedbStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine<QueueNames>, TempDir> for RedbStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine<QueueNames>), StorageError> {
        let io = |e: std::io::Error| {
            crate::raft::io::storage_err(openraft::ErrorSubject::Store, openraft::ErrorVerb::Write, &e)
        };
        let dir = TempDir::new().map_err(io)?;
        let db = Arc::new(Database::create(dir.path().join("convoy.redb")).map_err(|e| io(std::io::Error::other(e)))?);
        let log = LogStore::open(db.clone()).map_err(io)?;
        let sm = StateMachine::new(db.clone(), QueueNames::open(db).map_err(io)?).map_err(io)?;
        Ok((dir, log, sm))
    }
}

/// openraft's conformance suite (about 8 s of it are the suite's own sleeps).
#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(RedbStoreBuilder) {
        panic!("storage suite failed: {e}");
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn create_queue(name: &str) -> Command {
    Command::CreateQueue { queue: Queue::new(QueueName::new(name).expect("valid queue name"), 1.0).into() }
}

fn entry(term: u64, index: u64, payload: EntryPayload<TypeConfig>) -> Entry {
    Entry { log_id: log_id(term, index), payload }
}

fn members(ids: &[u64]) -> Membership<u64, openraft::BasicNode> {
    Membership::new(vec![ids.iter().copied().collect::<BTreeSet<_>>()], None)
}

#[tokio::test]
async fn corrupt_log_entry_is_a_storage_error() {
    let dir = TempDir::new().unwrap();
    let db = Arc::new(Database::create(dir.path().join("convoy.redb")).unwrap());
    let mut log = LogStore::open(db.clone()).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(TableDefinition::<u64, &[u8]>::new("raft_log")).unwrap();
        t.insert(1, [0xffu8, 0xff, 0xff].as_slice()).unwrap();
    }
    tx.commit().unwrap();
    assert!(log.try_get_log_entries(1..2).await.is_err(), "garbage must not decode");
    assert!(log.get_log_state().await.is_err(), "the last entry is garbage too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_carries_state_and_survives_reopen() {
    let dir = TempDir::new().unwrap();
    let (path_a, path_b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));

    let db_a = open_db(&path_a).await;
    let state_a = QueueNames::open(db_a.clone()).unwrap();
    let calls_a = state_a.calls.clone();
    let mut sm_a = StateMachine::new(db_a.clone(), state_a).unwrap();
    let responses = sm_a
        .apply([
            entry(1, 1, EntryPayload::Membership(members(&[1, 2, 3]))),
            entry(1, 2, EntryPayload::Normal(create_queue("q1"))),
            entry(1, 3, EntryPayload::Blank),
            entry(1, 4, EntryPayload::Normal(create_queue("q2"))),
            entry(
                1,
                5,
                EntryPayload::Normal(Command::ExecutorLost {
                    executor: ExecutorName::new("x").unwrap(),
                    at_ms: 0,
                    max_attempted_runs: 5,
                }),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(responses.len(), 5);
    assert_eq!(responses[1], Response::Ok);
    assert!(matches!(responses[4], Response::Rejected(_)), "one response per entry, in order: {responses:?}");
    let snap = sm_a.get_snapshot_builder().await.build_snapshot().await.unwrap();
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 5)));
    assert_eq!(snap.meta.last_membership.log_id(), &Some(log_id(1, 1)));
    // The state is made durable before it is exported: the log behind a snapshot gets purged.
    assert_eq!(*calls_a.lock().unwrap(), ["apply", "make_durable", "export"]);

    let db_b = open_db(&path_b).await;
    let state_b = QueueNames::open(db_b.clone()).unwrap();
    let imports = state_b.imports.clone();
    let calls_b = state_b.calls.clone();
    let mut sm_b = StateMachine::new(db_b.clone(), state_b).unwrap();
    sm_b.apply([entry(1, 1, EntryPayload::Normal(create_queue("stale")))]).await.unwrap();
    let mut data = sm_b.begin_receiving_snapshot().await.unwrap();
    *data = *snap.snapshot;
    sm_b.install_snapshot(&snap.meta, data).await.unwrap();
    assert_eq!(imports.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(*calls_b.lock().unwrap(), ["apply", "import", "make_durable"], "an installed snapshot is made durable");
    assert_eq!(QueueNames::names(&db_b).unwrap(), vec!["q1", "q2"], "the snapshot replaces the whole state");
    assert_eq!(sm_b.applied_state().await.unwrap(), (snap.meta.last_log_id, snap.meta.last_membership.clone()));

    // After a restart, the installed snapshot is still the current one.
    drop(sm_b);
    drop(db_b);
    let db_b = open_db(&path_b).await;
    let mut sm_b = StateMachine::new(db_b.clone(), QueueNames::open(db_b.clone()).unwrap()).unwrap();
    let current = sm_b.get_current_snapshot().await.unwrap().expect("snapshot kept across a reopen");
    assert_eq!(current.meta, snap.meta);
    assert_eq!(sm_b.applied_state().await.unwrap().0, Some(log_id(1, 5)));
    assert_eq!(QueueNames::names(&db_b).unwrap(), vec!["q1", "q2"]);
}

fn single_node_settings() -> RaftSettings {
    RaftSettings {
        heartbeat_interval: Duration::from_millis(50),
        election_timeout_min: Duration::from_millis(150),
        election_timeout_max: Duration::from_millis(300),
        bootstrap: crate::raft::Bootstrap::Single,
        ..RaftSettings::default()
    }
}

/// Waits until `node` is leader and has applied up to `index`.
async fn wait_leader_applied(node: &RaftNode, index: u64) {
    node.raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.current_leader == Some(m.id) && m.last_applied.map(|l| l.index) >= Some(index),
            "leader with entries applied",
        )
        .await
        .expect("single node elects itself and applies its log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_log_vote_and_state() {
    install_crypto_provider();
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("convoy.redb");
    let addr = "http://127.0.0.1:1"; // a one-member cluster never calls its peers

    let db = open_db(&path).await;
    let node = RaftNode::start(1, addr, db.clone(), QueueNames::open(db.clone()).unwrap(), single_node_settings())
        .await
        .unwrap();
    wait_leader_applied(&node, 1).await;
    for name in ["a", "b", "c"] {
        assert_eq!(node.write(create_queue(name)).await.unwrap(), Response::Ok);
    }
    let before = node.metrics().borrow().clone();
    let last_index = before.last_log_index.expect("entries written");
    node.shutdown().await.unwrap();
    drop(node);
    drop(db);

    // Log and vote are back, as on disk.
    let db = open_db(&path).await;
    let mut log = LogStore::open(db.clone()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id.map(|l| l.index), Some(last_index));
    let vote = log.read_vote().await.unwrap().expect("vote persisted");
    assert_eq!(vote.leader_id().term, before.current_term);
    let entries = log.try_get_log_entries(1..=last_index).await.unwrap();
    assert_eq!(entries.len() as u64, last_index);
    let written: Vec<_> = entries
        .iter()
        .filter_map(|e| match &e.payload {
            EntryPayload::Normal(Command::CreateQueue { queue }) => Some(queue.name.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(written, ["a", "b", "c"]);
    drop(log);

    // The restarted node has the applied state back and keeps accepting writes.
    let node = RaftNode::start(1, addr, db.clone(), QueueNames::open(db.clone()).unwrap(), single_node_settings())
        .await
        .unwrap();
    wait_leader_applied(&node, last_index).await;
    assert_eq!(QueueNames::names(&db).unwrap(), ["a", "b", "c"]);
    assert_eq!(node.write(create_queue("d")).await.unwrap(), Response::Ok);
    assert!(node.current_term() >= before.current_term);
    assert_eq!(QueueNames::names(&db).unwrap(), ["a", "b", "c", "d"]);
    node.shutdown().await.unwrap();
}
