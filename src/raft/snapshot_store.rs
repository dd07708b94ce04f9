//! Where the latest snapshot lives: a file in the snapshot directory (`<data_dir>/snapshots/`),
//! named, with its meta, in the `raft_snapshot` table.
//!
//! Files: a snapshot is written (built, received, or converted from an older release) under a
//! temporary name (`*.tmp`), fsynced, renamed to `<snapshot id>.snap`, and the directory fsynced;
//! only then is it recorded as the current snapshot (one durable redb commit), and only after
//! that is the previous file deleted. A crash at any point leaves either the old snapshot or the
//! new one recorded, plus files that `SnapshotDir::recover` sorts out at the next start:
//! temporary files are deleted, and so are unrecorded `.snap` files, except one whose header
//! says it is exactly the state's applied log id (an install that committed the state but
//! crashed before recording the file), which is adopted.
//!
//! A file being sent to a peer may be replaced by a newer snapshot meanwhile: the sender holds
//! it open, and an open file outlives its deletion (POSIX), so the stream completes.
//!
//! Format 1 logs kept the snapshot's bytes inline in `raft_snapshot` (`data`); such a row is
//! handed to the state to convert (see `StateMachine::new`) and then dropped.

use super::io::{corrupt, encode_err, io_err};
pub(super) use super::snapshot_data::SnapshotFile;
use super::snapshot_file::{SnapshotFileError, SnapshotReader};
use super::types::{LogId, SnapshotMeta};
use crate::record::raft::{SnapshotFileRecord, SnapshotMetaRecord};
use crate::record::{decode, encode};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The latest snapshot: `meta` (a `SnapshotMetaRecord`) and `file` (a `SnapshotFileRecord`);
/// in logs of format 1, `data` (the bytes themselves) instead of `file`.
pub(crate) const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_snapshot");
const KEY_META: &str = "meta";
const KEY_FILE: &str = "file";
const KEY_DATA: &str = "data";

/// The directory, inside the snapshot directory, of the snapshot files kept for replay.
pub(crate) const REPLAY_BASES: &str = "replay";

/// Suffix of a finished snapshot file.
const SNAP: &str = "snap";
/// Suffix of a snapshot file being written or received.
const TMP: &str = "tmp";

/// The recorded current snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Current {
    /// Its meta.
    pub(crate) meta: SnapshotMeta,
    /// Its file's name in the directory.
    pub(crate) name: String,
    /// Its file's length.
    pub(crate) bytes: u64,
}

/// The snapshot directory and the `raft_snapshot` table that names the current file.
#[derive(Clone)]
pub(crate) struct SnapshotDir {
    dir: PathBuf,
    db: Arc<Database>,
    /// Where replaced snapshot files go instead of being deleted (`replay/` inside `dir`), when
    /// replay retention keeps them as the states `convoy replay` starts from. Start-up recovery
    /// leaves that directory alone; the server's replay retention deletes what it no longer
    /// needs.
    bases: Option<PathBuf>,
}

impl SnapshotDir {
    /// Creates the directory and the table if they are missing.
    pub(crate) fn open(db: Arc<Database>, dir: PathBuf) -> io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let tx = db.begin_write().map_err(io_err)?;
        tx.open_table(SNAPSHOT).map_err(io_err)?;
        tx.commit().map_err(io_err)?;
        Ok(Self { dir, db, bases: None })
    }

    /// Keeps replaced snapshot files in [`REPLAY_BASES`] from now on.
    pub(crate) fn keep_bases(&mut self) -> io::Result<()> {
        let bases = self.dir.join(REPLAY_BASES);
        std::fs::create_dir_all(&bases)?;
        self.bases = Some(bases);
        Ok(())
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh temporary path for a snapshot being `what` (built, received, converted).
    pub(crate) fn temp_path(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{what}-{}.{TMP}", ulid::Ulid::generate()))
    }

    /// The name of a snapshot's file: its id, with anything but letters, digits, `-` and `_`
    /// replaced (the id comes from a peer, and must not name a path elsewhere).
    pub(crate) fn file_name(meta: &SnapshotMeta) -> String {
        let id: String = meta
            .snapshot_id
            .chars()
            .take(100)
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        let id = if id.is_empty() { "snapshot".to_string() } else { id };
        format!("{id}.{SNAP}")
    }

    /// The path of the file `name` in the directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Moves a finished (and fsynced) temporary file to its name, durably (the directory is
    /// fsynced too). It is not the current snapshot until [`record`](Self::record)ed.
    pub(crate) fn publish(&self, temp: &Path, name: &str) -> io::Result<PathBuf> {
        let path = self.path(name);
        std::fs::rename(temp, &path)?;
        self.sync_dir()?;
        Ok(path)
    }

    fn sync_dir(&self) -> io::Result<()> {
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// The recorded current snapshot, if any.
    pub(crate) fn current(&self) -> io::Result<Option<Current>> {
        let tx = self.db.begin_read().map_err(io_err)?;
        let t = tx.open_table(SNAPSHOT).map_err(io_err)?;
        let Some(meta) = t.get(KEY_META).map_err(io_err)? else { return Ok(None) };
        let meta: SnapshotMetaRecord = decode(meta.value()).map_err(|e| corrupt("raft snapshot meta", e))?;
        let Some(file) = t.get(KEY_FILE).map_err(io_err)? else {
            // A format 1 row (bytes inline) not converted yet: there is no file to offer.
            return Ok(None);
        };
        let file: SnapshotFileRecord = decode(file.value()).map_err(|e| corrupt("raft snapshot file", e))?;
        Ok(Some(Current { meta: meta.into(), name: file.name, bytes: file.bytes }))
    }

    /// Makes the published file `name` the current snapshot (durably) and deletes the previous
    /// one's file. Also drops a format 1 inline snapshot.
    pub(crate) fn record(&self, meta: &SnapshotMeta, name: &str, bytes: u64) -> io::Result<()> {
        let previous = self.current()?;
        let meta_bytes = encode(&SnapshotMetaRecord::from(meta)).map_err(encode_err)?;
        let file_bytes = encode(&SnapshotFileRecord { name: name.to_string(), bytes }).map_err(encode_err)?;
        let mut tx = self.db.begin_write().map_err(io_err)?;
        tx.set_durability(Durability::Immediate).map_err(io_err)?;
        {
            let mut t = tx.open_table(SNAPSHOT).map_err(io_err)?;
            t.insert(KEY_META, meta_bytes.as_slice()).map_err(io_err)?;
            t.insert(KEY_FILE, file_bytes.as_slice()).map_err(io_err)?;
            t.remove(KEY_DATA).map_err(io_err)?;
        }
        tx.commit().map_err(io_err)?;
        if let Some(p) = previous.filter(|p| p.name != name) {
            match &self.bases {
                Some(bases) => {
                    // Kept for replay; a failed move only loses a base (logged), never the new file.
                    if let Err(e) = std::fs::rename(self.path(&p.name), bases.join(&p.name)) {
                        tracing::warn!(file = %p.name, error = %e, "cannot keep the replaced snapshot file for replay");
                        self.remove(&p.name);
                    }
                }
                None => self.remove(&p.name),
            }
        }
        Ok(())
    }

    /// Deletes the file `name` (best effort: a leftover is removed at the next start).
    pub(crate) fn remove(&self, name: &str) {
        let path = self.path(name);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove an old snapshot file");
        }
    }

    /// A format 1 snapshot (meta and inline bytes), if the table still holds one.
    pub(crate) fn legacy(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        let tx = self.db.begin_read().map_err(io_err)?;
        let t = tx.open_table(SNAPSHOT).map_err(io_err)?;
        let Some(data) = t.get(KEY_DATA).map_err(io_err)? else { return Ok(None) };
        let Some(meta) = t.get(KEY_META).map_err(io_err)? else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the raft snapshot has data but no meta"));
        };
        let meta: SnapshotMetaRecord = decode(meta.value()).map_err(|e| corrupt("raft snapshot meta", e))?;
        Ok(Some((meta.into(), data.value().to_vec())))
    }

    /// Forgets the current snapshot (a format 1 one that cannot be converted): Raft builds a new
    /// one from the state at start-up when it needs one.
    pub(crate) fn forget(&self) -> io::Result<()> {
        let mut tx = self.db.begin_write().map_err(io_err)?;
        tx.set_durability(Durability::Immediate).map_err(io_err)?;
        {
            let mut t = tx.open_table(SNAPSHOT).map_err(io_err)?;
            for key in [KEY_META, KEY_FILE, KEY_DATA] {
                t.remove(key).map_err(io_err)?;
            }
        }
        tx.commit().map_err(io_err)
    }

    /// Start-up: removes what interrupted writes left (see the module docs), adopts an installed
    /// snapshot that was not recorded, and checks that the recorded file is there and whole; a
    /// recorded snapshot whose file is missing or damaged is forgotten (Raft builds another).
    /// `applied` is the state's applied log id.
    pub(crate) fn recover(&self, applied: Option<LogId>) -> io::Result<()> {
        let mut current = self.current()?;
        if let Some(c) = &current {
            let path = self.path(&c.name);
            let len = std::fs::metadata(&path).map(|m| m.len());
            if !matches!(len, Ok(l) if l == c.bytes) {
                tracing::warn!(
                    path = %path.display(), expected_bytes = c.bytes, found = ?len,
                    "the recorded raft snapshot file is missing or has the wrong length; forgetting it"
                );
                self.forget()?;
                current = None;
            }
        }
        let mut adopt: Option<(SnapshotMeta, String, u64)> = None;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
            match path.extension().and_then(|e| e.to_str()) {
                Some(TMP) => {
                    tracing::info!(path = %path.display(), "removing an unfinished snapshot file");
                    std::fs::remove_file(&path)?;
                }
                Some(SNAP) if current.as_ref().is_some_and(|c| c.name == name) => {}
                Some(SNAP) => {
                    let installed = match SnapshotReader::open(&path) {
                        Ok(r) => applied.is_some() && r.meta().last_log_id == applied,
                        Err(SnapshotFileError::Io { source, .. }) => return Err(source),
                        Err(_) => false,
                    };
                    let newer = current.as_ref().is_none_or(|c| c.meta.last_log_id < applied);
                    if installed && newer && adopt.is_none() {
                        // Read whole once: adopting a damaged file would hand it to peers.
                        match SnapshotReader::open(&path).and_then(SnapshotReader::verify) {
                            Ok(_) => {
                                let r = SnapshotReader::open(&path)?;
                                adopt = Some((r.meta().clone(), name, entry.metadata()?.len()));
                                continue;
                            }
                            Err(e) => tracing::warn!(path = %path.display(), error = %e, "damaged snapshot file"),
                        }
                    }
                    tracing::info!(path = %path.display(), "removing a snapshot file that is not the current one");
                    std::fs::remove_file(&path)?;
                }
                _ => {}
            }
        }
        if let Some((meta, name, bytes)) = adopt {
            tracing::info!(
                snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id,
                "adopting the snapshot file of an install that was interrupted before it was recorded"
            );
            self.record(&meta, &name, bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::snapshot_file::SnapshotWriter;
    use crate::record::FrameSink;
    use openraft::CommittedLeaderId;

    fn meta(index: u64, id: &str) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), index)),
            last_membership: Default::default(),
            snapshot_id: id.into(),
        }
    }

    fn write(dir: &SnapshotDir, meta: &SnapshotMeta) -> (String, u64) {
        let tmp = dir.temp_path("test");
        let mut w = SnapshotWriter::create(&tmp, meta).unwrap();
        w.frame(b"row").unwrap();
        let done = w.finish().unwrap();
        let name = SnapshotDir::file_name(meta);
        dir.publish(&tmp, &name).unwrap();
        (name, done.bytes)
    }

    fn files(dir: &SnapshotDir) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn open(tmp: &Path) -> SnapshotDir {
        let db = Arc::new(Database::create(tmp.join("raft.redb")).unwrap());
        SnapshotDir::open(db, tmp.join("snapshots")).unwrap()
    }

    #[test]
    fn file_names_never_leave_the_directory() {
        assert_eq!(SnapshotDir::file_name(&meta(1, "3-2-18-1760")), "3-2-18-1760.snap");
        assert_eq!(SnapshotDir::file_name(&meta(1, "../../etc/passwd")), "______etc_passwd.snap");
        assert_eq!(SnapshotDir::file_name(&meta(1, "")), "snapshot.snap");
    }

    #[test]
    fn recording_replaces_the_previous_file_and_start_up_cleans_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let (a, a_bytes) = write(&dir, &meta(5, "a"));
        dir.record(&meta(5, "a"), &a, a_bytes).unwrap();
        let (b, b_bytes) = write(&dir, &meta(9, "b"));
        dir.record(&meta(9, "b"), &b, b_bytes).unwrap();
        assert_eq!(files(&dir), ["b.snap"], "the previous file goes once the new one is recorded");
        assert_eq!(dir.current().unwrap().map(|c| c.meta), Some(meta(9, "b")));

        // Leftovers of interrupted writes: a temporary file, and a published but unrecorded one.
        std::fs::write(dir.temp_path("recv"), b"half a snapshot").unwrap();
        write(&dir, &meta(12, "c"));
        dir.recover(Some(LogId::new(CommittedLeaderId::new(1, 1), 14))).unwrap();
        assert_eq!(files(&dir), ["b.snap"]);
        assert_eq!(dir.current().unwrap().map(|c| c.meta), Some(meta(9, "b")));
    }

    #[test]
    fn an_installed_but_unrecorded_snapshot_is_adopted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let (a, a_bytes) = write(&dir, &meta(5, "a"));
        dir.record(&meta(5, "a"), &a, a_bytes).unwrap();
        // The state committed the install of "c" at index 12, then the process died.
        write(&dir, &meta(12, "c"));
        dir.recover(Some(LogId::new(CommittedLeaderId::new(1, 1), 12))).unwrap();
        assert_eq!(files(&dir), ["c.snap"]);
        assert_eq!(dir.current().unwrap().map(|c| c.meta), Some(meta(12, "c")));
    }

    #[test]
    fn a_recorded_file_that_is_gone_or_cut_is_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path());
        let (a, a_bytes) = write(&dir, &meta(5, "a"));
        dir.record(&meta(5, "a"), &a, a_bytes).unwrap();
        let bytes = std::fs::read(dir.path(&a)).unwrap();
        std::fs::write(dir.path(&a), &bytes[..bytes.len() - 3]).unwrap();
        dir.recover(Some(LogId::new(CommittedLeaderId::new(1, 1), 7))).unwrap();
        assert_eq!(dir.current().unwrap(), None);
        assert!(files(&dir).is_empty());
    }
}
