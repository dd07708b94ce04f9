//! Storage tests: openraft's conformance suite on the redb log store and the state-machine
//! adapter, snapshots across a reopen, decode errors, and a
//! single-node restart.

use super::test_state::QueueNames;
use super::{install_crypto_provider, open_db, snapshots};
use crate::model::{ExecutorName, Queue, QueueName};
use crate::raft::types::{Entry, StorageError, TypeConfig};
use crate::raft::{LogId, LogStore, RaftNode, RaftSettings, StateMachine};
use crate::state::{Command, Response};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder};
use redb::{Database, ReadableDatabase, TableDefinition};
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
        let sm = StateMachine::new(db.clone(), dir.path().join("snapshots"), QueueNames::open(db).map_err(io)?)
            .map_err(io)?;
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
    Command::create_queue(Queue::new(QueueName::new(name).expect("valid queue name"), 1.0))
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
    let mut sm_a = StateMachine::new(db_a.clone(), snapshots(&path_a), state_a).unwrap();
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
    let mut sm_b = StateMachine::new(db_b.clone(), snapshots(&path_b), state_b).unwrap();
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
    let mut sm_b =
        StateMachine::new(db_b.clone(), snapshots(&path_b), QueueNames::open(db_b.clone()).unwrap()).unwrap();
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
    let node = RaftNode::start(
        1,
        addr,
        db.clone(),
        snapshots(&path),
        QueueNames::open(db.clone()).unwrap(),
        single_node_settings(),
    )
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
            EntryPayload::Normal(Command::CreateQueue { queue, .. }) => Some(queue.name.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(written, ["a", "b", "c"]);
    drop(log);

    // The restarted node has the applied state back and keeps accepting writes.
    let node = RaftNode::start(
        1,
        addr,
        db.clone(),
        snapshots(&path),
        QueueNames::open(db.clone()).unwrap(),
        single_node_settings(),
    )
    .await
    .unwrap();
    wait_leader_applied(&node, last_index).await;
    assert_eq!(QueueNames::names(&db).unwrap(), ["a", "b", "c"]);
    assert_eq!(node.write(create_queue("d")).await.unwrap(), Response::Ok);
    assert!(node.current_term() >= before.current_term);
    assert_eq!(QueueNames::names(&db).unwrap(), ["a", "b", "c", "d"]);
    node.shutdown().await.unwrap();
}

/// The names of the files in `dir`, sorted.
fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// A state machine over a fresh database at `path`, with queues `names` applied up to index
/// `names.len()` (term 1).
async fn machine_with(path: &std::path::Path, names: &[&str]) -> (Arc<Database>, StateMachine<QueueNames>) {
    let db = open_db(path).await;
    let mut sm = StateMachine::new(db.clone(), snapshots(path), QueueNames::open(db.clone()).unwrap()).unwrap();
    let entries: Vec<Entry> =
        names.iter().enumerate().map(|(i, n)| entry(1, i as u64 + 1, EntryPayload::Normal(create_queue(n)))).collect();
    sm.apply(entries).await.unwrap();
    (db, sm)
}

/// Sends `bytes` to `sm` as openraft's chunked transport does: a receiving file from
/// `begin_receiving_snapshot`, written chunk by chunk.
async fn receive(
    sm: &mut StateMachine<QueueNames>,
    bytes: &[u8],
    chunk: usize,
) -> Box<crate::raft::snapshot_store::SnapshotFile> {
    use tokio::io::AsyncWriteExt;
    let mut data = sm.begin_receiving_snapshot().await.unwrap();
    for c in bytes.chunks(chunk) {
        data.write_all(c).await.unwrap();
    }
    data.shutdown().await.unwrap();
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_files_sent_in_chunks_and_replace_the_previous_one() {
    let dir = TempDir::new().unwrap();
    let (path_a, path_b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));
    let (_db_a, mut sm_a) = machine_with(&path_a, &["q1", "q2", "q3"]).await;
    let first = sm_a.get_snapshot_builder().await.build_snapshot().await.unwrap();
    sm_a.apply([entry(1, 4, EntryPayload::Normal(create_queue("q4")))]).await.unwrap();
    let snap = sm_a.get_snapshot_builder().await.build_snapshot().await.unwrap();
    assert_ne!(first.meta.snapshot_id, snap.meta.snapshot_id);
    let name = format!("{}.snap", snap.meta.snapshot_id);
    assert_eq!(files_in(&snapshots(&path_a)), std::slice::from_ref(&name), "the previous snapshot's file is gone");
    // The first snapshot's handle still reads whole: an open file outlives its deletion.
    let mut old = Vec::new();
    let mut first_data = first.snapshot;
    tokio::io::AsyncReadExt::read_to_end(&mut *first_data, &mut old).await.unwrap();
    assert!(!old.is_empty());

    let bytes = std::fs::read(snapshots(&path_a).join(&name)).unwrap();
    let (db_b, mut sm_b) = machine_with(&path_b, &["stale"]).await;
    let data = receive(&mut sm_b, &bytes, 7).await;
    assert_eq!(files_in(&snapshots(&path_b)).len(), 1, "received into a temporary file");
    sm_b.install_snapshot(&snap.meta, data).await.unwrap();
    assert_eq!(QueueNames::names(&db_b).unwrap(), ["q1", "q2", "q3", "q4"]);
    assert_eq!(files_in(&snapshots(&path_b)), [name], "moved into place, no temporary file left");
    let current = sm_b.get_current_snapshot().await.unwrap().expect("the installed snapshot is current");
    assert_eq!(current.meta, snap.meta);
    assert_eq!(sm_b.installed_counter().load(std::sync::atomic::Ordering::Relaxed), 1);

    // A receiving file dropped before it is installed (the leader gave up) leaves nothing.
    let data = receive(&mut sm_b, &bytes[..100], 7).await;
    drop(data);
    assert_eq!(files_in(&snapshots(&path_b)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_mismatched_snapshot_is_refused_and_changes_nothing() {
    let dir = TempDir::new().unwrap();
    let (path_a, path_b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));
    let (_db_a, mut sm_a) = machine_with(&path_a, &["q1", "q2"]).await;
    let snap = sm_a.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::fs::read(snapshots(&path_a).join(format!("{}.snap", snap.meta.snapshot_id))).unwrap();
    let (db_b, mut sm_b) = machine_with(&path_b, &["mine"]).await;
    let applied = sm_b.applied_state().await.unwrap();

    let mut cases: Vec<(&str, Vec<u8>, crate::raft::SnapshotMeta)> = Vec::new();
    let mut flipped = bytes.clone();
    // The last byte of the last frame: before the end marker (4 bytes) and the trailer (40).
    let at = bytes.len() - 45;
    flipped[at] ^= 0x01;
    cases.push(("checksum does not match", flipped, snap.meta.clone()));
    cases.push(("truncated", bytes[..bytes.len() - 10].to_vec(), snap.meta.clone()));
    let mut other = snap.meta.clone();
    other.snapshot_id = "another".into();
    cases.push(("not snapshot another", bytes.clone(), other));
    for (expected, data, meta) in cases {
        let data = receive(&mut sm_b, &data, 1000).await;
        let e = sm_b.install_snapshot(&meta, data).await.expect_err("refused");
        let text = format!("{e:?}");
        assert!(text.contains(expected), "expected {expected:?} in {text}");
        assert_eq!(QueueNames::names(&db_b).unwrap(), ["mine"], "the state is unchanged");
        assert_eq!(sm_b.applied_state().await.unwrap(), applied);
        assert!(files_in(&snapshots(&path_b)).is_empty(), "no file is left behind: {expected}");
        assert!(sm_b.get_current_snapshot().await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_snapshot_of_an_older_release_becomes_a_file() {
    use crate::record::raft::SnapshotMetaRecord;
    let dir = TempDir::new().unwrap();
    let meta = crate::raft::SnapshotMeta {
        last_log_id: Some(log_id(2, 8)),
        last_membership: Default::default(),
        snapshot_id: "2-1-8-1700000000000".into(),
    };
    let legacy = |path: &std::path::Path, data: Vec<u8>| {
        let db = Database::create(path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(TableDefinition::<&str, &[u8]>::new("raft_snapshot")).unwrap();
            t.insert("meta", crate::record::encode(&SnapshotMetaRecord::from(&meta)).unwrap().as_slice()).unwrap();
            t.insert("data", data.as_slice()).unwrap();
        }
        tx.commit().unwrap();
    };
    // The test state's old format: the encoded list of names.
    let path = dir.path().join("old.redb");
    legacy(&path, crate::record::encode(&vec!["a".to_string(), "b".to_string()]).unwrap());
    let db = open_db(&path).await;
    let mut sm = StateMachine::new(db.clone(), snapshots(&path), QueueNames::open(db.clone()).unwrap()).unwrap();
    let current = sm.get_current_snapshot().await.unwrap().expect("converted");
    assert_eq!(current.meta, meta);
    assert_eq!(files_in(&snapshots(&path)), ["2-1-8-1700000000000.snap"]);
    // Usable: it installs on another member.
    let target = dir.path().join("new.redb");
    let (db_t, mut sm_t) = machine_with(&target, &[]).await;
    sm_t.install_snapshot(&current.meta, current.snapshot).await.unwrap();
    assert_eq!(QueueNames::names(&db_t).unwrap(), ["a", "b"]);
    // The inline bytes are gone; a restart finds the file.
    drop(sm);
    let tx = db.begin_read().unwrap();
    let t = tx.open_table(TableDefinition::<&str, &[u8]>::new("raft_snapshot")).unwrap();
    assert!(t.get("data").unwrap().is_none());
    drop(t);
    drop(tx);

    // One that cannot be read is forgotten (Raft builds a new one when it needs one).
    let path = dir.path().join("garbage.redb");
    legacy(&path, vec![0xff; 5]);
    let db = open_db(&path).await;
    let mut sm = StateMachine::new(db.clone(), snapshots(&path), QueueNames::open(db.clone()).unwrap()).unwrap();
    assert!(sm.get_current_snapshot().await.unwrap().is_none());
    assert!(files_in(&snapshots(&path)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_the_state_would_refuse_is_built_again_at_start_up() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("a.redb");
    let (db, mut sm) = machine_with(&path, &["q1", "q2"]).await;
    let old = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    sm.apply([entry(1, 3, EntryPayload::Normal(create_queue("q3")))]).await.unwrap();
    drop(sm);
    // A state that takes its snapshot keeps it.
    let mut sm = StateMachine::new(db.clone(), snapshots(&path), QueueNames::open(db.clone()).unwrap()).unwrap();
    assert_eq!(sm.get_current_snapshot().await.unwrap().expect("kept").meta, old.meta);
    drop(sm);
    // One whose format changed since (an upgrade) gets a new one, of everything it applied.
    let mut state = QueueNames::open(db.clone()).unwrap();
    state.refuse_snapshots = true;
    let mut sm = StateMachine::new(db.clone(), snapshots(&path), state).unwrap();
    let current = sm.get_current_snapshot().await.unwrap().expect("built again");
    assert_eq!(current.meta.last_log_id, Some(log_id(1, 3)));
    assert_ne!(current.meta.snapshot_id, old.meta.snapshot_id);
    assert_eq!(files_in(&snapshots(&path)), [format!("{}.snap", current.meta.snapshot_id)], "the old file is gone");
    let (db_t, mut sm_t) = machine_with(&dir.path().join("t.redb"), &[]).await;
    sm_t.install_snapshot(&current.meta, current.snapshot).await.unwrap();
    assert_eq!(QueueNames::names(&db_t).unwrap(), ["q1", "q2", "q3"]);
}
