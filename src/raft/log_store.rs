//! The Raft log on redb: entries in `raft_log` (index → [`LogEntryRecord`]), and the vote, the
//! committed log id, the last purged log id and the log format version in `raft_meta`.
//!
//! The file carries its format version ([`LOG_FORMAT_VERSION`]); a log written by a newer Convoy
//! is refused when opened, and an older one is marked with today's version (every older entry
//! reads as an entry of today's format; a format 1 log's inline snapshot is converted by the
//! state machine adapter).
//!
//! The log has a redb file of its own (the state is in another). Every write that Raft relies on
//! for safety (vote, appended entries, truncation, purge) commits with `Durability::Immediate`,
//! so it is on disk before openraft is told it happened. Only the committed log id is not saved
//! when openraft hands it over: it is kept in memory and written with the next append. Losing it
//! in a crash is harmless (it is an optimisation for re-applying the log at start-up, and an older
//! value is always valid).

use super::io::{blocking, corrupt, encode_err, io_err, storage_err};
use super::types::{Entry, EntryPayload, LogId, StorageError, TypeConfig, Vote};
use crate::record::raft::{EntryPayloadRecord, EntryPayloadRef, LogEntryRecord, LogEntryRef, LogIdRecord, VoteRecord};
use crate::record::{LOG_FORMAT_VERSION, decode, encode};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Log entries by index.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// Small Raft records by name.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";
/// The log's format version (u32 big-endian). Logs from before it was written are format 1.
const KEY_FORMAT: &str = "format_version";

/// Encodes a log entry (borrowing its command).
fn encode_entry(entry: &Entry) -> io::Result<Vec<u8>> {
    let payload = match &entry.payload {
        EntryPayload::Blank => EntryPayloadRef::Blank,
        EntryPayload::Normal(cmd) => EntryPayloadRef::Normal(cmd),
        EntryPayload::Membership(m) => EntryPayloadRef::Membership(m.into()),
    };
    encode(&LogEntryRef { log_id: entry.log_id.into(), payload }).map_err(encode_err)
}

/// Decodes the log entry stored at `index`, a command of an older form as the current one.
fn decode_entry(index: u64, bytes: &[u8]) -> io::Result<Entry> {
    let r: LogEntryRecord = decode(bytes).map_err(|e| corrupt(format!("raft log entry {index}"), e))?;
    let payload = match r.payload {
        EntryPayloadRecord::Blank => EntryPayload::Blank,
        EntryPayloadRecord::Normal(cmd) => EntryPayload::Normal(cmd.into()),
        EntryPayloadRecord::Membership(m) => EntryPayload::Membership(m.into()),
    };
    Ok(Entry { log_id: r.log_id.into(), payload })
}

fn encode_log_id(id: Option<LogId>) -> io::Result<Vec<u8>> {
    encode(&id.map(LogIdRecord::from)).map_err(encode_err)
}

fn decode_log_id(what: &str, bytes: &[u8]) -> io::Result<Option<LogId>> {
    let r: Option<LogIdRecord> = decode(bytes).map_err(|e| corrupt(format!("raft {what}"), e))?;
    Ok(r.map(Into::into))
}

/// Checks the log's format version, and writes the current one into a new or older log.
///
/// Format 2 only changed how the latest snapshot is kept (`raft_snapshot`); the state machine
/// adapter converts a format 1 inline snapshot whenever it finds one
/// (`StateMachine::new`), so the version can be raised here, before that conversion, without a
/// window in which a format 1 row could be misread.
fn check_format(tx: &redb::WriteTransaction) -> io::Result<()> {
    let mut meta = tx.open_table(META).map_err(io_err)?;
    let stored = meta.get(KEY_FORMAT).map_err(io_err)?.map(|v| v.value().to_vec());
    let found = match stored {
        // A new log, or one from before the version was written (format 1).
        None => None,
        Some(bytes) => Some(
            <[u8; 4]>::try_from(bytes.as_slice())
                .map(u32::from_be_bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "raft_meta.format_version is not 4 bytes"))?,
        ),
    };
    if let Some(found) = found
        && found > LOG_FORMAT_VERSION
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the raft log has format version {found}, newer than this binary reads \
                 ({LOG_FORMAT_VERSION}): it was written by a newer convoy; run that version or newer"
            ),
        ));
    }
    if found != Some(LOG_FORMAT_VERSION) {
        if let Some(old) = found {
            tracing::info!(from = old, to = LOG_FORMAT_VERSION, "upgrading the raft log's format");
        }
        meta.insert(KEY_FORMAT, LOG_FORMAT_VERSION.to_be_bytes().as_slice()).map_err(io_err)?;
    }
    Ok(())
}

/// The Raft log storage. Cheap to clone: clones share the database and serve as log readers.
#[derive(Clone)]
pub(crate) struct LogStore {
    db: Arc<Database>,
    /// The latest committed log id, not yet written: it rides along with the next append
    /// instead of costing a transaction of its own. Losing it in a crash only means applying
    /// again from the durable applied id.
    committed: Arc<Mutex<Option<Vec<u8>>>>,
    /// Entries appended but not read yet. Nearly every entry is read exactly once, right after
    /// it commits, to be applied: handing over the appended value saves decoding it again on
    /// Raft's core task. Reads of anything else go to disk.
    recent: Arc<Mutex<BTreeMap<u64, Entry>>>,
    /// Counts appends made durable, so that a proposer can form its next batch when the log is
    /// free rather than queue a small one behind the append in progress.
    flushed: Arc<watch::Sender<u64>>,
}

/// Most entries kept in [`LogStore::recent`]; older ones are dropped (and read from disk).
const RECENT_MAX: usize = 256;

impl LogStore {
    /// Opens the log in `db`, creating its tables if they do not exist yet (so that read
    /// transactions never meet a missing table). Refuses a log of a newer format.
    pub(crate) fn open(db: Arc<Database>) -> io::Result<Self> {
        let tx = db.begin_write().map_err(io_err)?;
        {
            tx.open_table(LOG).map_err(io_err)?;
            check_format(&tx)?;
        }
        tx.commit().map_err(io_err)?;
        Ok(Self {
            db,
            committed: Arc::new(Mutex::new(None)),
            recent: Arc::new(Mutex::new(BTreeMap::new())),
            flushed: Arc::new(watch::Sender::new(0)),
        })
    }

    /// Ticks once per append made durable (the value is a count; only its changes matter).
    pub(crate) fn flushed(&self) -> watch::Receiver<u64> {
        self.flushed.subscribe()
    }

    fn read_meta(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let tx = self.db.begin_read().map_err(io_err)?;
        let table = tx.open_table(META).map_err(io_err)?;
        Ok(table.get(key).map_err(io_err)?.map(|v| v.value().to_vec()))
    }

    /// Writes one meta record in its own transaction, off the async threads.
    async fn write_meta(&self, key: &'static str, bytes: Vec<u8>, durability: Durability) -> io::Result<()> {
        let db = self.db.clone();
        blocking(move || {
            let mut tx = db.begin_write().map_err(io_err)?;
            tx.set_durability(durability).map_err(io_err)?;
            {
                let mut meta = tx.open_table(META).map_err(io_err)?;
                meta.insert(key, bytes.as_slice()).map_err(io_err)?;
            }
            tx.commit().map_err(io_err)
        })
        .await
    }

    /// The id of the last entry in the log, or the last purged one when the log is empty: what a
    /// member compares when it is asked whether a candidate's log is at least as up to date.
    pub(crate) fn last_log_id(&self) -> io::Result<Option<LogId>> {
        Ok(self.log_state()?.last_log_id)
    }

    fn log_state(&self) -> io::Result<LogState<TypeConfig>> {
        let tx = self.db.begin_read().map_err(io_err)?;
        let meta = tx.open_table(META).map_err(io_err)?;
        let last_purged = match meta.get(KEY_LAST_PURGED).map_err(io_err)? {
            Some(v) => decode_log_id("last purged log id", v.value())?,
            None => None,
        };
        let log = tx.open_table(LOG).map_err(io_err)?;
        let last = match log.last().map_err(io_err)? {
            Some((k, v)) => Some(decode_entry(k.value(), v.value())?.log_id),
            None => None,
        };
        // With every entry purged, the last log id is the last purged one.
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last.or(last_purged) })
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entries of `range` from [`LogStore::recent`], removed from it, if it holds all of them.
    fn take_recent<RB: RangeBounds<u64>>(&self, range: &RB) -> Option<Vec<Entry>> {
        use std::ops::Bound;
        let mut recent = self.recent();
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.checked_add(1)?,
            Bound::Unbounded => return None,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e.checked_add(1)?,
            Bound::Excluded(e) => *e,
            Bound::Unbounded => return None,
        };
        if end <= start {
            return Some(vec![]);
        }
        let held = recent.range(start..end).count() as u64;
        if held != end - start {
            return None;
        }
        let mut rest = recent.split_off(&start);
        let mut after = rest.split_off(&end);
        recent.append(&mut after);
        Some(rest.into_values().collect())
    }

    /// Keeps durably appended entries for the read that applies them.
    fn remember(&self, appended: Vec<Entry>) {
        let mut recent = self.recent();
        for entry in appended {
            recent.insert(entry.log_id.index, entry);
        }
        while recent.len() > RECENT_MAX {
            recent.pop_first();
        }
    }

    /// The entries of `range` (for a reader of a copied log: replay).
    pub(crate) fn read_entries(&self, range: std::ops::RangeInclusive<u64>) -> io::Result<Vec<Entry>> {
        self.read_range(range)
    }

    /// The indexes of the first and the last entry the log holds, if it holds any.
    pub(crate) fn held_range(&self) -> io::Result<Option<(u64, u64)>> {
        let tx = self.db.begin_read().map_err(io_err)?;
        let log = tx.open_table(LOG).map_err(io_err)?;
        let first = log.first().map_err(io_err)?.map(|(k, _)| k.value());
        let last = log.last().map_err(io_err)?.map(|(k, _)| k.value());
        Ok(first.zip(last))
    }

    fn read_range<RB: RangeBounds<u64>>(&self, range: RB) -> io::Result<Vec<Entry>> {
        if let Some(entries) = self.take_recent(&range) {
            return Ok(entries);
        }
        let tx = self.db.begin_read().map_err(io_err)?;
        let log = tx.open_table(LOG).map_err(io_err)?;
        let mut out = Vec::new();
        for item in log.range::<u64>(range).map_err(io_err)? {
            let (k, v) = item.map_err(io_err)?;
            out.push(decode_entry(k.value(), v.value())?);
        }
        Ok(out)
    }
}

fn read_err(e: io::Error) -> StorageError {
    storage_err(ErrorSubject::Logs, ErrorVerb::Read, &e)
}

fn write_err(e: io::Error) -> StorageError {
    storage_err(ErrorSubject::Logs, ErrorVerb::Write, &e)
}

impl RaftLogReader<TypeConfig> for LogStore {
    // Reads run inline rather than on the blocking pool: they are bounded (openraft asks for at
    // most `max_payload_entries` at a time), mostly hit redb's page cache, and never fsync.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_range(range).map_err(read_err)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        self.log_state().map_err(read_err)
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode(&VoteRecord::from(*vote))
            .map_err(|e| storage_err(ErrorSubject::Vote, ErrorVerb::Write, &encode_err(e)))?;
        self.write_meta(KEY_VOTE, bytes, Durability::Immediate)
            .await
            .map_err(|e| storage_err(ErrorSubject::Vote, ErrorVerb::Write, &e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        let read = || -> io::Result<Option<Vote>> {
            match self.read_meta(KEY_VOTE)? {
                Some(bytes) => {
                    let v: VoteRecord = decode(&bytes).map_err(|e| corrupt("raft vote", e))?;
                    Ok(Some(v.into()))
                }
                None => Ok(None),
            }
        };
        read().map_err(|e| storage_err(ErrorSubject::Vote, ErrorVerb::Read, &e))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = encode_log_id(committed).map_err(write_err)?;
        *self.committed.lock().unwrap_or_else(|p| p.into_inner()) = Some(bytes);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let pending = self.committed.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match pending {
            Some(bytes) => decode_log_id("committed log id", &bytes).map_err(read_err),
            None => match self.read_meta(KEY_COMMITTED).map_err(read_err)? {
                Some(bytes) => decode_log_id("committed log id", &bytes).map_err(read_err),
                None => Ok(None),
            },
        }
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // One durable transaction for the whole batch (one fsync), committed right here: openraft
        // 0.9 waits for the flush before it does anything else anyway, and this runs on the Raft
        // runtime's own thread (see `RaftNode::start`), so a hop to the blocking pool would only
        // add two thread wake-ups to every append.
        let mut appended = Vec::new();
        let res = (|| {
            let tx = self.db.begin_write().map_err(io_err)?;
            {
                let mut log = tx.open_table(LOG).map_err(io_err)?;
                for entry in entries {
                    log.insert(entry.log_id.index, encode_entry(&entry)?.as_slice()).map_err(io_err)?;
                    appended.push(entry);
                }
            }
            if let Some(c) = self.committed.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let mut meta = tx.open_table(META).map_err(io_err)?;
                meta.insert(KEY_COMMITTED, c.as_slice()).map_err(io_err)?;
            }
            tx.commit().map_err(io_err)
        })();
        let (first, last, count) =
            (appended.first().map(|e| e.log_id.index), appended.last().map(|e| e.log_id.index), appended.len());
        match res {
            Ok(()) => {
                self.remember(appended);
                tracing::trace!(first, last, count, "raft log entries appended");
                callback.log_io_completed(Ok(()));
                self.flushed.send_modify(|n| *n = n.wrapping_add(1));
                Ok(())
            }
            Err(e) => {
                tracing::error!(first, last, count, error = %e, "raft log append failed");
                callback.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(write_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "truncating raft log since");
        self.recent().retain(|&i, _| i < log_id.index);
        let db = self.db.clone();
        blocking(move || {
            let tx = db.begin_write().map_err(io_err)?;
            {
                let mut log = tx.open_table(LOG).map_err(io_err)?;
                log.retain_in::<u64, _>(log_id.index.., |_, _| false).map_err(io_err)?;
            }
            tx.commit().map_err(io_err)
        })
        .await
        .map_err(|e| storage_err(ErrorSubject::Log(log_id), ErrorVerb::Delete, &e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "purging raft log up to");
        self.recent().retain(|&i, _| i > log_id.index);
        let db = self.db.clone();
        let bytes = encode_log_id(Some(log_id)).map_err(write_err)?;
        // The purge mark and the deletion commit together, so the log never has a hole.
        blocking(move || {
            let tx = db.begin_write().map_err(io_err)?;
            {
                let mut meta = tx.open_table(META).map_err(io_err)?;
                meta.insert(KEY_LAST_PURGED, bytes.as_slice()).map_err(io_err)?;
                let mut log = tx.open_table(LOG).map_err(io_err)?;
                log.retain_in::<u64, _>(..=log_id.index, |_, _| false).map_err(io_err)?;
            }
            tx.commit().map_err(io_err)
        })
        .await
        .map_err(|e| storage_err(ErrorSubject::Log(log_id), ErrorVerb::Delete, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn blank(index: u64) -> Entry {
        Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Blank }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn appended_entries_are_handed_over_once_then_read_from_disk() {
        let dir = tempfile::TempDir::new().unwrap();
        let db = Arc::new(Database::create(dir.path().join("raft.redb")).unwrap());
        let mut log = LogStore::open(db).unwrap();
        // Only remembered, never written: every read that reaches the disk finds nothing.
        log.remember((1..=5).map(blank).collect());
        assert_eq!(indexes(&log.try_get_log_entries(1..3).await.unwrap()), vec![1, 2]);
        assert!(log.try_get_log_entries(1..3).await.unwrap().is_empty(), "handed over once");
        assert!(log.try_get_log_entries(2..5).await.unwrap().is_empty(), "a partly held range is read from disk");
        log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 4)).await.unwrap();
        assert!(log.try_get_log_entries(4..5).await.unwrap().is_empty(), "truncated entries are forgotten");
        assert_eq!(indexes(&log.try_get_log_entries(3..=3).await.unwrap()), vec![3]);
        log.remember((6..=6 + RECENT_MAX as u64).map(blank).collect());
        assert!(log.try_get_log_entries(6..7).await.unwrap().is_empty(), "the oldest beyond the cap were dropped");
        assert_eq!(log.try_get_log_entries(7..=6 + RECENT_MAX as u64).await.unwrap().len(), RECENT_MAX);
    }
}
