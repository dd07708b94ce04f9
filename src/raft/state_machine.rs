//! The state-machine side of openraft, as an adapter over a plain synchronous
//! [`ReplicatedState`] that the server implements on its redb tables.
//!
//! Concurrency choice: the state lives behind an `Arc<std::sync::Mutex<_>>`. Small applies, the
//! hot path, run on the calling task, on the Raft runtime's own thread (see `RaftNode::start`):
//! a sub-millisecond redb commit there costs less than a hop to another thread. Everything that
//! may take long (large applies, making the state durable, exporting, importing) runs on tokio's
//! blocking pool (`spawn_blocking`), so Raft's core keeps its timers. openraft builds snapshots in
//! a task of their own, in parallel with applying; the mutex serialises the two, so an export
//! always sees a state between two apply batches. The export only pins a read transaction under
//! the lock and writes the file after releasing it, so applying goes on meanwhile.
//!
//! Snapshots are files (`raft::snapshot_store`): built by streaming the pinned state into a file,
//! sent to peers in chunks read from the file, received into a temporary file, and installed by
//! streaming the file into the state ([`ReplicatedState::import`]), so no snapshot is ever held
//! in memory whole. The latest one is named in the `raft_snapshot` table, so that
//! `get_current_snapshot` answers after a restart.

use super::io::{blocking, storage_err};
use super::snapshot_file::{Finished, SnapshotReader, SnapshotWriter};
use super::snapshot_store::{SnapshotDir, SnapshotFile};
use super::types::{
    Entry, EntryPayload, LogId, Membership, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::record::{FrameSink, FrameSource};
use crate::state::{Command, Response};
use openraft::storage::RaftStateMachine;
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder};
use redb::Database;
use std::io::{self, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What a committed log entry asks the state to do.
#[derive(Debug, Clone)]
pub(crate) enum ApplyPayload {
    /// An empty entry a new leader writes at the start of its term. Only the applied log id moves.
    Blank,
    /// A state change.
    Command(Command),
    /// A membership change: the state must store it, with the entry's log id, as its membership.
    Membership(Membership),
}

/// One committed log entry to apply.
#[derive(Debug, Clone)]
pub(crate) struct ApplyItem {
    /// The entry's log id; its `leader_id.term` is the term the entry was proposed in.
    pub log_id: LogId,
    /// What to apply.
    pub payload: ApplyPayload,
}

/// A consistent view of the whole state, pinned by [`ReplicatedState::export`], to be written
/// out as snapshot frames.
pub(crate) struct StateExport {
    /// The last log id the view includes.
    pub last_applied: Option<LogId>,
    /// The membership the view includes.
    pub membership: StoredMembership,
    /// Writes the view's frames, in whatever format [`ReplicatedState::import`] reads. Runs on a
    /// blocking thread without the state lock, while applying goes on.
    pub rows: ExportRows,
}

impl std::fmt::Debug for StateExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateExport").field("last_applied", &self.last_applied).finish_non_exhaustive()
    }
}

/// Writes a pinned state's snapshot frames (see [`StateExport::rows`]).
pub(super) type ExportRows = Box<dyn FnOnce(&mut dyn FrameSink) -> io::Result<()> + Send>;

/// The replicated state as the Raft adapter sees it: a synchronous, deterministic state machine
/// on redb. The server implements it; the adapter calls it from blocking threads, one call at a
/// time.
///
/// Durability contract: `apply` may commit with `redb::Durability::None` (fast, not fsynced).
/// Raft tolerates losing such applies in a crash because it keeps every log entry the durable
/// state does not cover and re-applies them at start-up. It only drops log entries covered by a
/// snapshot, so before it builds one the adapter calls [`make_durable`](Self::make_durable), and it
/// calls it again after [`import`](Self::import).
pub(crate) trait ReplicatedState: Send + Sync + 'static {
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

    /// Pins a consistent view of the whole state with its applied log id and membership, e.g. a
    /// redb read transaction. Called with applying paused, right after
    /// [`make_durable`](Self::make_durable); the returned [`StateExport::rows`] reads that view
    /// while applying goes on, so a large state does not stall writes.
    fn export(&mut self) -> io::Result<StateExport>;

    /// Replaces the whole state with a snapshot's frames, read one at a time. Readers of the
    /// state must see either the old state or the new one, never a mix, and a failure (a corrupt
    /// stream: [`FrameSource::next_frame`] fails, possibly after many frames) or a crash part-way
    /// must leave the old state. Afterwards [`applied_state`](Self::applied_state) returns
    /// `meta.last_log_id` and `meta.last_membership`.
    fn import(&mut self, meta: &SnapshotMeta, frames: &mut dyn FrameSource) -> io::Result<()>;

    /// Writes the frames of a snapshot that an older release kept inline in the log database
    /// (`data`, in the format its export wrote), so that it becomes a snapshot file. The default
    /// cannot: the adapter then forgets that snapshot, and Raft builds a new one when it needs
    /// one.
    fn convert_legacy_snapshot(&self, data: &[u8], out: &mut dyn FrameSink) -> io::Result<()> {
        let _ = (data, out);
        Err(io::Error::new(io::ErrorKind::Unsupported, "this state cannot read snapshots of older releases"))
    }

    /// Whether [`import`](Self::import) takes the snapshot whose frames these are, judging by its
    /// first frames (e.g. a version they carry). At start-up, a current snapshot this state would
    /// refuse (written before an upgrade changed the state's format) is built again from the
    /// state, or a member catching up would be sent one it cannot install. The default takes all.
    fn reads_snapshot(&self, frames: &mut dyn FrameSource) -> io::Result<bool> {
        let _ = frames;
        Ok(true)
    }
}

/// openraft's state machine over a [`ReplicatedState`].
pub(crate) struct StateMachine<S: ReplicatedState> {
    shared: Shared<S>,
}

/// Builds snapshots for openraft in a task of their own; shares the state with the state machine.
pub(crate) struct SnapshotBuilder<S: ReplicatedState> {
    shared: Shared<S>,
}

struct Shared<S> {
    state: Arc<Mutex<S>>,
    snapshots: SnapshotDir,
    installed: Arc<AtomicU64>,
    /// Bytes a snapshot build must leave free on the snapshot directory's file system.
    keep_free: u64,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            snapshots: self.snapshots.clone(),
            installed: self.installed.clone(),
            keep_free: self.keep_free,
        }
    }
}

impl<S: ReplicatedState> StateMachine<S> {
    /// Wraps `state`, with its snapshot files in `snapshot_dir` and the table naming the current
    /// one in `db` (the server's log database). Converts a snapshot an older release kept inline
    /// in `db`, and cleans up after snapshot writes a crash interrupted.
    pub(crate) fn new(db: Arc<Database>, snapshot_dir: PathBuf, mut state: S) -> io::Result<Self> {
        let snapshots = SnapshotDir::open(db, snapshot_dir)?;
        convert_legacy(&snapshots, &state)?;
        let (applied, _) = state.applied_state()?;
        snapshots.recover(applied)?;
        rebuild_stale(&snapshots, &mut state)?;
        Ok(Self {
            shared: Shared {
                state: Arc::new(Mutex::new(state)),
                snapshots,
                installed: Arc::new(AtomicU64::new(0)),
                keep_free: 0,
            },
        })
    }

    /// Snapshots are built only while they would leave `bytes` free on the disk (estimated from
    /// the size of the last one); a build that finds no room is skipped, and the log is kept
    /// until there is.
    pub(crate) fn keeping_free(mut self, bytes: u64) -> Self {
        self.shared.keep_free = bytes;
        self
    }

    /// With `on`, each snapshot file a newer one replaces is kept as a replay base (see
    /// [`SnapshotDir::keep_bases`]).
    pub(crate) fn keeping_replay_bases(mut self, on: bool) -> io::Result<Self> {
        if on {
            self.shared.snapshots.keep_bases()?;
        }
        Ok(self)
    }

    /// Counts the snapshots this member installed since it started (it caught up by snapshot).
    pub(crate) fn installed_counter(&self) -> Arc<AtomicU64> {
        self.shared.installed.clone()
    }
}

/// Turns a snapshot an older release kept inline (log format 1) into a snapshot file; forgets it
/// if the state cannot convert it.
fn convert_legacy<S: ReplicatedState>(snapshots: &SnapshotDir, state: &S) -> io::Result<()> {
    let Some((meta, data)) = snapshots.legacy()? else { return Ok(()) };
    let tmp = snapshots.temp_path("convert");
    let written = (|| -> io::Result<Finished> {
        let mut w = SnapshotWriter::create(&tmp, &meta)?;
        state.convert_legacy_snapshot(&data, &mut w)?;
        Ok(w.finish()?)
    })();
    match written {
        Ok(done) => {
            let name = SnapshotDir::file_name(&meta);
            snapshots.publish(&tmp, &name)?;
            snapshots.record(&meta, &name, done.bytes)?;
            tracing::info!(
                snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id, bytes = done.bytes,
                "converted the inline raft snapshot of an older release into a snapshot file"
            );
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(
                snapshot_id = %meta.snapshot_id, error = %e,
                "cannot convert the inline raft snapshot of an older release; a new one is built when needed"
            );
            snapshots.forget()?;
        }
    }
    Ok(())
}

/// Builds the current snapshot again from the state if the state would not install it (see
/// [`ReplicatedState::reads_snapshot`]). The state has applied at least what the old snapshot
/// holds, so the new one covers every entry the log has purged.
fn rebuild_stale<S: ReplicatedState>(snapshots: &SnapshotDir, state: &mut S) -> io::Result<()> {
    let Some(current) = snapshots.current()? else { return Ok(()) };
    let readable = match SnapshotReader::open(&snapshots.path(&current.name)) {
        Ok(mut reader) => state.reads_snapshot(&mut reader)?,
        Err(_) => false,
    };
    if readable {
        return Ok(());
    }
    state.make_durable()?;
    let export = state.export()?;
    let meta = SnapshotMeta {
        snapshot_id: snapshot_id(export.last_applied.as_ref()),
        last_log_id: export.last_applied,
        last_membership: export.membership,
    };
    let (name, done) = write_snapshot(snapshots, &meta, export.rows)?;
    snapshots.record(&meta, &name, done.bytes)?;
    tracing::info!(
        old_snapshot_id = %current.meta.snapshot_id, snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id,
        bytes = done.bytes, "the raft snapshot was of an older state format; built it again from the state"
    );
    Ok(())
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

    /// Runs `f` on the state on a blocking thread. Recording, installing and opening the current
    /// snapshot run under the state lock too, so none of them sees another half done.
    async fn with_state<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut S, &SnapshotDir) -> io::Result<T> + Send + 'static,
    {
        let state = self.state.clone();
        let snapshots = self.snapshots.clone();
        blocking(move || {
            // A panic while holding the lock leaves the state unknown: refuse to go on.
            let mut guard =
                state.lock().map_err(|_| io::Error::other("replicated state lock poisoned by an earlier panic"))?;
            f(&mut guard, &snapshots)
        })
        .await
    }
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

/// Writes a pinned state into a new snapshot file under its final name (not yet recorded).
fn write_snapshot(snapshots: &SnapshotDir, meta: &SnapshotMeta, rows: ExportRows) -> io::Result<(String, Finished)> {
    let tmp = snapshots.temp_path("build");
    let written = (|| -> io::Result<Finished> {
        let mut w = SnapshotWriter::create(&tmp, meta)?;
        rows(&mut w)?;
        Ok(w.finish()?)
    })();
    match written {
        Ok(done) => {
            let name = SnapshotDir::file_name(meta);
            snapshots.publish(&tmp, &name)?;
            Ok((name, done))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Installs the snapshot in `file` (at `path`, a temporary file of this node's): checks that it
/// is the snapshot `meta` describes, puts it in place, streams it into the state and records it.
/// Runs under the state lock.
fn install<S: ReplicatedState>(
    state: &mut S,
    snapshots: &SnapshotDir,
    meta: &SnapshotMeta,
    mut file: std::fs::File,
    path: &Path,
) -> io::Result<u64> {
    let checked = (|| -> io::Result<SnapshotReader> {
        file.sync_all()?;
        file.seek(SeekFrom::Start(0))?;
        let reader = SnapshotReader::from_file(file, path)?;
        let found = reader.meta();
        if found.snapshot_id != meta.snapshot_id || found.last_log_id != meta.last_log_id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the received file holds snapshot {} (up to {:?}), not snapshot {} (up to {:?})",
                    found.snapshot_id, found.last_log_id, meta.snapshot_id, meta.last_log_id
                ),
            ));
        }
        Ok(reader)
    })();
    let mut reader = match checked {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    };
    let bytes = std::fs::metadata(path)?.len();
    let name = SnapshotDir::file_name(meta);
    // The same snapshot again (a retried send): its file is already the current one.
    let again = snapshots.current()?.is_some_and(|c| c.name == name);
    // In place before the state changes: if the process dies after the import commits but before
    // the file is recorded, the next start finds it and adopts it (`SnapshotDir::recover`).
    if !again {
        snapshots.publish(path, &name)?;
    }
    let imported = state.import(meta, &mut reader).and_then(|()| state.make_durable());
    match (imported, again) {
        (Ok(()), false) => snapshots.record(meta, &name, bytes)?,
        (Ok(()), true) => {
            let _ = std::fs::remove_file(path);
        }
        (Err(e), false) => {
            snapshots.remove(&name);
            return Err(e);
        }
        (Err(e), true) => {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    }
    Ok(bytes)
}

impl<S: ReplicatedState> SnapshotBuilder<S> {
    /// Why there is no room for a new snapshot now, if there is none: it would take about twice
    /// the last one (the state grows), and `keep_free` bytes must stay free beside it.
    fn no_room(&self) -> Option<String> {
        let snapshots = &self.shared.snapshots;
        let free = crate::disk_space::free_bytes(snapshots.dir()).ok()?;
        let estimate = snapshots.current().ok().flatten().map_or(0, |c| c.bytes.saturating_mul(2));
        let needed = estimate.saturating_add(self.shared.keep_free);
        (free < needed).then(|| format!("{free} bytes are free and it needs about {needed}"))
    }

    /// What a build answers when there is no room: the current snapshot again (before any, an
    /// empty one that covers nothing). openraft takes it as nothing newer, keeps the log, and
    /// asks again after later entries.
    async fn skip(&self, why: &str) -> Result<Snapshot, StorageError> {
        tracing::warn!(
            reason = why,
            "raft snapshot not built for lack of disk space; the log is kept until there is room"
        );
        self.shared
            .with_state(|_, snapshots| {
                if let Some(current) = snapshots.current()? {
                    let path = snapshots.path(&current.name);
                    let file = std::fs::File::open(&path)?;
                    return Ok(Snapshot { meta: current.meta, snapshot: Box::new(SnapshotFile::from_std(file, path)) });
                }
                let none = PathBuf::from("/dev/null");
                let meta = SnapshotMeta {
                    last_log_id: None,
                    last_membership: StoredMembership::default(),
                    snapshot_id: "none".into(),
                };
                Ok(Snapshot { meta, snapshot: Box::new(SnapshotFile::from_std(std::fs::File::open(&none)?, none)) })
            })
            .await
            .map_err(snapshot_err(ErrorVerb::Read))
    }
}

impl<S: ReplicatedState> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let t0 = Instant::now();
        if let Some(why) = self.no_room() {
            return self.skip(&why).await;
        }
        // Only pinning the view holds the state lock; the copy runs while entries keep applying.
        let export = self
            .shared
            .with_state(|state, _| {
                // Durable first: once the snapshot exists, Raft may purge the log it covers.
                state.make_durable()?;
                state.export()
            })
            .await
            .map_err(snapshot_err(ErrorVerb::Read))?;
        let meta = SnapshotMeta {
            snapshot_id: snapshot_id(export.last_applied.as_ref()),
            last_log_id: export.last_applied,
            last_membership: export.membership,
        };
        let (snapshots, m, rows) = (self.shared.snapshots.clone(), meta.clone(), export.rows);
        let (name, done) = match blocking(move || write_snapshot(&snapshots, &m, rows)).await {
            Ok(written) => written,
            Err(e) if crate::disk_space::is_disk_full(&e) => {
                return self.skip(&format!("writing it filled the disk: {e}")).await;
            }
            Err(e) => return Err(snapshot_err(ErrorVerb::Write)(e)),
        };
        // Recorded under the state lock, and only if no newer snapshot was installed meanwhile.
        // Opened before: the file handed to Raft stays readable even if it is not kept.
        let m = meta.clone();
        let file = self
            .shared
            .with_state(move |_, snapshots| {
                let file = std::fs::File::open(snapshots.path(&name))?;
                let saved = snapshots.current()?;
                if saved.as_ref().is_none_or(|s| s.meta.last_log_id <= m.last_log_id) {
                    snapshots.record(&m, &name, done.bytes)?;
                } else {
                    snapshots.remove(&name);
                }
                Ok(SnapshotFile::from_std(file, snapshots.path(&name)))
            })
            .await
            .map_err(snapshot_err(ErrorVerb::Write))?;
        tracing::info!(
            snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id, bytes = done.bytes, frames = done.frames,
            build_ms = t0.elapsed().as_millis() as u64, "raft snapshot built"
        );
        crate::metrics::global().snapshot_built_at.set(crate::metrics::unix_seconds());
        Ok(Snapshot { meta, snapshot: Box::new(file) })
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

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StorageError> {
        let path = self.shared.snapshots.temp_path("recv");
        let file = SnapshotFile::create_temp(path).await.map_err(snapshot_err(ErrorVerb::Write))?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Box<SnapshotFile>) -> Result<(), StorageError> {
        let t0 = Instant::now();
        let err = |e: io::Error| storage_err(ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Write, &e);
        // A file received into this node's directory is moved into place; anything else (a
        // sender's file handed over in-process, as in tests) is copied into a file of its own.
        let ours = snapshot.is_temporary() && snapshot.path().parent() == Some(self.shared.snapshots.dir());
        let (file, path) = if ours {
            snapshot.into_std().await.map_err(err)?
        } else {
            copy_in(&self.shared.snapshots, snapshot).await.map_err(err)?
        };
        let m = meta.clone();
        let bytes = self
            .shared
            .with_state(move |state, snapshots| install(state, snapshots, &m, file, &path))
            .await
            .map_err(err)?;
        self.shared.installed.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().snapshot_installed_at.set(crate::metrics::unix_seconds());
        tracing::info!(
            snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id, bytes,
            install_ms = t0.elapsed().as_millis() as u64, "raft snapshot installed"
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        // Under the state lock: a build or an install replacing the file cannot delete it between
        // looking it up and opening it.
        self.shared
            .with_state(|_, snapshots| {
                let Some(current) = snapshots.current()? else { return Ok(None) };
                let path = snapshots.path(&current.name);
                let file = std::fs::File::open(&path)?;
                Ok(Some(Snapshot { meta: current.meta, snapshot: Box::new(SnapshotFile::from_std(file, path)) }))
            })
            .await
            .map_err(snapshot_err(ErrorVerb::Read))
    }
}

/// Copies a snapshot that is not a temporary file of this node's into one.
async fn copy_in(snapshots: &SnapshotDir, mut from: Box<SnapshotFile>) -> io::Result<(std::fs::File, PathBuf)> {
    use tokio::io::AsyncSeekExt;
    let mut to = SnapshotFile::create_temp(snapshots.temp_path("copy")).await?;
    from.seek(SeekFrom::Start(0)).await?;
    tokio::io::copy(&mut *from, &mut to).await?;
    to.into_std().await
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
        let snapshots = SnapshotDir::open(db.clone(), dir.path().join("snapshots")).unwrap();
        let state = Arc::new(Mutex::new(QueueNames::open(db.clone()).unwrap()));
        let shared = Shared { state, snapshots, installed: Arc::new(AtomicU64::new(0)), keep_free: 0 };
        let queue = Queue::new(QueueName::new("q1").unwrap(), 1.0);
        let items = vec![ApplyItem {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: ApplyPayload::Command(Command::create_queue(queue)),
        }];
        let items = {
            let _export = shared.state.lock().unwrap();
            shared.try_apply_here(items).expect_err("the state is busy: the items come back")
        };
        assert_eq!(items.len(), 1);
        assert_eq!(QueueNames::names(&db).unwrap(), Vec::<String>::new(), "nothing was applied");
        let responses = shared.try_apply_here(items).expect("the state is free: applied here").unwrap();
        assert_eq!(responses, vec![Response::Ok]);
        assert_eq!(QueueNames::names(&db).unwrap(), vec!["q1"]);
    }
}
