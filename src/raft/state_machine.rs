//! The state-machine side of openraft, as an adapter over a plain synchronous
//! [`ReplicatedState`] that the server implements on its redb tables.
//!
//! Concurrency choice: the state lives behind an `Arc<std::sync::Mutex<_>>`. Small applies, the
//! hot path, run on the calling task, on the Raft runtime's own thread (see `RaftNode::start`):
//! a sub-millisecond redb commit there costs less than a hop to another thread. Everything that
//! may take long (large applies, making the state durable, exporting, importing) runs on tokio's
//! blocking pool (`spawn_blocking`), so Raft's core keeps its timers. openraft builds snapshots in
//! a task of their own, in parallel with applying; the mutex serialises the two, so an export
//! always sees a state between two apply batches, and a slow export delays applying for its
//! duration (see [`ReplicatedState::export`]).
//!
//! The latest snapshot (meta and bytes) is kept in the `raft_snapshot` table so that
//! `get_current_snapshot` answers after a restart, and a lagging follower can be sent it without
//! rebuilding.

use super::io::{blocking, corrupt, encode_err, io_err, storage_err};
use super::types::{
    Entry, EntryPayload, LogId, Membership, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::record::raft::SnapshotMetaRecord;
use crate::record::{decode, encode};
use crate::state::{Command, Response};
use openraft::storage::RaftStateMachine;
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder};
use redb::{Database, ReadableDatabase, TableDefinition};
use std::io::{self, Cursor};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The latest snapshot: its meta and its bytes.
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_snapshot");
const KEY_META: &str = "meta";
const KEY_DATA: &str = "data";

/// What a committed log entry asks the state to do.
#[derive(Debug, Clone)]
pub enum ApplyPayload {
    /// An empty entry a new leader writes at the start of its term. Only the applied log id moves.
    Blank,
    /// A state change.
    Command(Command),
    /// A membership change: the state must store it, with the entry's log id, as its membership.
    Membership(Membership),
}

/// One committed log entry to apply.
#[derive(Debug, Clone)]
pub struct ApplyItem {
    /// The entry's log id; its `leader_id.term` is the term the entry was proposed in.
    pub log_id: LogId,
    /// What to apply.
    pub payload: ApplyPayload,
}

/// A consistent copy of the whole state, as [`ReplicatedState::export`] produces it.
#[derive(Debug, Clone)]
pub struct SnapshotExport {
    /// The last log id the exported state includes.
    pub last_applied: Option<LogId>,
    /// The membership the exported state includes.
    pub membership: StoredMembership,
    /// The state's contents, in whatever format [`ReplicatedState::import`] reads.
    pub data: Vec<u8>,
}

/// The replicated state as the Raft adapter sees it: a synchronous, deterministic state machine
/// on redb. The server implements it; the adapter calls it from blocking threads, one call at a
/// time.
///
/// Durability contract: `apply` may commit with `redb::Durability::None` (fast, not fsynced).
/// Raft tolerates losing such applies in a crash because it keeps every log entry the durable
/// state does not cover and re-applies them at start-up. It only drops log entries covered by a
/// snapshot, so before it builds one the adapter calls [`make_durable`](Self::make_durable), and it
/// calls it again after [`import`](Self::import).
pub trait ReplicatedState: Send + Sync + 'static {
    /// Applies committed entries in order, returning one response per item (`Blank` and
    /// `Membership` items answer [`Response::Ok`]). The changes of the whole batch, the last
    /// applied log id and the membership are persisted together (one redb write transaction).
    /// An `Err` is fatal for the Raft node: refuse bad commands with a [`Response`] instead.
    fn apply(&mut self, items: Vec<ApplyItem>) -> io::Result<Vec<Response>>;

    /// The last applied log id and the last applied membership (as persisted, or as last applied
    /// in this process).
    fn applied_state(&self) -> io::Result<(Option<LogId>, StoredMembership)>;

    /// Makes everything applied so far durable (e.g. commit an empty write transaction with
    /// `redb::Durability::Immediate`, which persists the earlier non-durable commits too).
    fn make_durable(&mut self) -> io::Result<()>;

    /// Starts a consistent export of the whole state with its applied log id and membership.
    /// Called with applying paused, right after [`make_durable`](Self::make_durable): pin a
    /// consistent view, e.g. a redb read transaction. The returned job reads that view while
    /// applying goes on, so a large state does not stall writes.
    fn export(&mut self) -> io::Result<ExportJob>;

    /// Replaces the whole state with a snapshot's contents, atomically. Afterwards
    /// [`applied_state`](Self::applied_state) returns `meta.last_log_id` and
    /// `meta.last_membership`.
    fn import(&mut self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()>;
}

/// Reads a pinned view of the state into a [`SnapshotExport`], away from the state lock.
pub type ExportJob = Box<dyn FnOnce() -> io::Result<SnapshotExport> + Send>;

/// openraft's state machine over a [`ReplicatedState`].
pub struct StateMachine<S: ReplicatedState> {
    shared: Shared<S>,
}

/// Builds snapshots for openraft in a task of their own; shares the state with the state machine.
pub struct SnapshotBuilder<S: ReplicatedState> {
    shared: Shared<S>,
}

struct Shared<S> {
    state: Arc<Mutex<S>>,
    db: Arc<Database>,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self { state: self.state.clone(), db: self.db.clone() }
    }
}

impl<S: ReplicatedState> StateMachine<S> {
    /// Wraps `state`; the snapshot table lives in `db` (normally the database that also holds the
    /// state).
    pub fn new(db: Arc<Database>, state: S) -> io::Result<Self> {
        let tx = db.begin_write().map_err(io_err)?;
        tx.open_table(SNAPSHOT).map_err(io_err)?;
        tx.commit().map_err(io_err)?;
        Ok(Self { shared: Shared { state: Arc::new(Mutex::new(state)), db } })
    }
}

/// Largest [`Command::apply_weight`] applied on the Raft runtime's thread: about 5 ms of work.
const INLINE_APPLY_WEIGHT: usize = 256;

impl<S: ReplicatedState> Shared<S> {
    /// Applies `items` on this thread if the state is free; hands them back if it is busy (an
    /// export may hold it for seconds, and this thread is Raft's).
    fn try_apply_here(&self, items: Vec<ApplyItem>) -> Result<io::Result<Vec<Response>>, Vec<ApplyItem>> {
        match self.state.try_lock() {
            Ok(mut state) => Ok(state.apply(items)),
            Err(std::sync::TryLockError::WouldBlock) => Err(items),
            // A panic while holding the lock leaves the state unknown: refuse to go on.
            Err(std::sync::TryLockError::Poisoned(_)) => {
                Ok(Err(io::Error::other("replicated state lock poisoned by an earlier panic")))
            }
        }
    }

    /// Runs `f` on the state on a blocking thread.
    async fn with_state<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut S, &Database) -> io::Result<T> + Send + 'static,
    {
        let state = self.state.clone();
        let db = self.db.clone();
        blocking(move || {
            // A panic while holding the lock leaves the state unknown: refuse to go on.
            let mut guard =
                state.lock().map_err(|_| io::Error::other("replicated state lock poisoned by an earlier panic"))?;
            f(&mut guard, &db)
        })
        .await
    }
}

/// Persists `meta` and `data` as the current snapshot (durably: logs get purged behind it).
fn save_snapshot(db: &Database, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
    let meta_bytes = encode(&SnapshotMetaRecord::from(meta)).map_err(encode_err)?;
    let tx = db.begin_write().map_err(io_err)?;
    {
        let mut t = tx.open_table(SNAPSHOT).map_err(io_err)?;
        t.insert(KEY_META, meta_bytes.as_slice()).map_err(io_err)?;
        t.insert(KEY_DATA, data).map_err(io_err)?;
    }
    tx.commit().map_err(io_err)
}

fn decode_meta(bytes: &[u8]) -> io::Result<SnapshotMeta> {
    let r: SnapshotMetaRecord = decode(bytes).map_err(|e| corrupt("raft snapshot meta", e))?;
    Ok(r.into())
}

fn load_snapshot_meta(db: &Database) -> io::Result<Option<SnapshotMeta>> {
    let tx = db.begin_read().map_err(io_err)?;
    let t = tx.open_table(SNAPSHOT).map_err(io_err)?;
    match t.get(KEY_META).map_err(io_err)? {
        Some(v) => Ok(Some(decode_meta(v.value())?)),
        None => Ok(None),
    }
}

fn load_snapshot(db: &Database) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
    let tx = db.begin_read().map_err(io_err)?;
    let t = tx.open_table(SNAPSHOT).map_err(io_err)?;
    let meta = match t.get(KEY_META).map_err(io_err)? {
        Some(v) => decode_meta(v.value())?,
        None => return Ok(None),
    };
    let data = match t.get(KEY_DATA).map_err(io_err)? {
        Some(v) => v.value().to_vec(),
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("snapshot {} has meta but no data", meta.snapshot_id),
            ));
        }
    };
    Ok(Some((meta, data)))
}

/// A snapshot id unique across rebuilds of the same log id (the time tells them apart).
fn snapshot_id(last: Option<&LogId>) -> String {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    match last {
        Some(l) => format!("{}-{}-{}-{millis}", l.leader_id.term, l.leader_id.node_id, l.index),
        None => format!("none-{millis}"),
    }
}

fn sm_err(verb: ErrorVerb) -> impl Fn(io::Error) -> StorageError {
    move |e| storage_err(ErrorSubject::StateMachine, verb, &e)
}

fn snapshot_err(verb: ErrorVerb) -> impl Fn(io::Error) -> StorageError {
    move |e| storage_err(ErrorSubject::Snapshot(None), verb, &e)
}

impl<S: ReplicatedState> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Only pinning the view holds the state lock; the copy runs while entries keep applying.
        let job = self
            .shared
            .with_state(|state, _| {
                // Durable first: once the snapshot exists, Raft may purge the log it covers.
                state.make_durable()?;
                state.export()
            })
            .await
            .map_err(snapshot_err(ErrorVerb::Read))?;
        let export = blocking(job).await.map_err(snapshot_err(ErrorVerb::Read))?;
        let meta = SnapshotMeta {
            snapshot_id: snapshot_id(export.last_applied.as_ref()),
            last_log_id: export.last_applied,
            last_membership: export.membership,
        };
        let (m, d) = (meta.clone(), export.data);
        // Saved under the state lock, and only if no newer snapshot was installed meanwhile.
        let data = self
            .shared
            .with_state(move |_, db| {
                let saved = load_snapshot_meta(db)?;
                if saved.as_ref().is_none_or(|s| s.last_log_id <= m.last_log_id) {
                    save_snapshot(db, &m, &d)?;
                }
                Ok(d)
            })
            .await
            .map_err(snapshot_err(ErrorVerb::Write))?;
        tracing::info!(snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id, bytes = data.len(), "raft snapshot built");
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl<S: ReplicatedState> RaftStateMachine<TypeConfig> for StateMachine<S> {
    type SnapshotBuilder = SnapshotBuilder<S>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        self.shared.with_state(|state, _| state.applied_state()).await.map_err(sm_err(ErrorVerb::Read))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let items: Vec<ApplyItem> = entries
            .into_iter()
            .map(|e| ApplyItem {
                log_id: e.log_id,
                payload: match e.payload {
                    EntryPayload::Blank => ApplyPayload::Blank,
                    EntryPayload::Normal(cmd) => ApplyPayload::Command(cmd),
                    EntryPayload::Membership(m) => ApplyPayload::Membership(m),
                },
            })
            .collect();
        let Some(last) = items.last().map(|i| i.log_id) else {
            return Ok(Vec::new());
        };
        let count = items.len();
        let weight = items.iter().fold(0usize, |sum, i| match &i.payload {
            ApplyPayload::Command(cmd) => sum.saturating_add(cmd.apply_weight()),
            ApplyPayload::Blank | ApplyPayload::Membership(_) => sum.saturating_add(1),
        });
        // Small applies run right here, on the Raft runtime's thread (see `RaftNode::start`):
        // they take less than the two thread wake-ups of a hop to the blocking pool. Large ones
        // go to the pool so that Raft's core, which shares the thread, keeps its timers.
        let here = if weight <= INLINE_APPLY_WEIGHT { self.shared.try_apply_here(items) } else { Err(items) };
        let responses = match here {
            Ok(applied) => applied,
            Err(items) => self.shared.with_state(move |state, _| state.apply(items)).await,
        }
        .map_err(|e| storage_err(ErrorSubject::Apply(last), ErrorVerb::Write, &e))?;
        // openraft pairs responses with entries by position: a short answer would misroute them.
        if responses.len() != count {
            let e = io::Error::other(format!("state answered {} responses to {count} entries", responses.len()));
            return Err(storage_err(ErrorSubject::Apply(last), ErrorVerb::Write, &e));
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { shared: self.shared.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let bytes = data.len();
        let m = meta.clone();
        self.shared
            .with_state(move |state, db| {
                state.import(&m, &data)?;
                // Raft purges the log behind an installed snapshot: the imported state must not
                // be lost in a crash.
                state.make_durable()?;
                save_snapshot(db, &m, &data)
            })
            .await
            .map_err(|e| storage_err(ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Write, &e))?;
        tracing::info!(snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id, bytes, "raft snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let db = self.shared.db.clone();
        let loaded = blocking(move || load_snapshot(&db)).await.map_err(snapshot_err(ErrorVerb::Read))?;
        Ok(loaded.map(|(meta, data)| Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Queue, QueueName};
    use crate::raft::tests::test_state::QueueNames;
    use openraft::CommittedLeaderId;

    #[test]
    fn a_busy_state_hands_the_apply_back_instead_of_blocking_raft() {
        let dir = tempfile::TempDir::new().unwrap();
        let db = Arc::new(Database::create(dir.path().join("state.redb")).unwrap());
        let shared = Shared { state: Arc::new(Mutex::new(QueueNames::open(db.clone()).unwrap())), db };
        let queue = Queue::new(QueueName::new("q1").unwrap(), 1.0);
        let items = vec![ApplyItem {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: ApplyPayload::Command(Command::CreateQueue { queue: queue.into() }),
        }];
        let items = {
            let _export = shared.state.lock().unwrap();
            shared.try_apply_here(items).expect_err("the state is busy: the items come back")
        };
        assert_eq!(items.len(), 1);
        assert_eq!(QueueNames::names(&shared.db).unwrap(), Vec::<String>::new(), "nothing was applied");
        let responses = shared.try_apply_here(items).expect("the state is free: applied here").unwrap();
        assert_eq!(responses, vec![Response::Ok]);
        assert_eq!(QueueNames::names(&shared.db).unwrap(), vec!["q1"]);
    }
}
