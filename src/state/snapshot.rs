//! The scheduler's view of the state: nodes of live executors, queues with their first queued
//! jobs, and the jobs holding resources. Only pointers are copied.

use super::machine::State;
use crate::model::{Node, Resources};
use crate::scheduler::{JobInfo, QueueSnapshot, RateLimiterState, RunningJob, Snapshot};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

impl State {
    /// Builds a scheduling snapshot. Each queue contributes its first `lookback` queued jobs
    /// (0 = all), completed with the other queued members of any gang among them, and the sum
    /// of all its queued requests. Runs being stopped (cancelled or preempted, not yet confirmed
    /// over) are not the scheduler's to move: their resources count as used by others. Every
    /// quarantine comes along with its end; the scheduler judges which hold at its `now`.
    pub fn scheduling_snapshot(&self, lookback: usize, rate_limits: RateLimiterState) -> Snapshot {
        let mut stopping: HashMap<(&str, &str), Resources> = HashMap::new();
        // Sized once: growing a list of 15,000 runs copied it a dozen times.
        let mut running = Vec::with_capacity(self.by_executor.values().map(BTreeMap::len).sum());
        for (executor, runs) in &self.by_executor {
            for run in runs.values() {
                if run.stopping {
                    stopping
                        .entry((executor.as_str(), run.node.as_str()))
                        .or_default()
                        .add(&run.info.requirements.requests);
                } else {
                    running.push(RunningJob {
                        job: run.info.clone(),
                        executor: executor.clone(),
                        node: run.node.clone(),
                        leased_at_ms: run.leased_at_ms,
                    });
                }
            }
        }
        // Deterministic order regardless of hash maps.
        running.sort_by_key(|r| r.job.submit_seq);
        // What running jobs hold, only on the nodes where runs are being stopped (most cycles: none).
        let mut held: HashMap<(&str, &str), Resources> = HashMap::new();
        if !stopping.is_empty() {
            for r in &running {
                let key = (r.executor.as_str(), r.node.as_str());
                if stopping.contains_key(&key) {
                    held.entry(key).or_default().add(&r.job.requirements.requests);
                }
            }
        }
        let mut nodes = Vec::with_capacity(self.executors.values().map(|e| e.nodes().len()).sum());
        for e in self.executors.values() {
            for n in e.nodes() {
                let mut unallocatable = n.unallocatable.clone();
                let key = (e.name.as_str(), n.name.as_str());
                if let Some(stopping) = stopping.get(&key) {
                    let room = stopping_room(stopping, &n.allocatable, &unallocatable, held.get(&key));
                    unallocatable.add(&room);
                }
                nodes.push(Node {
                    name: n.name.clone(),
                    executor: e.name.clone(),
                    pool: n.pool.clone(),
                    labels: n.labels.clone(),
                    taints: n.taints.clone(),
                    allocatable: n.allocatable.clone(),
                    unallocatable,
                    unschedulable: n.unschedulable,
                });
            }
        }
        let take = if lookback == 0 { usize::MAX } else { lookback };
        let queues = self
            .queues
            .values()
            .map(|q| {
                let mut queued: Vec<Arc<JobInfo>> = Vec::with_capacity(q.queued.len().min(take));
                let mut gangs: BTreeSet<&str> = BTreeSet::new();
                for info in q.queued.values().take(take) {
                    if let Some(g) = &info.gang {
                        gangs.insert(g.id.as_str());
                    }
                    queued.push(info.clone());
                }
                // Gang members past the cut come along so the gang is judged whole.
                if q.queued.len() > take && !gangs.is_empty() {
                    let have: BTreeSet<_> = queued.iter().map(|j| j.id).collect();
                    let mut extra: Vec<Arc<JobInfo>> = Vec::new();
                    for g in gangs {
                        if let Some(members) = self.gangs.get(&(q.queue.name.clone(), g.to_string())) {
                            for m in members {
                                if have.contains(m) {
                                    continue;
                                }
                                if let Some(j) = self.jobs.get(m)
                                    && j.record.state == crate::model::JobState::Queued
                                {
                                    extra.push(j.info.clone());
                                }
                            }
                        }
                    }
                    queued.extend(extra);
                }
                QueueSnapshot { queue: q.queue.clone(), queued, queued_demand: Some(q.demand.clone()) }
            })
            .collect();
        let quarantined = self
            .node_health
            .iter()
            .filter_map(|(node, h)| h.quarantine.as_ref().map(|q| (node.clone(), q.until_ms)))
            .collect();
        Snapshot {
            nodes,
            queues,
            running,
            rate_limits,
            usage: self.queue_usage.clone(),
            quarantined,
            job_times: Default::default(),
        }
    }
}

/// The room runs being stopped on a node hold: what they use, but no more than the node has left
/// beside its running jobs. The cycle that evicted them already gave their room to the jobs that
/// replace them; counting it a second time would leave those jobs without room on their own node,
/// and the next cycle, evicting and re-placing preemptible jobs, would preempt them while the
/// evicted ones were still stopping (which takes a real agent seconds).
fn stopping_room(
    stopping: &Resources,
    allocatable: &Resources,
    unallocatable: &Resources,
    held: Option<&Resources>,
) -> Resources {
    let mut room = Resources::new();
    for (name, used) in stopping.iter() {
        let left = allocatable.get(name.as_str())
            - unallocatable.get(name.as_str())
            - held.map_or(0, |h| h.get(name.as_str()));
        let hold = used.min(left.max(0));
        if hold > 0 {
            room.set(name.clone(), hold);
        }
    }
    room
}
