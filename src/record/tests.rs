//! Golden tests: the fixtures under `tests/fixtures/formats/` were written by earlier binaries.
//! Each must decode to the value built here and encode back to the same bytes. A failure means a
//! stored format changed: add a migration and new fixtures instead (see the module docs).

use super::codec::{decode, encode};
use super::command::*;
use super::event::*;
use super::executor::*;
use super::job::*;
use super::placement::*;
use super::queue::*;
use super::raft::*;
use super::reservation::*;
use super::schedule::*;
use super::snapshot::{SnapshotRecord, SnapshotRowRecord};
use super::usage::QueueUsageRecord;
use crate::model::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;

fn fixture(path: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats").join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// `path` decodes to `expected` and `expected` encodes to the bytes of `path`.
fn golden<T: Serialize + DeserializeOwned + PartialEq + Debug>(path: &str, expected: &T) {
    let bytes = fixture(path);
    let decoded: T = decode(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&decoded, expected, "{path} decodes to another value");
    assert_eq!(encode(expected).unwrap(), bytes, "{path}: the value encodes to other bytes");
}

fn map(p: &[(&str, &str)]) -> BTreeMap<String, String> {
    p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
fn quantities(p: &[(&str, i64)]) -> QuantitiesRecord {
    p.iter().map(|(k, v)| (ResourceName::new(k).unwrap(), *v)).collect()
}
fn jid(n: u64) -> JobId {
    JobId::from_parts(1_760_000_000_000 + n, n as u128)
}
fn rid(n: u64) -> RunId {
    RunId::from_parts(1_760_000_100_000 + n, n as u128)
}
fn qn(s: &str) -> QueueName {
    QueueName::new(s).unwrap()
}
fn js(s: &str) -> JobSetName {
    JobSetName::new(s).unwrap()
}
fn pc(s: &str) -> PriorityClassName {
    PriorityClassName::new(s).unwrap()
}
fn ex(s: &str) -> ExecutorName {
    ExecutorName::new(s).unwrap()
}
fn nn(s: &str) -> NodeName {
    NodeName::new(s).unwrap()
}
fn pool(s: &str) -> PoolName {
    PoolName::new(s).unwrap()
}

fn requirements() -> RequirementsRecord {
    let req = |key: &str, operator, values: &[&str]| SelectorRequirementRecord {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    };
    RequirementsRecord {
        requests: quantities(&[("cpu", 1500), ("memory", 4 << 30), ("nvidia.com/gpu", 2000)]),
        node_selector: map(&[("zone", "a")]),
        tolerations: vec![
            TolerationRecord {
                key: "gpu".into(),
                operator: TolerationOperatorRecord::Equal,
                value: "yes".into(),
                effect: Some(TaintEffectRecord::NoSchedule),
            },
            TolerationRecord {
                key: String::new(),
                operator: TolerationOperatorRecord::Exists,
                value: String::new(),
                effect: None,
            },
        ],
        node_affinity: Some(NodeAffinityRecord {
            required_terms: Some(vec![NodeSelectorTermRecord {
                match_expressions: vec![
                    req("rack", SelectorOperatorRecord::NotIn, &["r2", "r3"]),
                    req("cores", SelectorOperatorRecord::Gt, &["8"]),
                ],
                match_fields: vec![req("metadata.name", SelectorOperatorRecord::In, &["n1"])],
            }]),
        }),
    }
}

fn gang() -> GangRecord {
    GangRecord { id: "g1".into(), cardinality: 4, min_cardinality: 2, node_uniformity_label: Some("rack".into()) }
}

fn payload() -> PayloadRecord {
    PayloadRecord {
        pod_spec: r#"{"containers":[{"name":"main","image":"busybox"}]}"#.into(),
        services: vec![r#"{"spec":{}}"#.into()],
        ingresses: vec![r#"{"spec":{"rules":[]}}"#.into()],
    }
}

fn new_job(n: u64, full: bool) -> NewJob {
    NewJob {
        id: jid(n),
        client_id: full.then(|| "client-1".to_string()),
        priority: if full { 7 } else { 0 },
        priority_class: pc(if full { "preemptible" } else { "default" }),
        requirements: if full {
            requirements()
        } else {
            RequirementsRecord {
                requests: quantities(&[("cpu", 1000)]),
                node_selector: BTreeMap::new(),
                tolerations: vec![],
                node_affinity: None,
            }
        },
        gang: full.then(gang),
        annotations: if full { map(&[("convoy.io/gang-id", "g1")]) } else { BTreeMap::new() },
        labels: if full { map(&[("team", "physics")]) } else { BTreeMap::new() },
        termination_grace_period_ms: 30_000,
        active_deadline_seconds: 259_200,
        payload: payload(),
    }
}

fn queue() -> QueueRecord {
    QueueRecord {
        name: qn("physics"),
        priority_factor: 2.0,
        owners: vec!["alice".into()],
        groups: vec!["phys".into()],
        resource_limits: [(ResourceName::cpu(), 0.5)].into_iter().collect(),
        resource_limits_by_priority_class: [(pc("preemptible"), [(ResourceName::gpu(), 0.25)].into_iter().collect())]
            .into_iter()
            .collect(),
        cordoned: true,
        labels: map(&[("dept", "science")]),
    }
}

fn plain_queue(name: &str) -> QueueRecord {
    QueueRecord {
        name: qn(name),
        priority_factor: 1.0,
        owners: vec![],
        groups: vec![],
        resource_limits: BTreeMap::new(),
        resource_limits_by_priority_class: BTreeMap::new(),
        cordoned: false,
        labels: BTreeMap::new(),
    }
}

fn node() -> NodeRecord {
    let taint = |key: &str, value: &str, effect| TaintRecord { key: key.into(), value: value.into(), effect };
    NodeRecord {
        name: nn("node-1"),
        pool: pool("gpu"),
        labels: map(&[("rack", "r1")]),
        taints: vec![
            taint("gpu", "yes", TaintEffectRecord::NoSchedule),
            taint("spot", "", TaintEffectRecord::PreferNoSchedule),
            taint("x", "y", TaintEffectRecord::NoExecute),
        ],
        allocatable: quantities(&[("cpu", 64_000), ("memory", 256 << 30), ("nvidia.com/gpu", 8000)]),
        unallocatable: quantities(&[("cpu", 500)]),
        unschedulable: true,
    }
}

fn run_report(kind: RunReportKind, n: u64) -> RunReport {
    let full = kind == RunReportKind::Failed;
    RunReport {
        run_id: rid(n),
        job_id: jid(n),
        kind,
        time_ms: full.then_some(1_760_000_200_000),
        exit_code: full.then_some(137),
        reason: full.then(|| "OOMKilled".into()),
        message: full.then(|| "out of memory".into()),
        log_tail: full.then(|| "last line\n".into()),
    }
}

fn submit() -> CommandRecord {
    CommandRecord::Submit {
        queue: qn("physics"),
        job_set: js("run-1"),
        at_ms: 1_760_000_000_002,
        jobs: vec![new_job(1, true), new_job(2, false)],
    }
}

/// One command of every kind, named as its fixture.
fn commands() -> Vec<(&'static str, CommandRecord)> {
    use RunReportKind::*;
    vec![
        ("create-queue", CommandRecord::CreateQueue { queue: queue() }),
        ("update-queue", CommandRecord::UpdateQueue { queue: plain_queue("plain") }),
        ("delete-queue", CommandRecord::DeleteQueue { name: qn("physics"), force: true, at_ms: 1_760_000_000_001 }),
        ("submit", submit()),
        (
            "cancel",
            CommandRecord::Cancel {
                queue: qn("physics"),
                job_set: js("run-1"),
                job_ids: Some(vec![jid(1), jid(2)]),
                states: Some(vec![JobStateRecord::Queued, JobStateRecord::Running]),
                reason: "user asked".into(),
                at_ms: 1_760_000_000_003,
            },
        ),
        (
            "cancel-set",
            CommandRecord::Cancel {
                queue: qn("physics"),
                job_set: js("run-1"),
                job_ids: None,
                states: None,
                reason: String::new(),
                at_ms: 1_760_000_000_004,
            },
        ),
        (
            "reprioritize",
            CommandRecord::Reprioritize {
                queue: qn("physics"),
                job_set: js("run-1"),
                job_ids: Some(vec![jid(1)]),
                priority: 3,
                at_ms: 1_760_000_000_005,
            },
        ),
        (
            "preempt",
            CommandRecord::Preempt {
                queue: qn("physics"),
                job_set: js("run-1"),
                job_ids: vec![jid(2)],
                reason: "admin".into(),
                at_ms: 1_760_000_000_006,
            },
        ),
        (
            "schedule",
            CommandRecord::Schedule {
                term: 4,
                at_ms: 1_760_000_000_007,
                leases: vec![NewLease {
                    job_id: jid(1),
                    run_id: rid(1),
                    executor: ex("cluster-a"),
                    node: nn("node-1"),
                    pool: pool("gpu"),
                }],
                preemptions: vec![JobVerdict { job_id: jid(3), reason: "preempted by a higher priority job".into() }],
                failures: vec![JobVerdict { job_id: jid(4), reason: "gang remainder below minimum".into() }],
            },
        ),
        (
            "upsert-executor",
            CommandRecord::UpsertExecutor { executor: ex("cluster-a"), nodes: vec![node()], at_ms: 1_760_000_000_008 },
        ),
        (
            "run-events",
            CommandRecord::RunEvents {
                executor: ex("cluster-a"),
                at_ms: 1_760_000_000_009,
                max_attempted_runs: 5,
                events: [Pending, Running, Succeeded, Failed, Returned]
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| run_report(k, i as u64 + 1))
                    .collect(),
            },
        ),
        (
            "executor-lost",
            CommandRecord::ExecutorLost { executor: ex("cluster-a"), at_ms: 1_760_000_000_010, max_attempted_runs: 3 },
        ),
        (
            "batch",
            CommandRecord::Batch(vec![
                CommandRecord::CreateQueue { queue: plain_queue("a") },
                CommandRecord::Batch(vec![CommandRecord::DeleteQueue { name: qn("a"), force: false, at_ms: 1 }]),
            ]),
        ),
    ]
}

fn log_id(term: u64, node_id: u64, index: u64) -> LogIdRecord {
    LogIdRecord { term, node_id, index }
}

fn membership() -> MembershipRecord {
    MembershipRecord {
        configs: vec![BTreeSet::from([1, 2]), BTreeSet::from([1, 2, 3])],
        nodes: [(1, "https://convoy-1:8080"), (2, "https://convoy-2:8080"), (3, "http://127.0.0.1:9000")]
            .into_iter()
            .map(|(id, a)| (id, a.to_string()))
            .collect(),
    }
}

fn stored_membership() -> StoredMembershipRecord {
    StoredMembershipRecord { log_id: Some(log_id(4, 3, 19)), membership: membership() }
}

fn run(n: u64, state: RunStateRecord, full: bool) -> RunRecord {
    RunRecord {
        run_id: rid(n),
        executor: ex("cluster-a"),
        node: nn("node-1"),
        pool: pool("gpu"),
        state,
        leased_at_ms: 1_760_000_300_000,
        pending_at_ms: full.then_some(1_760_000_300_001),
        running_at_ms: full.then_some(1_760_000_300_002),
        finished_at_ms: full.then_some(1_760_000_300_003),
        exit_code: full.then_some(1),
        reason: full.then(|| "Error".into()),
        message: full.then(|| "exit code 1".into()),
        kill: full.then(|| KillRecord { at_ms: 1_760_000_300_004, grace_period_ms: 5000, reason: "cancelled".into() }),
        log_tail: full.then(|| "tail".into()),
        pod: full.then(|| PodRecord {
            name: "armada-01m83szbrqev3e1yk9cw9xg4zq-0".into(),
            namespace: "ml-team".into(),
            uid: "6f1c2d0e-8a4b-4c1d-9e2f-3a4b5c6d7e8f".into(),
        }),
    }
}

fn job() -> JobRecord {
    JobRecord {
        id: jid(1),
        queue: qn("physics"),
        job_set: js("run-1"),
        priority: 7,
        priority_class: pc("preemptible"),
        submit_seq: 42,
        submitted_at_ms: 1_760_000_000_002,
        client_id: Some("client-1".into()),
        annotations: map(&[("convoy.io/gang-id", "g1")]),
        labels: map(&[("team", "physics")]),
        requirements: requirements(),
        gang: Some(gang()),
        termination_grace_period_ms: 30_000,
        active_deadline_seconds: 259_200,
        state: JobStateRecord::Running,
        state_reason: Some("why".into()),
        runs: vec![run(1, RunStateRecord::Lost, true), run(2, RunStateRecord::Running, false)],
        event_seqs: vec![1, 2, 5, 9],
        namespace: Some(Namespace::new("ml-team").unwrap()),
    }
}

fn events() -> Vec<EventRecord> {
    use EventKindRecord::*;
    [
        Submitted,
        Queued,
        Leased,
        Pending,
        Running,
        Succeeded,
        Failed,
        CancelRequested,
        Cancelled,
        PreemptRequested,
        Preempted,
        Reprioritized,
        Requeued,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, kind)| EventRecord {
        seq: 10 + i as u64,
        job_id: jid(1),
        at_ms: 1_760_000_400_000 + i as i64,
        kind,
        run_id: (i % 2 == 0).then(|| rid(1)),
        message: (i % 3 == 0).then(|| format!("m{i}")),
    })
    .collect()
}

#[test]
fn log_format_1_commands() {
    for (name, cmd) in commands() {
        golden(&format!("log-v1/command-{name}.bin"), &cmd);
    }
}

/// The command log format 3 added, with a job of each kind: with and without a client id.
fn purge_finished() -> CommandRecord {
    CommandRecord::PurgeFinished {
        purges: 7,
        before_ms: 1_760_000_600_000,
        jobs: vec![
            PurgeTarget {
                job_id: jid(1),
                finished_ms: 1_760_000_300_003,
                queue: qn("physics"),
                job_set: js("run-1"),
                client_id: Some("client-1".into()),
            },
            PurgeTarget { job_id: jid(2), finished_ms: -1, queue: qn("a"), job_set: js("s"), client_id: None },
        ],
    }
}

#[test]
fn log_format_3_commands() {
    // Format 3 only added this command: the commands of formats 1 and 2 (which changed no
    // command) are format 3's, byte for byte, as `log_format_1_commands` checks with today's types.
    golden("log-v3/command-purge-finished.bin", &purge_finished());
}

/// The commands log format 4 added: run events with node faults (one of each kind, with and
/// without a fault), and a quarantine lifted.
fn log_format_4_commands() -> Vec<(&'static str, CommandRecord)> {
    let faults = [
        None,
        Some(NodeFaultRecord::NotStarted),
        Some(NodeFaultRecord::ImagePull),
        Some(NodeFaultRecord::NodePressure),
        Some(NodeFaultRecord::NodeLost),
    ];
    let kinds = [
        RunReportKind::Pending,
        RunReportKind::Running,
        RunReportKind::Succeeded,
        RunReportKind::Failed,
        RunReportKind::Returned,
    ];
    vec![
        (
            "command-run-events-with-faults",
            CommandRecord::RunEventsWithFaults {
                executor: ex("cluster-a"),
                at_ms: 1_760_000_700_000,
                events: kinds
                    .iter()
                    .zip(faults)
                    .enumerate()
                    .map(|(i, (kind, node_fault))| FaultedRunReport {
                        report: run_report(*kind, i as u64 + 1),
                        node_fault,
                    })
                    .collect(),
                max_attempted_runs: 5,
                quarantine: QuarantinePolicyRecord { max_failures: 3, window_ms: 600_000, duration_ms: 1_800_000 },
            },
        ),
        (
            "command-lift-quarantine",
            CommandRecord::LiftQuarantine { executor: ex("cluster-a"), node: nn("n1"), at_ms: 1_760_000_800_000 },
        ),
    ]
}

#[test]
fn log_format_4_commands_are_golden() {
    // Format 4 only added these commands: the older ones are format 4's byte for byte.
    for (name, cmd) in log_format_4_commands() {
        golden(&format!("log-v4/{name}.bin"), &cmd);
    }
}

/// The usage of two queues in two pools, with values that need every bit of an `f64`.
fn queue_usage() -> QueueUsageRecord {
    let sample = |usage, current| super::usage::UsageSampleRecord { usage, current };
    QueueUsageRecord {
        at_ms: 1_760_000_700_000,
        pools: [
            (
                PoolName::default_pool(),
                [(qn("physics"), sample(0.25, 0.5)), (qn("a"), sample(1.0 / 3.0, 0.0))].into_iter().collect(),
            ),
            (PoolName::new("gpu").unwrap(), [(qn("a"), sample(1e-9, 0.75))].into_iter().collect()),
        ]
        .into_iter()
        .collect(),
    }
}

#[test]
fn log_format_5_commands() {
    // Format 5 only added this command, at the end: every older command is format 5's byte for
    // byte (the golden tests of the older fixtures read them with today's types).
    golden("log-v5/command-record-usage.bin", &CommandRecord::RecordUsage { term: 7, usage: queue_usage() });
}

#[test]
fn state_schema_5_rows() {
    // Schema 5 added one meta row, the queues' usage; snapshots carry it as a meta row.
    golden("state-v5/meta-queue-usage.bin", &queue_usage());
    let row = SnapshotRowRecord::Meta { key: "queue_usage".into(), value: fixture("state-v5/meta-queue-usage.bin") };
    golden("state-v5/row-meta-queue-usage.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v5/row-meta-queue-usage.bin"));
    // The domain value goes through the record unchanged.
    assert_eq!(QueueUsageRecord::from(crate::scheduler::QueueUsage::from(queue_usage())), queue_usage());
}

#[test]
fn log_format_1_entries_vote_and_log_ids() {
    let entries = [
        ("entry-blank", LogEntryRecord { log_id: log_id(3, 1, 17), payload: EntryPayloadRecord::Blank }),
        ("entry-command", LogEntryRecord { log_id: log_id(3, 2, 18), payload: EntryPayloadRecord::Normal(submit()) }),
        (
            "entry-membership",
            LogEntryRecord { log_id: log_id(4, 3, 19), payload: EntryPayloadRecord::Membership(membership()) },
        ),
    ];
    for (name, entry) in &entries {
        let path = format!("log-v1/{name}.bin");
        golden(&path, entry);
        // What the log store writes, borrowing the command, is the same bytes.
        let payload = match &entry.payload {
            EntryPayloadRecord::Blank => EntryPayloadRef::Blank,
            EntryPayloadRecord::Normal(c) => EntryPayloadRef::Normal(c),
            EntryPayloadRecord::Membership(m) => EntryPayloadRef::Membership(m.clone()),
        };
        assert_eq!(encode(&LogEntryRef { log_id: entry.log_id, payload }).unwrap(), fixture(&path), "{path}");
    }
    golden("log-v1/vote.bin", &VoteRecord { term: 5, node_id: 2, committed: true });
    golden("log-v1/vote-uncommitted.bin", &VoteRecord { term: 6, node_id: 3, committed: false });
    golden("log-v1/log-id.bin", &Some(log_id(3, 2, 18)));
    golden("log-v1/log-id-none.bin", &None::<LogIdRecord>);
}

#[test]
fn state_schema_2_rows() {
    golden("state-v2/queue.bin", &queue());
    // `state-v2/job.bin` holds a job row of schemas 2 to 6: migration 7 reads it with its frozen
    // types (its tests), today's `jobs` rows are schema 7's (`state_schema_7_rows`).
    golden("state-v2/payload.bin", &payload());
    golden("state-v2/event-chunk.bin", &events());
    golden(
        "state-v2/executor.bin",
        &ExecutorRecord { name: ex("cluster-a"), nodes: vec![node()], updated_at_ms: 1_760_000_500_000 },
    );
    golden("state-v2/raft-applied.bin", &Some(log_id(3, 2, 18)));
    golden("state-v2/raft-membership.bin", &stored_membership());
    golden(
        "log-v1/snapshot-meta.bin",
        &SnapshotMetaRecord {
            last_log_id: Some(log_id(3, 2, 18)),
            last_membership: stored_membership(),
            snapshot_id: "3-2-18-1760000600000".into(),
        },
    );
}

#[test]
fn state_schema_2_snapshot() {
    let bytes = fixture("state-v2/snapshot.bin");
    let snap: SnapshotRecord = decode(&bytes).unwrap();
    assert_eq!(snap.schema_version, 2);
    assert_eq!(encode(&snap).unwrap(), bytes);
    // The rows inside are this schema's rows: the queue, the submitted jobs and their payloads,
    // the events, the executor.
    let queues: Vec<QueueRecord> = snap.queues.iter().map(|(_, v)| decode(v).unwrap()).collect();
    assert_eq!(queues, vec![QueueRecord { cordoned: false, ..queue() }]);
    // Job rows of schema 2, read as migration 7 reads them.
    let jobs: Vec<JobRecord> = snap
        .jobs
        .iter()
        .map(|(_, v)| decode(&crate::store::migrate::steps::v0007_run_index::convert_job(v).unwrap().0).unwrap())
        .collect();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![jid(1), jid(2)]);
    assert!(jobs.iter().all(|j| j.state == JobStateRecord::Queued && j.event_seqs.len() == 2));
    assert_eq!(jobs[0].requirements, requirements());
    assert_eq!(jobs[0].gang, Some(gang()));
    for (_, p) in &snap.payloads {
        assert_eq!(decode::<PayloadRecord>(p).unwrap(), payload());
    }
    assert_eq!(snap.live_jobs.len(), 2);
    let events: Vec<EventRecord> =
        snap.events.iter().flat_map(|(_, v)| decode::<Vec<EventRecord>>(v).unwrap()).collect();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    let executors: Vec<ExecutorRecord> = snap.executors.iter().map(|(_, v)| decode(v).unwrap()).collect();
    assert_eq!(executors[0].nodes, vec![node()]);
    assert_eq!(snap.client_ids.len(), 1);
    assert!(snap.meta.iter().any(|(k, v)| k == "submit_seq" && v.as_slice() == 2u64.to_be_bytes()));
}

/// The `finished` key of `jid(3)`, finished at 1_760_000_000_004: the finish time (sign bit
/// flipped) then the id, both big-endian.
fn finished_key() -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..8].copy_from_slice(&(1_760_000_000_004u64 ^ (1 << 63)).to_be_bytes());
    key[8..].copy_from_slice(&jid(3).as_u128().to_be_bytes());
    key
}

#[test]
fn state_schema_3_rows() {
    // Schema 3 added one kind of snapshot row (the `finished` index), at the end of the kinds.
    let row = SnapshotRowRecord::Finished { key: finished_key() };
    golden("state-v3/row-finished.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v3/row-finished.bin"));
}

/// A node with failures counted and a quarantine (schema 4's `node_health` row), and its
/// snapshot row.
fn node_health() -> NodeHealthRecord {
    NodeHealthRecord {
        executor: ex("cluster-a"),
        node: nn("n1"),
        failures: vec![
            NodeFailureRecord { at_ms: 1_760_000_900_000, fault: NodeFaultRecord::ImagePull, job_id: jid(1) },
            NodeFailureRecord { at_ms: 1_760_000_900_001, fault: NodeFaultRecord::NodeLost, job_id: jid(2) },
        ],
        quarantine: Some(QuarantineRecord {
            since_ms: 1_760_000_800_000,
            until_ms: 1_760_002_600_000,
            reason: "3 failures of the node within 10m: image_pull ×3".into(),
        }),
    }
}

#[test]
fn state_schema_4_rows() {
    golden("state-v4/node-health.bin", &node_health());
    let plain = NodeHealthRecord { executor: ex("e"), node: nn("n"), failures: vec![], quarantine: None };
    golden("state-v4/node-health-empty.bin", &plain);
    // Schema 4 added one kind of snapshot row, after `finished`.
    let row = SnapshotRowRecord::NodeHealth { key: b"cluster-a\0n1".to_vec(), value: encode(&node_health()).unwrap() };
    golden("state-v4/row-node-health.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v4/row-node-health.bin"));
}

#[test]
fn domain_values_survive_a_round_trip_through_records() {
    // Conversions are lossless in both directions: record -> domain -> record.
    let j = job();
    assert_eq!(JobRecord::from(Job::from(j.clone())), j);
    let q = queue();
    assert_eq!(QueueRecord::from(Queue::from(q.clone())), q);
    for e in events() {
        assert_eq!(EventRecord::from(Event::from(e.clone())), e);
    }
    let n = node();
    assert_eq!(NodeRecord::from(n.clone().into_node(ex("cluster-a"))), n);
    assert_eq!(PayloadRecord::from(JobPayload::from(payload())), payload());
    let m = stored_membership();
    let back: openraft::StoredMembership<u64, openraft::BasicNode> = m.clone().into();
    assert_eq!(StoredMembershipRecord::from(&back), m);
    let v = VoteRecord { term: 5, node_id: 2, committed: true };
    assert_eq!(VoteRecord::from(openraft::Vote::<u64>::from(v)), v);
}

/// One row of every table, as a snapshot stream of file format 1 carries them.
fn snapshot_rows() -> Vec<(&'static str, SnapshotRowRecord)> {
    let id = jid(1).as_u128().to_be_bytes();
    let set = b"physics\0run-1".to_vec();
    let with = |rest: &[u8]| {
        let mut k = set.clone();
        k.push(0);
        k.extend_from_slice(rest);
        k
    };
    let executor = ExecutorRecord { name: ex("cluster-a"), nodes: vec![node()], updated_at_ms: 1_760_000_500_000 };
    vec![
        ("row-meta", SnapshotRowRecord::Meta { key: "submit_seq".into(), value: 2u64.to_be_bytes().to_vec() }),
        ("row-queue", SnapshotRowRecord::Queue { name: "physics".into(), value: encode(&queue()).unwrap() }),
        // A job row's bytes travel as they are stored: here schema 2's.
        ("row-job", SnapshotRowRecord::Job { id, value: fixture("state-v2/job.bin") }),
        ("row-payload", SnapshotRowRecord::Payload { id, value: encode(&payload()).unwrap() }),
        ("row-live-job", SnapshotRowRecord::LiveJob { id }),
        ("row-job-set", SnapshotRowRecord::JobSet { key: with(&id) }),
        (
            "row-event-chunk",
            SnapshotRowRecord::EventChunk { key: with(&1u64.to_be_bytes()), value: encode(&events()).unwrap() },
        ),
        ("row-event-seq", SnapshotRowRecord::EventSeq { key: set.clone(), seq: 4 }),
        ("row-client-id", SnapshotRowRecord::ClientId { key: b"physics\0client-1".to_vec(), job: id }),
        ("row-executor", SnapshotRowRecord::Executor { name: "cluster-a".into(), value: encode(&executor).unwrap() }),
    ]
}

fn snapshot_meta() -> SnapshotMetaRecord {
    SnapshotMetaRecord {
        last_log_id: Some(log_id(3, 2, 18)),
        last_membership: stored_membership(),
        snapshot_id: "3-2-18-1760000600000".into(),
    }
}

#[test]
fn snapshot_file_format_1_rows_and_header() {
    for (name, row) in snapshot_rows() {
        let path = format!("snapshot-v1/{name}.bin");
        golden(&path, &row);
        // What an export writes, borrowing the row from its table, is the same bytes.
        assert_eq!(encode(&row.as_ref()).unwrap(), fixture(&path), "{path}");
    }
    golden("snapshot-v1/header.bin", &SnapshotHeaderRecord { meta: snapshot_meta() });
}

#[test]
fn snapshot_file_format_1_whole_file() {
    use crate::raft::snapshot_file::{SnapshotReader, SnapshotWriter};
    use crate::record::{FrameSink, FrameSource};
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats/snapshot-v1/state.snap");
    let bytes = fixture("snapshot-v1/state.snap");
    golden(
        "log-v2/snapshot-file.bin",
        &SnapshotFileRecord { name: "3-2-18-1760000600000.snap".into(), bytes: bytes.len() as u64 },
    );
    // The file holds the state of `state-v2/snapshot.bin`: the schema version, then its rows.
    let mut r = SnapshotReader::open(&path).unwrap();
    assert_eq!(SnapshotMetaRecord::from(r.meta()), snapshot_meta());
    let mut frames = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        frames.push(f.to_vec());
    }
    assert_eq!(decode::<u32>(&frames[0]).unwrap(), 2);
    let rows: Vec<SnapshotRowRecord> = frames[1..].iter().map(|f| decode(f).unwrap()).collect();
    let old: SnapshotRecord = decode(&fixture("state-v2/snapshot.bin")).unwrap();
    let queues: Vec<QueueRecord> = rows
        .iter()
        .filter_map(|r| match r {
            SnapshotRowRecord::Queue { value, .. } => Some(decode(value).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(queues, vec![QueueRecord { cordoned: false, ..queue() }]);
    let jobs = rows.iter().filter(|r| matches!(r, SnapshotRowRecord::Job { .. })).count();
    assert_eq!(jobs, old.jobs.len());
    let mut converted = Vec::new();
    crate::store::snapshot_stream::convert_legacy(&fixture("state-v2/snapshot.bin"), &mut converted).unwrap();
    // Converted today, the rows are today's schema's: the same rows, the `finished` index, which
    // is empty for this state (both jobs are queued), no node health, and no queue usage (schema
    // 5; the conversion adds none).
    assert_eq!(decode::<u32>(&converted[0]).unwrap(), super::STATE_SCHEMA_VERSION);
    // Job rows are converted to schema 7's as migration 7 converts them (these jobs have no runs
    // to index).
    let expected: Vec<Vec<u8>> = frames[1..]
        .iter()
        .map(|f| match decode::<SnapshotRowRecord>(f).unwrap() {
            SnapshotRowRecord::Job { id, value } => {
                let (value, runs) = crate::store::migrate::steps::v0007_run_index::convert_job(&value).unwrap();
                assert!(runs.is_empty());
                let record: JobRecord = decode(&value).unwrap();
                assert_eq!(record.namespace, None);
                encode(&SnapshotRowRecord::Job { id, value }).unwrap()
            }
            _ => f.clone(),
        })
        .collect();
    assert_eq!(converted[1..], expected[..], "the conversion of the old snapshot writes these rows");
    // Writing the same snapshot again writes the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let again = dir.path().join("again.snap");
    let mut w = SnapshotWriter::create(&again, &snapshot_meta().into()).unwrap();
    for f in &frames {
        w.frame(f).unwrap();
    }
    w.finish().unwrap();
    assert_eq!(std::fs::read(&again).unwrap(), bytes);
}

/// Tree settings using every field, with values that need every bit of an i32.
fn queue_trees() -> QueueTreesRecord {
    QueueTreesRecord {
        queues: [
            (
                qn("physics"),
                QueueTreeRecord {
                    parent: Some(qn("science")),
                    priority_offset: i32::MIN,
                    priority_policy: PriorityPolicyRecord::Fence,
                    sort_priority: SortPriorityRecord::Disabled,
                },
            ),
            (
                qn("science"),
                QueueTreeRecord {
                    parent: None,
                    priority_offset: 100,
                    priority_policy: PriorityPolicyRecord::Default,
                    sort_priority: SortPriorityRecord::Enabled,
                },
            ),
        ]
        .into_iter()
        .collect(),
    }
}

fn format_6_commands() -> Vec<(&'static str, CommandRecord)> {
    let trees = queue_trees().queues;
    vec![
        (
            "command-create-queue-in-tree",
            CommandRecord::CreateQueueInTree { queue: queue(), tree: trees[&qn("physics")].clone() },
        ),
        (
            "command-update-queue-in-tree",
            CommandRecord::UpdateQueueInTree { queue: plain_queue("science"), tree: trees[&qn("science")].clone() },
        ),
    ]
}

#[test]
fn log_format_6_commands() {
    // Format 6 only added these commands, at the end: every older command is format 6's byte for
    // byte (the golden tests of the older fixtures read them with today's types).
    for (name, cmd) in format_6_commands() {
        golden(&format!("log-v6/{name}.bin"), &cmd);
    }
}

#[test]
fn state_schema_6_rows() {
    // Schema 6 added one meta row, the queue tree; snapshots carry it as a meta row.
    golden("state-v6/meta-queue-tree.bin", &queue_trees());
    let row = SnapshotRowRecord::Meta { key: "queue_tree".into(), value: fixture("state-v6/meta-queue-tree.bin") };
    golden("state-v6/row-meta-queue-tree.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v6/row-meta-queue-tree.bin"));
    // The domain value goes through the records unchanged.
    let trees = queue_trees();
    let mut q = Queue::from(queue());
    trees.queues[&qn("physics")].clone().apply_to(&mut q);
    assert_eq!(QueueTreeRecord::of(&q), trees.queues[&qn("physics")]);
    assert_eq!(QueueRecord::from(q.clone()), queue());
    assert_eq!(q.priority_offset, i32::MIN);
}

fn format_7_commands() -> Vec<(&'static str, CommandRecord)> {
    let pod = PodRecord { name: "armada-x-0".into(), namespace: "ml-team".into(), uid: "uid-1".into() };
    vec![
        (
            "command-submit-in-namespaces",
            CommandRecord::SubmitInNamespaces {
                queue: qn("physics"),
                job_set: js("run-1"),
                at_ms: 1_760_000_900_000,
                jobs: vec![
                    NamespacedJob { job: new_job(1, true), namespace: Some(Namespace::new("ml-team").unwrap()) },
                    NamespacedJob { job: new_job(2, false), namespace: None },
                ],
            },
        ),
        (
            "command-run-events-with-pods",
            CommandRecord::RunEventsWithPods {
                executor: ex("cluster-a"),
                at_ms: 1_760_000_900_001,
                events: vec![
                    PodRunReport {
                        event: FaultedRunReport { report: run_report(RunReportKind::Pending, 1), node_fault: None },
                        pod: Some(pod),
                    },
                    PodRunReport {
                        event: FaultedRunReport {
                            report: run_report(RunReportKind::Returned, 2),
                            node_fault: Some(NodeFaultRecord::NotStarted),
                        },
                        pod: None,
                    },
                ],
                max_attempted_runs: 5,
                quarantine: QuarantinePolicyRecord { max_failures: 3, window_ms: 600_000, duration_ms: 1_800_000 },
            },
        ),
    ]
}

#[test]
fn log_format_7_commands() {
    // Format 7 only added these commands, at the end: every older command is format 7's byte for
    // byte (the golden tests of the older fixtures read them with today's types).
    for (name, cmd) in format_7_commands() {
        golden(&format!("log-v7/{name}.bin"), &cmd);
    }
}

#[test]
fn state_schema_7_rows() {
    // Schema 7 rewrote the `jobs` rows (namespace, pods of runs) and added the `run_jobs` index.
    golden("state-v7/job.bin", &job());
    let row = SnapshotRowRecord::RunJob { run: rid(1).as_u128().to_be_bytes(), job: jid(1).as_u128().to_be_bytes() };
    golden("state-v7/row-run-job.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v7/row-run-job.bin"));
    // Migration 7 turns the schema 2 row of the same job into this one without namespace or pods.
    let (bytes, runs) =
        crate::store::migrate::steps::v0007_run_index::convert_job(&fixture("state-v2/job.bin")).unwrap();
    let mut expected = job();
    expected.namespace = None;
    for r in &mut expected.runs {
        r.pod = None;
    }
    assert_eq!(decode::<JobRecord>(&bytes).unwrap(), expected);
    assert_eq!(runs, vec![rid(1).as_u128().to_be_bytes(), rid(2).as_u128().to_be_bytes()]);
}

fn format_8_commands() -> Vec<(&'static str, CommandRecord)> {
    vec![(
        "command-submit-by-owner",
        CommandRecord::SubmitByOwner {
            queue: qn("physics"),
            job_set: js("run-1"),
            at_ms: 1_760_000_900_002,
            owner: "alice".into(),
            jobs: vec![
                NamespacedJob { job: new_job(1, true), namespace: Some(Namespace::new("ml-team").unwrap()) },
                NamespacedJob { job: new_job(2, false), namespace: None },
            ],
        },
    )]
}

fn job_owner_row() -> SnapshotRowRecord {
    SnapshotRowRecord::JobOwner { job: jid(1).as_u128().to_be_bytes(), owner: "alice".into() }
}

#[test]
fn log_format_8_commands() {
    // Format 8 only added this command, at the end: every older command is format 8's byte for
    // byte.
    for (name, cmd) in format_8_commands() {
        golden(&format!("log-v8/{name}.bin"), &cmd);
    }
}

#[test]
fn state_schema_8_rows() {
    // Schema 8 only added the `job_owners` table (migration 8 makes it, empty); its snapshot row:
    let row = job_owner_row();
    golden("state-v8/row-job-owner.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v8/row-job-owner.bin"));
}

fn format_9_commands() -> Vec<(&'static str, CommandRecord)> {
    vec![(
        "command-run-events-with-usage",
        CommandRecord::RunEventsWithUsage {
            executor: ex("cluster-a"),
            at_ms: 1_760_000_900_003,
            events: vec![
                UsageRunReport {
                    event: PodRunReport {
                        event: FaultedRunReport { report: run_report(RunReportKind::Running, 1), node_fault: None },
                        pod: None,
                    },
                    usage: None,
                },
                UsageRunReport {
                    event: PodRunReport {
                        event: FaultedRunReport { report: run_report(RunReportKind::Failed, 2), node_fault: None },
                        pod: None,
                    },
                    usage: Some(RunUsageRecord { cpu_ms: 61_250, peak_memory_bytes: 3 << 30 }),
                },
            ],
            max_attempted_runs: 5,
            quarantine: QuarantinePolicyRecord { max_failures: 3, window_ms: 600_000, duration_ms: 1_800_000 },
        },
    )]
}

fn run_usage_row() -> SnapshotRowRecord {
    let usage = RunUsageRecord { cpu_ms: 61_250, peak_memory_bytes: 3 << 30 };
    SnapshotRowRecord::RunUsage { run: rid(2).as_u128().to_be_bytes(), value: encode(&usage).unwrap() }
}

#[test]
fn log_format_9_commands() {
    // Format 9 only added this command, at the end: every older command is format 9's byte for
    // byte.
    for (name, cmd) in format_9_commands() {
        golden(&format!("log-v9/{name}.bin"), &cmd);
    }
}

#[test]
fn state_schema_9_rows() {
    // Schema 9 only added the `run_usage` table (migration 9 makes it, empty); its snapshot row:
    let row = run_usage_row();
    golden("state-v9/row-run-usage.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v9/row-run-usage.bin"));
}

fn schedule_inputs(rate_limited: bool) -> ScheduleInputsRecord {
    let bucket = |milli_tokens, updated_ms| TokenBucketRecord { milli_tokens, updated_ms };
    ScheduleInputsRecord {
        cycle: 1_234,
        seed: 0x0000_0300_0000_04d1,
        snapshot_index: 56_831,
        config_hash: (0u8..32).collect(),
        scheduler_version: 1,
        rate_limits: rate_limited.then(|| RateLimiterRecord {
            global: bucket(2_500, Some(1_760_000_900_000)),
            queues: [(qn("physics"), bucket(0, Some(1_760_000_899_900))), (qn("biology"), bucket(4_000, None))]
                .into_iter()
                .collect(),
        }),
    }
}

fn scheduler_config_record() -> SchedulerConfigRecord {
    SchedulerConfigRecord {
        hash: (32u8..64).collect(),
        scheduler_version: 1,
        binary_version: "0.1.0".into(),
        json: r#"{"max_queue_lookback":1000,"node_eviction_probability":0.5}"#.into(),
    }
}

fn format_10_commands() -> Vec<(&'static str, CommandRecord)> {
    let schedule = |inputs| CommandRecord::ScheduleWithInputs {
        term: 3,
        at_ms: 1_760_000_900_000,
        leases: vec![NewLease {
            job_id: jid(1),
            run_id: rid(9),
            executor: ex("cluster-a"),
            node: nn("node-7"),
            pool: pool("default"),
        }],
        preemptions: vec![JobVerdict { job_id: jid(2), reason: "preempted by 01M… of queue physics".into() }],
        failures: vec![],
        inputs,
    };
    vec![
        ("command-schedule-with-inputs", schedule(schedule_inputs(false))),
        ("command-schedule-with-inputs-rate-limited", schedule(schedule_inputs(true))),
        (
            "command-record-scheduler-config",
            CommandRecord::RecordSchedulerConfig { term: 3, config: scheduler_config_record() },
        ),
    ]
}

#[test]
fn log_format_10_commands() {
    // Format 10 only added these commands, at the end: every older command is format 10's byte
    // for byte, and an older `Schedule` reads as a cycle without inputs.
    for (name, cmd) in format_10_commands() {
        golden(&format!("log-v10/{name}.bin"), &cmd);
    }
    let old: Command = decode(&fixture("log-v1/command-schedule.bin")).unwrap();
    assert!(matches!(old, Command::Schedule { inputs: None, .. }));
}

#[test]
fn state_schema_10_rows() {
    // Schema 10 only added two meta rows, carried by snapshots as meta rows.
    golden("state-v10/meta-scheduler-config.bin", &scheduler_config_record());
    let row = SnapshotRowRecord::Meta {
        key: "scheduler_config".into(),
        value: fixture("state-v10/meta-scheduler-config.bin"),
    };
    golden("state-v10/row-meta-scheduler-config.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v10/row-meta-scheduler-config.bin"));
    let cycles = SnapshotRowRecord::Meta { key: "schedule_cycles".into(), value: 1_234u64.to_be_bytes().to_vec() };
    golden("state-v10/row-meta-schedule-cycles.bin", &cycles);
}

fn format_11_commands() -> Vec<(&'static str, CommandRecord)> {
    use super::job_policy::*;
    let retry = RetryRecord {
        max_attempts: 3,
        on_exit_codes: vec![75, 143],
        on_oom: true,
        on_node_failure: false,
        backoff_ms: 30_000,
    };
    let waits = SubmitPoliciesRecord {
        depends_on: vec![
            SubmitDependencyRecord { job_id: jid(1), on: DependencyConditionRecord::Succeeded, ended: None },
            SubmitDependencyRecord {
                job_id: jid(9),
                on: DependencyConditionRecord::Ended,
                ended: Some(JobStateRecord::Cancelled),
            },
        ],
        retry: None,
    };
    vec![(
        "command-submit-with-policies",
        CommandRecord::SubmitWithPolicies {
            queue: qn("physics"),
            job_set: js("run-1"),
            at_ms: 1_760_000_900_011,
            owner: Some("alice".into()),
            jobs: vec![
                PolicyJob {
                    job: NamespacedJob { job: new_job(1, true), namespace: Some(Namespace::new("ml-team").unwrap()) },
                    policies: SubmitPoliciesRecord { depends_on: vec![], retry: Some(retry) },
                },
                PolicyJob { job: NamespacedJob { job: new_job(2, false), namespace: None }, policies: waits },
            ],
        },
    )]
}

fn job_policies_row() -> SnapshotRowRecord {
    use super::job_policy::*;
    let policies = JobPoliciesRecord {
        depends_on: vec![
            DependencyRecord { job_id: jid(1), on: DependencyConditionRecord::Succeeded, met: true },
            DependencyRecord { job_id: jid(3), on: DependencyConditionRecord::Failed, met: false },
        ],
        retry: Some(RetryRecord {
            max_attempts: 2,
            on_exit_codes: vec![75],
            on_oom: false,
            on_node_failure: true,
            backoff_ms: 0,
        }),
        not_before_ms: Some(1_760_000_900_500),
    };
    SnapshotRowRecord::JobPolicies { job: jid(2).as_u128().to_be_bytes(), value: encode(&policies).unwrap() }
}

/// Policies using every field: a guarantee of several resources (values that need more than 32
/// bits among them) and a fence.
fn queue_policies() -> QueuePoliciesByQueueRecord {
    QueuePoliciesByQueueRecord {
        queues: [
            (
                qn("physics"),
                QueuePoliciesRecord {
                    guaranteed: quantities(&[("cpu", 6_000), ("memory", 64 << 30), ("nvidia.com/gpu", 2_000)]),
                    preemption_policy: PreemptionPolicyRecord::Fence,
                },
            ),
            (
                qn("science"),
                QueuePoliciesRecord { guaranteed: BTreeMap::new(), preemption_policy: PreemptionPolicyRecord::Fence },
            ),
        ]
        .into_iter()
        .collect(),
    }
}

fn format_12_commands() -> Vec<(&'static str, CommandRecord)> {
    let trees = queue_trees().queues;
    let policies = queue_policies().queues;
    vec![
        (
            "command-create-queue-with-policies",
            CommandRecord::CreateQueueWithPolicies {
                queue: queue(),
                tree: trees[&qn("physics")].clone(),
                policies: policies[&qn("physics")].clone(),
            },
        ),
        (
            "command-update-queue-with-policies",
            CommandRecord::UpdateQueueWithPolicies {
                queue: plain_queue("science"),
                tree: trees[&qn("science")].clone(),
                policies: policies[&qn("science")].clone(),
            },
        ),
    ]
}

#[test]
fn log_format_11_commands() {
    // Format 11 only added this command, at the end: every older command is format 11's byte
    // for byte, and older submits read as jobs without policies.
    for (name, cmd) in format_11_commands() {
        golden(&format!("log-v11/{name}.bin"), &cmd);
    }
}

#[test]
fn log_format_12_commands() {
    // Format 12 only added these commands, at the end: every older command is format 12's byte
    // for byte, and an older queue command reads as a queue without a guarantee or fence.
    for (name, cmd) in format_12_commands() {
        golden(&format!("log-v12/{name}.bin"), &cmd);
    }
    let old: Command = decode(&fixture("log-v6/command-create-queue-in-tree.bin")).unwrap();
    assert!(matches!(old, Command::CreateQueue { policies, .. } if policies == none()));
}

#[test]
fn state_schema_11_rows() {
    // Schema 11 only added the `job_policies` table (migration 11 makes it, empty); its row and
    // its snapshot row:
    let row = job_policies_row();
    let SnapshotRowRecord::JobPolicies { value, .. } = &row else { unreachable!() };
    assert_eq!(value, &fixture("state-v11/job-policies.bin"));
    golden::<super::job_policy::JobPoliciesRecord>("state-v11/job-policies.bin", &decode(value).unwrap());
    golden("state-v11/row-job-policies.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v11/row-job-policies.bin"));
}

#[test]
fn state_schema_12_rows() {
    // Schema 12 only added one meta row, the queues' policies; snapshots carry it as a meta row.
    golden("state-v12/meta-queue-policies.bin", &queue_policies());
    let row =
        SnapshotRowRecord::Meta { key: "queue_policies".into(), value: fixture("state-v12/meta-queue-policies.bin") };
    golden("state-v12/row-meta-queue-policies.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v12/row-meta-queue-policies.bin"));
    // The domain value goes through the records unchanged.
    let policies = queue_policies();
    let mut q = Queue::from(queue());
    policies.queues[&qn("physics")].clone().apply_to(&mut q);
    assert_eq!(QueuePoliciesRecord::of(&q), policies.queues[&qn("physics")]);
    assert_eq!(QueueRecord::from(q.clone()), queue());
    assert_eq!((q.guaranteed.get("cpu"), q.preemption_policy), (6_000, PreemptionPolicy::Fence));
}

/// A retry policy using every field (a back-off of several seconds, several exit codes).
fn queue_retry_record() -> super::job_policy::RetryRecord {
    super::job_policy::RetryRecord {
        max_attempts: 3,
        on_exit_codes: vec![75, -9, 143],
        on_oom: true,
        on_node_failure: true,
        backoff_ms: 30_000,
    }
}

/// Schema 13's `queue_policies` row: a queue with a guarantee, a fence and a retry policy, one
/// with a fence only, one with a retry policy only.
fn queue_policies_with_retry() -> QueuePoliciesWithRetryByQueueRecord {
    let v12 = queue_policies().queues;
    QueuePoliciesWithRetryByQueueRecord {
        queues: [
            (
                qn("physics"),
                QueuePoliciesWithRetryRecord {
                    policies: v12[&qn("physics")].clone(),
                    retry: Some(queue_retry_record()),
                },
            ),
            (qn("science"), QueuePoliciesWithRetryRecord { policies: v12[&qn("science")].clone(), retry: None }),
            (
                qn("biology"),
                QueuePoliciesWithRetryRecord {
                    policies: none(),
                    retry: Some(super::job_policy::RetryRecord {
                        max_attempts: 1,
                        on_exit_codes: vec![],
                        on_oom: false,
                        on_node_failure: false,
                        backoff_ms: 0,
                    }),
                },
            ),
        ]
        .into_iter()
        .collect(),
    }
}

fn format_13_commands() -> Vec<(&'static str, CommandRecord)> {
    let trees = queue_trees().queues;
    let policies = queue_policies().queues;
    let node = |executor: &str, node: &str| ReservedNodeRecord { executor: ex(executor), node: nn(node) };
    vec![
        (
            "command-create-queue-with-retry",
            CommandRecord::CreateQueueWithRetry {
                queue: queue(),
                tree: trees[&qn("physics")].clone(),
                policies: policies[&qn("physics")].clone(),
                retry: Box::new(queue_retry_record()),
            },
        ),
        (
            "command-update-queue-with-retry",
            CommandRecord::UpdateQueueWithRetry {
                queue: plain_queue("science"),
                tree: trees[&qn("science")].clone(),
                policies: none(),
                retry: Box::new(queue_retry_record()),
            },
        ),
        (
            "command-record-reservations",
            CommandRecord::RecordReservations {
                term: 9,
                at_ms: 1_760_000_000_050,
                reserved: vec![
                    ReservationRecord {
                        jobs: vec![jid(1), jid(2)],
                        pool: pool("gpu"),
                        nodes: vec![node("cluster-a", "gpu-1"), node("cluster-b", "gpu-7")],
                        expected_start_ms: Some(1_760_000_600_000),
                    },
                    ReservationRecord {
                        jobs: vec![jid(3)],
                        pool: pool("default"),
                        nodes: vec![node("cluster-a", "n1")],
                        expected_start_ms: None,
                    },
                ],
                released: vec![ReservationRecord {
                    jobs: vec![jid(4)],
                    pool: pool("default"),
                    nodes: vec![node("cluster-a", "n2")],
                    expected_start_ms: Some(1_760_000_000_000),
                }],
            },
        ),
    ]
}

#[test]
fn log_format_13_commands() {
    // Format 13 only added these commands, at the end: every older command is format 13's byte
    // for byte, and an older queue command reads as a queue without a retry policy.
    for (name, cmd) in format_13_commands() {
        golden(&format!("log-v13/{name}.bin"), &cmd);
    }
    let old: Command = decode(&fixture("log-v12/command-create-queue-with-policies.bin")).unwrap();
    assert!(matches!(old, Command::CreateQueue { retry: None, .. }));
    // A queue without a retry policy is still written as format 12's command.
    assert_eq!(encode(&old).unwrap(), fixture("log-v12/command-create-queue-with-policies.bin"));
}

#[test]
fn state_schema_13_rows() {
    // Schema 13 gave the `queue_policies` meta row each queue's retry policy; snapshots carry it
    // as a meta row.
    golden("state-v13/meta-queue-policies.bin", &queue_policies_with_retry());
    let row =
        SnapshotRowRecord::Meta { key: "queue_policies".into(), value: fixture("state-v13/meta-queue-policies.bin") };
    golden("state-v13/row-meta-queue-policies.bin", &row);
    assert_eq!(encode(&row.as_ref()).unwrap(), fixture("state-v13/row-meta-queue-policies.bin"));
    // The domain value goes through the records unchanged (the back-off in whole seconds).
    let policies = queue_policies_with_retry();
    let mut q = Queue::from(queue());
    policies.queues[&qn("physics")].clone().apply_to(&mut q);
    assert_eq!(QueuePoliciesWithRetryRecord::of(&q), policies.queues[&qn("physics")]);
    let retry = q.retry.as_ref().map(|r| (r.max_attempts, r.on_exit_codes.clone(), r.backoff_seconds));
    assert_eq!(retry, Some((3, vec![75, -9, 143], 30)));
    assert_eq!(QueueRecord::from(q), queue());
}

// -----------------------------------------------------------------------------------------------
// What every command fixture means today: the command the rest of Convoy sees when it decodes
// one (`Command`, read through `CommandRecord`), and the bytes that command writes.
// -----------------------------------------------------------------------------------------------

/// Every command fixture with the record it holds.
fn command_fixtures() -> Vec<(String, CommandRecord)> {
    let in_dir = |dir: &'static str| move |(name, cmd): (&str, CommandRecord)| (format!("{dir}/{name}.bin"), cmd);
    let mut all: Vec<_> = commands().into_iter().map(|(n, c)| (format!("log-v1/command-{n}.bin"), c)).collect();
    all.push(("log-v3/command-purge-finished.bin".into(), purge_finished()));
    all.extend(log_format_4_commands().into_iter().map(in_dir("log-v4")));
    all.push(("log-v5/command-record-usage.bin".into(), CommandRecord::RecordUsage { term: 7, usage: queue_usage() }));
    all.extend(format_6_commands().into_iter().map(in_dir("log-v6")));
    all.extend(format_7_commands().into_iter().map(in_dir("log-v7")));
    all.extend(format_8_commands().into_iter().map(in_dir("log-v8")));
    all.extend(format_9_commands().into_iter().map(in_dir("log-v9")));
    all.extend(format_10_commands().into_iter().map(in_dir("log-v10")));
    all.extend(format_11_commands().into_iter().map(in_dir("log-v11")));
    all.extend(format_12_commands().into_iter().map(in_dir("log-v12")));
    all.extend(format_13_commands().into_iter().map(in_dir("log-v13")));
    all
}

/// The record a current command is written as, field by field: the newest form of its meaning
/// (a submit without an owner, read from an older log, as the newest form without one).
fn newest(cmd: Command) -> CommandRecord {
    match cmd {
        Command::Batch(cmds) => CommandRecord::Batch(cmds.into_iter().map(newest).collect()),
        Command::CreateQueue { queue, tree, policies, retry: None } => {
            CommandRecord::CreateQueueWithPolicies { queue, tree, policies }
        }
        Command::UpdateQueue { queue, tree, policies, retry: None } => {
            CommandRecord::UpdateQueueWithPolicies { queue, tree, policies }
        }
        Command::CreateQueue { queue, tree, policies, retry: Some(retry) } => {
            CommandRecord::CreateQueueWithRetry { queue, tree, policies, retry }
        }
        Command::UpdateQueue { queue, tree, policies, retry: Some(retry) } => {
            CommandRecord::UpdateQueueWithRetry { queue, tree, policies, retry }
        }
        Command::DeleteQueue { name, force, at_ms } => CommandRecord::DeleteQueue { name, force, at_ms },
        Command::Submit { queue, job_set, at_ms, owner, jobs } if jobs.iter().any(|j| !j.policies.is_empty()) => {
            CommandRecord::SubmitWithPolicies { queue, job_set, at_ms, owner, jobs }
        }
        Command::Submit { queue, job_set, at_ms, owner: Some(owner), jobs } => {
            let jobs = jobs.into_iter().map(|j| j.job).collect();
            CommandRecord::SubmitByOwner { queue, job_set, at_ms, owner, jobs }
        }
        Command::Submit { queue, job_set, at_ms, owner: None, jobs } => {
            let jobs = jobs.into_iter().map(|j| j.job).collect();
            CommandRecord::SubmitInNamespaces { queue, job_set, at_ms, jobs }
        }
        Command::Cancel { queue, job_set, job_ids, states, reason, at_ms } => {
            CommandRecord::Cancel { queue, job_set, job_ids, states, reason, at_ms }
        }
        Command::Reprioritize { queue, job_set, job_ids, priority, at_ms } => {
            CommandRecord::Reprioritize { queue, job_set, job_ids, priority, at_ms }
        }
        Command::Preempt { queue, job_set, job_ids, reason, at_ms } => {
            CommandRecord::Preempt { queue, job_set, job_ids, reason, at_ms }
        }
        Command::Schedule { term, at_ms, leases, preemptions, failures, inputs: None } => {
            CommandRecord::Schedule { term, at_ms, leases, preemptions, failures }
        }
        Command::Schedule { term, at_ms, leases, preemptions, failures, inputs: Some(inputs) } => {
            CommandRecord::ScheduleWithInputs { term, at_ms, leases, preemptions, failures, inputs }
        }
        Command::UpsertExecutor { executor, nodes, at_ms } => CommandRecord::UpsertExecutor { executor, nodes, at_ms },
        Command::RunEvents { executor, at_ms, events, max_attempted_runs, quarantine } => {
            CommandRecord::RunEventsWithUsage { executor, at_ms, events, max_attempted_runs, quarantine }
        }
        Command::ExecutorLost { executor, at_ms, max_attempted_runs } => {
            CommandRecord::ExecutorLost { executor, at_ms, max_attempted_runs }
        }
        Command::PurgeFinished { purges, before_ms, jobs } => CommandRecord::PurgeFinished { purges, before_ms, jobs },
        Command::LiftQuarantine { executor, node, at_ms } => CommandRecord::LiftQuarantine { executor, node, at_ms },
        Command::RecordUsage { term, usage } => CommandRecord::RecordUsage { term, usage },
        Command::RecordSchedulerConfig { term, config } => CommandRecord::RecordSchedulerConfig { term, config },
        Command::RecordReservations { term, at_ms, reserved, released } => {
            CommandRecord::RecordReservations { term, at_ms, reserved, released }
        }
    }
}

/// The tree settings every queue had before log format 6.
fn top_level() -> QueueTreeRecord {
    QueueTreeRecord {
        parent: None,
        priority_offset: 0,
        priority_policy: PriorityPolicyRecord::Default,
        sort_priority: SortPriorityRecord::Enabled,
    }
}

/// The policies every queue had before log format 11: no guarantee, no fence.
fn none() -> QueuePoliciesRecord {
    QueuePoliciesRecord { guaranteed: BTreeMap::new(), preemption_policy: PreemptionPolicyRecord::Default }
}

/// A run event of a form without pods or usage.
fn without_pod(report: RunReport, node_fault: Option<NodeFaultRecord>) -> UsageRunReport {
    UsageRunReport { event: PodRunReport { event: FaultedRunReport { report, node_fault }, pod: None }, usage: None }
}

/// The submit of `log-v1/command-submit.bin` (and of `log-v1/entry-command.bin`) as read today.
fn current_submit() -> Command {
    Command::Submit {
        queue: qn("physics"),
        job_set: js("run-1"),
        at_ms: 1_760_000_000_002,
        owner: None,
        jobs: vec![
            NamespacedJob { job: new_job(1, true), namespace: None }.into(),
            NamespacedJob { job: new_job(2, false), namespace: None }.into(),
        ],
    }
}

/// Each fixture of a superseded form, with the current command it decodes into.
fn superseded_fixtures() -> Vec<(&'static str, Command)> {
    use RunReportKind::*;
    let faults_policy = QuarantinePolicyRecord { max_failures: 3, window_ms: 600_000, duration_ms: 1_800_000 };
    let quarantine_off = QuarantinePolicyRecord { max_failures: 0, window_ms: 0, duration_ms: 0 };
    let pod = PodRecord { name: "armada-x-0".into(), namespace: "ml-team".into(), uid: "uid-1".into() };
    vec![
        (
            "log-v1/command-create-queue.bin",
            Command::CreateQueue { queue: queue(), tree: top_level(), policies: none(), retry: None },
        ),
        (
            "log-v1/command-update-queue.bin",
            Command::UpdateQueue { queue: plain_queue("plain"), tree: top_level(), policies: none(), retry: None },
        ),
        (
            "log-v6/command-create-queue-in-tree.bin",
            Command::CreateQueue {
                queue: queue(),
                tree: queue_trees().queues[&qn("physics")].clone(),
                policies: none(),
                retry: None,
            },
        ),
        (
            "log-v6/command-update-queue-in-tree.bin",
            Command::UpdateQueue {
                queue: plain_queue("science"),
                tree: queue_trees().queues[&qn("science")].clone(),
                policies: none(),
                retry: None,
            },
        ),
        ("log-v1/command-submit.bin", current_submit()),
        (
            "log-v1/command-run-events.bin",
            Command::RunEvents {
                executor: ex("cluster-a"),
                at_ms: 1_760_000_000_009,
                events: [Pending, Running, Succeeded, Failed, Returned]
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| without_pod(run_report(k, i as u64 + 1), None))
                    .collect(),
                max_attempted_runs: 5,
                quarantine: quarantine_off,
            },
        ),
        (
            "log-v1/command-batch.bin",
            Command::Batch(vec![
                Command::CreateQueue { queue: plain_queue("a"), tree: top_level(), policies: none(), retry: None },
                Command::Batch(vec![Command::DeleteQueue { name: qn("a"), force: false, at_ms: 1 }]),
            ]),
        ),
        (
            "log-v4/command-run-events-with-faults.bin",
            Command::RunEvents {
                executor: ex("cluster-a"),
                at_ms: 1_760_000_700_000,
                events: vec![
                    without_pod(run_report(Pending, 1), None),
                    without_pod(run_report(Running, 2), Some(NodeFaultRecord::NotStarted)),
                    without_pod(run_report(Succeeded, 3), Some(NodeFaultRecord::ImagePull)),
                    without_pod(run_report(Failed, 4), Some(NodeFaultRecord::NodePressure)),
                    without_pod(run_report(Returned, 5), Some(NodeFaultRecord::NodeLost)),
                ],
                max_attempted_runs: 5,
                quarantine: faults_policy,
            },
        ),
        (
            "log-v7/command-submit-in-namespaces.bin",
            Command::Submit {
                queue: qn("physics"),
                job_set: js("run-1"),
                at_ms: 1_760_000_900_000,
                owner: None,
                jobs: vec![
                    NamespacedJob { job: new_job(1, true), namespace: Some(Namespace::new("ml-team").unwrap()) }.into(),
                    NamespacedJob { job: new_job(2, false), namespace: None }.into(),
                ],
            },
        ),
        (
            "log-v7/command-run-events-with-pods.bin",
            Command::RunEvents {
                executor: ex("cluster-a"),
                at_ms: 1_760_000_900_001,
                events: vec![
                    UsageRunReport {
                        event: PodRunReport {
                            event: FaultedRunReport { report: run_report(Pending, 1), node_fault: None },
                            pod: Some(pod),
                        },
                        usage: None,
                    },
                    without_pod(run_report(Returned, 2), Some(NodeFaultRecord::NotStarted)),
                ],
                max_attempted_runs: 5,
                quarantine: faults_policy,
            },
        ),
    ]
}

#[test]
fn superseded_command_fixtures_decode_into_the_current_command() {
    for (path, expected) in superseded_fixtures() {
        let bytes = fixture(path);
        let cmd: Command = decode(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(cmd, expected, "{path} decodes into another command");
        // The same conversion as through the record the golden tests read.
        assert_eq!(Command::from(decode::<CommandRecord>(&bytes).unwrap()), expected, "{path}");
        // Written again, it is the newest form of its meaning, which reads back the same.
        let written = encode(&cmd).unwrap();
        assert_eq!(written, encode(&newest(expected.clone())).unwrap(), "{path}");
        assert_eq!(decode::<Command>(&written).unwrap(), expected, "{path}");
    }
    // A log entry carrying a superseded command reads as one carrying the current command.
    let entry: LogEntryRecord = decode(&fixture("log-v1/entry-command.bin")).unwrap();
    let EntryPayloadRecord::Normal(cmd) = entry.payload else { panic!("entry-command holds a command") };
    assert_eq!(Command::from(cmd), current_submit());
}

#[test]
fn current_command_fixtures_round_trip_byte_for_byte_as_commands() {
    let superseded: BTreeSet<&str> = superseded_fixtures().into_iter().map(|(p, _)| p).collect();
    let mut current = 0;
    for (path, record) in command_fixtures() {
        let bytes = fixture(&path);
        let cmd: Command = decode(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(cmd, Command::from(record), "{path}");
        // Every command writes the bytes of the newest record of its meaning.
        assert_eq!(encode(&cmd).unwrap(), encode(&newest(cmd.clone())).unwrap(), "{path}");
        if !superseded.contains(path.as_str()) {
            assert_eq!(encode(&cmd).unwrap(), bytes, "{path}: the command encodes to other bytes");
            current += 1;
        }
    }
    assert_eq!(current + superseded.len(), command_fixtures().len(), "every superseded fixture is listed");
    // What the log store writes for a current command is the entry of its newest record.
    let cmd = decode::<Command>(&fixture("log-v8/command-submit-by-owner.bin")).unwrap();
    let log_id = log_id(3, 2, 18);
    let written = encode(&LogEntryRef { log_id, payload: EntryPayloadRef::Normal(&cmd) }).unwrap();
    let record = LogEntryRecord { log_id, payload: EntryPayloadRecord::Normal(newest(cmd)) };
    assert_eq!(written, encode(&record).unwrap());
}
