//! The fake runtime's journal (`[fake] journal = true`): one JSON line per run started, ended
//! and forgotten, in `<data_dir>/fake-runs.jsonl`. A restarted agent reads it to find its runs
//! again, as a process agent finds its run directories and a Kubernetes agent its pods, so a
//! `kill -9` of a fake agent does not lose runs that a real one would keep. Fault tests also
//! read it: it says when each run really ran on this agent.

use crate::model::{JobId, RunId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

/// The journal's file name in the agent's data directory.
pub const FILE: &str = "fake-runs.jsonl";

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(super) enum Entry {
    /// A run started at `at_ms`; it will end by itself at `ends_at_ms` with `exit_code`.
    Start {
        /// The run.
        run_id: RunId,
        /// Its job.
        job_id: JobId,
        /// When it started (ms since the epoch).
        at_ms: i64,
        /// When it ends by itself.
        ends_at_ms: i64,
        /// The exit code it ends with.
        exit_code: i32,
    },
    /// A run ended at `at_ms` (by itself, or stopped), with `exit_code`.
    End {
        /// The run.
        run_id: RunId,
        /// When.
        at_ms: i64,
        /// Its exit code.
        exit_code: i32,
        /// True if a stop order ended it.
        killed: bool,
    },
    /// The server has the run's end: it is no longer held.
    Forget {
        /// The run.
        run_id: RunId,
    },
}

/// What the journal says of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// Its job.
    pub job_id: JobId,
    /// When it started.
    pub started_ms: i64,
    /// When it ends, or ended, by itself.
    pub ends_at_ms: i64,
    /// The exit code it ends with by itself.
    pub exit_code: i32,
    /// How it ended, if the journal says: when, the exit code, and whether it was stopped.
    pub ended: Option<(i64, i32, bool)>,
    /// The server has its end.
    pub forgotten: bool,
}

/// Appends entries to the journal.
pub(super) struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<std::fs::File>,
}

impl Journal {
    /// Opens (creating) the journal in `data_dir`.
    pub(super) fn open(data_dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join(FILE);
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Journal { path, file: std::sync::Mutex::new(file) })
    }

    /// Appends one entry as one write (whole lines, however the process ends).
    pub(super) fn append(&self, entry: &Entry) {
        let Ok(mut line) = serde_json::to_vec(entry) else { return };
        line.push(b'\n');
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(&line) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot write the fake runtime's journal");
        }
    }

    /// The runs the journal records, by run id.
    pub(super) fn read(&self) -> io::Result<BTreeMap<RunId, RunRecord>> {
        read(&self.path)
    }
}

/// The runs recorded in the journal at `path`, by run id (a torn last line is skipped).
pub fn read(path: &Path) -> io::Result<BTreeMap<RunId, RunRecord>> {
    let mut runs = BTreeMap::new();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(runs),
        Err(e) => return Err(e),
    };
    for line in io::BufReader::new(file).lines() {
        let Ok(entry) = serde_json::from_str::<Entry>(&line?) else { continue };
        match entry {
            Entry::Start { run_id, job_id, at_ms, ends_at_ms, exit_code } => {
                runs.insert(
                    run_id,
                    RunRecord { job_id, started_ms: at_ms, ends_at_ms, exit_code, ended: None, forgotten: false },
                );
            }
            Entry::End { run_id, at_ms, exit_code, killed } => {
                if let Some(r) = runs.get_mut(&run_id) {
                    r.ended.get_or_insert((at_ms, exit_code, killed));
                }
            }
            Entry::Forget { run_id } => {
                if let Some(r) = runs.get_mut(&run_id) {
                    r.forgotten = true;
                }
            }
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_read_back_with_their_ends_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path()).unwrap();
        let (a, b) = (RunId::from_parts(1, 1), RunId::from_parts(1, 2));
        let job = JobId::from_parts(1, 3);
        j.append(&Entry::Start { run_id: a, job_id: job, at_ms: 10, ends_at_ms: 50, exit_code: 0 });
        j.append(&Entry::Start { run_id: b, job_id: job, at_ms: 60, ends_at_ms: 90, exit_code: 3 });
        j.append(&Entry::End { run_id: a, at_ms: 20, exit_code: 143, killed: true });
        j.append(&Entry::Forget { run_id: a });
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE))
            .unwrap()
            .write_all(b"{\"event\":\"en")
            .unwrap();
        let runs = j.read().unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[&a].ended, Some((20, 143, true)));
        assert!(runs[&a].forgotten);
        assert_eq!((runs[&b].ended, runs[&b].exit_code, runs[&b].forgotten), (None, 3, false));
    }
}
