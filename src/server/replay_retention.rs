//! Replay retention (`[cluster] replay_retention`): the log is kept for a window behind the
//! present, with the snapshot files that newer ones replaced kept under `snapshots/replay/` as the
//! states `convoy replay` starts from. Every [`EVERY`], on each member:
//! - the newest base older than the window stays (replay of the window's first cycles starts
//!   there), with every newer one; older bases go, and so do bases the log no longer continues
//!   (a member that caught up by snapshot has a gap after them);
//! - the log is purged up to the oldest base kept, and never closer to the latest snapshot than
//!   `log_entries_kept` (lagging members still catch up from the log);
//! - while the disk runs low (`server.disk_reserve`), bases go and the log is purged as with
//!   retention off: replay then reaches only the cycles after the latest snapshot.

use crate::control::Control;
use crate::control::disk::DiskState;
use crate::raft::{RaftNode, SnapshotReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// How often the bases and the log are trimmed.
const EVERY: Duration = Duration::from_secs(2);

/// A snapshot file kept for replay.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Base {
    /// The index of the last entry it holds.
    pub index: u64,
    /// When it was written.
    pub written: SystemTime,
    /// Its file.
    pub path: PathBuf,
}

/// What one pass decides: the bases to delete and the index to purge the log up to.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Trim {
    /// Bases no longer needed.
    pub delete: Vec<PathBuf>,
    /// Purge the log up to and including this index, if above what is purged already.
    pub purge_upto: Option<u64>,
}

/// Runs until `shutdown` turns true.
pub(super) async fn run(
    app: Arc<Control>,
    raft: RaftNode,
    window: Duration,
    bases: PathBuf,
    mut shutdown: watch::Receiver<bool>,
) {
    let kept_behind = app.config.cluster.log_entries_kept;
    let mut low_disk = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        let (snapshot, purged) = {
            let m = raft.metrics();
            let m = m.borrow();
            (m.snapshot.map(|l| l.index), m.purged.map(|l| l.index))
        };
        let Some(snapshot) = snapshot else { continue };
        let low = app.disk.state() != DiskState::Ample;
        if low != low_disk {
            low_disk = low;
            if low {
                tracing::warn!(
                    "the disk is low: replay bases are dropped and the log purged as with replay retention off"
                );
            }
        }
        let dir = bases.clone();
        let listed = tokio::task::spawn_blocking(move || list(&dir)).await.unwrap_or_default();
        let window_start = SystemTime::now().checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        let trim = decide(&listed, window_start, snapshot, purged, kept_behind, low);
        for path in &trim.delete {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a replay base");
            }
        }
        if let Some(upto) = trim.purge_upto
            && let Err(e) = raft.purge_log(upto).await
        {
            tracing::warn!(upto, error = %e, "the log could not be purged for replay retention");
        }
    }
}

/// The bases in `dir`, oldest first (unreadable files are skipped: a base being moved in).
pub(crate) fn list(dir: &Path) -> Vec<Base> {
    let Ok(listing) = std::fs::read_dir(dir) else { return vec![] };
    let mut bases: Vec<Base> = listing
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let index = SnapshotReader::open(&path).ok()?.meta().last_log_id?.index;
            let written = e.metadata().ok()?.modified().ok()?;
            Some(Base { index, written, path })
        })
        .collect();
    bases.sort_by_key(|b| b.index);
    bases
}

/// What to delete and purge, given the bases (oldest first), the start of the window, the latest
/// snapshot's index, what the log has purged, the entries kept behind the snapshot, and whether
/// the disk is low.
pub(crate) fn decide(
    bases: &[Base],
    window_start: SystemTime,
    snapshot: u64,
    purged: Option<u64>,
    kept_behind: u64,
    low_disk: bool,
) -> Trim {
    let behind = snapshot.saturating_sub(kept_behind);
    let mut trim = Trim::default();
    // A base is useful only while the log holds the entry after it.
    let continued = |b: &Base| purged.is_none_or(|p| p <= b.index);
    let floor = if low_disk {
        trim.delete = bases.iter().map(|b| b.path.clone()).collect();
        behind
    } else {
        // The newest base written before the window starts, and all newer ones, stay.
        let cut = bases.iter().rposition(|b| b.written <= window_start).unwrap_or(0);
        for (i, b) in bases.iter().enumerate() {
            if i < cut || !continued(b) {
                trim.delete.push(b.path.clone());
            }
        }
        match bases.iter().enumerate().find(|(i, b)| *i >= cut && continued(b)) {
            Some((_, oldest_kept)) => oldest_kept.index.min(behind),
            // No base: a log never purged replays from the empty state; keep it whole.
            None if purged.is_none() => 0,
            None => behind,
        }
    };
    trim.purge_upto = (floor > 0 && purged.is_none_or(|p| floor > p)).then_some(floor);
    trim
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(index: u64, age_s: u64, now: SystemTime) -> Base {
        Base { index, written: now - Duration::from_secs(age_s), path: PathBuf::from(format!("b{index}")) }
    }

    #[test]
    fn the_newest_base_before_the_window_and_newer_ones_stay() {
        let now = SystemTime::now();
        let window_start = now - Duration::from_secs(3600);
        let bases = [base(100, 9000, now), base(200, 5000, now), base(300, 1000, now), base(400, 10, now)];
        let t = decide(&bases, window_start, 500, Some(50), 20, false);
        assert_eq!(t.delete, vec![PathBuf::from("b100")]);
        assert_eq!(t.purge_upto, Some(200));
        // Never closer to the snapshot than the entries kept behind it.
        let t = decide(&bases[3..], window_start, 410, Some(50), 20, false);
        assert_eq!(t.purge_upto, Some(390));
    }

    #[test]
    fn a_young_log_is_kept_whole_and_a_gap_drops_the_bases_before_it() {
        let now = SystemTime::now();
        let window_start = now - Duration::from_secs(3600);
        // Never purged, no base older than the window: the log stays from its first entry.
        let t = decide(&[base(100, 60, now)], window_start, 300, None, 20, false);
        assert_eq!(t, Trim { delete: vec![], purge_upto: Some(100) });
        let t = decide(&[], window_start, 300, None, 20, false);
        assert_eq!(t, Trim::default());
        // A member that caught up by snapshot purged past its bases: they go.
        let t = decide(&[base(100, 60, now), base(200, 30, now)], window_start, 900, Some(800), 20, false);
        assert_eq!(t.delete, vec![PathBuf::from("b100"), PathBuf::from("b200")]);
        assert_eq!(t.purge_upto, Some(880));
    }

    #[test]
    fn a_low_disk_purges_as_with_retention_off() {
        let now = SystemTime::now();
        let bases = [base(100, 9000, now), base(200, 10, now)];
        let t = decide(&bases, now - Duration::from_secs(3600), 500, Some(50), 20, true);
        assert_eq!(t.delete.len(), 2);
        assert_eq!(t.purge_upto, Some(480));
    }
}
