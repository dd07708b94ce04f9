//! The server's replicated state machine: applies committed commands to the in-memory state and
//! writes their changes to redb, with the Raft bookkeeping, in one write transaction.
//!
//! Durability: applied batches are committed with `Durability::None` (visible at once, fsync'd
//! later) because the Raft log, which is fsync'd before anything is acknowledged and lives in a
//! file of its own, can replay them after a crash. One apply per [`DURABLE_EVERY`] is committed
//! durably, which bounds the replay at start-up and lets redb reuse freed pages. `make_durable`
//! is called before a snapshot is built, and only then may the log be purged.

use super::app::Notifier;
use crate::state::{ApplyContext, Command, Effects, Response, State, StateSettings};
use crate::store::tables::META;
use crate::store::{Store, StoreError, write_changes};
use redb::{Durability, ReadableDatabase};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Longest stretch of applied entries that may be lost in a crash (and replayed from the log).
pub const DURABLE_EVERY: Duration = Duration::from_secs(1);

/// One committed log entry to apply.
pub struct Entry {
    /// Term of the leader that appended the entry.
    pub term: u64,
    /// `None` for blank and membership entries.
    pub command: Option<Command>,
}

/// Applies commands and keeps memory and disk in step.
pub struct ServerMachine {
    store: Store,
    state: Arc<RwLock<State>>,
    notify: Arc<Notifier>,
    settings: StateSettings,
    last_durable: Mutex<Instant>,
}

impl ServerMachine {
    pub fn new(store: Store, state: Arc<RwLock<State>>, notify: Arc<Notifier>, settings: StateSettings) -> Self {
        ServerMachine { store, state, notify, settings, last_durable: Mutex::new(Instant::now()) }
    }

    /// Applies entries in order inside one write transaction that also stores `raft_meta`
    /// (opaque key/value pairs such as the last applied log id). If the commit fails the
    /// in-memory state no longer matches the disk: the error must stop the server, which then
    /// reloads from disk and replays the log.
    pub fn apply(&self, entries: Vec<Entry>, raft_meta: &[(&str, Vec<u8>)]) -> Result<Vec<Response>, StoreError> {
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
        let mut responses = Vec::with_capacity(entries.len());
        let mut effects = Effects::default();
        let mut changes = Vec::new();
        // Memory first, under the lock; the disk writes after it, so readers wait less.
        {
            let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
            for e in entries {
                match e.command {
                    None => responses.push(Response::Ok),
                    Some(cmd) => {
                        let applied = state.apply(cmd, ApplyContext { term: e.term });
                        changes.extend(applied.changes);
                        effects.merge(applied.effects);
                        responses.push(applied.response.unwrap_or(Response::Ok));
                    }
                }
            }
        }
        write_changes(&tx, &changes)?;
        {
            let mut meta = tx.open_table(META)?;
            for (k, v) in raft_meta {
                meta.insert(*k, v.as_slice())?;
            }
        }
        tx.commit()?;
        self.notify.effects(&effects);
        Ok(responses)
    }

    /// Makes everything applied so far durable.
    pub fn make_durable(&self) -> Result<(), StoreError> {
        let mut tx = self.store.write()?;
        tx.set_durability(Durability::Immediate)?;
        tx.commit()?;
        Ok(())
    }

    /// A Raft bookkeeping value stored by `apply` or `import`.
    pub fn raft_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.store.db().begin_read()?;
        let meta = tx.open_table(META)?;
        Ok(meta.get(key)?.map(|v| v.value().to_vec()))
    }

    /// Pins a consistent view of the state for a snapshot.
    pub fn pin_export(&self) -> Result<crate::store::ExportView, StoreError> {
        self.store.pin_export()
    }

    /// Replaces the state with a snapshot, durably, with its Raft bookkeeping, and reloads the
    /// in-memory state from it.
    pub fn import(&self, data: &[u8], raft_meta: &[(&str, Vec<u8>)]) -> Result<(), StoreError> {
        let mut tx = self.store.write()?;
        tx.set_durability(Durability::Immediate)?;
        self.store.import_into(&tx, data)?;
        {
            let mut meta = tx.open_table(META)?;
            for (k, v) in raft_meta {
                meta.insert(*k, v.as_slice())?;
            }
        }
        tx.commit()?;
        let fresh = self.store.load_state(self.settings.clone())?;
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        let mut effects = Effects { schedule: true, ..Default::default() };
        effects.executors = self.state.read().unwrap_or_else(|p| p.into_inner()).executors.keys().cloned().collect();
        self.notify.effects(&effects);
        Ok(())
    }
}
