//! What replay reads: copies of a data directory's Raft log (`raft.redb`) and snapshot files
//! (`snapshots/*.snap`, and the older ones kept for replay under `snapshots/replay/`), the
//! recorded cycles and configurations found in the log, and the states replay can start from.

use super::ReplayError;
use super::compare::Recorded;
use crate::raft::SnapshotReader;
use crate::record::{ScheduleInputsRecord, SchedulerConfigRecord};
use crate::service::data_dir::{LogCopy, TempDir, check_data_dir};
use crate::state::{Command, State, StateSettings};
use crate::store::Store;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Recorded scheduler configurations by their hash.
pub(crate) type Configs = BTreeMap<Vec<u8>, SchedulerConfigRecord>;

/// Rows imported per write transaction when a snapshot file becomes a base state.
const IMPORT_ROWS_PER_TX: usize = 10_000;

/// One scheduling cycle recorded in the log.
#[derive(Debug, Clone)]
pub(crate) struct LoggedCycle {
    /// The index of the entry holding its decisions.
    pub index: u64,
    /// The entry's term; the decisions applied only if the cycle's term is the same.
    pub entry_term: u64,
    /// The term of the leader that ran it.
    pub term: u64,
    /// The time the scheduler was given.
    pub at_ms: i64,
    /// What it ran on beyond the state (`None`: recorded before log format 10).
    pub inputs: Option<ScheduleInputsRecord>,
    /// Its decisions.
    pub recorded: Recorded,
}

/// A state replay can start from: the empty state before the log's first entry, or a snapshot
/// file.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    /// The index of the last entry it holds (`None`: the empty state before index 0).
    pub index: Option<u64>,
    /// Its file (`None`: the empty state).
    pub file: Option<PathBuf>,
}

/// A data directory's log and snapshot files, copied.
pub(crate) struct Copied {
    /// The copied log.
    pub log: LogCopy,
    /// The first and last entries it holds.
    pub held: Option<(u64, u64)>,
    /// The states replay may start from, oldest first.
    pub bases: Vec<Base>,
    /// Where the copies are (removed when dropped).
    pub scratch: TempDir,
}

impl Copied {
    /// Copies `dir`'s log and snapshot files to a temporary directory and opens the copies.
    pub(crate) fn take(dir: &Path) -> Result<Copied, ReplayError> {
        let log_path = dir.join("raft.redb");
        check_data_dir(dir, &log_path)?;
        let scratch = TempDir::new("replay", &log_path)?;
        // The snapshot files first: the log copied after them holds every entry after each.
        let mut bases = vec![];
        for sub in [dir.join("snapshots").join(crate::raft::REPLAY_BASES), dir.join("snapshots")] {
            let Ok(listing) = std::fs::read_dir(&sub) else { continue };
            for entry in listing.flatten() {
                let path = entry.path();
                if path.extension().and_then(|e| e.to_str()) != Some("snap") {
                    continue;
                }
                let Some(name) = path.file_name() else { continue };
                let copy = scratch.0.join(format!("{}-{}", bases.len(), name.to_string_lossy()));
                // A file replaced by a newer snapshot meanwhile is simply gone.
                if std::fs::copy(&path, &copy).is_err() {
                    continue;
                }
                match SnapshotReader::open(&copy) {
                    Ok(r) => bases.push(Base { index: r.meta().last_log_id.map(|l| l.index), file: Some(copy) }),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable snapshot file")
                    }
                }
            }
        }
        let log = LogCopy::take(&log_path, &scratch)?;
        let held = log.held().map_err(ReplayError::Log)?;
        if held.is_some_and(|(first, _)| first == 0) {
            bases.push(Base { index: None, file: None });
        }
        bases.sort_by_key(|b| b.index.map_or(0, |i| i + 1));
        bases.dedup_by_key(|b| b.index);
        Ok(Copied { log, held, bases, scratch })
    }

    /// Calls `each` with every command of the entries in `from..=to`, with the entry's index and
    /// term, in log order.
    pub(crate) fn each_command(
        &self,
        from: u64,
        to: u64,
        each: impl FnMut(u64, u64, Command),
    ) -> Result<(), ReplayError> {
        self.log.each_command(from, to, each).map_err(ReplayError::Log)
    }

    /// The cycles recorded in the log and every configuration recorded in it, by hash.
    pub(crate) fn scan(&self) -> Result<(Vec<LoggedCycle>, Configs), ReplayError> {
        let (mut cycles, mut configs) = (vec![], BTreeMap::new());
        let Some((first, last)) = self.held else { return Ok((cycles, configs)) };
        self.each_command(first, last, |index, entry_term, cmd| {
            collect(index, entry_term, cmd, &mut cycles, &mut configs);
        })?;
        Ok((cycles, configs))
    }

    /// The state of `base`, with its recorded configuration's settings.
    pub(crate) fn load(&self, base: &Base) -> Result<State, ReplayError> {
        let mut state = match &base.file {
            None => State::new(StateSettings::from_config(&Default::default())),
            Some(file) => {
                let store = Store::open(&self.scratch.0.join("base.redb")).map_err(ReplayError::Store)?;
                let mut reader = SnapshotReader::open(file).map_err(|e| ReplayError::Snapshot(e.to_string()))?;
                store.import_stream(&mut reader, &[], IMPORT_ROWS_PER_TX).map_err(ReplayError::Store)?;
                store.load_state(StateSettings::from_config(&Default::default())).map_err(ReplayError::Store)?
            }
        };
        if let Some(index) = base.index {
            state.set_applied_index(index);
        }
        Ok(state)
    }
}

fn collect(index: u64, entry_term: u64, cmd: Command, cycles: &mut Vec<LoggedCycle>, configs: &mut Configs) {
    match cmd {
        Command::Batch(cmds) => {
            for c in cmds {
                collect(index, entry_term, c, cycles, configs);
            }
        }
        Command::Schedule { term, at_ms, leases, preemptions, failures, inputs } => cycles.push(LoggedCycle {
            index,
            entry_term,
            term,
            at_ms,
            inputs,
            recorded: Recorded { leases, preemptions, failures },
        }),
        Command::RecordSchedulerConfig { config, .. } => {
            configs.insert(config.hash.clone(), config);
        }
        _ => {}
    }
}
