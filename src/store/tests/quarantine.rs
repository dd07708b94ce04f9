//! Node health on disk: written as failures are counted, loaded back at start-up, carried by
//! snapshots and the digest, deleted when a quarantine is lifted; and migration 4's table.

use super::*;
use crate::model::{ExecutorName, RunId};
use crate::record::{
    FaultedRunReport, MemoryFrames, NodeFaultRecord, PodRunReport, QuarantinePolicyRecord, RunReport, RunReportKind,
    UsageRunReport,
};

fn e1() -> ExecutorName {
    "e1".parse().unwrap()
}

/// The sample state with job 2's run on n1 failed by an image pull error: one failure is
/// enough under this policy, so n1 is quarantined from t=10 until t=1010.
fn quarantined_sample(store: &Store) -> State {
    let mut state = sample(store);
    let report = RunReport {
        run_id: RunId::from_u128(20),
        job_id: JobId::from_u128(2),
        kind: RunReportKind::Failed,
        time_ms: None,
        exit_code: None,
        reason: Some("image pull error".into()),
        message: None,
        log_tail: None,
    };
    apply_all(
        store,
        &mut state,
        vec![Command::RunEvents {
            executor: e1(),
            at_ms: 10,
            events: vec![UsageRunReport {
                event: PodRunReport {
                    event: FaultedRunReport { report, node_fault: Some(NodeFaultRecord::ImagePull) },
                    pod: None,
                },
                usage: None,
            }],
            max_attempted_runs: 3,
            quarantine: QuarantinePolicyRecord { max_failures: 1, window_ms: 1000, duration_ms: 1000 },
        }],
    );
    state
}

#[test]
fn node_health_loads_back_and_travels_in_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    let before = {
        let b = Store::open(&dir.path().join("plain.redb")).unwrap();
        sample(&b);
        b.digest().unwrap()
    };
    let state = quarantined_sample(&a);
    let key = (e1(), NodeName::new("n1").unwrap());
    assert_eq!(state.health_of(&key.0, &key.1).unwrap().quarantined_at(10).map(|q| q.until_ms), Some(1010));
    let loaded = a.load_state(settings()).unwrap();
    assert_eq!(loaded.node_health().collect::<Vec<_>>(), state.node_health().collect::<Vec<_>>());
    assert_ne!(a.digest().unwrap().sha256, before.sha256, "node health is part of the digest");

    // A snapshot carries the row; installed elsewhere, it loads to the same quarantine.
    let mut frames = Vec::new();
    a.pin_export().unwrap().write_rows(&mut frames).unwrap();
    let rows: Vec<crate::record::SnapshotRowRecord> =
        frames[1..].iter().map(|f| crate::record::decode(f).unwrap()).collect();
    let health: Vec<_> = rows
        .iter()
        .filter_map(|r| match r {
            crate::record::SnapshotRowRecord::NodeHealth { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(health, vec![b"e1\0n1".to_vec()]);
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    b.import_stream(&mut MemoryFrames::new(frames), &[], 100).unwrap();
    assert_eq!(
        b.load_state(settings()).unwrap().node_health().collect::<Vec<_>>(),
        state.node_health().collect::<Vec<_>>()
    );
    assert_eq!(b.digest().unwrap(), a.digest().unwrap());
}

#[test]
fn a_lifted_quarantine_leaves_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.redb")).unwrap();
    let mut state = quarantined_sample(&store);
    apply_all(
        &store,
        &mut state,
        vec![Command::LiftQuarantine { executor: e1(), node: NodeName::new("n1").unwrap(), at_ms: 20 }],
    );
    assert!(state.node_health().next().is_none());
    let tx = store.read().unwrap();
    assert_eq!(redb::ReadableTableMetadata::len(&tx.open_table(NODE_HEALTH).unwrap()).unwrap(), 0);
    assert!(store.load_state(settings()).unwrap().node_health().next().is_none());
}

#[test]
fn migration_4_adds_an_empty_node_health_table_to_a_schema_3_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    {
        // A schema 3 database: migrations 1 to 3 only.
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        for m in super::super::migrate::steps::ALL.iter().filter(|m| m.version <= 3) {
            (m.run)(&tx).unwrap();
        }
        tx.open_table(META).unwrap().insert(SCHEMA_VERSION, 3u32.to_be_bytes().as_slice()).unwrap();
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let tx = store.read().unwrap();
    assert_eq!(redb::ReadableTableMetadata::len(&tx.open_table(NODE_HEALTH).unwrap()).unwrap(), 0);
    drop(tx);
    assert_eq!(super::super::migrate::version(&store.db()).unwrap(), crate::record::STATE_SCHEMA_VERSION);
    assert!(store.load_state(settings()).unwrap().node_health().next().is_none());
}
