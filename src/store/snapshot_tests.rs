//! Snapshot streams and the state digest: export and import round trips, bounded transactions,
//! corrupt streams and crashes part-way through an import, old inline snapshots, and a digest
//! that does not depend on how applies were batched.

use super::snapshot_stream::convert_legacy;
use super::tables::*;
use super::tests::{apply_all, job, sample, settings};
use super::*;
use crate::model::{JobSetName, QueueName};
use crate::record::raft::LogIdRecord;
use crate::record::{FrameSource, MemoryFrames, STATE_SCHEMA_VERSION, encode};
use crate::state::{Command, State};
use redb::TableHandle;
use std::io;

fn export(store: &Store) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    store.pin_export().unwrap().write_rows(&mut frames).unwrap();
    frames
}

fn raft_meta(index: u64) -> Vec<(&'static str, Vec<u8>)> {
    let applied = encode(&Some(LogIdRecord { term: 2, node_id: 1, index })).unwrap();
    vec![(RAFT_APPLIED, applied)]
}

fn set_meta(store: &Store, meta: &[(&str, Vec<u8>)]) {
    let tx = store.write().unwrap();
    {
        let mut t = tx.open_table(META).unwrap();
        for (k, v) in meta {
            t.insert(*k, v.as_slice()).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn staging_tables(store: &Store) -> Vec<String> {
    let tx = store.read().unwrap();
    tx.list_tables().unwrap().map(|t| t.name().to_string()).filter(|n| n.starts_with("import.")).collect()
}

/// Frames as a real snapshot file hands them out, failing at frame `fail_at` the way a truncated
/// or corrupt file does.
struct FailingFrames {
    inner: MemoryFrames,
    served: usize,
    fail_at: usize,
    panic: bool,
}

impl FrameSource for FailingFrames {
    fn next_frame(&mut self) -> io::Result<Option<&[u8]>> {
        if self.served == self.fail_at {
            if self.panic {
                panic!("the process dies in the middle of the install");
            }
            return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot file x.snap is truncated"));
        }
        self.served += 1;
        self.inner.next_frame()
    }
}

#[test]
fn a_stream_round_trips_into_another_store() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    let state = sample(&a);
    set_meta(&a, &raft_meta(7));
    let frames = export(&a);
    assert_eq!(crate::record::decode::<u32>(&frames[0]).unwrap(), STATE_SCHEMA_VERSION, "the version comes first");

    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    sample(&b); // some other state, replaced whole
    apply_all(
        &b,
        &mut State::new(settings()),
        vec![Command::create_queue(crate::model::Queue::new(QueueName::new("stale").unwrap(), 1.0))],
    );
    let stats = b.import_stream(&mut MemoryFrames::new(frames.clone()), &raft_meta(7), 1000).unwrap();
    assert_eq!(stats, ImportStats { rows: frames.len() as u64 - 1, transactions: 1 });
    let loaded = b.load_state(settings()).unwrap();
    assert_eq!(loaded.live_jobs(), state.live_jobs());
    assert_eq!(loaded.next_seq(), state.next_seq());
    assert!(loaded.queue(&QueueName::new("stale").unwrap()).is_none(), "the old state is gone");
    assert_eq!(export(&b), frames, "the imported state exports the same stream");
    assert_eq!(b.digest().unwrap(), a.digest().unwrap());
    assert_eq!(b.digest().unwrap().applied_index(), 7);
    assert!(staging_tables(&b).is_empty());
}

#[test]
fn an_import_commits_bounded_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    let mut state = sample(&a);
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("many").unwrap());
    let jobs = (100..300).map(|i| job(i, None).into()).collect();
    apply_all(&a, &mut state, vec![Command::Submit { queue: q, job_set: s, at_ms: 5, owner: None, jobs }]);
    set_meta(&a, &raft_meta(3));
    let frames = export(&a);
    let rows = frames.len() as u64 - 1;
    assert!(rows > 600, "{rows} rows");
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    let stats = b.import_stream(&mut MemoryFrames::new(frames), &raft_meta(3), 50).unwrap();
    // A commit every 50 rows, then the swap with the last rows.
    assert_eq!(stats, ImportStats { rows, transactions: rows / 50 + 1 });
    assert_eq!(b.digest().unwrap(), a.digest().unwrap());
}

#[test]
fn a_stream_that_fails_part_way_leaves_the_state_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    sample(&a);
    let frames = export(&a);
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    let mut state = State::new(settings());
    apply_all(
        &b,
        &mut state,
        vec![Command::create_queue(crate::model::Queue::new(QueueName::new("mine").unwrap(), 1.0))],
    );
    set_meta(&b, &raft_meta(2));
    let before = b.digest().unwrap();
    for fail_at in [0, 1, 5, frames.len() - 1, frames.len()] {
        let mut source = FailingFrames { inner: MemoryFrames::new(frames.clone()), served: 0, fail_at, panic: false };
        let e = b.import_stream(&mut source, &raft_meta(9), 2).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        assert_eq!(b.digest().unwrap(), before, "failing at frame {fail_at} changed the state");
        assert!(staging_tables(&b).is_empty(), "a failed import drops its staging tables");
    }
    // The same stream, whole, then goes in.
    b.import_stream(&mut MemoryFrames::new(frames), &raft_meta(9), 2).unwrap();
    assert_eq!(b.digest().unwrap().applied_index(), 9);
}

#[test]
fn a_crash_in_the_middle_of_an_import_is_undone_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    sample(&a);
    let frames = export(&a);
    let path = dir.path().join("b.redb");
    let b = Store::open(&path).unwrap();
    let mut state = State::new(settings());
    apply_all(
        &b,
        &mut state,
        vec![Command::create_queue(crate::model::Queue::new(QueueName::new("mine").unwrap(), 1.0))],
    );
    set_meta(&b, &raft_meta(2));
    let before = b.digest().unwrap();
    let fail_at = frames.len() - 2;
    let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut source = FailingFrames { inner: MemoryFrames::new(frames.clone()), served: 0, fail_at, panic: true };
        b.import_stream(&mut source, &raft_meta(9), 2)
    }));
    assert!(crashed.is_err());
    assert!(!staging_tables(&b).is_empty(), "the batches committed before the crash are still there");
    assert_eq!(b.digest().unwrap(), before, "readers still see the old state");
    drop(b);
    let b = Store::open(&path).unwrap();
    assert!(staging_tables(&b).is_empty(), "opening the database drops them");
    assert_eq!(b.digest().unwrap(), before);
    assert_eq!(b.load_state(settings()).unwrap().queues().len(), 1);
}

#[test]
fn streams_of_another_schema_or_without_one_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    let mut frames = vec![encode(&(STATE_SCHEMA_VERSION + 1)).unwrap()];
    let e = b.import_stream(&mut MemoryFrames::new(frames.clone()), &[], 10).unwrap_err();
    assert!(
        matches!(e, StoreError::SnapshotVersion { found, expected } if found == STATE_SCHEMA_VERSION + 1 && expected == STATE_SCHEMA_VERSION),
        "{e}"
    );
    frames.clear();
    let e = b.import_stream(&mut MemoryFrames::new(frames), &[], 10).unwrap_err();
    assert!(e.to_string().contains("no schema version"), "{e}");
    let garbage = vec![encode(&STATE_SCHEMA_VERSION).unwrap(), vec![0xff, 0xff]];
    let e = b.import_stream(&mut MemoryFrames::new(garbage), &[], 10).unwrap_err();
    assert!(e.to_string().contains("snapshot row 1 is corrupt"), "{e}");
    assert!(staging_tables(&b).is_empty());
}

#[test]
fn the_node_s_own_meta_keys_stay_out_of_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    sample(&a);
    let rows: Vec<crate::record::SnapshotRowRecord> =
        export(&a)[1..].iter().map(|f| crate::record::decode(f).unwrap()).collect();
    assert!(rows.iter().any(|r| matches!(r, crate::record::SnapshotRowRecord::Meta { key, .. } if key == SUBMIT_SEQ)));
    assert!(
        !rows.iter().any(|r| matches!(r, crate::record::SnapshotRowRecord::Meta { key, .. } if key == SCHEMA_VERSION))
    );
    // A snapshot that carries one anyway does not overwrite ours.
    let mut frames = export(&a);
    let foreign =
        crate::record::SnapshotRowRecord::Meta { key: SCHEMA_VERSION.into(), value: 99u32.to_be_bytes().into() };
    frames.insert(1, encode(&foreign).unwrap());
    let path = dir.path().join("b.redb");
    let b = Store::open(&path).unwrap();
    b.import_stream(&mut MemoryFrames::new(frames), &[], 10).unwrap();
    drop(b);
    assert!(Store::open(&path).is_ok(), "the schema version is still this binary's");
}

#[test]
fn a_pinned_export_ignores_later_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.redb")).unwrap();
    let mut state = sample(&store);
    let before = export(&store);
    let view = store.pin_export().unwrap();
    // Writes after pinning (the server keeps applying while a snapshot is written).
    apply_all(
        &store,
        &mut state,
        vec![Command::Submit {
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new("later").unwrap(),
            at_ms: 9,
            owner: None,
            jobs: vec![job(7, None).into()],
        }],
    );
    set_meta(&store, &[(RAFT_APPLIED, b"later".to_vec())]);
    let mut pinned = Vec::new();
    view.write_rows(&mut pinned).unwrap();
    assert_eq!(pinned, before, "the view exports the state as it was when pinned");
    assert_eq!(view.raft_meta(RAFT_APPLIED).unwrap(), None);
    assert_ne!(export(&store), before, "the later writes are in the store");
}

#[test]
fn an_inline_snapshot_of_state_schema_2_converts_to_a_stream() {
    let bytes = std::fs::read(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/state-v2/snapshot.bin"),
    )
    .unwrap();
    let mut frames = Vec::new();
    let rows = convert_legacy(&bytes, &mut frames).unwrap();
    assert_eq!(rows as usize, frames.len() - 1);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.redb")).unwrap();
    store.import_stream(&mut MemoryFrames::new(frames.clone()), &[], 10).unwrap();
    let state = store.load_state(settings()).unwrap();
    assert_eq!(state.queues().len(), 1);
    assert_eq!(state.live_jobs(), 2, "both jobs of the old snapshot are live");
    assert_eq!(state.client_ids().count(), 1);
    assert_eq!(state.executors().len(), 1);
    assert_eq!(state.next_seq(), 2);
    // Exporting the imported state writes the same stream the conversion wrote.
    assert_eq!(export(&store), frames);
    // Anything else is refused for what it is.
    let e = convert_legacy(&[0xff; 4], &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("inline snapshot is corrupt"), "{e}");
}

#[test]
fn the_digest_follows_the_state_not_how_applies_were_batched() {
    let dir = tempfile::tempdir().unwrap();
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let cmds = || {
        let mut v = vec![Command::create_queue(crate::model::Queue::new(q.clone(), 1.0))];
        for i in 0..10 {
            v.push(Command::Submit {
                queue: q.clone(),
                job_set: s.clone(),
                at_ms: i,
                owner: None,
                jobs: vec![job(i as u128 + 1, None).into()],
            });
        }
        v
    };
    // One store writes the changes of every command at once (as the server does with a batch of
    // entries: one event chunk), the other command by command (a chunk each): the same state,
    // chunked differently.
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    let mut batch = State::new(settings());
    let changes: Vec<_> =
        cmds().into_iter().flat_map(|c| batch.apply(c, crate::state::ApplyContext { term: 1 }).changes).collect();
    let tx = a.write().unwrap();
    write_changes(&tx, &changes).unwrap();
    tx.commit().unwrap();
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    let mut state = State::new(settings());
    for c in cmds() {
        apply_all(&b, &mut state, vec![c]);
    }
    let chunks = |st: &Store| {
        let tx = st.read().unwrap();
        redb::ReadableTableMetadata::len(&tx.open_table(EVENTS).unwrap()).unwrap()
    };
    assert_ne!(chunks(&a), chunks(&b), "the events are chunked differently");
    assert_eq!(a.digest().unwrap(), b.digest().unwrap());
    assert_eq!(a.digest().unwrap().hex().len(), 64);
    // Any change of the state changes it.
    apply_all(
        &b,
        &mut state,
        vec![Command::Submit { queue: q, job_set: s, at_ms: 99, owner: None, jobs: vec![job(99, None).into()] }],
    );
    assert_ne!(a.digest().unwrap(), b.digest().unwrap());
    // The applied index is read with it.
    set_meta(&a, &raft_meta(41));
    assert_eq!(a.digest().unwrap().applied_index(), 41);
}

#[test]
fn the_queues_usage_survives_a_restart_and_a_snapshot() {
    use crate::scheduler::{QueueUsage, UsageSample};
    use crate::state::{ApplyContext, Response};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    let usage = QueueUsage {
        at_ms: 1_000,
        pools: [(
            crate::model::PoolName::default_pool(),
            [(QueueName::new("A").unwrap(), UsageSample { usage: 0.375, current: 0.5 })].into_iter().collect(),
        )]
        .into_iter()
        .collect(),
    };
    let record = Command::RecordUsage { term: 1, usage: usage.clone().into() };
    {
        let a = Store::open(&path).unwrap();
        let mut state = sample(&a);
        // A deposed leader's record is refused and changes nothing.
        let stale =
            state.apply(Command::RecordUsage { term: 1, usage: usage.clone().into() }, ApplyContext { term: 2 });
        assert!(matches!(stale.response, Some(Response::Rejected(_))) && stale.changes.is_empty());
        assert_eq!(*state.queue_usage(), QueueUsage::default());
        apply_all(&a, &mut state, vec![record]);
        assert_eq!(*state.queue_usage(), usage);
        assert_eq!(state.scheduling_snapshot(0, Default::default()).usage, usage, "the scheduler reads it");
    }
    // Restart: the record is loaded back from the database.
    let a = Store::open(&path).unwrap();
    assert_eq!(*a.load_state(settings()).unwrap().queue_usage(), usage);
    // Snapshot: another member that installs it has the same record and digest.
    set_meta(&a, &raft_meta(4));
    let frames = export(&a);
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    b.import_stream(&mut MemoryFrames::new(frames), &raft_meta(4), 1000).unwrap();
    assert_eq!(*b.load_state(settings()).unwrap().queue_usage(), usage);
    assert_eq!(b.digest().unwrap(), a.digest().unwrap());
}

#[test]
fn the_recorded_scheduler_config_and_cycle_number_survive_restart_and_snapshot() {
    use crate::record::{ScheduleInputsRecord, SchedulerConfigRecord};
    use crate::state::{ApplyContext, Response};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    let config = SchedulerConfigRecord::of(&crate::scheduler::SchedulerConfig::default());
    let inputs = ScheduleInputsRecord {
        cycle: 7,
        seed: 3,
        snapshot_index: 2,
        config_hash: config.hash.clone(),
        scheduler_version: crate::scheduler::SCHEDULER_VERSION,
        rate_limits: None,
    };
    let schedule = |term| Command::Schedule {
        term,
        at_ms: 5,
        leases: vec![],
        preemptions: vec![],
        failures: vec![],
        inputs: Some(inputs.clone()),
    };
    {
        let a = Store::open(&path).unwrap();
        let mut state = sample(&a);
        // A deposed leader's record and cycle are refused and change nothing.
        let stale =
            state.apply(Command::RecordSchedulerConfig { term: 0, config: config.clone() }, ApplyContext { term: 2 });
        assert!(matches!(stale.response, Some(Response::Rejected(_))) && stale.changes.is_empty());
        let stale = state.apply(schedule(0), ApplyContext { term: 2 });
        assert!(matches!(stale.response, Some(Response::Rejected(_))));
        assert_eq!((state.scheduler_config(), state.cycles()), (None, 0));
        apply_all(
            &a,
            &mut state,
            vec![Command::RecordSchedulerConfig { term: 1, config: config.clone() }, schedule(1)],
        );
        assert_eq!((state.scheduler_config(), state.cycles()), (Some(&config), 7));
    }
    // Restart: both are loaded back from the database.
    let a = Store::open(&path).unwrap();
    let loaded = a.load_state(settings()).unwrap();
    assert_eq!((loaded.scheduler_config(), loaded.cycles()), (Some(&config), 7));
    // Snapshot: another member that installs it has the same record, cycle number and digest,
    // and knows the index it was taken at.
    set_meta(&a, &raft_meta(4));
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    b.import_stream(&mut MemoryFrames::new(export(&a)), &raft_meta(4), 1000).unwrap();
    let installed = b.load_state(settings()).unwrap();
    assert_eq!((installed.scheduler_config(), installed.cycles()), (Some(&config), 7));
    assert_eq!(installed.applied_index(), 4);
    assert_eq!(b.digest().unwrap(), a.digest().unwrap());
}
