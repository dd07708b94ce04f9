//! The server's replicated state machine, as the Raft adapter (`raft::StateMachine`) drives it:
//! applies committed entries to the in-memory state and writes their changes to redb, with the
//! Raft bookkeeping (last applied log id, membership), in one write transaction.
//!
//! Durability: applied batches are committed with `Durability::None` (visible at once, fsync'd
//! later) because the Raft log, which is fsync'd before anything is acknowledged and lives in a
//! file of its own, can replay them after a crash. One apply per [`DURABLE_EVERY`] is committed
//! durably, which bounds the replay at start-up and lets redb reuse freed pages. `make_durable`
//! is called before a snapshot is built, and only then may the log be purged.

use crate::control::Notifier;
use crate::raft::{ApplyItem, ApplyPayload, LogId, ReplicatedState, SnapshotMeta, StateExport, StoredMembership};
use crate::record::raft::{LogIdRecord, StoredMembershipRecord};
use crate::record::{FrameSink, FrameSource, decode, encode};
use crate::state::{ApplyContext, Change, Effects, Response, State, StateSettings};
use crate::store::tables::{META, RAFT_APPLIED, RAFT_MEMBERSHIP};
use crate::store::{IMPORT_ROWS_PER_TX, Store, StoreError, snapshot_stream, write_changes};
use redb::{Durability, ReadableDatabase};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Longest stretch of applied entries that may be lost in a crash (and replayed from the log).
pub(crate) const DURABLE_EVERY: Duration = Duration::from_secs(1);

/// `meta` key of the last applied log id (`Option<LogIdRecord>`).
const APPLIED: &str = RAFT_APPLIED;
/// `meta` key of the last applied membership (`StoredMembershipRecord`).
const MEMBERSHIP: &str = RAFT_MEMBERSHIP;

fn io_err(e: StoreError) -> io::Error {
    io::Error::other(e)
}

fn encode_applied(id: Option<LogId>) -> io::Result<Vec<u8>> {
    encode(&id.map(LogIdRecord::from)).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn encode_membership(m: &StoredMembership) -> io::Result<Vec<u8>> {
    encode(&StoredMembershipRecord::from(m)).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn decode_applied(stored: Option<Vec<u8>>) -> io::Result<Option<LogId>> {
    let Some(bytes) = stored else { return Ok(None) };
    let r: Option<LogIdRecord> =
        decode(&bytes).map_err(|source| io_err(StoreError::Corrupt { what: "meta.raft_applied".into(), source }))?;
    Ok(r.map(Into::into))
}

fn decode_membership(stored: Option<Vec<u8>>) -> io::Result<StoredMembership> {
    let Some(bytes) = stored else { return Ok(StoredMembership::default()) };
    let r: StoredMembershipRecord =
        decode(&bytes).map_err(|source| io_err(StoreError::Corrupt { what: "meta.raft_membership".into(), source }))?;
    Ok(r.into())
}

/// Applies commands and keeps memory and disk in step.
pub(crate) struct ServerMachine {
    store: Store,
    state: Arc<RwLock<State>>,
    notify: Arc<Notifier>,
    settings: StateSettings,
    last_durable: Mutex<Instant>,
    /// Index of the last applied log entry, set once its changes are committed: a write's
    /// answer is sent after that, so a reader of this sees at least the write's index (Raft's
    /// metrics may lag behind).
    applied: Arc<AtomicU64>,
}

impl ServerMachine {
    /// A state machine over `store` and its loaded `state`, waking `notify` after each apply.
    pub(crate) fn new(store: Store, state: Arc<RwLock<State>>, notify: Arc<Notifier>, settings: StateSettings) -> Self {
        ServerMachine {
            store,
            state,
            notify,
            settings,
            last_durable: Mutex::new(Instant::now()),
            applied: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The index of the last applied entry, as it changes.
    pub(crate) fn applied_counter(&self) -> Arc<AtomicU64> {
        self.applied.clone()
    }

    /// Applies items in order inside one write transaction that also stores the Raft
    /// bookkeeping. If the commit fails the in-memory state no longer matches the disk: the error
    /// stops Raft, and the server must restart (reloading from disk and replaying the log).
    fn apply_items(&self, items: Vec<ApplyItem>) -> io::Result<Vec<Response>> {
        // The transaction first: if it cannot begin, memory is left untouched.
        let tx = self.begin().map_err(io_err)?;
        let mut last = None;
        let mut membership = None;
        let mut responses = Vec::with_capacity(items.len());
        let mut effects = Effects::default();
        let mut changes = Vec::new();
        // Memory first, under the lock; the disk writes after it, so readers wait less.
        {
            let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
            for item in items {
                last = Some(item.log_id);
                match item.payload {
                    ApplyPayload::Blank => responses.push(Response::Ok),
                    ApplyPayload::Membership(m) => {
                        membership = Some(StoredMembership::new(Some(item.log_id), m));
                        responses.push(Response::Ok);
                    }
                    ApplyPayload::Command(cmd) => {
                        let applied = state.apply(cmd, ApplyContext { term: item.log_id.leader_id.term });
                        changes.extend(applied.changes);
                        effects.merge(applied.effects);
                        responses.push(applied.response.unwrap_or(Response::Ok));
                    }
                }
            }
            if let Some(max) = state.max_job_id() {
                crate::control::ids::observe(max);
            }
            if let Some(l) = last {
                state.set_applied_index(l.index);
            }
        }
        // An executor's long poll is answered from memory and from rows earlier applies
        // committed (a leased job's pod spec was stored when it was submitted), so it need not
        // wait for this transaction: the entries are committed in the log already, and a
        // restart that loses the transaction replays them to the same runs. Watchers of job
        // sets read their events from the store: they are woken after the commit.
        self.notify.executor_effects(&effects);
        let mut raft_meta = vec![(APPLIED, encode_applied(last)?)];
        if let Some(m) = &membership {
            raft_meta.push((MEMBERSHIP, encode_membership(m)?));
        }
        commit(tx, &changes, &raft_meta).map_err(io_err)?;
        if let Some(l) = last {
            self.applied.fetch_max(l.index, Ordering::Release);
        }
        self.notify.store_effects(&effects);
        Ok(responses)
    }

    /// Begins the write transaction of an apply: durable once per [`DURABLE_EVERY`].
    fn begin(&self) -> Result<redb::WriteTransaction, StoreError> {
        let mut tx = self.store.write()?;
        let durable = {
            let mut last = self.last_durable.lock().unwrap_or_else(|p| p.into_inner());
            let due = last.elapsed() >= DURABLE_EVERY;
            if due {
                *last = Instant::now();
            }
            due
        };
        tx.set_durability(if durable { Durability::Immediate } else { Durability::None })?;
        Ok(tx)
    }

    /// A Raft bookkeeping value stored by an apply or an import.
    fn raft_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.store.db().begin_read()?;
        let meta = tx.open_table(META)?;
        Ok(meta.get(key)?.map(|v| v.value().to_vec()))
    }

    /// Replaces the state with a snapshot stream, durably, with its Raft bookkeeping (see
    /// `store::snapshot_stream` for how readers never see half of it), and reloads the in-memory
    /// state from it.
    fn import_snapshot(&self, frames: &mut dyn FrameSource, raft_meta: &[(&str, Vec<u8>)]) -> Result<(), StoreError> {
        let t0 = Instant::now();
        let stats = self.store.import_stream(frames, raft_meta, IMPORT_ROWS_PER_TX)?;
        let imported = t0.elapsed();
        let fresh = self.store.load_state(self.settings.clone())?;
        let executors = fresh.executors().map(|e| e.name.clone()).collect();
        let live_jobs = fresh.live_jobs();
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        self.notify.effects(&Effects { schedule: true, executors, ..Default::default() });
        tracing::info!(
            rows = stats.rows,
            transactions = stats.transactions,
            live_jobs,
            import_ms = imported.as_millis() as u64,
            load_ms = (t0.elapsed() - imported).as_millis() as u64,
            "state replaced by a snapshot"
        );
        Ok(())
    }
}

/// Writes an apply's changes and Raft bookkeeping, and commits.
fn commit(tx: redb::WriteTransaction, changes: &[Change], raft_meta: &[(&str, Vec<u8>)]) -> Result<(), StoreError> {
    write_changes(&tx, changes)?;
    {
        let mut meta = tx.open_table(META)?;
        for (k, v) in raft_meta {
            meta.insert(*k, v.as_slice())?;
        }
    }
    tx.commit()?;
    Ok(())
}

impl ReplicatedState for ServerMachine {
    fn apply(&mut self, items: Vec<ApplyItem>) -> io::Result<Vec<Response>> {
        self.apply_items(items)
    }

    fn applied_state(&self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let applied = decode_applied(self.raft_meta(APPLIED).map_err(io_err)?)?;
        let membership = decode_membership(self.raft_meta(MEMBERSHIP).map_err(io_err)?)?;
        Ok((applied, membership))
    }

    fn make_durable(&mut self) -> io::Result<()> {
        let mut tx = self.store.write().map_err(io_err)?;
        tx.set_durability(Durability::Immediate).map_err(|e| io_err(e.into()))?;
        tx.commit().map_err(|e| io_err(e.into()))
    }

    fn export(&mut self) -> io::Result<StateExport> {
        let view = self.store.pin_export().map_err(io_err)?;
        Ok(StateExport {
            last_applied: decode_applied(view.raft_meta(APPLIED).map_err(io_err)?)?,
            membership: decode_membership(view.raft_meta(MEMBERSHIP).map_err(io_err)?)?,
            rows: Box::new(move |out: &mut dyn FrameSink| view.write_rows(out).map(|_| ()).map_err(io_err)),
        })
    }

    fn import(&mut self, meta: &SnapshotMeta, frames: &mut dyn FrameSource) -> io::Result<()> {
        let raft_meta =
            [(APPLIED, encode_applied(meta.last_log_id)?), (MEMBERSHIP, encode_membership(&meta.last_membership)?)];
        self.import_snapshot(frames, &raft_meta).map_err(io_err)?;
        if let Some(l) = meta.last_log_id {
            self.applied.fetch_max(l.index, Ordering::Release);
        }
        Ok(())
    }

    fn convert_legacy_snapshot(&self, data: &[u8], out: &mut dyn FrameSink) -> io::Result<()> {
        snapshot_stream::convert_legacy(data, out).map(|_| ()).map_err(io_err)
    }

    fn reads_snapshot(&self, frames: &mut dyn FrameSource) -> io::Result<bool> {
        Ok(snapshot_stream::schema_of(frames).map_err(io_err)? == crate::record::STATE_SCHEMA_VERSION)
    }
}
