//! Cordoned queues (Armada's meaning): their queued jobs are not scheduled and claim no share;
//! their running jobs stay and count as their demand.

use crate::model::{
    ExecutorName, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements,
};
use crate::scheduler::{JobInfo, QueueSnapshot, Reason, RunningJob, SchedulerConfig, Snapshot, schedule};
use std::sync::Arc;

fn name(q: &str) -> QueueName {
    QueueName::new(q).unwrap()
}

fn job(queue: &str, seq: u64) -> Arc<JobInfo> {
    let requests = Resources::parse([("cpu", "1"), ("memory", "1Gi")]).unwrap();
    Arc::new(JobInfo {
        id: JobId::from_u128(u128::from(seq)),
        queue: name(queue),
        priority_class: PriorityClassName::new("preemptible").unwrap(),
        priority: 0,
        submit_seq: seq,
        requirements: Requirements::new(SchedulingRequirements { requests, ..Default::default() }),
        gang: None,
        pools: vec![],
        not_before_ms: None,
    })
}

/// One 10-cpu node; A runs 4 jobs and has 6 queued, B has 10 queued.
fn snapshot(a_cordoned: bool) -> Snapshot {
    let node = Node {
        name: NodeName::new("n").unwrap(),
        executor: ExecutorName::new("e").unwrap(),
        pool: PoolName::default_pool(),
        labels: Labels::new(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "10"), ("memory", "64Gi")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    };
    let running: Vec<RunningJob> = (1..=4)
        .map(|s| RunningJob {
            job: job("A", s),
            executor: node.executor.clone(),
            node: node.name.clone(),
            leased_at_ms: 0,
        })
        .collect();
    let mut a = Queue::new(name("A"), 1.0);
    a.cordoned = a_cordoned;
    Snapshot {
        nodes: vec![node],
        queues: vec![
            QueueSnapshot { queue: a, queued: (5..=10).map(|s| job("A", s)).collect(), queued_demand: None },
            QueueSnapshot {
                queue: Queue::new(name("B"), 1.0),
                queued: (11..=20).map(|s| job("B", s)).collect(),
                queued_demand: None,
            },
        ],
        running,
        ..Default::default()
    }
}

fn leased(d: &crate::scheduler::Decisions, queue: &str) -> Vec<u128> {
    d.leases
        .iter()
        .filter(|l| l.job_id.as_u128() >= 1 && queue_of(l.job_id.as_u128()) == queue)
        .map(|l| l.job_id.as_u128())
        .collect()
}

fn queue_of(seq: u128) -> &'static str {
    if seq <= 10 { "A" } else { "B" }
}

#[test]
fn a_cordoned_queue_keeps_its_running_jobs_and_schedules_none_of_its_queued_ones() {
    let d = schedule(&snapshot(true), &SchedulerConfig::default(), 0, 0);
    // B takes the 6 free cpus; none of A's queued jobs is placed and none of its running ones
    // is preempted.
    assert_eq!(leased(&d, "A"), Vec::<u128>::new());
    assert_eq!(leased(&d, "B"), (11..=16).collect::<Vec<_>>());
    assert!(d.preemptions.is_empty(), "{:?}", d.preemptions);
    assert_eq!(
        d.queue_notes.get(&name("A")).map(|r| r.as_ref().clone()),
        Some(Reason::QueueCordoned { queue: name("A") })
    );
    assert_eq!(
        d.queue_notes[&name("A")].to_string(),
        "queue A is cordoned: its queued jobs wait until it is uncordoned"
    );
    // A's demand is what it runs (4 cpu): its adjusted fair share is 0.4 and B's the rest.
    let pool = &d.pools[0];
    let share = |q: &str| pool.queues.iter().find(|s| s.queue.as_str() == q).unwrap();
    assert_eq!(share("A").demand.get("cpu"), 4000);
    assert_eq!(share("B").demand.get("cpu"), 10_000);
    assert!((share("A").adjusted_fair_share - 0.4).abs() < 1e-9, "{}", share("A").adjusted_fair_share);
    assert!((share("B").adjusted_fair_share - 0.6).abs() < 1e-9, "{}", share("B").adjusted_fair_share);
}

#[test]
fn uncordoned_the_same_queue_claims_its_queued_demand_again() {
    let d = schedule(&snapshot(false), &SchedulerConfig::default(), 0, 0);
    // Equal weights, both demanding more than half: 5 cpus each, so A gets one more job and B 5.
    assert_eq!(leased(&d, "A"), vec![5]);
    assert_eq!(leased(&d, "B"), (11..=15).collect::<Vec<_>>());
    assert_eq!(d.queue_notes.get(&name("A")), None);
    let share = |q: &str| d.pools[0].queues.iter().find(|s| s.queue.as_str() == q).unwrap().demand.get("cpu");
    assert_eq!((share("A"), share("B")), (10_000, 10_000));
}
