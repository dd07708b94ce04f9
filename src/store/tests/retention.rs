//! Retention on disk: the `finished` index, purge plans, what a purge deletes and keeps, reloads,
//! snapshots, and the migration that indexes a schema 2 database.

use super::*;
use crate::model::{Job, NodeName, PoolName, RunId};
use crate::record::PurgeTarget;
use crate::record::RunUsageRecord;
use crate::state::{
    Applied, FaultedRunReport, PodRunReport, QuarantinePolicyRecord, Response, RunReport, RunReportKind, UsageRunReport,
};
use proptest::prelude::*;
use redb::{ReadableDatabase, ReadableTable};
use std::collections::{BTreeMap, BTreeSet};

fn q() -> QueueName {
    QueueName::new("A").unwrap()
}

fn js(name: &str) -> JobSetName {
    JobSetName::new(name).unwrap()
}

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

/// Applies one command and writes its changes, like the server does.
fn apply(store: &Store, state: &mut State, cmd: Command) -> Applied {
    let tx = store.write().unwrap();
    let a = state.apply(cmd, ApplyContext { term: 1 });
    write_changes(&tx, &a.changes).unwrap();
    tx.commit().unwrap();
    a
}

fn node() -> crate::record::NodeRecord {
    crate::record::NodeRecord::from(crate::model::Node {
        name: NodeName::new("n1").unwrap(),
        executor: "e1".parse().unwrap(),
        pool: PoolName::default_pool(),
        labels: Default::default(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "1000")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    })
}

/// A store with queue `A` and executor `e1`.
fn fresh(dir: &std::path::Path) -> (Store, State) {
    let store = Store::open(&dir.join("db.redb")).unwrap();
    let mut state = State::new(settings());
    apply(&store, &mut state, Command::create_queue(Queue::new(q(), 1.0)));
    apply(
        &store,
        &mut state,
        Command::UpsertExecutor { executor: "e1".parse().unwrap(), nodes: vec![node()], at_ms: 1 },
    );
    (store, state)
}

/// Submits as the leader proposes it: with the jobs' owner.
fn submit(store: &Store, state: &mut State, set: &str, jobs: Vec<NewJob>, at_ms: i64) -> Applied {
    let jobs = jobs
        .into_iter()
        .map(|job| crate::state::PolicyJob::from(crate::state::NamespacedJob { job, namespace: None }))
        .collect();
    apply(store, state, Command::Submit { queue: q(), job_set: js(set), at_ms, owner: Some("alice".into()), jobs })
}

fn cancel(store: &Store, state: &mut State, set: &str, ids: &[u128], at_ms: i64) {
    let job_ids = Some(ids.iter().map(|n| id(*n)).collect());
    apply(
        store,
        state,
        Command::Cancel { queue: q(), job_set: js(set), job_ids, states: None, reason: "x".into(), at_ms },
    );
}

/// Leases job `n` (run `n`) and reports it succeeded, with output, at `at_ms`.
fn run_to_success(store: &Store, state: &mut State, n: u128, at_ms: i64) {
    let lease = NewLease {
        job_id: id(n),
        run_id: RunId::from_u128(n),
        executor: "e1".parse().unwrap(),
        node: NodeName::new("n1").unwrap(),
        pool: PoolName::default_pool(),
    };
    let schedule =
        Command::Schedule { term: 1, at_ms, leases: vec![lease], preemptions: vec![], failures: vec![], inputs: None };
    apply(store, state, schedule);
    let report = |kind| RunReport {
        run_id: RunId::from_u128(n),
        job_id: id(n),
        kind,
        time_ms: None,
        exit_code: Some(0),
        reason: None,
        message: None,
        log_tail: Some("done\n".into()),
    };
    // The end comes with what the run used (the `run_usage` row, deleted with the job).
    let events = [
        (RunReportKind::Running, None),
        (RunReportKind::Succeeded, Some(RunUsageRecord { cpu_ms: 5, peak_memory_bytes: 7 })),
    ]
    .into_iter()
    .map(|(kind, usage)| UsageRunReport {
        event: PodRunReport { event: FaultedRunReport { report: report(kind), node_fault: None }, pod: None },
        usage,
    })
    .collect();
    let quarantine = QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 };
    let cmd = Command::RunEvents { executor: "e1".parse().unwrap(), at_ms, events, max_attempted_runs: 3, quarantine };
    apply(store, state, cmd);
}

/// Plans a purge from the store, as the leader does, and applies it; the ids purged.
fn purge(store: &Store, state: &mut State, before_ms: i64, limit: usize) -> Vec<u128> {
    let plan = store.purge_plan(before_ms, limit).unwrap();
    let a = apply(store, state, Command::PurgeFinished { purges: plan.purges, before_ms, jobs: plan.jobs });
    match a.response {
        Some(Response::JobIds(ids)) => ids.iter().map(|i| i.as_u128()).collect(),
        other => panic!("purge refused: {other:?}"),
    }
}

/// Every job id any state table refers to, by table.
fn references(store: &Store) -> BTreeMap<&'static str, BTreeSet<JobId>> {
    let tx = store.read().unwrap();
    let mut out: BTreeMap<&'static str, BTreeSet<JobId>> = BTreeMap::new();
    for row in tx.open_table(JOBS).unwrap().iter().unwrap() {
        out.entry("jobs").or_default().insert(job_from_key(row.unwrap().0.value()));
    }
    for row in tx.open_table(PAYLOADS).unwrap().iter().unwrap() {
        out.entry("payloads").or_default().insert(job_from_key(row.unwrap().0.value()));
    }
    for row in tx.open_table(LIVE_JOBS).unwrap().iter().unwrap() {
        out.entry("live_jobs").or_default().insert(job_from_key(row.unwrap().0.value()));
    }
    for row in tx.open_table(JOB_SETS).unwrap().iter().unwrap() {
        let (k, _) = row.unwrap();
        let key = k.value();
        let tail: [u8; 16] = key[key.len() - 16..].try_into().unwrap();
        out.entry("job_sets").or_default().insert(job_from_key(&tail));
    }
    for row in tx.open_table(CLIENT_IDS).unwrap().iter().unwrap() {
        out.entry("client_ids").or_default().insert(job_from_key(row.unwrap().1.value()));
    }
    for row in tx.open_table(FINISHED).unwrap().iter().unwrap() {
        out.entry("finished").or_default().insert(finished_from_key(row.unwrap().0.value()).1);
    }
    for row in tx.open_table(RUN_JOBS).unwrap().iter().unwrap() {
        out.entry("run_jobs").or_default().insert(job_from_key(row.unwrap().1.value()));
    }
    for row in tx.open_table(JOB_OWNERS).unwrap().iter().unwrap() {
        out.entry("job_owners").or_default().insert(job_from_key(row.unwrap().0.value()));
    }
    // Keyed by run: job n's run is run n in these tests.
    for row in tx.open_table(RUN_USAGE).unwrap().iter().unwrap() {
        out.entry("run_usage").or_default().insert(job_from_key(row.unwrap().0.value()));
    }
    for row in tx.open_table(EVENTS).unwrap().iter().unwrap() {
        let chunk: Vec<EventRecord> = crate::record::decode(row.unwrap().1.value()).unwrap();
        out.entry("event_chunks").or_default().extend(chunk.iter().map(|e| e.job_id));
    }
    out
}

/// Rows of the `finished` index: (finish time, job).
fn finished_rows(store: &Store) -> Vec<(i64, u128)> {
    let tx = store.read().unwrap();
    let t = tx.open_table(FINISHED).unwrap();
    t.iter().unwrap().map(|r| finished_from_key(r.unwrap().0.value())).map(|(t, j)| (t, j.as_u128())).collect()
}

/// Checks that memory matches what loading the store gives (as after a restart).
fn assert_reloads_as_in_memory(store: &Store, state: &State) {
    let loaded = store.load_state(settings()).unwrap();
    assert_eq!(
        loaded.client_ids().collect::<std::collections::HashMap<_, _>>(),
        state.client_ids().collect::<std::collections::HashMap<_, _>>(),
        "client ids"
    );
    assert_eq!(
        loaded.event_seqs().collect::<std::collections::HashMap<_, _>>(),
        state.event_seqs().collect::<std::collections::HashMap<_, _>>(),
        "event counters"
    );
    assert_eq!(
        loaded.stored_jobs_per_set().collect::<std::collections::HashMap<_, _>>(),
        state.stored_jobs_per_set().collect::<std::collections::HashMap<_, _>>(),
        "jobs per job set"
    );
    assert_eq!(loaded.purges(), state.purges(), "purges");
    assert_eq!(loaded.max_job_id(), state.max_job_id(), "largest job id");
    assert_eq!(loaded.next_seq(), state.next_seq(), "submit sequence");
    let live = |s: &State| s.jobs().map(|j| (j.record.id, j.record.clone())).collect::<BTreeMap<JobId, Job>>();
    assert_eq!(live(&loaded), live(state), "live jobs");
}

#[test]
fn a_purge_plan_takes_the_oldest_finished_jobs_first_up_to_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut state) = fresh(dir.path());
    submit(&store, &mut state, "s", (1..=6).map(|n| job(n, None)).collect(), 10);
    // Finish times out of id order; 2 and 5 finish together.
    cancel(&store, &mut state, "s", &[5, 2], 300);
    cancel(&store, &mut state, "s", &[4], 100);
    run_to_success(&store, &mut state, 1, 200);
    cancel(&store, &mut state, "s", &[3], 400);
    assert_eq!(finished_rows(&store), vec![(100, 4), (200, 1), (300, 2), (300, 5), (400, 3)]);
    let plan = store.purge_plan(400, 3).unwrap();
    assert_eq!(plan.purges, 0);
    let order: Vec<(i64, u128)> = plan.jobs.iter().map(|t| (t.finished_ms, t.job_id.as_u128())).collect();
    assert_eq!(order, vec![(100, 4), (200, 1), (300, 2)], "finish time, then id; at most the limit");
    assert_eq!(
        plan.jobs[0],
        PurgeTarget { job_id: id(4), finished_ms: 100, queue: q(), job_set: js("s"), client_id: None }
    );
    // The cutoff is exclusive, and live jobs are never in the index.
    let all: Vec<u128> = store.purge_plan(400, 100).unwrap().jobs.iter().map(|t| t.job_id.as_u128()).collect();
    assert_eq!(all, vec![4, 1, 2, 5]);
    assert!(store.purge_plan(100, 100).unwrap().jobs.is_empty());
    assert_eq!(store.finished_jobs().unwrap(), 5);
}

#[test]
fn a_purge_deletes_every_row_of_its_jobs_and_leaves_the_others_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut state) = fresh(dir.path());
    // Jobs 1-3 share their submission's event chunk; 4 is in a job set of its own.
    submit(&store, &mut state, "s", vec![job(1, Some("c1")), job(2, Some("c2")), job(3, None)], 10);
    submit(&store, &mut state, "solo", vec![job(4, Some("c4"))], 11);
    run_to_success(&store, &mut state, 1, 100);
    cancel(&store, &mut state, "s", &[2], 110);
    cancel(&store, &mut state, "solo", &[4], 120);
    let queued_events = store.job_events(&store.job(id(3)).unwrap().unwrap()).unwrap();
    // Job 1's run is indexed by its id while the job is kept.
    let run = RunId::from_u128(1);
    assert_eq!(store.jobs_of_runs(&[run]).unwrap()[0].as_ref().map(|j| j.id), Some(id(1)));
    assert_eq!(references(&store)["run_jobs"], BTreeSet::from([id(1)]));
    assert_eq!(references(&store)["job_owners"], BTreeSet::from([id(1), id(2), id(3), id(4)]));
    assert_eq!(references(&store)["run_usage"], BTreeSet::from([id(1)]));
    let used = store.run_usage(&[run, RunId::from_u128(9)]).unwrap();
    assert_eq!(used, vec![Some(RunUsageRecord { cpu_ms: 5, peak_memory_bytes: 7 }), None]);
    assert_eq!(store.owners(&[id(1), id(9)]).unwrap(), vec![Some("alice".to_string()), None]);

    assert_eq!(purge(&store, &mut state, 121, 100).into_iter().collect::<BTreeSet<_>>(), BTreeSet::from([1, 2, 4]));
    let refs = references(&store);
    for gone in [1, 2, 4] {
        for (table, ids) in &refs {
            assert!(!ids.contains(&id(gone)), "job {gone} is still in {table}");
        }
        assert_eq!(store.job(id(gone)).unwrap(), None);
        assert_eq!(store.payload(id(gone)).unwrap(), None);
    }
    // Job 3 (queued) is whole: record, payload, job set row, events.
    let three = store.job(id(3)).unwrap().unwrap();
    assert_eq!(store.job_events(&three).unwrap(), queued_events);
    assert!(store.payload(id(3)).unwrap().is_some());
    assert_eq!(refs["job_sets"], BTreeSet::from([id(3)]));
    // The stream of `s` lost the purged jobs' events, not its numbering.
    let stream = store.events(&q(), &js("s"), 1, 1000).unwrap();
    assert!(stream.iter().all(|e| e.job_id == id(3)), "{stream:?}");
    assert_eq!(state.event_seq(&q(), &js("s")), Some(11), "the stream keeps its numbering");
    // `solo` held only job 4: it is forgotten, counter and all.
    assert!(store.events(&q(), &js("solo"), 1, 1000).unwrap().is_empty());
    assert!(state.event_seq(&q(), &js("solo")).is_none());
    assert!(
        store
            .read()
            .unwrap()
            .open_table(EVENT_SEQS)
            .unwrap()
            .get(set_prefix(&q(), &js("solo")).as_slice())
            .unwrap()
            .is_none()
    );
    assert_eq!(finished_rows(&store), vec![]);
    // The purge took job 1's run out of the index.
    assert_eq!(store.jobs_of_runs(&[run]).unwrap(), vec![None]);
    assert!(!refs.contains_key("run_jobs"));
    assert_reloads_as_in_memory(&store, &state);
    // The client ids are free again, on disk too.
    let mut loaded = store.load_state(settings()).unwrap();
    let again = loaded.apply(
        Command::Submit {
            queue: q(),
            job_set: js("s"),
            at_ms: 200,
            owner: None,
            jobs: vec![job(9, Some("c1")).into()],
        },
        ApplyContext { term: 1 },
    );
    assert_eq!(again.response, Some(Response::JobIds(vec![id(9)])));
}

#[test]
fn a_restart_keeps_the_largest_job_id_after_its_job_is_purged() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut state) = fresh(dir.path());
    submit(&store, &mut state, "s", vec![job(1, None), job(7, None)], 10);
    cancel(&store, &mut state, "s", &[1, 7], 20);
    assert_eq!(purge(&store, &mut state, 21, 10), vec![1, 7]);
    assert_eq!(store.read().unwrap().open_table(JOBS).unwrap().iter().unwrap().count(), 0);
    assert_eq!(store.load_state(settings()).unwrap().max_job_id(), Some(id(7)));
    assert_eq!(store.load_state(settings()).unwrap().purges(), 1);
}

#[test]
fn snapshots_carry_the_index_and_the_counters() {
    let dir = tempfile::tempdir().unwrap();
    let (a, mut state) = fresh(dir.path());
    submit(&a, &mut state, "s", vec![job(1, None), job(2, None), job(3, None)], 10);
    cancel(&a, &mut state, "s", &[1, 2], 20);
    purge(&a, &mut state, 21, 1);
    let export = |store: &Store| {
        let mut frames = Vec::new();
        store.pin_export().unwrap().write_rows(&mut frames).unwrap();
        frames
    };
    let frames = export(&a);
    let rows: Vec<crate::record::SnapshotRowRecord> =
        frames[1..].iter().map(|f| crate::record::decode(f).unwrap()).collect();
    assert!(rows.contains(&crate::record::SnapshotRowRecord::Finished { key: finished_key(20, id(2)) }));
    let b = Store::open(&dir.path().join("b.redb")).unwrap();
    // What b held before is replaced, counters included.
    {
        let tx = b.write().unwrap();
        tx.open_table(META).unwrap().insert(PURGES, 99u64.to_be_bytes().as_slice()).unwrap();
        tx.open_table(META).unwrap().insert(MAX_JOB_ID, u128::MAX.to_be_bytes().as_slice()).unwrap();
        tx.open_table(FINISHED).unwrap().insert(&finished_key(5, id(99)), ()).unwrap();
        tx.commit().unwrap();
    }
    b.import_stream(&mut crate::record::MemoryFrames::new(frames.clone()), &[], 10).unwrap();
    assert_eq!(finished_rows(&b), vec![(20, 2)]);
    assert_reloads_as_in_memory(&b, &state);
    assert_eq!(export(&b), frames);
    assert_eq!(b.digest().unwrap().sha256, a.digest().unwrap().sha256);
}

#[test]
fn the_finished_jobs_of_a_schema_2_data_dir_are_indexed_at_their_last_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("convoy.redb");
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datadir-v2/convoy.redb");
    std::fs::copy(fixture, &path).unwrap();
    assert_eq!(migrate::version(&redb::Database::open(&path).unwrap()).unwrap(), 2);
    let store = Store::open(&path).unwrap();
    assert_eq!(migrate::version(&store.db()).unwrap(), migrate::CURRENT_VERSION);
    // `c1` succeeded; `c2` runs and `c3` is queued (live: not indexed).
    let c1: JobId = "01M83SZBRQEV3E1YK9CW9XG4ZQ".parse().unwrap();
    let record = store.job(c1).unwrap().unwrap();
    let last = store.job_events(&record).unwrap().last().cloned().unwrap();
    assert_eq!(last.kind, crate::model::EventKind::Succeeded);
    assert_eq!(finished_rows(&store), vec![(last.at_ms, c1.as_u128())]);
    let state = store.load_state(settings()).unwrap();
    assert_eq!(
        state.stored_job_sets(&QueueName::new("physics").unwrap()).find(|(s, _)| **s == js("run-1")).map(|(_, n)| n),
        Some(3)
    );
    assert_eq!(state.purges(), 0);
}

#[test]
fn a_malformed_job_set_key_is_an_error_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    let tx = store.write().unwrap();
    tx.open_table(JOB_SETS).unwrap().insert(b"short".as_slice(), ()).unwrap();
    tx.commit().unwrap();
    let Err(e) = store.load_state(settings()) else { panic!("loaded a malformed key") };
    assert!(matches!(e, StoreError::Malformed { .. }), "{e}");
}

/// One step of a random history.
#[derive(Debug, Clone)]
enum Step {
    /// Submits job `n` (client id `c{client}` if given) to job set `s{set}`.
    Submit { n: u8, set: u8, client: Option<u8> },
    /// Cancels job `n` if it is live.
    Cancel { n: u8 },
    /// Runs job `n` to success if it is queued.
    Succeed { n: u8 },
    /// Purges at most `limit` jobs that finished more than `age` steps ago.
    Purge { age: u8, limit: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..8, 0u8..3, proptest::option::of(0u8..6)).prop_map(|(n, set, client)| Step::Submit { n, set, client }),
        2 => (0u8..8).prop_map(|n| Step::Cancel { n }),
        2 => (0u8..8).prop_map(|n| Step::Succeed { n }),
        2 => (0u8..4, 1u8..6).prop_map(|(age, limit)| Step::Purge { age, limit }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// After any history of submissions, ends and purges: no table refers to a purged job, every
    /// job a purge did not name is exactly as before it, the index holds exactly the stored jobs
    /// that left memory, and a restart loads what memory holds.
    #[test]
    fn purges_leave_no_trace_of_their_jobs_and_touch_no_other(steps in proptest::collection::vec(step(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut state) = fresh(dir.path());
        // Ids are never reused: submission k to job slot n gets id n * 1000 + k.
        let mut next_id: BTreeMap<u8, u128> = BTreeMap::new();
        let mut current: BTreeMap<u8, (u128, String)> = BTreeMap::new();
        let mut purged: BTreeSet<JobId> = BTreeSet::new();
        // When each job finished (the step it ended in).
        let mut finished: BTreeMap<JobId, i64> = BTreeMap::new();
        for (i, s) in steps.into_iter().enumerate() {
            let now = 100 * (i as i64 + 1);
            match s {
                Step::Submit { n, set, client } => {
                    let k = next_id.entry(n).or_insert(0);
                    *k += 1;
                    let new = u128::from(n) * 1000 + *k;
                    let set = format!("s{set}");
                    let a = submit(&store, &mut state, &set, vec![job(new, client.map(|c| format!("c{c}")).as_deref())], now);
                    if a.response == Some(Response::JobIds(vec![id(new)])) {
                        current.insert(n, (new, set));
                    }
                }
                Step::Cancel { n } => {
                    if let Some((j, set)) = current.get(&n).cloned() && state.job(id(j)).is_some() {
                        cancel(&store, &mut state, &set, &[j], now);
                        if store.job(id(j)).unwrap().is_some_and(|r| r.state.is_terminal()) {
                            finished.entry(id(j)).or_insert(now);
                        }
                    }
                }
                Step::Succeed { n } => {
                    if let Some((j, _)) = current.get(&n).cloned()
                        && state.job(id(j)).is_some_and(|l| l.record.state == JobState::Queued)
                    {
                        run_to_success(&store, &mut state, j, now);
                        finished.entry(id(j)).or_insert(now);
                    }
                }
                Step::Purge { age, limit } => {
                    let before_ms = now - 100 * i64::from(age);
                    let stored: BTreeMap<JobId, (Job, Vec<crate::model::Event>)> = store
                        .list_jobs(&JobFilter { limit: 10_000, ..Default::default() })
                        .unwrap()
                        .0
                        .into_iter()
                        .map(|j| {
                            let events = store.job_events(&j).unwrap();
                            (j.id, (j, events))
                        })
                        .collect();
                    // The oldest `limit` of the jobs that finished strictly before the cut-off.
                    let mut due: Vec<(i64, JobId)> = finished
                        .iter()
                        .filter(|(j, at)| **at < before_ms && !purged.contains(*j))
                        .map(|(j, at)| (*at, *j))
                        .collect();
                    due.sort();
                    due.truncate(limit.into());
                    let gone: BTreeSet<JobId> = purge(&store, &mut state, before_ms, limit.into()).into_iter().map(id).collect();
                    prop_assert_eq!(&gone, &due.iter().map(|(_, j)| *j).collect::<BTreeSet<_>>(), "purged at {}", before_ms);
                    for j in &gone {
                        let (record, _) = &stored[j];
                        prop_assert!(record.state.is_terminal() && state.job(*j).is_none(), "{j} was not finished");
                    }
                    for (j, (record, events)) in &stored {
                        if gone.contains(j) {
                            continue;
                        }
                        let now_record = store.job(*j).unwrap();
                        prop_assert_eq!(now_record.as_ref(), Some(record), "job {} changed", j);
                        prop_assert_eq!(&store.job_events(record).unwrap(), events, "events of job {} changed", j);
                    }
                    purged.extend(gone);
                }
            }
        }
        for (table, ids) in references(&store) {
            let left: Vec<_> = ids.intersection(&purged).collect();
            prop_assert!(left.is_empty(), "{} still refers to purged jobs {:?}", table, left);
        }
        // The index holds exactly the stored jobs that are not live.
        let refs = references(&store);
        let empty = BTreeSet::new();
        let stored = refs.get("jobs").unwrap_or(&empty);
        let live: BTreeSet<JobId> = state.jobs().map(|j| j.record.id).collect();
        let indexed = refs.get("finished").cloned().unwrap_or_default();
        prop_assert_eq!(&indexed, &stored.difference(&live).copied().collect::<BTreeSet<_>>());
        // Jobs per job set in memory are the job-set index's.
        let mut per_set: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for row in store.read().unwrap().open_table(JOB_SETS).unwrap().iter().unwrap() {
            let (k, _) = row.unwrap();
            *per_set.entry(k.value()[..k.value().len() - 17].to_vec()).or_default() += 1;
        }
        let in_memory: BTreeMap<Vec<u8>, u64> = state.stored_jobs_per_set().map(|((q, s), n)| (set_prefix(q, s), n)).collect();
        prop_assert_eq!(per_set, in_memory);
        assert_reloads_as_in_memory(&store, &state);
    }
}

#[test]
fn every_job_set_with_jobs_has_events_and_none_without() {
    // A purge that forgets a job set in the same transaction as a submission to it again: the
    // new stream's events survive the forgetting of the old one.
    let dir = tempfile::tempdir().unwrap();
    let (store, mut state) = fresh(dir.path());
    submit(&store, &mut state, "s", vec![job(1, None)], 10);
    cancel(&store, &mut state, "s", &[1], 20);
    let plan = store.purge_plan(21, 10).unwrap();
    let tx = store.write().unwrap();
    let mut changes = state
        .apply(Command::PurgeFinished { purges: plan.purges, before_ms: 21, jobs: plan.jobs }, ApplyContext { term: 1 })
        .changes;
    changes.extend(
        state
            .apply(
                Command::Submit {
                    queue: q(),
                    job_set: js("s"),
                    at_ms: 30,
                    owner: None,
                    jobs: vec![job(2, None).into()],
                },
                ApplyContext { term: 1 },
            )
            .changes,
    );
    write_changes(&tx, &changes).unwrap();
    tx.commit().unwrap();
    let seqs: Vec<(u64, u128)> =
        store.events(&q(), &js("s"), 1, 100).unwrap().iter().map(|e| (e.seq, e.job_id.as_u128())).collect();
    assert_eq!(seqs, vec![(1, 2), (2, 2)]);
    assert_reloads_as_in_memory(&store, &state);
    let db = store.db();
    let read = db.begin_read().unwrap();
    assert_eq!(
        read.open_table(EVENT_SEQS).unwrap().get(set_prefix(&q(), &js("s")).as_slice()).unwrap().map(|v| v.value()),
        Some(2)
    );
}
