//! Storage tests: changes written and loaded back, queries, snapshots, migrations.

use super::*;
use crate::model::api::NodeReport;
use crate::model::{JobId, JobPayload, JobSetName, JobState, NodeName, PoolName, PriorityClassName, Queue, QueueName, Resources, SchedulingRequirements};
use crate::scheduler::SchedulerConfig;
use crate::state::{ApplyContext, Command, NewJob, NewLease, State, StateSettings};
use crate::store::tables::*;

fn settings() -> StateSettings {
    StateSettings::from_config(&SchedulerConfig::default())
}

fn job(id: u128, client: Option<&str>) -> NewJob {
    NewJob {
        id: JobId::from_u128(id),
        client_id: client.map(str::to_string),
        priority: 0,
        priority_class: PriorityClassName::new("default").unwrap(),
        requirements: SchedulingRequirements { requests: Resources::parse([("cpu", "1")]).unwrap(), ..Default::default() },
        gang: None,
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_ms: 1000,
        active_deadline_seconds: 60,
        payload: JobPayload { pod_spec: r#"{"containers":[]}"#.into(), services: vec![], ingresses: vec![] },
    }
}

/// Applies commands to the state and writes their changes, like the server does.
fn apply_all(store: &Store, state: &mut State, cmds: Vec<Command>) {
    let tx = store.write().unwrap();
    for c in cmds {
        let a = state.apply(c, ApplyContext { term: 1 });
        write_changes(&tx, &a.changes).unwrap();
    }
    tx.commit().unwrap();
}

fn sample(store: &Store) -> State {
    let mut state = State::new(settings());
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let node = NodeReport {
        name: NodeName::new("n1").unwrap(),
        pool: PoolName::default_pool(),
        labels: Default::default(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "4")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    };
    apply_all(
        store,
        &mut state,
        vec![
            Command::CreateQueue { queue: Queue::new(q.clone(), 1.0) },
            Command::UpsertExecutor { executor: "e1".parse().unwrap(), nodes: vec![node], at_ms: 1 },
            Command::Submit { queue: q.clone(), job_set: s.clone(), at_ms: 2, jobs: vec![job(1, Some("c1")), job(2, None), job(3, None)] },
            Command::Schedule {
                term: 1,
                at_ms: 3,
                leases: vec![NewLease { job_id: JobId::from_u128(2), run_id: crate::model::RunId::from_u128(20), executor: "e1".parse().unwrap(), node: NodeName::new("n1").unwrap(), pool: PoolName::default_pool() }],
                preemptions: vec![],
                failures: vec![],
            },
            Command::Cancel { queue: q, job_set: s, job_ids: Some(vec![JobId::from_u128(3)]), states: None, reason: "x".into(), at_ms: 4 },
        ],
    );
    state
}

#[test]
fn state_loads_back_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    let state = sample(&store);
    let loaded = store.load_state(settings()).unwrap();
    assert_eq!(loaded.next_seq, state.next_seq);
    assert_eq!(loaded.jobs.len(), 2);
    let mut a: Vec<_> = state.jobs.values().map(|j| j.record.clone()).collect();
    let mut b: Vec<_> = loaded.jobs.values().map(|j| j.record.clone()).collect();
    a.sort_by_key(|r| r.id);
    b.sort_by_key(|r| r.id);
    assert_eq!(a, b);
    assert_eq!(loaded.queues[&QueueName::new("A").unwrap()].queued.len(), 1);
    assert_eq!(loaded.runs.len(), 1);
    assert_eq!(loaded.executors.len(), 1);
    assert_eq!(loaded.client_ids.len(), 1);
    assert_eq!(loaded.event_seqs, state.event_seqs);
    // The cancelled job is on disk but not in memory.
    assert_eq!(store.job(JobId::from_u128(3)).unwrap().map(|r| r.state), Some(JobState::Cancelled));
}

#[test]
fn queries_list_jobs_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    sample(&store);
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let (all, more) = store.list_jobs(&JobFilter { queue: Some(q.clone()), job_set: Some(s.clone()), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(all.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(!more);
    let (page, more) = store.list_jobs(&JobFilter { queue: Some(q.clone()), job_set: Some(s.clone()), limit: 2, ..Default::default() }).unwrap();
    assert_eq!(page.len(), 2);
    assert!(more);
    let (rest, _) = store.list_jobs(&JobFilter { queue: Some(q.clone()), job_set: Some(s.clone()), limit: 2, after: Some(page[1].id), ..Default::default() }).unwrap();
    assert_eq!(rest.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>(), vec![3]);
    let (queued, _) = store.list_jobs(&JobFilter { queue: Some(q.clone()), states: vec![JobState::Queued], limit: 10, ..Default::default() }).unwrap();
    assert_eq!(queued.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>(), vec![1]);
    let events = store.events(&q, &s, 1, 100).unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=events.len() as u64).collect::<Vec<_>>());
    let resumed = store.events(&q, &s, 4, 100).unwrap();
    assert_eq!(resumed.first().map(|e| e.seq), Some(4));
    let r2 = store.job(JobId::from_u128(2)).unwrap().unwrap();
    let e2 = store.job_events(&r2).unwrap();
    assert!(e2.iter().all(|e| e.job_id == r2.id));
    assert_eq!(e2.len(), 3); // submitted, queued, leased
    assert!(store.payload(JobId::from_u128(2)).unwrap().is_some());
}

#[test]
fn export_and_import_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(&dir.path().join("a.redb")).unwrap();
    let state = sample(&a);
    let data = a.export().unwrap();
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    let tx = b.write().unwrap();
    b.import_into(&tx, &data).unwrap();
    tx.commit().unwrap();
    let loaded = b.load_state(settings()).unwrap();
    assert_eq!(loaded.jobs.len(), state.jobs.len());
    assert_eq!(loaded.next_seq, state.next_seq);
    assert_eq!(b.export().unwrap(), data);
}

#[test]
fn pinned_export_ignores_later_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.redb")).unwrap();
    let mut state = sample(&store);
    let before = store.export().unwrap();
    let view = store.pin_export().unwrap();
    // Writes after pinning (the server keeps applying while a snapshot is copied).
    let q = QueueName::new("A").unwrap();
    apply_all(&store, &mut state, vec![Command::Submit { queue: q, job_set: JobSetName::new("later").unwrap(), at_ms: 9, jobs: vec![job(7, None)] }]);
    let tx = store.write().unwrap();
    tx.open_table(META).unwrap().insert("raft_applied", b"later".as_slice()).unwrap();
    tx.commit().unwrap();

    assert_eq!(view.export().unwrap(), before, "the view exports the state as it was when pinned");
    assert_eq!(view.raft_meta("raft_applied").unwrap(), None);
    assert_ne!(store.export().unwrap(), before, "the later writes are in the store");
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META).unwrap().insert(SCHEMA_VERSION, 99u32.to_be_bytes().as_slice()).unwrap();
        tx.commit().unwrap();
    }
    let err = Store::open(&path).err().expect("refused");
    let msg = err.to_string();
    assert!(msg.contains("schema version 99") && msg.contains("newer"), "{msg}");
}

#[test]
fn prototype_database_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    // A version-0 database: jobs as JSON text, no meta, no indexes.
    let queued = {
        let a = Store::open(&dir.path().join("scratch.redb")).unwrap();
        let state = sample(&a);
        let mut records: Vec<_> = state.jobs.values().map(|j| j.record.clone()).collect();
        records.push(a.job(JobId::from_u128(3)).unwrap().unwrap());
        records
    };
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(migrate::steps::v0001_initial::JOBS_JSON_V0).unwrap();
            for r in &queued {
                t.insert(r.id.to_string().as_str(), serde_json::to_string(r).unwrap().as_str()).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    assert_eq!(migrate::version(&redb::Database::open(&path).unwrap()).unwrap(), 0);
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), migrate::CURRENT_VERSION);
    let loaded = store.load_state(settings()).unwrap();
    assert_eq!(loaded.jobs.len(), 2, "the two live jobs are live again");
    assert_eq!(store.job(JobId::from_u128(3)).unwrap().map(|r| r.state), Some(JobState::Cancelled));
    assert_eq!(loaded.next_seq, 3);
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let (listed, _) = store.list_jobs(&JobFilter { queue: Some(q), job_set: Some(s), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(listed.len(), 3);
    // Opening again changes nothing.
    drop(store);
    let again = Store::open(&path).unwrap();
    assert_eq!(again.load_state(settings()).unwrap().jobs.len(), 2);
}
