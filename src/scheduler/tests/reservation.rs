//! Reservations for jobs that cannot fit piecemeal (`gang_reservation_after`): the issue's
//! example with exact outcomes, the worked scenario, and the property that no job other than the
//! reserved one or a backfill lands on a reserved node, with at most `max_reservations_per_pool`
//! held per pool.

use super::properties::{Harness, world};
use crate::model::{
    ExecutorName, GangSpec, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements,
};
use crate::scheduler::{
    Decisions, JobInfo, JobTimes, QueueSnapshot, Reason, RunningJob, SchedulerConfig, Snapshot, schedule,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

const S: i64 = 1000;

fn job(id: u128, queue: &str, gang: Option<&Arc<GangSpec>>) -> Arc<JobInfo> {
    Arc::new(JobInfo {
        id: JobId::from_u128(id),
        queue: QueueName::new(queue).unwrap(),
        priority_class: PriorityClassName::new("default").unwrap(),
        priority: 0,
        submit_seq: id as u64,
        requirements: Requirements::new(SchedulingRequirements {
            requests: Resources::parse([("cpu", "1")]).unwrap(),
            ..Default::default()
        }),
        gang: gang.cloned(),
        pools: vec![],
        not_before_ms: None,
    })
}

fn node() -> Node {
    Node {
        name: NodeName::new("n").unwrap(),
        executor: ExecutorName::new("e").unwrap(),
        pool: PoolName::default_pool(),
        labels: Labels::new(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "8")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    }
}

/// The example at t=20 s: one 8-cpu node; 7 jobs of queue B run on it (ids 1..=7,
/// started at 0 with a 40 s deadline), one cpu is free; queue A's gang of 8 one-cpu jobs (ids
/// 11..=18) has waited since 0; B queues job 21 (deadline 600 s) and job 22 (deadline 5 s).
fn example(after_secs: u64) -> (Snapshot, SchedulerConfig) {
    let gang = Arc::new(GangSpec { id: "g".into(), cardinality: 8, min_cardinality: 8, node_uniformity_label: None });
    let n = node();
    let running: Vec<RunningJob> = (1..=7)
        .map(|i| RunningJob {
            job: job(i, "B", None),
            executor: n.executor.clone(),
            node: n.name.clone(),
            leased_at_ms: 0,
        })
        .collect();
    let gang_jobs: Vec<Arc<JobInfo>> = (11..=18).map(|i| job(i, "A", Some(&gang))).collect();
    let small = vec![job(21, "B", None), job(22, "B", None)];
    let mut times = BTreeMap::new();
    for i in 1..=7 {
        times.insert(JobId::from_u128(i), JobTimes { since_ms: 0, deadline_ms: Some(40 * S) });
    }
    for i in 11..=18 {
        times.insert(JobId::from_u128(i), JobTimes { since_ms: 0, deadline_ms: None });
    }
    times.insert(JobId::from_u128(21), JobTimes { since_ms: 10 * S, deadline_ms: Some(600 * S) });
    times.insert(JobId::from_u128(22), JobTimes { since_ms: 10 * S, deadline_ms: Some(5 * S) });
    let snap = Snapshot {
        nodes: vec![n],
        queues: vec![
            QueueSnapshot {
                queue: Queue::new(QueueName::new("A").unwrap(), 1.0),
                queued: gang_jobs,
                queued_demand: None,
            },
            QueueSnapshot { queue: Queue::new(QueueName::new("B").unwrap(), 1.0), queued: small, queued_demand: None },
        ],
        running,
        job_times: times,
        ..Default::default()
    };
    let cfg = SchedulerConfig { gang_reservation_after: Duration::from_secs(after_secs), ..Default::default() };
    (snap, cfg)
}

fn leased(d: &Decisions) -> Vec<u128> {
    d.leases.iter().map(|l| l.job_id.as_u128()).collect()
}

fn reason_of(d: &Decisions, id: u128) -> Option<&Reason> {
    d.unscheduled.iter().find(|u| u.job_id.as_u128() == id).map(|u| &*u.reason)
}

#[test]
fn without_reservations_the_freed_cpu_goes_to_the_next_small_job() {
    let (snap, cfg) = example(0);
    let d = schedule(&snap, &cfg, 0, 20 * S);
    assert_eq!(leased(&d), vec![21]);
    assert!(d.reservations.is_empty());
    // The same without the job times: the option off reads none of them.
    let d2 = schedule(&Snapshot { job_times: BTreeMap::new(), ..snap }, &cfg, 0, 20 * S);
    assert_eq!(d, d2);
}

#[test]
fn the_gang_gets_the_node_reserved_and_a_short_job_backfills() {
    let (snap, cfg) = example(15);
    let d = schedule(&snap, &cfg, 0, 20 * S);
    // Job 22 ends by 25 s, before the gang's expected start at 40 s: it backfills. Job 21 would
    // end at 620 s: it is kept off.
    assert_eq!(leased(&d), vec![22]);
    assert_eq!(d.reservations.len(), 1);
    let r = &d.reservations[0];
    assert_eq!(r.job_id.as_u128(), 11);
    assert_eq!(r.jobs.iter().map(|j| j.as_u128()).collect::<Vec<_>>(), (11..=18).collect::<Vec<_>>());
    assert_eq!((r.gang.as_deref(), r.queue.as_str(), r.pool.as_str()), (Some("g"), "A", "default"));
    assert_eq!(r.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), vec!["n"]);
    assert_eq!((r.expected_start_ms, r.queued_since_ms, r.kept_off), (Some(40 * S), 0, 1));
    assert_eq!(
        reason_of(&d, 11).map(|r| r.to_string()).as_deref(),
        Some("reserved node n in pool default; expected to fit at 1970-01-01T00:00:40Z")
    );
    assert_eq!(
        reason_of(&d, 21),
        Some(&Reason::KeptOffReservation {
            pool: PoolName::default_pool(),
            nodes: vec![NodeName::new("n").unwrap()],
            job: JobId::from_u128(11)
        })
    );
}

#[test]
fn the_reservation_waits_for_the_gang_s_time_and_the_gang_starts_once_the_node_is_free() {
    // Before the wait is over (10 s < 15 s), nothing is reserved.
    let (snap, cfg) = example(15);
    let d = schedule(&snap, &cfg, 0, 10 * S);
    assert_eq!(leased(&d), vec![21]);
    assert!(d.reservations.is_empty());
    // At 40 s the running jobs are gone: the gang starts, though B's jobs come first in the
    // first pass's order (B's share equals A's after the gang; A is tried first by name, but
    // even with B ahead the second pass keeps its jobs off).
    let (mut snap, cfg) = example(15);
    snap.running.clear();
    let d = schedule(&snap, &cfg, 0, 40 * S);
    assert_eq!(leased(&d), (11..=18).collect::<Vec<_>>());
    assert!(d.reservations.is_empty(), "a reservation whose job started is not held");
}

#[test]
fn a_second_reservation_needs_max_reservations_per_pool() {
    // Two nodes, each with 7 of 8 cpus taken; two gangs of 8 in two queues, both waiting.
    let (mut snap, mut cfg) = example(15);
    let mut n2 = node();
    n2.name = NodeName::new("m").unwrap();
    let gang2 = Arc::new(GangSpec { id: "h".into(), cardinality: 8, min_cardinality: 8, node_uniformity_label: None });
    for i in 31..=37 {
        snap.running.push(RunningJob {
            job: job(i, "B", None),
            executor: n2.executor.clone(),
            node: n2.name.clone(),
            leased_at_ms: 0,
        });
        snap.job_times.insert(JobId::from_u128(i), JobTimes { since_ms: 0, deadline_ms: Some(50 * S) });
    }
    snap.nodes.push(n2);
    let members: Vec<Arc<JobInfo>> = (41..=48).map(|i| job(i, "C", Some(&gang2))).collect();
    for i in 41..=48 {
        snap.job_times.insert(JobId::from_u128(i), JobTimes { since_ms: 5 * S, deadline_ms: None });
    }
    snap.queues.push(QueueSnapshot {
        queue: Queue::new(QueueName::new("C").unwrap(), 1.0),
        queued: members,
        queued_demand: None,
    });
    let d = schedule(&snap, &cfg, 0, 20 * S);
    // The oldest (A's, waiting since 0) holds the node that frees first; C's waits unreserved.
    assert_eq!(d.reservations.len(), 1);
    assert_eq!(d.reservations[0].job_id.as_u128(), 11);
    assert_eq!(d.reservations[0].nodes[0].node.as_str(), "n");
    assert_eq!(d.reservations[0].expected_start_ms, Some(40 * S));
    cfg.max_reservations_per_pool = 2;
    let d = schedule(&snap, &cfg, 0, 20 * S);
    let held: Vec<(u128, &str, Option<i64>)> =
        d.reservations.iter().map(|r| (r.job_id.as_u128(), r.nodes[0].node.as_str(), r.expected_start_ms)).collect();
    assert_eq!(held, vec![(11, "n", Some(40 * S)), (41, "m", Some(50 * S))]);
    // No small job starts: both free cpus are reserved, and neither small job ends in time.
    assert_eq!(leased(&d), vec![22]);
}

#[test]
fn without_known_ends_the_roomiest_nodes_are_reserved_with_no_expected_start() {
    let (mut snap, cfg) = example(15);
    for i in 1..=7 {
        snap.job_times.insert(JobId::from_u128(i), JobTimes { since_ms: 0, deadline_ms: None });
    }
    let d = schedule(&snap, &cfg, 0, 20 * S);
    assert_eq!(d.reservations.len(), 1);
    assert_eq!(d.reservations[0].expected_start_ms, None);
    // With no expected start nothing backfills.
    assert!(leased(&d).is_empty());
    assert_eq!(
        reason_of(&d, 11).map(|r| r.to_string()).as_deref(),
        Some("reserved node n in pool default; expected start unknown (the running jobs there have no known end)")
    );
}

#[test]
fn config_reads_the_server_and_the_simulate_spellings() {
    let c: SchedulerConfig =
        toml::from_str("gang_reservation_after = \"10m\"\nmax_reservations_per_pool = 2\n").unwrap();
    assert_eq!((c.gang_reservation_after, c.max_reservations_per_pool), (Duration::from_secs(600), 2));
    let c: SchedulerConfig = toml::from_str("gang_reservation_after = \"off\"\n").unwrap();
    assert_eq!(c.gang_reservation_after, Duration::ZERO);
    let c: SchedulerConfig = serde_yaml_ng::from_str("gang_reservation_after_seconds: 90\n").unwrap();
    assert_eq!(c.gang_reservation_after, Duration::from_secs(90));
    let e = toml::from_str::<SchedulerConfig>("gang_reservation_after = \"soon\"\n").unwrap_err();
    assert!(e.to_string().contains("\"off\""), "{e}");
    let c = SchedulerConfig { max_reservations_per_pool: 0, ..Default::default() };
    assert_eq!(c.validate().unwrap_err().field, "max_reservations_per_pool");
    // Off and at the default, the keys are not written: the recorded configuration is unchanged.
    let json = serde_json::to_string(&SchedulerConfig::default()).unwrap();
    assert!(!json.contains("reservation"), "{json}");
}

/// The queued and running jobs' times of a property world: everything queued since 0, deadlines
/// by id (none, 30 s or 600 s).
fn times(snap: &Snapshot) -> BTreeMap<JobId, JobTimes> {
    let deadline = |id: JobId| match id.as_u128() % 3 {
        0 => None,
        1 => Some(30 * S),
        _ => Some(600 * S),
    };
    let queued = snap.queues.iter().flat_map(|q| q.queued.iter().map(|j| j.id));
    let running = snap.running.iter().map(|r| r.job.id);
    queued.chain(running).map(|id| (id, JobTimes { since_ms: 0, deadline_ms: deadline(id) })).collect()
}

/// No job other than a reservation's own or one whose deadline ends before its expected start is
/// placed on a reserved node; at most `max` reservations per pool, on nodes of their own.
fn check(snap: &Snapshot, d: &Decisions, max: u32, now: i64) -> Result<(), TestCaseError> {
    let mut per_pool: BTreeMap<&str, u32> = BTreeMap::new();
    let mut holder: HashMap<(String, String), usize> = HashMap::new();
    for (i, r) in d.reservations.iter().enumerate() {
        *per_pool.entry(r.pool.as_str()).or_default() += 1;
        for n in &r.nodes {
            prop_assert!(
                holder.insert((n.executor.to_string(), n.node.to_string()), i).is_none(),
                "node reserved twice"
            );
        }
        let leased: BTreeSet<JobId> = d.leases.iter().map(|l| l.job_id).collect();
        prop_assert!(r.jobs.iter().all(|j| !leased.contains(j)), "a held reservation's job was placed");
    }
    prop_assert!(per_pool.values().all(|&c| c <= max), "{per_pool:?} > {max}");
    for l in &d.leases {
        let Some(&i) = holder.get(&(l.executor.to_string(), l.node.to_string())) else { continue };
        let r = &d.reservations[i];
        let ends = snap.job_times.get(&l.job_id).and_then(|t| t.deadline_ms).map(|dl| now + dl);
        let backfill = matches!((ends, r.expected_start_ms), (Some(e), Some(s)) if e <= s);
        prop_assert!(
            r.jobs.contains(&l.job_id) || backfill,
            "job {} placed on a node reserved for {}",
            l.job_id,
            r.job_id
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn only_the_reserved_job_or_a_backfill_lands_on_a_reserved_node(w in world(), max in 1u32..=3) {
        let mut h = Harness::new(&w);
        h.cfg.gang_reservation_after = Duration::from_secs(10);
        h.cfg.max_reservations_per_pool = max;
        h.submit(&w.before);
        let mut snap = h.snapshot();
        snap.job_times = times(&snap);
        let d = schedule(&snap, &h.cfg, w.seed, 60 * S);
        check(&snap, &d, max, 60 * S)?;
        h.apply(&d);
        h.submit(&w.after);
        let mut snap = h.snapshot();
        snap.job_times = times(&snap);
        let d = schedule(&snap, &h.cfg, w.seed, 120 * S);
        check(&snap, &d, max, 120 * S)?;
        // Deterministic, like every cycle.
        prop_assert_eq!(&d, &schedule(&snap, &h.cfg, w.seed, 120 * S));
    }
}

/// The worked scenario (tests/scenarios/gang_reservation.yaml), with the option and without.
mod scenario {
    use crate::simulate::{Output, RoundOutput, run_text};

    fn text() -> String {
        let path = format!("{}/tests/scenarios/gang_reservation.yaml", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn job<'a>(r: &'a RoundOutput, name: &str) -> (&'a str, Option<&'a str>, &'a str) {
        let j = &r.jobs[name];
        (j.state, j.node.as_deref(), j.reason.as_deref().unwrap_or(""))
    }

    fn held(r: &RoundOutput) -> Vec<(String, Vec<String>, Option<f64>, u32)> {
        r.reservations.iter().map(|x| (x.job.clone(), x.nodes.clone(), x.expected_start_seconds, x.kept_off)).collect()
    }

    const KEPT_OFF: &str = "node n in pool default reserved for job 00000000000000000000000009 until it fits; only jobs \
                            whose deadline ends before the reservation's expected start may use it";

    #[test]
    fn the_gang_starts_once_its_node_frees_up() {
        let out: Output = run_text(&text()).expect("valid");
        let r = &out.rounds;
        // Round 1: the gang has waited 10 s of 15: the freed cpu goes to s1.
        assert_eq!(job(&r[1], "s1").0, "running");
        assert!(held(&r[1]).is_empty());
        // Round 2: node n reserved; expected at 610 s (s1's deadline); s2 kept off.
        assert_eq!(held(&r[2]), vec![("g-1".to_string(), vec!["n".to_string()], Some(610.0), 1)]);
        assert_eq!(
            job(&r[2], "g-1"),
            ("queued", None, "reserved node n in pool default; expected to fit at 1970-01-01T00:10:10Z")
        );
        assert_eq!(job(&r[2], "s2"), ("queued", None, KEPT_OFF));
        assert_eq!(r[2].nodes["n"].get("B").copied(), Some(7), "the freed cpu stays free");
        // Round 3: s1 ended; the gang is expected at 40 s; x (ends at 35 s) backfills.
        assert_eq!(held(&r[3]), vec![("g-1".to_string(), vec!["n".to_string()], Some(40.0), 1)]);
        assert_eq!(job(&r[3], "x"), ("running", Some("n"), ""));
        assert_eq!(job(&r[3], "s2"), ("queued", None, KEPT_OFF));
        // Round 4: the node is free: the gang starts on it; s2 was kept off until it did.
        for i in 1..=8 {
            assert_eq!(job(&r[4], &format!("g-{i}")), ("running", Some("n"), ""));
        }
        assert_eq!(job(&r[4], "s2"), ("queued", None, KEPT_OFF));
        assert!(held(&r[4]).is_empty());
        // Round 5: s2, now the oldest at its queue's head, holds the node; the gang has no
        // deadline, so no start is expected.
        assert_eq!(held(&r[5]), vec![("s2".to_string(), vec!["n".to_string()], None, 0)]);
    }

    #[test]
    fn without_the_option_the_gang_never_starts() {
        let text = text().replace("gang_reservation_after_seconds: 15", "gang_reservation_after_seconds: 0");
        let out = run_text(&text).expect("valid");
        for r in &out.rounds {
            assert_eq!(job(r, "g-1").0, "queued", "round {}", r.round);
            assert!(r.reservations.is_empty());
        }
        assert_eq!(job(&out.rounds[2], "s2"), ("running", Some("n"), ""));
        assert_eq!(job(&out.rounds[4], "s2").0, "running");
    }
}
