//! Each kind of condition, on a small pool with an exact answer; and for each, meeting the
//! condition by hand (not through the explainer's own edit) does start the job.

use super::{ConditionKind, EndBasis, Explanation, RunEnd, WhyQuestion, explain};
use crate::model::{
    ExecutorName, GangSpec, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, Queue, QueueName, Requirements,
    ResourceName, Resources, SchedulingRequirements,
};
use crate::scheduler::rate_limit::TokenBucket;
use crate::scheduler::{JobInfo, QueueSnapshot, RunningJob, SchedulerConfig, Snapshot, schedule};
use std::sync::Arc;

const NOW: i64 = 1_000_000;

fn queue(q: &str) -> QueueName {
    QueueName::new(q).unwrap()
}

fn job(q: &str, seq: u64, cpu: &str, class: &str) -> JobInfo {
    let requests = Resources::parse([("cpu", cpu), ("memory", "1Gi")]).unwrap();
    JobInfo {
        id: JobId::from_u128(u128::from(seq)),
        queue: queue(q),
        priority_class: PriorityClassName::new(class).unwrap(),
        priority: 0,
        submit_seq: seq,
        requirements: Requirements::new(SchedulingRequirements { requests, ..Default::default() }),
        gang: None,
        pools: vec![],
        not_before_ms: None,
    }
}

fn node(name: &str, cpu: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        name: NodeName::new(name).unwrap(),
        executor: ExecutorName::new("e").unwrap(),
        pool: PoolName::default_pool(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Labels>(),
        taints: vec![],
        allocatable: Resources::parse([("cpu", cpu), ("memory", "64Gi")]).unwrap(),
        unallocatable: Resources::new(),
        unschedulable: false,
    }
}

fn running(j: JobInfo, node: &str, leased_at_ms: i64) -> RunningJob {
    RunningJob {
        job: Arc::new(j),
        executor: ExecutorName::new("e").unwrap(),
        node: NodeName::new(node).unwrap(),
        leased_at_ms,
    }
}

fn queued(q: Queue, jobs: Vec<JobInfo>) -> QueueSnapshot {
    QueueSnapshot { queue: q, queued: jobs.into_iter().map(Arc::new).collect(), queued_demand: None }
}

/// Queue B runs `b_running` 1-cpu non-preemptible jobs on one 4-cpu node; queue A has job 100
/// queued, asking for `cpu`.
fn full_node(cpu: &str, b_running: u64) -> Snapshot {
    Snapshot {
        nodes: vec![node("n1", "4", &[])],
        queues: vec![
            queued(Queue::new(queue("A"), 1.0), vec![job("A", 100, cpu, "default")]),
            queued(Queue::new(queue("B"), 1.0), vec![]),
        ],
        running: (1..=b_running).map(|s| running(job("B", s, "1", "default"), "n1", 0)).collect(),
        ..Default::default()
    }
}

fn ask(s: &Snapshot, cfg: &SchedulerConfig, id: u128, ends: &[RunEnd]) -> Explanation {
    explain(&WhyQuestion { snapshot: s, cfg, seed: 0, now_ms: NOW, job: JobId::from_u128(id), ends })
}

fn kinds(e: &Explanation) -> Vec<ConditionKind> {
    e.would_start_if.iter().map(|c| c.kind).collect()
}

fn starts(s: &Snapshot, cfg: &SchedulerConfig, id: u128) -> bool {
    schedule(s, cfg, 0, NOW).leases.iter().any(|l| l.job_id == JobId::from_u128(id))
}

#[test]
fn a_job_the_next_cycle_places_needs_nothing() {
    let s = full_node("1", 2);
    let e = ask(&s, &SchedulerConfig::default(), 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::NextCycle]);
    assert_eq!(e.estimated_start.map(|x| x.at_ms), Some(NOW));
    assert_eq!(e.reason, None);
}

#[test]
fn room_on_one_node_is_named_with_what_is_free_now() {
    let cfg = SchedulerConfig::default();
    let s = full_node("2", 3);
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::Capacity]);
    assert_eq!(
        e.would_start_if[0].detail,
        "2 cpu, 1Gi memory free on one node of pool default (the most free now is 1 cpu, 61Gi memory)"
    );
    // Met by hand: a second node with 2 cpu.
    let mut met = s.clone();
    met.nodes.push(node("n2", "2", &[]));
    assert!(starts(&met, &cfg, 100));
}

#[test]
fn a_queue_over_its_fair_share_is_told_so_and_how_many_of_its_jobs_must_end() {
    let cfg = SchedulerConfig::default();
    // A holds the whole node with non-preemptible jobs; B waits for 2 cpu, so A's share is 0.5.
    let s = Snapshot {
        nodes: vec![node("n1", "4", &[])],
        queues: vec![
            queued(Queue::new(queue("A"), 1.0), vec![job("A", 100, "1", "default")]),
            queued(Queue::new(queue("B"), 1.0), vec![job("B", 200, "1", "default"), job("B", 201, "1", "default")]),
        ],
        running: (1..=4).map(|s| running(job("A", s, "1", "default"), "n1", s as i64)).collect(),
        ..Default::default()
    };
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    // A 1-cpu node alone would go to B, further below its share: only A's own jobs ending helps.
    assert_eq!(kinds(&e), vec![ConditionKind::FairShare]);
    assert_eq!(
        e.would_start_if[0].detail,
        "queue A below its fair share in pool default (it holds 1.00 of the pool, its share is 0.50): 3 of its \
         running jobs end"
    );
    // Met by hand: A's three latest jobs end.
    let mut met = s.clone();
    met.running.retain(|r| r.job.id.as_u128() == 1);
    assert!(starts(&met, &cfg, 100));
}

#[test]
fn a_cordoned_queue_is_the_one_condition() {
    let cfg = SchedulerConfig::default();
    let mut s = full_node("1", 0);
    s.queues[0].queue.cordoned = true;
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::QueueUncordoned]);
    assert_eq!(e.would_start_if[0].detail, "queue A uncordoned");
    s.queues[0].queue.cordoned = false;
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn a_queue_limit_lifted() {
    let cfg = SchedulerConfig::default();
    let mut s = full_node("2", 0);
    s.queues[0].queue.resource_limits.insert(ResourceName::new("cpu").unwrap(), 0.25);
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::QueueLimit]);
    assert_eq!(
        e.would_start_if[0].detail,
        "queue A's limit on cpu (0.25 of the pool) lifted, or enough of its running jobs end"
    );
    s.queues[0].queue.resource_limits.clear();
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn an_empty_rate_bucket_refilled() {
    let cfg = SchedulerConfig { maximum_scheduling_rate: 0.001, maximum_scheduling_burst: 1, ..Default::default() };
    let mut s = full_node("1", 0);
    s.rate_limits.global = TokenBucket { milli_tokens: 0, updated_ms: Some(NOW) };
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::RateLimit]);
    s.rate_limits = Default::default();
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn a_job_past_the_lookback() {
    let cfg = SchedulerConfig { max_queue_lookback: 2, ..Default::default() };
    // A's first two jobs need more than any node has; job 100 comes third.
    let mut s = full_node("1", 0);
    s.queues[0].queued =
        vec![job("A", 10, "8", "default"), job("A", 11, "8", "default"), job("A", 100, "1", "default")]
            .into_iter()
            .map(Arc::new)
            .collect();
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::Lookback]);
    assert!(starts(&s, &SchedulerConfig { max_queue_lookback: 3, ..cfg.clone() }, 100));
}

#[test]
fn a_selector_no_node_passes_gets_a_node_that_does() {
    let cfg = SchedulerConfig::default();
    let mut s = full_node("1", 0);
    let mut j = job("A", 100, "1", "default");
    let mut reqs = (*j.requirements).clone();
    reqs.node_selector.insert("gpu".to_string(), "a100".to_string());
    j.requirements = Requirements::new(reqs);
    s.queues[0].queued = vec![Arc::new(j)];
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::MatchingNode]);
    assert_eq!(
        e.would_start_if[0].detail,
        "a node pool default with labels gpu=a100, untainted, with 1 cpu, 1Gi memory free"
    );
    s.nodes.push(node("n2", "2", &[("gpu", "a100")]));
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn a_resource_no_node_offers() {
    let cfg = SchedulerConfig::default();
    let mut s = full_node("1", 0);
    let mut j = job("A", 100, "1", "default");
    let mut reqs = (*j.requirements).clone();
    reqs.requests.set(ResourceName::new("example.com/fpga").unwrap(), 1000);
    j.requirements = Requirements::new(reqs);
    s.queues[0].queued = vec![Arc::new(j)];
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::Resource]);
    assert_eq!(e.would_start_if[0].detail, "a node of pool default like n1 offers 1 example.com/fpga");
    s.nodes[0].allocatable.set(ResourceName::new("example.com/fpga").unwrap(), 1000);
    assert!(starts(&s, &cfg, 100));
}

fn gang_of(q: &str, seqs: std::ops::RangeInclusive<u64>, cardinality: u32, label: Option<&str>) -> Vec<JobInfo> {
    let spec = Arc::new(GangSpec {
        id: "g1".to_string(),
        cardinality,
        min_cardinality: cardinality,
        node_uniformity_label: label.map(str::to_string),
    });
    seqs.map(|s| JobInfo { gang: Some(spec.clone()), ..job(q, s, "2", "default") }).collect()
}

#[test]
fn a_gang_that_needs_nodes_sharing_a_label() {
    let cfg = SchedulerConfig::default();
    // Two racks of two 2-cpu nodes; a 3-member gang of 2-cpu jobs must share a rack.
    let mut s = full_node("1", 0);
    s.nodes = vec![
        node("r1a", "2", &[("rack", "r1")]),
        node("r1b", "2", &[("rack", "r1")]),
        node("r2a", "2", &[("rack", "r2")]),
        node("r2b", "2", &[("rack", "r2")]),
    ];
    s.queues[0].queued = gang_of("A", 100..=102, 3, Some("rack")).into_iter().map(Arc::new).collect();
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::GangCapacity]);
    assert_eq!(
        e.would_start_if[0].detail,
        "the 3 members of gang g1 fit on nodes with the same `rack` in pool default, such as `rack=r1` (2 fit now)"
    );
    s.nodes.push(node("r1c", "2", &[("rack", "r1")]));
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn a_gang_with_members_missing() {
    let cfg = SchedulerConfig::default();
    let mut s = full_node("1", 0);
    s.nodes = vec![node("n1", "8", &[])];
    s.queues[0].queued = gang_of("A", 100..=101, 3, None).into_iter().map(Arc::new).collect();
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::GangComplete]);
    assert_eq!(e.would_start_if[0].detail, "the other 1 members of gang g1 are submitted (2 of its 3 are queued)");
    s.queues[0].queued = gang_of("A", 100..=102, 3, None).into_iter().map(Arc::new).collect();
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn the_estimate_is_the_end_after_which_it_fits() {
    let cfg = SchedulerConfig::default();
    // B's three jobs end at +10 s, +20 s (deadline) and +30 s (recorded runtime); job 100 needs
    // 2 cpu, so it can start once two of them have ended.
    let s = full_node("2", 3);
    let ends = [
        RunEnd { job: JobId::from_u128(3), at_ms: NOW + 30_000, basis: EndBasis::Runtime },
        RunEnd { job: JobId::from_u128(1), at_ms: NOW + 10_000, basis: EndBasis::Deadline },
        RunEnd { job: JobId::from_u128(2), at_ms: NOW + 20_000, basis: EndBasis::Deadline },
    ];
    let e = ask(&s, &cfg, 100, &ends);
    let est = e.estimated_start.expect("an estimate");
    assert_eq!(est.at_ms, NOW + 10_000, "one of the four cpus is free: one more end is enough");
    assert_eq!(est.method, "when 1 running job ends (1 by its deadline), if nothing more urgent arrives first");
    // Without known ends there is no estimate.
    assert_eq!(ask(&s, &cfg, 100, &[]).estimated_start, None);
}

#[test]
fn an_unknown_or_running_job_gets_an_empty_answer() {
    let s = full_node("1", 2);
    let e = ask(&s, &SchedulerConfig::default(), 1, &[]);
    assert!(e.would_start_if.is_empty() && e.estimated_start.is_none() && e.reason.is_none());
}

#[test]
fn a_priority_class_limit_lifted() {
    let mut cfg = SchedulerConfig::default();
    let cpu = ResourceName::new("cpu").unwrap();
    for class in &mut cfg.priority_classes {
        class.max_resource_fraction_per_queue.insert(cpu.clone(), 0.25);
    }
    let s = full_node("2", 0);
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::PriorityClassLimit]);
    assert_eq!(
        e.would_start_if[0].detail,
        "queue A's limit on cpu within priority class default lifted, or its running jobs of that class end"
    );
    let mut met = cfg.clone();
    for class in &mut met.priority_classes {
        class.max_resource_fraction_per_queue.clear();
    }
    assert!(starts(&s, &met, 100));
}

#[test]
fn conditions_that_start_the_job_only_together_are_reported_together() {
    let cfg = SchedulerConfig::default();
    // A holds the 4-cpu node with non-preemptible jobs while B waits for 4 cpus; job 100 of A
    // needs 3. Neither A's jobs ending (B takes the room) nor a new node (B takes it first) is
    // enough alone.
    let s = Snapshot {
        nodes: vec![node("n1", "4", &[])],
        queues: vec![
            queued(Queue::new(queue("A"), 1.0), vec![job("A", 100, "3", "default")]),
            queued(Queue::new(queue("B"), 1.0), (200..204).map(|s| job("B", s, "1", "default")).collect()),
        ],
        running: (1..=4).map(|s| running(job("A", s, "1", "default"), "n1", s as i64)).collect(),
        ..Default::default()
    };
    assert!(!starts(&s, &cfg, 100));
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::AllOf], "{:?}", e.would_start_if);
    let parts: Vec<ConditionKind> = e.would_start_if[0].parts.iter().map(|c| c.kind).collect();
    assert_eq!(parts, vec![ConditionKind::FairShare, ConditionKind::Capacity]);
    // Met by hand: A's jobs end and a second 4-cpu node joins.
    let mut met = s.clone();
    met.running.clear();
    met.nodes.push(node("n2", "4", &[]));
    assert!(starts(&met, &cfg, 100));
    // Either alone is not enough.
    let mut only_ended = s.clone();
    only_ended.running.clear();
    assert!(!starts(&only_ended, &cfg, 100));
    let mut only_node = s.clone();
    only_node.nodes.push(node("n2", "4", &[]));
    assert!(!starts(&only_node, &cfg, 100));
}

#[test]
fn with_no_node_at_all_a_node_joining_the_pool_is_the_condition() {
    let cfg = SchedulerConfig::default();
    let mut s = full_node("1", 0);
    s.nodes.clear();
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::MatchingNode], "{e:?}");
    assert_eq!(e.would_start_if[0].detail, "a node joins pool default, untainted, with 1 cpu, 1Gi memory free");
    s.nodes.push(node("n1", "1", &[]));
    assert!(starts(&s, &cfg, 100));
}

#[test]
fn room_for_the_jobs_of_its_queue_ahead_of_it_when_room_for_it_alone_would_go_to_them() {
    let cfg = SchedulerConfig::default();
    // The node is full; job 99 of A comes before job 100, and would take a node sized for 100.
    let mut s = full_node("2", 4);
    s.queues[0].queued =
        vec![job("A", 99, "2", "default"), job("A", 100, "2", "default")].into_iter().map(Arc::new).collect();
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::Capacity]);
    assert_eq!(
        e.would_start_if[0].detail,
        "4 cpu, 2Gi memory free on one node of pool default, for it and the 1 job of queue A ahead of it (the most \
         free now is 0 cpu, 60Gi memory)"
    );
    let mut met = s.clone();
    met.nodes.push(node("n2", "4", &[]));
    assert!(starts(&met, &cfg, 100));
    let mut too_small = s.clone();
    too_small.nodes.push(node("n2", "2", &[]));
    assert!(!starts(&too_small, &cfg, 100), "room for it alone goes to the job ahead of it");
}

#[test]
fn behind_a_cordon_the_next_reason_is_found_and_both_are_named() {
    let cfg = SchedulerConfig::default();
    // A is cordoned, and the node has no room for its 2-cpu job either.
    let mut s = full_node("2", 3);
    s.queues[0].queue.cordoned = true;
    let e = ask(&s, &cfg, 100, &[]);
    assert_eq!(kinds(&e), vec![ConditionKind::AllOf], "{:?}", e.would_start_if);
    assert_eq!(
        e.would_start_if[0].detail,
        "queue A uncordoned; and 2 cpu, 1Gi memory free on one node of pool default (the most free now is 1 cpu, \
         61Gi memory)"
    );
    // Met by hand: uncordoned alone is not enough; uncordoned with a 2-cpu node is.
    s.queues[0].queue.cordoned = false;
    assert!(!starts(&s, &cfg, 100));
    s.nodes.push(node("n2", "2", &[]));
    assert!(starts(&s, &cfg, 100));
}
