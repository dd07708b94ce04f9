//! Storage tests: changes written and loaded back, queries, migrations (snapshots and the digest:
//! `snapshot_tests`).

use super::*;
use crate::model::{
    JobId, JobPayload, JobSetName, JobState, NodeName, PoolName, PriorityClassName, Queue, QueueName, Resources,
    SchedulingRequirements,
};
use crate::record::{EventRecord, JobRecord, encode};
use crate::scheduler::SchedulerConfig;
use crate::state::{ApplyContext, Command, NewJob, NewLease, State, StateSettings};
use crate::store::tables::*;
use redb::ReadableTable;

pub(super) fn settings() -> StateSettings {
    StateSettings::from_config(&SchedulerConfig::default())
}

pub(super) fn job(id: u128, client: Option<&str>) -> NewJob {
    NewJob {
        id: JobId::from_u128(id),
        client_id: client.map(str::to_string),
        priority: 0,
        priority_class: PriorityClassName::new("default").unwrap(),
        requirements: SchedulingRequirements {
            requests: Resources::parse([("cpu", "1")]).unwrap(),
            ..Default::default()
        }
        .into(),
        gang: None,
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_ms: 1000,
        active_deadline_seconds: 60,
        payload: JobPayload { pod_spec: r#"{"containers":[]}"#.into(), services: vec![], ingresses: vec![] }.into(),
    }
}

/// Applies commands to the state and writes their changes, like the server does.
pub(super) fn apply_all(store: &Store, state: &mut State, cmds: Vec<Command>) {
    let tx = store.write().unwrap();
    for c in cmds {
        let a = state.apply(c, ApplyContext { term: 1 });
        write_changes(&tx, &a.changes).unwrap();
    }
    tx.commit().unwrap();
}

pub(super) fn sample(store: &Store) -> State {
    let mut state = State::new(settings());
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let node = crate::record::NodeRecord::from(crate::model::Node {
        name: NodeName::new("n1").unwrap(),
        executor: "e1".parse().unwrap(),
        pool: PoolName::default_pool(),
        labels: Default::default(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "4")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    });
    apply_all(
        store,
        &mut state,
        vec![
            Command::create_queue(Queue::new(q.clone(), 1.0)),
            Command::UpsertExecutor { executor: "e1".parse().unwrap(), nodes: vec![node], at_ms: 1 },
            Command::Submit {
                queue: q.clone(),
                job_set: s.clone(),
                at_ms: 2,
                owner: None,
                jobs: vec![job(1, Some("c1")).into(), job(2, None).into(), job(3, None).into()],
            },
            Command::Schedule {
                term: 1,
                at_ms: 3,
                leases: vec![NewLease {
                    job_id: JobId::from_u128(2),
                    run_id: crate::model::RunId::from_u128(20),
                    executor: "e1".parse().unwrap(),
                    node: NodeName::new("n1").unwrap(),
                    pool: PoolName::default_pool(),
                }],
                preemptions: vec![],
                failures: vec![],
                inputs: None,
            },
            Command::Cancel {
                queue: q,
                job_set: s,
                job_ids: Some(vec![JobId::from_u128(3)]),
                states: None,
                reason: "x".into(),
                at_ms: 4,
            },
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
    assert_eq!(loaded.next_seq(), state.next_seq());
    assert_eq!(loaded.live_jobs(), 2);
    let mut a: Vec<_> = state.jobs().map(|j| j.record.clone()).collect();
    let mut b: Vec<_> = loaded.jobs().map(|j| j.record.clone()).collect();
    a.sort_by_key(|r| r.id);
    b.sort_by_key(|r| r.id);
    assert_eq!(a, b);
    assert_eq!(loaded.queue(&QueueName::new("A").unwrap()).unwrap().queued.len(), 1);
    assert_eq!(loaded.active_run_count(), 1);
    assert_eq!(loaded.executors().len(), 1);
    assert_eq!(loaded.client_ids().count(), 1);
    assert_eq!(
        loaded.event_seqs().collect::<std::collections::HashMap<_, _>>(),
        state.event_seqs().collect::<std::collections::HashMap<_, _>>()
    );
    // The cancelled job is on disk but not in memory.
    assert_eq!(store.job(JobId::from_u128(3)).unwrap().map(|r| r.state), Some(JobState::Cancelled));
}

#[test]
fn queries_list_jobs_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    sample(&store);
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let (all, more) = store
        .list_jobs(&JobFilter { queue: Some(q.clone()), job_set: Some(s.clone()), limit: 10, ..Default::default() })
        .unwrap();
    assert_eq!(all.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(!more);
    let (page, more) = store
        .list_jobs(&JobFilter { queue: Some(q.clone()), job_set: Some(s.clone()), limit: 2, ..Default::default() })
        .unwrap();
    assert_eq!(page.len(), 2);
    assert!(more);
    let (rest, _) = store
        .list_jobs(&JobFilter {
            queue: Some(q.clone()),
            job_set: Some(s.clone()),
            limit: 2,
            after: Some(page[1].id),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rest.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>(), vec![3]);
    let (queued, _) = store
        .list_jobs(&JobFilter {
            queue: Some(q.clone()),
            states: vec![JobState::Queued],
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(queued.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>(), vec![1]);
    // Newest first, through the job set's index and through the jobs, a page at a time.
    let ids = |p: &crate::store::JobPage| p.jobs.iter().map(|r| r.id.as_u128()).collect::<Vec<_>>();
    for job_set in [Some(s.clone()), None] {
        let newest = JobFilter { queue: Some(q.clone()), job_set, limit: 2, newest_first: true, ..Default::default() };
        let first = store.search_jobs(&newest).unwrap();
        assert_eq!((ids(&first), first.next.map(|n| n.as_u128())), (vec![3, 2], Some(2)));
        let rest = store.search_jobs(&JobFilter { after: first.next, ..newest }).unwrap();
        assert_eq!((ids(&rest), rest.next), (vec![1], None));
    }
    // Text: any case, in the id and the names; a search that looked far enough stops with a
    // `next` to go on from, even with no job found yet.
    let text = |t: &str| JobFilter { text: Some(t.into()), limit: 10, ..Default::default() };
    let all = store.search_jobs(&text("")).unwrap();
    assert_eq!(ids(&all), vec![1, 2, 3]);
    let third = crate::model::JobId::from_u128(3).to_string();
    let found = store.search_jobs(&text(&third[20..].to_lowercase())).unwrap();
    assert_eq!((ids(&found), found.next), (vec![3], None));
    assert_eq!(ids(&store.search_jobs(&text("no such text")).unwrap()), Vec::<u128>::new());
    let stopped = store.search_jobs_looking_at(&text(&third[20..]), 2).unwrap();
    assert_eq!((ids(&stopped), stopped.next.map(|n| n.as_u128())), (vec![], Some(2)));
    let on = store.search_jobs_looking_at(&JobFilter { after: stopped.next, ..text(&third[20..]) }, 2).unwrap();
    assert_eq!(ids(&on), vec![3]);
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

/// Makes `store` a database of `version` (4 to 6) as far as schema 7 is concerned: job rows in
/// the format of schemas 2 to 6, no `run_jobs` table.
fn as_schema_6(store: &Store, version: u32) {
    let tx = store.write().unwrap();
    tx.open_table(META).unwrap().insert(SCHEMA_VERSION, version.to_be_bytes().as_slice()).unwrap();
    {
        let mut jobs = tx.open_table(JOBS).unwrap();
        let rows: Vec<([u8; 16], Vec<u8>)> =
            jobs.iter().unwrap().map(|r| r.unwrap()).map(|(k, v)| (*k.value(), v.value().to_vec())).collect();
        for (k, v) in rows {
            jobs.insert(&k, migrate::steps::v0007_run_index::to_version_6(&v).as_slice()).unwrap();
        }
    }
    tx.delete_table(RUN_JOBS).unwrap();
    tx.commit().unwrap();
}

#[test]
fn a_schema_6_database_is_migrated_with_its_runs_indexed_and_jobs_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let (jobs, before) = {
        let store = Store::open(&path).unwrap();
        sample(&store);
        let state = store.load_state(settings()).unwrap();
        let (jobs, _) = store.list_jobs(&JobFilter { limit: 1000, ..Default::default() }).unwrap();
        assert!(jobs.iter().any(|j| !j.runs.is_empty()), "the sample has runs");
        let digest = store.digest().unwrap();
        as_schema_6(&store, 6);
        assert!(store.jobs_of_runs(&[jobs.iter().flat_map(|j| &j.runs).next().unwrap().run_id]).is_err());
        (jobs, (state.live_jobs(), state.next_seq(), digest.sha256))
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), crate::record::STATE_SCHEMA_VERSION);
    let state = store.load_state(settings()).unwrap();
    // The same rows as before (the index rebuilt is the one written with the runs).
    assert_eq!((state.live_jobs(), state.next_seq(), store.digest().unwrap().sha256), before);
    let runs: Vec<_> = jobs.iter().flat_map(|j| j.runs.iter().map(move |r| (r.run_id, j.id))).collect();
    let found = store.jobs_of_runs(&runs.iter().map(|(r, _)| *r).collect::<Vec<_>>()).unwrap();
    assert_eq!(
        found.iter().map(|j| j.as_ref().map(|j| j.id)).collect::<Vec<_>>(),
        runs.iter().map(|(_, j)| Some(*j)).collect::<Vec<_>>()
    );
}

#[test]
fn a_schema_4_database_opens_at_schema_5_as_it_was_without_a_usage_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let before = {
        let store = Store::open(&path).unwrap();
        sample(&store);
        let state = store.load_state(settings()).unwrap();
        // Make it a version 4 database: schema 5 only added the `queue_usage` row, absent here.
        let digest = store.digest().unwrap().sha256;
        as_schema_6(&store, 4);
        (state.live_jobs(), state.next_seq(), digest)
    };
    let store = Store::open(&path).unwrap();
    // Migrated on to the latest schema (6 converts nothing either).
    assert_eq!(migrate::version(&store.db()).unwrap(), crate::record::STATE_SCHEMA_VERSION);
    let state = store.load_state(settings()).unwrap();
    assert_eq!((state.live_jobs(), state.next_seq(), store.digest().unwrap().sha256), before);
    assert_eq!(*state.queue_usage(), crate::scheduler::QueueUsage::default());
}

#[test]
fn a_schema_5_database_opens_at_schema_6_with_top_level_queues_and_keeps_a_tree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let before = {
        let store = Store::open(&path).unwrap();
        sample(&store);
        let state = store.load_state(settings()).unwrap();
        // Make it a version 5 database: schema 6 only added the `queue_tree` row, absent here.
        let digest = store.digest().unwrap().sha256;
        as_schema_6(&store, 5);
        (state.live_jobs(), state.next_seq(), digest)
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), crate::record::STATE_SCHEMA_VERSION);
    let mut state = store.load_state(settings()).unwrap();
    assert_eq!((state.live_jobs(), state.next_seq(), store.digest().unwrap().sha256), before);
    assert!(state.queues().all(|q| q.queue.is_flat()));
    // A tree written now is read back.
    let parent = QueueName::new("P").unwrap();
    let child = Queue {
        parent: Some(parent.clone()),
        priority_offset: -4,
        priority_policy: crate::model::PriorityPolicy::Fence,
        ..Queue::new(QueueName::new("tree-child").unwrap(), 1.0)
    };
    apply_all(
        &store,
        &mut state,
        vec![Command::create_queue(Queue::new(parent.clone(), 1.0)), Command::create_queue(child.clone())],
    );
    let again = store.load_state(settings()).unwrap();
    assert_eq!(again.queue(&child.name).unwrap().queue, child);
    assert_eq!(again.queue(&parent).unwrap().queue.parent, None);
}

#[test]
fn a_schema_11_database_opens_at_schema_12_without_policies_and_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let before = {
        let store = Store::open(&path).unwrap();
        sample(&store);
        let state = store.load_state(settings()).unwrap();
        // Make it a version 11 database: schema 12 only added the `queue_policies` row, absent
        // here.
        let tx = store.write().unwrap();
        tx.open_table(META).unwrap().insert(SCHEMA_VERSION, 11u32.to_be_bytes().as_slice()).unwrap();
        tx.commit().unwrap();
        (state.live_jobs(), state.next_seq(), store.digest().unwrap().sha256)
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), crate::record::STATE_SCHEMA_VERSION);
    let mut state = store.load_state(settings()).unwrap();
    assert_eq!((state.live_jobs(), state.next_seq(), store.digest().unwrap().sha256), before);
    assert!(state.queues().all(|q| !q.queue.has_policies()));
    // Policies written now are read back, and dropped again when updated away.
    let guaranteed = crate::model::Resources::parse([("cpu", "6"), ("memory", "8Gi")]).unwrap();
    let fenced = Queue {
        guaranteed,
        preemption_policy: crate::model::PreemptionPolicy::Fence,
        ..Queue::new(QueueName::new("fenced").unwrap(), 1.0)
    };
    apply_all(&store, &mut state, vec![Command::create_queue(fenced.clone())]);
    let again = store.load_state(settings()).unwrap();
    assert_eq!(again.queue(&fenced.name).unwrap().queue, fenced);
    let plain = Queue::new(fenced.name.clone(), 1.0);
    apply_all(&store, &mut state, vec![Command::update_queue(plain.clone())]);
    assert_eq!(store.load_state(settings()).unwrap().queue(&fenced.name).unwrap().queue, plain);
}

#[test]
fn a_schema_12_queue_policies_row_opens_at_schema_13_and_queue_retry_policies_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let fixture = |p: &str| {
        let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats").join(p);
        std::fs::read(p).unwrap()
    };
    {
        let store = Store::open(&path).unwrap();
        sample(&store);
        // A version 12 database holding the schema 12 fixture row (queues physics and science
        // with guarantees and fences).
        let tx = store.write().unwrap();
        {
            let mut meta = tx.open_table(META).unwrap();
            meta.insert(SCHEMA_VERSION, 12u32.to_be_bytes().as_slice()).unwrap();
            meta.insert(QUEUE_POLICIES, fixture("state-v12/meta-queue-policies.bin").as_slice()).unwrap();
        }
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), crate::record::STATE_SCHEMA_VERSION);
    let tx = store.db().begin_read().unwrap();
    let row = tx.open_table(META).unwrap().get(QUEUE_POLICIES).unwrap().unwrap().value().to_vec();
    drop(tx);
    let v13: crate::record::QueuePoliciesWithRetryByQueueRecord = crate::record::decode(&row).unwrap();
    let v12: crate::record::QueuePoliciesByQueueRecord =
        crate::record::decode(&fixture("state-v12/meta-queue-policies.bin")).unwrap();
    assert_eq!(v13.queues.keys().collect::<Vec<_>>(), v12.queues.keys().collect::<Vec<_>>());
    for (name, p) in &v13.queues {
        assert_eq!((&p.policies, &p.retry), (&v12.queues[name], &None), "{name}");
    }
    // A queue's retry policy is written, read back after a restart, and removed again.
    let mut state = store.load_state(settings()).unwrap();
    let retry = crate::model::api::JobRetryPolicy {
        max_attempts: 3,
        on_exit_codes: vec![75],
        on_oom: true,
        on_node_failure: false,
        backoff_seconds: 30,
    };
    let physics = Queue { retry: Some(retry), ..Queue::new(QueueName::new("retrying").unwrap(), 1.0) };
    apply_all(&store, &mut state, vec![Command::create_queue(physics.clone())]);
    drop(store);
    let store = Store::open(&path).unwrap();
    let mut state = store.load_state(settings()).unwrap();
    assert_eq!(state.queue(&physics.name).unwrap().queue, physics);
    let plain = Queue::new(physics.name.clone(), 1.0);
    apply_all(&store, &mut state, vec![Command::update_queue(plain.clone())]);
    assert_eq!(store.load_state(settings()).unwrap().queue(&plain.name).unwrap().queue, plain);
}

#[test]
fn prototype_database_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    // A version-0 database of the pre-release prototype: jobs as JSON text, no meta.
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(migrate::steps::v0001_initial::JOBS_JSON_V0).unwrap().insert("01J", "{}").unwrap();
        tx.commit().unwrap();
    }
    let Err(e) = Store::open(&path) else { panic!("a prototype database must be refused") };
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg = format!("{msg}: {s}");
        source = s.source();
    }
    assert!(msg.contains("pre-release prototype") && msg.contains("empty one"), "{msg}");
    // Nothing was changed: it is still a version-0 database.
    assert_eq!(migrate::version(&redb::Database::open(&path).unwrap()).unwrap(), 0);
}

fn event(seq: u64, job: u128) -> crate::model::Event {
    crate::model::Event {
        seq,
        job_id: JobId::from_u128(job),
        at_ms: seq as i64,
        kind: crate::model::EventKind::Queued,
        run_id: None,
        message: None,
    }
}

#[test]
fn events_resume_from_any_sequence_number_across_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    // Three transactions of 3, 300 (two chunks) and 1 events, and another job set between.
    let mut seq = 0;
    for n in [3, 300, 1] {
        let tx = store.write().unwrap();
        let mut changes = Vec::new();
        for _ in 0..n {
            seq += 1;
            changes.push(crate::state::Change::AppendEvent {
                queue: q.clone(),
                job_set: s.clone(),
                event: event(seq, seq as u128).into(),
            });
            changes.push(crate::state::Change::AppendEvent {
                queue: q.clone(),
                job_set: JobSetName::new("s2").unwrap(),
                event: event(seq, 0).into(),
            });
        }
        write_changes(&tx, &changes).unwrap();
        tx.commit().unwrap();
    }
    for from in [0, 1, 3, 4, 5, 259, 260, 303, 304, 305] {
        let got: Vec<u64> = store.events(&q, &s, from, 1000).unwrap().iter().map(|e| e.seq).collect();
        let want: Vec<u64> = (from.max(1)..=304).collect();
        assert_eq!(got, want, "from {from}");
    }
    let page: Vec<u64> = store.events(&q, &s, 255, 4).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(page, vec![255, 256, 257, 258], "a page may span two chunks");
    // A job's events, looked up by sequence number in several chunks.
    let other = Store::open(&dir.path().join("scratch.redb")).unwrap();
    let job = sample(&other).jobs().next().unwrap().record.clone();
    let record =
        crate::model::Job { event_seqs: vec![1, 4, 200, 304, 999].into(), queue: q.clone(), job_set: s.clone(), ..job };
    let found: Vec<u64> = store.job_events(&record).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(found, vec![1, 4, 200, 304], "sequence numbers that were never written are skipped");
}

#[test]
fn version_1_events_are_regrouped_into_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let (q, s, big) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap(), JobSetName::new("big").unwrap());
    // The events and a job record as version 2 stores them, from the same commands.
    let (expected, record) = {
        let scratch = Store::open(&dir.path().join("scratch.redb")).unwrap();
        sample(&scratch);
        (scratch.events(&q, &s, 1, 1000).unwrap(), scratch.job(JobId::from_u128(2)).unwrap().unwrap())
    };
    assert!(expected.len() >= 8 && record.event_seqs.len() >= 3, "{expected:?}");
    let v1_key = |set: &JobSetName, seq: u64| event_key(&set_prefix(&q, set), seq);
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        (migrate::steps::ALL[0].run)(&tx).unwrap();
        {
            tx.open_table(META).unwrap().insert(SCHEMA_VERSION, 1u32.to_be_bytes().as_slice()).unwrap();
            tx.open_table(JOBS)
                .unwrap()
                .insert(
                    &job_key(record.id),
                    migrate::steps::v0007_run_index::to_version_6(&encode(&JobRecord::from(record.clone())).unwrap())
                        .as_slice(),
                )
                .unwrap();
            let mut t = tx.open_table(migrate::steps::v0001_initial::EVENTS_V1).unwrap();
            for e in &expected {
                t.insert(v1_key(&s, e.seq).as_slice(), encode(&EventRecord::from(e.clone())).unwrap().as_slice())
                    .unwrap();
            }
            for seq in 1..=600 {
                t.insert(v1_key(&big, seq).as_slice(), encode(&EventRecord::from(event(seq, 7))).unwrap().as_slice())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), migrate::CURRENT_VERSION);
    assert_eq!(store.events(&q, &s, 1, 1000).unwrap(), expected);
    let all_big: Vec<u64> = store.events(&q, &big, 1, 1000).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(all_big, (1..=600).collect::<Vec<_>>());
    let mid: Vec<u64> = store.events(&q, &big, 300, 3).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(mid, vec![300, 301, 302]);
    let job_events = store.job_events(&record).unwrap();
    assert_eq!(job_events.iter().map(|e| e.seq).collect::<Vec<_>>(), record.event_seqs.to_vec());
    assert!(job_events.iter().all(|e| e.job_id == record.id));
    use redb::{ReadableTableMetadata, TableHandle};
    let rows = store.db().begin_read().unwrap().open_table(EVENTS).unwrap().len().unwrap();
    assert_eq!(rows, 4, "one chunk for the small set, three (256 + 256 + 88) for the big one");
    assert!(
        !store.db().begin_read().unwrap().list_tables().unwrap().any(|t| t.name() == "events"),
        "the old table is gone"
    );
}

#[test]
fn a_deleted_queue_forgets_its_client_ids_in_memory_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    let mut state = State::new(settings());
    let (q, s) = (QueueName::new("A").unwrap(), JobSetName::new("s").unwrap());
    let other = QueueName::new("B").unwrap();
    let create = |name: &QueueName| Command::create_queue(Queue::new(name.clone(), 1.0));
    let submit = |queue: &QueueName, id: u128| Command::Submit {
        queue: queue.clone(),
        job_set: s.clone(),
        at_ms: 2,
        owner: None,
        jobs: vec![job(id, Some("c1")).into()],
    };
    apply_all(
        &store,
        &mut state,
        vec![
            create(&q),
            create(&other),
            submit(&q, 1),
            submit(&other, 2),
            Command::DeleteQueue { name: q.clone(), force: true, at_ms: 3 },
            create(&q),
        ],
    );
    // The recreated queue takes `c1` as new; the other queue's `c1` still names its job.
    let a = state.apply(submit(&q, 3), ApplyContext { term: 1 });
    assert_eq!(a.response, Some(crate::state::Response::JobIds(vec![JobId::from_u128(3)])));
    let tx = store.write().unwrap();
    write_changes(&tx, &a.changes).unwrap();
    tx.commit().unwrap();
    let mut loaded = store.load_state(settings()).unwrap();
    assert_eq!(loaded.job_of_client_id(&q, "c1"), Some(JobId::from_u128(3)));
    assert_eq!(loaded.job_of_client_id(&other, "c1"), Some(JobId::from_u128(2)));
    let again = loaded.apply(submit(&other, 4), ApplyContext { term: 1 });
    assert_eq!(again.response, Some(crate::state::Response::JobIds(vec![JobId::from_u128(2)])));
}

mod policies;
mod quarantine;
mod retention;
