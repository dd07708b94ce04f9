//! Retry back-off: a job whose `not_before_ms` is ahead of the cycle's `now` is offered to no
//! pool, claims no share of the cycle's demand, and waits with its reason; at `now` it is
//! offered like any other.

use crate::model::{
    ExecutorName, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    Resources, SchedulingRequirements,
};
use crate::scheduler::{JobInfo, QueueSnapshot, Reason, SchedulerConfig, Snapshot, schedule};
use std::sync::Arc;

const NOW: i64 = 1_000_000;

fn job(queue: &str, seq: u64, not_before_ms: Option<i64>) -> Arc<JobInfo> {
    let requests = Resources::parse([("cpu", "1"), ("memory", "1Gi")]).unwrap();
    Arc::new(JobInfo {
        id: JobId::from_u128(u128::from(seq)),
        queue: QueueName::new(queue).unwrap(),
        priority_class: PriorityClassName::new("preemptible").unwrap(),
        priority: 0,
        submit_seq: seq,
        requirements: Requirements::new(SchedulingRequirements { requests, ..Default::default() }),
        gang: None,
        pools: vec![],
        not_before_ms,
    })
}

/// One 2-cpu node; queue A has jobs 1 (in back-off until `until`) and 2, queue B (cordoned or
/// not) has job 3, in back-off until `until` too.
fn snapshot(until: i64, b_cordoned: bool) -> Snapshot {
    let node = Node {
        name: NodeName::new("n").unwrap(),
        executor: ExecutorName::new("e").unwrap(),
        pool: PoolName::default_pool(),
        labels: Labels::new(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", "2"), ("memory", "64Gi")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    };
    let mut b = Queue::new(QueueName::new("B").unwrap(), 1.0);
    b.cordoned = b_cordoned;
    Snapshot {
        nodes: vec![node],
        queues: vec![
            QueueSnapshot {
                queue: Queue::new(QueueName::new("A").unwrap(), 1.0),
                queued: vec![job("A", 1, Some(until)), job("A", 2, None)],
                queued_demand: None,
            },
            QueueSnapshot { queue: b, queued: vec![job("B", 3, Some(until))], queued_demand: None },
        ],
        ..Default::default()
    }
}

fn id(seq: u64) -> JobId {
    JobId::from_u128(u128::from(seq))
}

#[test]
fn a_job_in_back_off_waits_with_its_end_and_the_rest_of_its_queue_goes_on() {
    let d = schedule(&snapshot(NOW + 30_000, false), &SchedulerConfig::default(), 1, NOW);
    let leased: Vec<JobId> = d.leases.iter().map(|l| l.job_id).collect();
    assert_eq!(leased, vec![id(2)]);
    let waits: Vec<(JobId, &Reason)> = d.unscheduled.iter().map(|u| (u.job_id, u.reason.as_ref())).collect();
    assert_eq!(
        waits,
        vec![
            (id(1), &Reason::RetryBackoff { until_ms: NOW + 30_000 }),
            (id(3), &Reason::RetryBackoff { until_ms: NOW + 30_000 })
        ]
    );
    // B holds nothing but a job in back-off: no note stands for the whole queue.
    assert!(!d.queue_notes.contains_key(&QueueName::new("B").unwrap()), "{:?}", d.queue_notes);
}

#[test]
fn a_back_off_that_ends_at_now_is_over() {
    let d = schedule(&snapshot(NOW, false), &SchedulerConfig::default(), 1, NOW);
    let mut leased: Vec<JobId> = d.leases.iter().map(|l| l.job_id).collect();
    leased.sort();
    assert_eq!(leased, vec![id(1), id(3)], "two cpus shared fairly: one for A, one for B");
    assert!(d.unscheduled.iter().all(|u| !matches!(*u.reason, Reason::RetryBackoff { .. })), "{:?}", d.unscheduled);
}

#[test]
fn a_cordoned_queue_with_only_jobs_in_back_off_is_not_noted_as_cordoned() {
    let d = schedule(&snapshot(NOW + 1, true), &SchedulerConfig::default(), 1, NOW);
    assert!(!d.queue_notes.contains_key(&QueueName::new("B").unwrap()), "{:?}", d.queue_notes);
    let d = schedule(&snapshot(NOW, true), &SchedulerConfig::default(), 1, NOW);
    assert!(
        matches!(
            d.queue_notes.get(&QueueName::new("B").unwrap()).map(|r| r.as_ref()),
            Some(Reason::QueueCordoned { .. })
        ),
        "{:?}",
        d.queue_notes
    );
}
