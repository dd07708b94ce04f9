//! The directory of one process run (`<data_dir>/runs/<run_id>/`): the files the agent and the
//! job's supervisor exchange. They are the durable record that lets a restarted agent find its
//! runs again.
//!
//! | file | written by | meaning |
//! |---|---|---|
//! | `lease.json` | agent, before the supervisor starts | the lease (the directory appears atomically with it) |
//! | `devices.json` | agent, with the lease | GPUs and cores given to the run (see [`super::confine::devices`]) |
//! | the directory itself | locked (`flock`) by the supervisor while it lives | liveness of the supervisor |
//! | `supervisor` | supervisor | its pid and start time (for signals; `host` after them for a supervisor host), then anything it says itself |
//! | `pid` | supervisor, once the job was spawned | the job's pid and start time (= process group) |
//! | `stdout`, `stderr` | the job | its output |
//! | `kill` | agent | stop order: grace period and reason |
//! | `exit` | supervisor (agent if the supervisor vanished) | how the job ended |
//! | `.exit.reserve` | agent, with the lease | room for `exit`, taken before the job can fill the disk |
//! | `reported` | agent | the server acknowledged the final event (a second name of `exit`) |
//!
//! Every file is an inode to allocate, and on ext4 without a journal that is most of what a short
//! job costs on disk (docs/benchmarks.md): so the lock is the directory's own, the supervisor's
//! output shares its stamp's file, and `reported` is a link. Directories made by agents before
//! this layout (a `lock` file, `supervisor.log`, an empty `reported`) are still read.

use super::os::ProcStamp;
use crate::agent::runtime::REASON_DISK_FULL;
use crate::model::api::{LeaseOrder, STDERR_MARKER};
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lease, written by the agent before the supervisor starts (the directory appears with it).
pub const LEASE: &str = "lease.json";
/// The lock file of run directories made before the directory itself was locked: a
/// supervisor started by an older agent may still hold it.
pub const LEGACY_LOCK: &str = "lock";
/// The supervisor's pid and start time (one line each time a supervisor started), then its own
/// output: what it says when it cannot start the job.
pub const SUPERVISOR: &str = "supervisor";
/// The job's pid and start time (its pid is also its process group), once it was spawned.
pub const PID: &str = "pid";
/// The job's standard output.
pub const STDOUT: &str = "stdout";
/// The job's standard error.
pub const STDERR: &str = "stderr";
/// The supervisor's own output in run directories made before it went into [`SUPERVISOR`].
pub const LEGACY_SUPERVISOR_LOG: &str = "supervisor.log";
/// A stop order ([`KillRecord`]), written by the agent.
pub const KILL: &str = "kill";
/// How the job ended ([`ExitRecord`]), written once.
pub const EXIT: &str = "exit";
/// Present once the server has the run's final event: a hard link to [`EXIT`] (no new inode),
/// whose modification time, set when it is made, decides when the directory goes.
pub const REPORTED: &str = "reported";
/// Blocks set aside for the exit record when the run directory is made: a job that fills the
/// disk cannot leave its run without one.
pub const EXIT_RESERVE: &str = ".exit.reserve";
/// Bytes set aside for the exit record (an exit record is a few hundred).
const EXIT_RESERVE_BYTES: usize = 8192;
/// A run directory with less free space than this when its job ends counts as full.
pub const NEARLY_FULL_BYTES: u64 = 1 << 20;

/// Reason recorded when a kill order stopped the job.
pub const REASON_KILLED: &str = "killed";
/// Reason recorded when the job outlived `activeDeadlineSeconds`.
pub const REASON_DEADLINE: &str = "deadline exceeded";

/// How a job ended, as recorded in `exit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// Exit status; `128 + n` when signal `n` ended the job; none when it never ran.
    pub exit_code: Option<i32>,
    /// The signal that ended the job, if one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why the job was stopped or did not start (`killed`, `deadline exceeded`, …); none for a job
    /// that exited on its own.
    #[serde(default)]
    pub reason: Option<String>,
    /// Details for people: why the job could not start, the stop order's reason, the deadline, the
    /// signal.
    #[serde(default)]
    pub message: Option<String>,
    /// When the job ended, or was given up, in ms since the epoch (this machine's clock).
    pub finished_at_ms: i64,
    /// What the job used, when it ran and was waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::model::RunUsage>,
}

impl ExitRecord {
    /// True for a job that exited 0 by itself.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.reason.is_none()
    }

    /// The record of a job that ended while `dir`'s disk was (nearly) full: whatever it wrote
    /// may be incomplete (its output, files in its directory), so even an exit status of 0 does
    /// not count as success. A record that already has a reason keeps it.
    pub fn judged_for_disk(self, dir: &RunDir) -> ExitRecord {
        if self.reason.is_some() {
            return self;
        }
        let Some(free) = dir.nearly_full() else { return self };
        let message = format!(
            "the agent's run directory {} had {free} bytes free when the job ended (exit status {}): its output may \
             be incomplete, so the run does not count as succeeded",
            dir.path.display(),
            self.exit_code.map_or("none".to_string(), |c| c.to_string())
        );
        ExitRecord { reason: Some(REASON_DISK_FULL.into()), message: Some(message), ..self }
    }
}

/// A stop order, as recorded in `kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillRecord {
    /// Seconds between SIGTERM and SIGKILL to the job's process group.
    pub grace_seconds: f64,
    /// Why the run is stopped, from the kill order.
    pub reason: String,
}

/// Paths of one run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The directory, `<data_dir>/runs/<run_id>` for the process runtime.
    pub path: PathBuf,
}

impl RunDir {
    /// The directory at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Path of a file in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// True if the file exists.
    pub fn has(&self, name: &str) -> bool {
        self.file(name).exists()
    }

    /// The lease the run was started for.
    pub fn read_lease(&self) -> io::Result<LeaseOrder> {
        let text = std::fs::read(self.file(LEASE))?;
        serde_json::from_slice(&text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", self.file(LEASE).display())))
    }

    /// The exit record, if the job ended.
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        read_json(&self.file(EXIT))
    }

    /// The stop order, if one was given.
    pub fn read_kill(&self) -> io::Result<Option<KillRecord>> {
        read_json(&self.file(KILL))
    }

    /// A pid file (`supervisor` or `pid`): the last stamp in it, since a supervisor started
    /// again for the run adds its own after the first's (and its output lines are no stamps).
    pub fn read_stamp(&self, name: &str) -> io::Result<Option<ProcStamp>> {
        match std::fs::read_to_string(self.file(name)) {
            Ok(t) => Ok(t.lines().rev().find_map(ProcStamp::decode_line)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// True while a supervisor holds the run: it locks the directory, or, in a directory of the
    /// earlier layout, the [`LEGACY_LOCK`] file.
    pub fn supervisor_alive(&self) -> bool {
        super::os::is_locked(&self.path).unwrap_or(false)
            || super::os::is_locked(&self.file(LEGACY_LOCK)).unwrap_or(false)
    }

    /// What the run's supervisors said themselves (their stamps left out), for a run whose
    /// supervisor ended without starting the job.
    pub fn supervisor_output(&self) -> String {
        let mut said = String::new();
        for name in [LEGACY_SUPERVISOR_LOG, SUPERVISOR] {
            let text = std::fs::read_to_string(self.file(name)).unwrap_or_default();
            for line in text.lines().filter(|l| ProcStamp::decode_line(l).is_none()) {
                said.push_str(line);
                said.push('\n');
            }
        }
        said
    }

    /// Appends this process's stamp to [`SUPERVISOR`]: one `write` on an append-only file, so
    /// lines the supervisor prints there cannot split it.
    pub fn add_supervisor_stamp(&self, stamp: &ProcStamp) -> io::Result<()> {
        self.add_to_supervisor_file(&stamp.encode())
    }

    /// Appends a line of what the supervisor says to [`SUPERVISOR`] (a supervisor process's own
    /// output goes there by its stderr; a host's threads write it with this).
    pub fn add_supervisor_words(&self, text: &str) -> io::Result<()> {
        self.add_to_supervisor_file(&format!("{text}\n"))
    }

    fn add_to_supervisor_file(&self, line: &str) -> io::Result<()> {
        std::fs::OpenOptions::new().create(true).append(true).open(self.file(SUPERVISOR))?.write_all(line.as_bytes())
    }

    /// Marks the run reported: [`REPORTED`] as a second name of the exit record, its time set to
    /// now (the sweep keeps the directory `keep_finished` from then). A run with no exit record
    /// gets an empty file.
    pub fn mark_reported(&self) -> io::Result<()> {
        let path = self.file(REPORTED);
        match std::fs::hard_link(self.file(EXIT), &path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return std::fs::write(&path, b""),
            Err(e) => return Err(e),
        }
        std::fs::OpenOptions::new().write(true).open(&path)?.set_modified(std::time::SystemTime::now())
    }

    /// Writes a file atomically (temporary file, then rename), so readers never see half of it.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        write_atomic(&self.file(name), bytes)
    }

    /// Like [`write_atomic`](Self::write_atomic) without forcing the bytes to disk: for the
    /// stamp of the live job (`pid`), which means nothing after the machine
    /// restarts, so the fsync would only slow every job's start.
    pub fn write_volatile(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.file(name);
        let tmp = self.file(&format!(".{name}.tmp.{}", std::process::id()));
        let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// The free bytes of the run directory's disk, if it has less than [`NEARLY_FULL_BYTES`].
    pub fn nearly_full(&self) -> Option<u64> {
        crate::disk_space::free_bytes(&self.path).ok().filter(|free| *free < NEARLY_FULL_BYTES)
    }

    /// Writes `exit` unless it exists already (the first writer wins). The record goes into the
    /// blocks set aside with the lease ([`EXIT_RESERVE`]) when they are there, so it can be
    /// written on a full disk.
    pub fn write_exit_once(&self, rec: &ExitRecord) -> io::Result<bool> {
        if self.has(EXIT) {
            return Ok(false);
        }
        let bytes = serde_json::to_vec(rec).map_err(io::Error::other)?;
        let tmp = self.file(&format!(".{EXIT}.{}", std::process::id()));
        let written = match std::fs::rename(self.file(EXIT_RESERVE), &tmp) {
            // Overwriting blocks the file holds needs no new ones; shrinking frees the rest.
            Ok(()) => (|| {
                let mut f = std::fs::OpenOptions::new().write(true).open(&tmp)?;
                f.write_all(&bytes)?;
                f.set_len(bytes.len() as u64)?;
                f.sync_all()
            })(),
            Err(_) => (|| {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&bytes)?;
                f.sync_all()
            })(),
        };
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        // Named `exit` unless that appeared meanwhile: the record already there stays.
        let linked = match rename_no_replace(&tmp, &self.file(EXIT)) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if !linked {
            let _ = std::fs::remove_file(&tmp);
        }
        if linked {
            // The record's blocks are synced, but its name lives in the directory: without this
            // a machine crash could lose `exit` for an end the agent already reported, and a
            // restarted agent would judge the run anew.
            std::fs::File::open(&self.path)?.sync_all()?;
        }
        Ok(linked)
    }

    /// Up to `max` bytes of the job's output file `name` from `from` (None: the last
    /// `tail` bytes): where they start, and the bytes. A file not there yet reads as empty.
    pub fn read_output(&self, name: &str, from: Option<u64>, tail: u64, max: usize) -> io::Result<(u64, Vec<u8>)> {
        let mut f = match std::fs::File::open(self.file(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((from.unwrap_or(0), Vec::new())),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        let start = from.unwrap_or_else(|| len.saturating_sub(tail)).min(len);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.take(max as u64).read_to_end(&mut buf)?;
        Ok((start, buf))
    }

    /// The end of the job's output (stdout, then stderr under [`STDERR_MARKER`]), at most
    /// `max_bytes` in all; when both are longer than half, half each.
    pub fn log_tail(&self, max_bytes: usize) -> Option<String> {
        if max_bytes == 0 {
            return None;
        }
        let out = read_tail(&self.file(STDOUT), max_bytes).unwrap_or_default();
        let err = read_tail(&self.file(STDERR), max_bytes).unwrap_or_default();
        let (out, err) = (out.as_str(), err.as_str());
        let text = match (out.is_empty(), err.is_empty()) {
            (true, true) => return None,
            (false, true) => out.to_string(),
            (true, false) => format!("{STDERR_MARKER}{err}"),
            (false, false) if out.len() + err.len() + STDERR_MARKER.len() < max_bytes => {
                let sep = if out.ends_with('\n') { "" } else { "\n" };
                format!("{out}{sep}{STDERR_MARKER}{err}")
            }
            (false, false) => {
                let half = max_bytes / 2;
                let out = crate::agent::runtime::tail_text(out, half);
                let err = crate::agent::runtime::tail_text(err, max_bytes - half - 16);
                let sep = if out.ends_with('\n') { "" } else { "\n" };
                format!("{out}{sep}{STDERR_MARKER}{err}")
            }
        };
        Some(crate::agent::runtime::tail_text(&text, max_bytes))
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `path` through a temporary sibling and a rename; on a failure (a full disk) the
/// temporary file is removed, so nothing half-written stays.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Renames `from` to `to` unless `to` exists (AlreadyExists then): one change of the directory
/// (`renameat2` with `RENAME_NOREPLACE`) where a hard link and an unlink are two. File systems
/// without the flag get the link and the unlink.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (cf, ct) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that live across the call.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, cf.as_ptr(), libc::AT_FDCWD, ct.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
        return Err(e);
    }
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

/// Sets aside room for a run's exit record in the (new) run directory `dir`.
pub fn reserve_exit(dir: &Path) -> io::Result<()> {
    std::fs::write(dir.join(EXIT_RESERVE), [b' '; EXIT_RESERVE_BYTES])
}

/// The last `max_bytes` of a file as text (invalid UTF-8 replaced).
fn read_tail(path: &Path, max_bytes: usize) -> io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max_bytes as u64);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(max_bytes as u64).read_to_end(&mut buf)?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0 {
        // Drop the partial first line.
        if let Some(i) = text.find('\n') {
            text.drain(..=i);
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record of a job that exited by itself with `code` at `finished_at_ms`.
    fn exited(code: i32, finished_at_ms: i64) -> ExitRecord {
        ExitRecord { exit_code: Some(code), signal: None, reason: None, message: None, finished_at_ms, usage: None }
    }

    #[test]
    fn the_exit_record_goes_into_the_room_set_aside_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rd = RunDir::new(dir.path().to_path_buf());
        reserve_exit(dir.path()).expect("reserve");
        assert_eq!(std::fs::metadata(rd.file(EXIT_RESERVE)).expect("reserve").len(), EXIT_RESERVE_BYTES as u64);
        let rec = exited(3, 7);
        assert!(rd.write_exit_once(&rec).expect("write"));
        assert_eq!(rd.read_exit().expect("read"), Some(rec.clone()));
        // The room was used (and trimmed), and nothing else is left behind.
        assert!(!rd.has(EXIT_RESERVE));
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![EXIT.to_string()]);
        // A record that says why it ended keeps its reason when judged for the disk.
        let killed = ExitRecord { reason: Some(REASON_KILLED.into()), ..rec };
        assert_eq!(killed.clone().judged_for_disk(&rd), killed);
    }

    #[test]
    fn reported_is_a_second_name_of_the_exit_record_dated_when_it_was_made() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let rd = RunDir::new(dir.path().to_path_buf());
        let rec = exited(0, 1);
        assert!(rd.write_exit_once(&rec).expect("write"));
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options().write(true).open(rd.file(EXIT)).expect("open").set_modified(old).expect("age it");
        rd.mark_reported().expect("mark");
        let (exit, reported) =
            (std::fs::metadata(rd.file(EXIT)).expect("exit"), std::fs::metadata(rd.file(REPORTED)).expect("reported"));
        assert_eq!((exit.ino(), exit.nlink()), (reported.ino(), 2), "one inode, two names");
        let age = reported.modified().expect("mtime").elapsed().expect("not in the future");
        assert!(age < std::time::Duration::from_secs(600), "dated now, not when the job ended: {age:?}");
        assert_eq!(rd.read_exit().expect("read"), Some(rec));
        // Marking again changes nothing; a run without an exit record gets an empty marker.
        rd.mark_reported().expect("again");
        let bare = tempfile::tempdir().expect("tempdir");
        let bare = RunDir::new(bare.path().to_path_buf());
        bare.mark_reported().expect("mark");
        assert_eq!(std::fs::read(bare.file(REPORTED)).expect("marker"), b"");
    }

    #[test]
    fn the_supervisor_file_holds_stamps_and_what_supervisors_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rd = RunDir::new(dir.path().to_path_buf());
        assert_eq!(rd.read_stamp(SUPERVISOR).expect("read"), None);
        let first = ProcStamp { pid: 41, start_time: 7, host: false };
        rd.add_supervisor_stamp(&first).expect("stamp");
        assert_eq!(rd.read_stamp(SUPERVISOR).expect("read"), Some(first));
        // What a supervisor prints goes after its stamp; one started again adds its own.
        let mut f = std::fs::OpenOptions::new().append(true).open(rd.file(SUPERVISOR)).expect("open");
        f.write_all(b"cannot spawn: 12 34 things\n").expect("say");
        // A host's stamp says so, and is no line of text either.
        let second = ProcStamp { pid: 42, start_time: 9, host: true };
        rd.add_supervisor_stamp(&second).expect("stamp");
        assert_eq!(rd.read_stamp(SUPERVISOR).expect("read"), Some(second));
        assert_eq!(rd.supervisor_output(), "cannot spawn: 12 34 things\n");
        // A directory from before this layout: a separate log, a stamp file of one line.
        std::fs::write(rd.file(LEGACY_SUPERVISOR_LOG), "old words\n").expect("legacy log");
        assert_eq!(rd.supervisor_output(), "old words\ncannot spawn: 12 34 things\n");
    }

    #[test]
    fn exit_is_written_once_and_tail_combines_outputs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rd = RunDir::new(dir.path().to_path_buf());
        let first = exited(0, 1);
        assert!(rd.write_exit_once(&first).expect("write"));
        let second = ExitRecord { exit_code: Some(1), ..first.clone() };
        assert!(!rd.write_exit_once(&second).expect("write"));
        assert_eq!(rd.read_exit().expect("read"), Some(first));
        assert_eq!(rd.log_tail(1024), None);
        let out: String = (1..=150).map(|i| format!("out {i}\n")).collect();
        std::fs::write(rd.file(STDOUT), &out).expect("write");
        std::fs::write(rd.file(STDERR), "boom\n").expect("write");
        // Every line fits: all of them, not the last hundred.
        let tail = rd.log_tail(4096).expect("tail");
        assert_eq!(tail, format!("{out}--- stderr ---\nboom\n"));
        let small = rd.log_tail(64).expect("tail");
        assert!(small.len() <= 64 && small.ends_with("boom\n") && small.contains("out 150\n"), "{small:?}");
        assert_eq!(rd.log_tail(0), None, "a server that keeps none is sent none");
    }
}
