//! Building the cycle's view from the snapshot: running jobs counted where they run.

use super::pool_policies::{job, node};
use crate::model::{ExecutorName, Node, NodeName, Queue, QueueName};
use crate::scheduler::{JobInfo, QueueSnapshot, RunningJob, SchedulerConfig, Snapshot, schedule};
use std::sync::Arc;

/// Runs are looked up by the run before them first: a run on a node of the same name under
/// another executor, or of another queue, is still counted where it runs.
#[test]
fn runs_on_same_named_nodes_of_two_executors_hold_their_own_node() {
    let on = |executor: &str| Node { executor: ExecutorName::new(executor).expect("valid"), ..node("n", 4) };
    // e1/n runs one job of A; e2/n runs three, of B, A and B: one cpu left there, three on e1.
    let runs = [("e1", "A"), ("e2", "B"), ("e2", "A"), ("e2", "B")];
    let running: Vec<RunningJob> = runs
        .iter()
        .enumerate()
        .map(|(i, &(executor, queue))| RunningJob {
            job: job(i as u128 + 1, queue, "default", 1, 0),
            executor: ExecutorName::new(executor).expect("valid"),
            node: NodeName::new("n").expect("valid"),
            leased_at_ms: 0,
        })
        .collect();
    let queue = |name: &str, queued: Vec<Arc<JobInfo>>| QueueSnapshot {
        queue: Queue::new(QueueName::new(name).expect("valid"), 1.0),
        queued,
        queued_demand: None,
    };
    let snap = Snapshot {
        nodes: vec![on("e1"), on("e2")],
        queues: vec![queue("A", vec![job(10, "A", "default", 3, 0)]), queue("B", vec![])],
        running,
        ..Default::default()
    };
    let d = schedule(&snap, &SchedulerConfig::default(), 0, 0);
    assert_eq!(d.leases.len(), 1, "{:?}", d.unscheduled);
    assert_eq!(d.leases[0].executor.as_str(), "e1");
    // Each queue is charged for its own runs: two cpus each.
    let alloc = |q: &str| d.pools[0].queues.iter().find(|s| s.queue.as_str() == q).map(|s| s.allocated.get("cpu"));
    assert_eq!(alloc("B"), Some(2000));
}
