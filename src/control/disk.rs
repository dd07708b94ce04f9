//! Free space on the data directory's file system, and which writes it still lets in.
//!
//! A write that reaches the disk when it is full fails inside Raft's log or the state database,
//! and Raft stops for good on a storage error. So writes are refused before they are proposed,
//! while there is still room for what is under way: below `server.disk_reserve` free, the writes
//! that add data (submissions, queue changes) are refused with 507, while those that let running
//! work finish and free space (run reports, scheduling decisions, cancels, retention) go on;
//! below a quarter of the reserve every write is refused. A leader of several servers that runs
//! low refuses every write and hands its leadership over (see `server::disk`), since another
//! member can take them.

use crate::disk_space::free_bytes;
use crate::state::Command;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// How much room the data directory has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskState {
    /// At least the reserve is free: every write is taken.
    Ample,
    /// Less than the reserve: writes that add data are refused.
    Low,
    /// Less than a quarter of the reserve: every write is refused.
    Exhausted,
}

/// Why a write was refused for lack of disk space.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the data directory {} has {} free, below server.disk_reserve ({}): {}; nothing was stored. Free space \
     there (writes resume by themselves)",
    .dir.display(),
    bytes(*.free),
    bytes(*.reserve),
    .what
)]
pub(crate) struct DiskFull {
    /// The data directory.
    pub dir: PathBuf,
    /// Bytes free when it was refused.
    pub free: u64,
    /// The configured reserve.
    pub reserve: u64,
    /// Which writes are refused.
    pub what: String,
}

/// Bytes as text with a binary unit (`12.0 MiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

/// Far from the reserve, a reading is reused for this long before the file system is asked again
/// (one `statvfs`).
const FRESH_MS: u64 = 100;

/// Watches the free space of one directory's file system.
pub(crate) struct DiskGuard {
    dir: PathBuf,
    reserve: u64,
    start: Instant,
    /// Bytes free at the last reading (`u64::MAX` before any, or when it cannot be read).
    free: AtomicU64,
    /// When the last reading was taken, in ms since `start` (plus one; 0: never).
    read_at: AtomicU64,
    /// Set while this server leads others who could take its writes: it then takes none while
    /// low, so that it can hand the leadership over.
    hand_over: AtomicBool,
    /// Reads the free bytes of the file system holding a directory (`statvfs`; tests give their
    /// own).
    read: Box<dyn Fn(&Path) -> u64 + Send + Sync>,
}

/// Free bytes of the file system that holds `dir`, or will hold it once made (`u64::MAX` when it
/// cannot be read).
fn read_free(dir: &Path) -> u64 {
    let existing = dir.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/"));
    free_bytes(existing).unwrap_or(u64::MAX)
}

impl DiskGuard {
    /// A guard of `dir`'s file system keeping `reserve` bytes free.
    pub(crate) fn new(dir: &Path, reserve: u64) -> Self {
        DiskGuard {
            dir: dir.to_path_buf(),
            reserve,
            start: Instant::now(),
            free: AtomicU64::new(u64::MAX),
            read_at: AtomicU64::new(0),
            hand_over: AtomicBool::new(false),
            read: Box::new(read_free),
        }
    }

    /// The directory watched.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The reserve kept free, in bytes.
    pub(crate) fn reserve(&self) -> u64 {
        self.reserve
    }

    /// Bytes free, as read at most [`FRESH_MS`] ago while more than twice the reserve was free;
    /// closer to the reserve, read afresh each time: in [`FRESH_MS`] a burst of submissions can
    /// write well past the reserve (on a 48 MB tmpfs with an 8 MiB reserve, 1.5–3.8 MiB past it
    /// on a reading 100 ms old).
    pub(crate) fn free(&self) -> u64 {
        let now = self.start.elapsed().as_millis() as u64 + 1;
        let at = self.read_at.load(Ordering::Relaxed);
        let last = self.free.load(Ordering::Relaxed);
        if at != 0 && now.saturating_sub(at) < FRESH_MS && last / 2 >= self.reserve {
            return last;
        }
        self.refresh()
    }

    /// Reads the free space now (of the file system that holds the directory, or will hold it
    /// once made).
    pub(crate) fn refresh(&self) -> u64 {
        let free = (self.read)(&self.dir);
        self.free.store(free, Ordering::Relaxed);
        self.read_at.store(self.start.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
        free
    }

    /// The state for `free` bytes free.
    pub(crate) fn state_at(&self, free: u64) -> DiskState {
        if free >= self.reserve {
            DiskState::Ample
        } else if free >= self.reserve / 4 {
            DiskState::Low
        } else {
            DiskState::Exhausted
        }
    }

    /// The state now (free space read at most [`FRESH_MS`] ago).
    pub(crate) fn state(&self) -> DiskState {
        self.state_at(self.free())
    }

    /// Says whether this server leads others that could take its writes (see the module).
    pub(crate) fn set_hand_over(&self, on: bool) {
        self.hand_over.store(on, Ordering::Relaxed);
    }

    /// Whether `cmd` may be proposed with the space left.
    pub(crate) fn admit(&self, cmd: &Command) -> Result<(), DiskFull> {
        let free = self.free();
        let refused = match self.state_at(free) {
            DiskState::Ample => return Ok(()),
            _ if self.hand_over.load(Ordering::Relaxed) => {
                "this server takes no writes and hands the leadership to another server; retry"
            }
            DiskState::Low if !adds_data(cmd) => return Ok(()),
            DiskState::Low => "submissions and queue changes are refused",
            DiskState::Exhausted => "every write is refused",
        };
        crate::metrics::global().writes_refused_for_disk.inc();
        Err(DiskFull { dir: self.dir.clone(), free, reserve: self.reserve, what: refused.to_string() })
    }
}

/// Whether `cmd` adds data rather than carrying running work to its end or removing data.
fn adds_data(cmd: &Command) -> bool {
    match cmd {
        Command::Batch(cmds) => cmds.iter().any(adds_data),
        Command::Submit { .. } | Command::CreateQueue { .. } | Command::UpdateQueue { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard whose file system reports `free` bytes.
    fn guard(reserve: u64, free: u64) -> DiskGuard {
        let mut g = DiskGuard::new(Path::new("/data"), reserve);
        g.free.store(free, Ordering::Relaxed);
        // A reading taken "now" that stays fresh for the test while it is far from the reserve.
        g.read_at.store(u64::MAX / 2, Ordering::Relaxed);
        g.read = Box::new(move |_| free);
        g
    }

    fn submit() -> Command {
        Command::Submit {
            queue: "A".parse().unwrap(),
            job_set: "s".parse().unwrap(),
            at_ms: 0,
            owner: None,
            jobs: vec![],
        }
    }

    fn cancel() -> Command {
        Command::ExecutorLost { executor: "e".parse().unwrap(), at_ms: 0, max_attempted_runs: 1 }
    }

    #[test]
    fn below_the_reserve_only_what_adds_data_is_refused_and_below_a_quarter_everything() {
        let mib = 1 << 20;
        let ample = guard(64 * mib, 65 * mib);
        assert_eq!(ample.state(), DiskState::Ample);
        assert!(ample.admit(&submit()).is_ok());
        let low = guard(64 * mib, 20 * mib);
        assert_eq!(low.state(), DiskState::Low);
        let e = low.admit(&submit()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the data directory /data has 20.0 MiB free, below server.disk_reserve (64.0 MiB)"),
            "{e}"
        );
        assert!(e.to_string().contains("submissions and queue changes are refused"), "{e}");
        assert!(low.admit(&cancel()).is_ok());
        assert!(low.admit(&Command::Batch(vec![cancel(), submit()])).is_err());
        let exhausted = guard(64 * mib, 15 * mib);
        assert_eq!(exhausted.state(), DiskState::Exhausted);
        assert!(exhausted.admit(&cancel()).unwrap_err().to_string().contains("every write is refused"));
        // A leader that can hand over takes nothing while low.
        low.set_hand_over(true);
        assert!(low.admit(&cancel()).unwrap_err().to_string().contains("hands the leadership"));
        ample.set_hand_over(true);
        assert!(ample.admit(&cancel()).is_ok());
    }

    #[test]
    fn near_the_reserve_every_question_reads_the_file_system_afresh() {
        let mib = 1 << 20;
        // A reading fresh in time: far from the reserve it is reused, near it read again.
        let mut far = guard(8 * mib, 65 * mib);
        far.read = Box::new(|_| 0);
        assert_eq!(far.free(), 65 * mib, "a fresh reading far from the reserve is reused");
        let mut near = guard(8 * mib, 15 * mib);
        near.read = Box::new(|_| 7 << 20);
        assert_eq!(near.free(), 7 * mib, "a reading within twice the reserve is taken again");
        assert_eq!(near.state(), DiskState::Low);
        assert!(near.admit(&submit()).is_err());
    }

    #[test]
    fn sizes_are_written_with_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
