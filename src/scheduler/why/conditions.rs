//! The conditions a job's reason points to, each as a change to the scheduler's inputs and the
//! words that say it.

use super::super::config::SchedulerConfig;
use super::super::decisions::{Decisions, RateScope, Reason};
use super::super::node_types::mismatch;
use super::super::snapshot::{JobInfo, RunningJob, Snapshot};
use super::{Condition, ConditionKind};
use crate::model::placement::SelectorOperator;
use crate::model::{
    ExecutorName, JobId, Labels, Node, NodeName, PoolName, PriorityClassName, QueueName, ResourceName, Resources,
};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Label every node carries with its own name (kept true on the nodes a condition adds).
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// A condition and the change to the inputs that meets it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub condition: Condition,
    edit: Edit,
    /// A larger change of the same kind, to try if this one does not start the job: room for
    /// the jobs of its queue that go first, as well as for it.
    pub wider: Option<Box<Change>>,
}

impl Change {
    fn new(condition: Condition, edit: Edit) -> Self {
        Change { condition, edit, wider: None }
    }

    /// The widest change of its ladder.
    pub(crate) fn widest(&self) -> &Change {
        let mut c = self;
        while let Some(w) = &c.wider {
            c = w;
        }
        c
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Uncordon(QueueName),
    LiftQueueLimit(QueueName, ResourceName),
    LiftClassLimit(QueueName, PriorityClassName, ResourceName),
    FillRateBuckets,
    NoLookback,
    AddNodes(Vec<Node>),
    AddQueued(QueueName, Vec<Arc<JobInfo>>),
    EndRunning(BTreeSet<JobId>),
}

/// The conditions worth checking for a job that waits for `reason`.
pub(crate) fn candidates(
    s: &Snapshot,
    cfg: &SchedulerConfig,
    base: &Decisions,
    job: &JobInfo,
    reason: Option<&Reason>,
) -> Vec<Change> {
    let mut out = Vec::new();
    let Some(reason) = reason else { return out };
    match reason {
        Reason::QueueCordoned { queue } => out.push(Change {
            wider: None,
            condition: Condition::new(ConditionKind::QueueUncordoned, format!("queue {queue} uncordoned")),
            edit: Edit::Uncordon(queue.clone()),
        }),
        Reason::QueueLimit { queue, resource } => out.push(queue_limit(s, queue, resource)),
        Reason::PriorityClassLimit { queue, priority_class, resource } => out.push(Change {
            wider: None,
            condition: Condition::new(
                ConditionKind::PriorityClassLimit,
                format!(
                    "queue {queue}'s limit on {resource} within priority class {priority_class} lifted, or its \
                     running jobs of that class end"
                ),
            ),
            edit: Edit::LiftClassLimit(queue.clone(), priority_class.clone(), resource.clone()),
        }),
        Reason::RateLimited { scope } => out.push(Change {
            wider: None,
            condition: Condition::new(
                ConditionKind::RateLimit,
                format!(
                    "the {} scheduling rate limit has tokens again (it refills with time)",
                    match scope {
                        RateScope::Global => "global",
                        RateScope::Queue => "queue's",
                    }
                ),
            ),
            edit: Edit::FillRateBuckets,
        }),
        Reason::LookbackLimit { queue, limit } => out.push(Change {
            wider: None,
            condition: Condition::new(
                ConditionKind::Lookback,
                format!(
                    "fewer than {limit} of queue {queue}'s jobs wait ahead of it (the scheduler tries {limit} jobs per \
                     queue and cycle: max_queue_lookback)"
                ),
            ),
            edit: Edit::NoLookback,
        }),
        Reason::GangIncomplete { gang, queued, cardinality } => {
            out.push(gang_complete(s, job, gang, *queued, *cardinality));
        }
        // Only a larger burst in the configuration starts it: no change of the state does.
        Reason::GangBeyondBurst { .. } | Reason::RetryBackoff { .. } => {}
        Reason::NoPool => out.extend(matching_node(s, job, None, "a node joins")),
        Reason::NoMatchingNode { pool, .. } => out.extend(matching_node(s, job, Some(pool), "a node")),
        Reason::UnknownResource { pool, resource } => out.extend(resource_node(s, job, pool, resource)),
        // Only jobs holding the floating resource ending (or a larger amount in the
        // configuration) starts it: no node added helps.
        Reason::FloatingResource { .. } => out.extend(fair_share(s, cfg, base, job)),
        Reason::NoCapacity { .. }
        | Reason::MinRuntime { .. }
        | Reason::PreemptionFence { .. }
        | Reason::Displaced { .. }
        | Reason::NoRoomOnNode { .. }
        | Reason::ReservedNodes { .. }
        | Reason::BehindHigherPriority { .. }
        | Reason::ProportionalTarget { .. }
        | Reason::HoldsReservation { .. }
        | Reason::KeptOffReservation { .. }
        | Reason::GangMemberLost { .. }
        | Reason::Gang { .. } => {
            out.extend(fair_share(s, cfg, base, job));
            out.extend(capacity(s, job, reason));
        }
    }
    out
}

/// The snapshot and configuration with `changes` made.
pub(crate) fn apply(s: &Snapshot, cfg: &SchedulerConfig, changes: &[&Change]) -> (Snapshot, SchedulerConfig) {
    let (mut s, mut cfg) = (s.clone(), cfg.clone());
    for change in changes {
        match &change.edit {
            Edit::Uncordon(q) => {
                if let Some(qs) = s.queues.iter_mut().find(|qs| &qs.queue.name == q) {
                    qs.queue.cordoned = false;
                }
            }
            Edit::LiftQueueLimit(q, r) => {
                if let Some(qs) = s.queues.iter_mut().find(|qs| &qs.queue.name == q) {
                    qs.queue.resource_limits.remove(r);
                }
            }
            Edit::LiftClassLimit(q, pc, r) => {
                if let Some(qs) = s.queues.iter_mut().find(|qs| &qs.queue.name == q)
                    && let Some(limits) = qs.queue.resource_limits_by_priority_class.get_mut(pc)
                {
                    limits.remove(r);
                }
                // The class's limit applies to every queue; lifting it for this one lifts it
                // for all, which can only help this one.
                if let Some(class) = cfg.priority_classes.iter_mut().find(|c| &c.name == pc) {
                    class.max_resource_fraction_per_queue.remove(r);
                }
            }
            Edit::FillRateBuckets => s.rate_limits = Default::default(),
            Edit::NoLookback => cfg.max_queue_lookback = 0,
            Edit::AddNodes(nodes) => s.nodes.extend(nodes.iter().cloned()),
            Edit::AddQueued(q, jobs) => {
                if let Some(qs) = s.queues.iter_mut().find(|qs| &qs.queue.name == q) {
                    qs.queued.extend(jobs.iter().cloned());
                }
            }
            Edit::EndRunning(ids) => s.running.retain(|r| !ids.contains(&r.job.id)),
        }
    }
    (s, cfg)
}

fn queue_limit(s: &Snapshot, queue: &QueueName, resource: &ResourceName) -> Change {
    let fraction = s
        .queues
        .iter()
        .find(|qs| &qs.queue.name == queue)
        .and_then(|qs| qs.queue.resource_limits.get(resource).copied());
    let limit = fraction.map(|f| format!(" ({f} of the pool)")).unwrap_or_default();
    Change {
        wider: None,
        condition: Condition::new(
            ConditionKind::QueueLimit,
            format!("queue {queue}'s limit on {resource}{limit} lifted, or enough of its running jobs end"),
        ),
        edit: Edit::LiftQueueLimit(queue.clone(), resource.clone()),
    }
}

fn gang_complete(s: &Snapshot, job: &JobInfo, gang: &str, queued: u32, cardinality: u32) -> Change {
    let missing = cardinality.saturating_sub(queued);
    let next_id = s
        .queues
        .iter()
        .flat_map(|q| q.queued.iter())
        .chain(s.running.iter().map(|r| &r.job))
        .map(|j| j.id.as_u128())
        .max()
        .unwrap_or(0);
    let next_seq = s.queues.iter().flat_map(|q| q.queued.iter()).map(|j| j.submit_seq).max().unwrap_or(0);
    let members: Vec<Arc<JobInfo>> = (1..=u64::from(missing))
        .map(|i| {
            let mut m = job.clone();
            m.id = JobId::from_u128(next_id + u128::from(i));
            m.submit_seq = next_seq + i;
            Arc::new(m)
        })
        .collect();
    Change {
        wider: None,
        condition: Condition::new(
            ConditionKind::GangComplete,
            format!(
                "the other {missing} members of gang {gang} are submitted ({queued} of its {cardinality} are queued)"
            ),
        ),
        edit: Edit::AddQueued(job.queue.clone(), members),
    }
}

/// The queue below its fair share: its running jobs in the pool end, latest started first, until
/// what it holds is within its share.
fn fair_share(s: &Snapshot, cfg: &SchedulerConfig, base: &Decisions, job: &JobInfo) -> Option<Change> {
    let (report, share) = base
        .pools
        .iter()
        .filter(|p| job.pools.is_empty() || job.pools.contains(&p.pool))
        .find_map(|p| p.queues.iter().find(|q| q.queue == job.queue).map(|q| (p, q)))?;
    let fair = share.adjusted_fair_share.max(share.fair_share);
    if share.actual_share <= fair {
        return None;
    }
    let in_pool: BTreeSet<(&str, &str)> =
        s.nodes.iter().filter(|n| n.pool == report.pool).map(|n| (n.executor.as_str(), n.name.as_str())).collect();
    let mut mine: Vec<&RunningJob> = s
        .running
        .iter()
        .filter(|r| r.job.queue == job.queue && in_pool.contains(&(r.executor.as_str(), r.node.as_str())))
        .collect();
    mine.sort_by_key(|r| std::cmp::Reverse((r.leased_at_ms, r.job.submit_seq)));
    let dominant = &cfg.dominant_resource_fairness_resources;
    let mut held = share.allocated.clone();
    let mut ended = BTreeSet::new();
    for r in mine {
        if held.dominant_share(&report.total, dominant)
            + job.requirements.requests.dominant_share(&report.total, dominant)
            <= fair
        {
            break;
        }
        held.sub(&r.job.requirements.requests);
        ended.insert(r.job.id);
    }
    (!ended.is_empty()).then(|| Change {
        wider: None,
        condition: Condition::new(
            ConditionKind::FairShare,
            format!(
                "queue {} below its fair share in pool {} (it holds {:.2} of the pool, its share is {:.2}): {} of its \
                 running jobs end",
                job.queue,
                report.pool,
                share.actual_share,
                fair,
                ended.len()
            ),
        ),
        edit: Edit::EndRunning(ended),
    })
}

/// What runs on each node, by (executor, node): one pass over the running jobs.
pub(super) fn held_by_node(s: &Snapshot) -> HashMap<(&str, &str), Resources> {
    let mut held: HashMap<(&str, &str), Resources> = HashMap::default();
    for r in &s.running {
        held.entry((r.executor.as_str(), r.node.as_str())).or_default().add(&r.job.requirements.requests);
    }
    held
}

/// What is free on a node now: allocatable, less what is not allocatable and what runs there.
pub(super) fn free_on(node: &Node, held: &HashMap<(&str, &str), Resources>) -> Resources {
    let mut free = node.allocatable.clone();
    free.sub(&node.unallocatable);
    if let Some(h) = held.get(&(node.executor.as_str(), node.name.as_str())) {
        free.sub(h);
    }
    free
}

/// Nodes of the job's pools that pass its selector, affinity and tolerations.
fn matching_nodes<'s>(s: &'s Snapshot, job: &JobInfo) -> Vec<&'s Node> {
    s.nodes
        .iter()
        .filter(|n| !n.unschedulable)
        .filter(|n| job.pools.is_empty() || job.pools.contains(&n.pool))
        .filter(|n| mismatch(n, &job.requirements).is_none())
        .collect()
}

/// The requests as quantities (`2 cpu, 4Gi memory`).
fn quantities(r: &Resources, names: &[&ResourceName]) -> String {
    names.iter().map(|n| format!("{} {n}", r.quantity_string(n.as_str()))).collect::<Vec<_>>().join(", ")
}

/// A new, empty node like `template` (labels, taints, the resources the job does not ask
/// for), named `what-if-N`, offering exactly `requests` of what the job asks for: the condition
/// says how much room, and the check must not find more.
fn like(template: &Node, n: usize, requests: &Resources) -> Node {
    let name = NodeName::new(&format!("what-if-{n}")).unwrap_or_else(|_| template.name.clone());
    let mut allocatable = template.allocatable.clone();
    for (r, v) in requests.iter().filter(|(_, v)| *v > 0) {
        allocatable.set(r.clone(), v);
    }
    let mut labels = template.labels.clone();
    if labels.contains_key(HOSTNAME_LABEL) {
        labels.insert(HOSTNAME_LABEL.to_string(), name.to_string());
    }
    Node {
        name,
        executor: template.executor.clone(),
        pool: template.pool.clone(),
        labels,
        taints: template.taints.clone(),
        allocatable,
        unallocatable: Resources::new(),
        unschedulable: false,
    }
}

/// Room for the job (or its gang): new nodes like the matching node with the most room.
fn capacity(s: &Snapshot, job: &JobInfo, reason: &Reason) -> Option<Change> {
    let requests = &job.requirements.requests;
    let names: Vec<&ResourceName> = requests.iter().filter(|(_, v)| *v > 0).map(|(n, _)| n).collect();
    let nodes = matching_nodes(s, job);
    let held = held_by_node(s);
    // The most room for the job's largest request, relative to the request.
    let roomiest = |nodes: &[&'_ Node]| -> Option<(Node, Resources)> {
        // Reversed, so that of equally roomy nodes the first wins.
        nodes
            .iter()
            .rev()
            .map(|n| (*n, free_on(n, &held)))
            .max_by(|(_, a), (_, b)| {
                let rel = |f: &Resources| {
                    names
                        .iter()
                        .map(|r| f.get(r.as_str()) as f64 / requests.get(r.as_str()).max(1) as f64)
                        .fold(f64::MAX, f64::min)
                };
                rel(a).total_cmp(&rel(b))
            })
            .map(|(n, f)| (n.clone(), f))
    };
    match &job.gang {
        None => {
            let (template, free) = roomiest(&nodes)?;
            let room = |needed: &Resources, also: &str| {
                Change::new(
                    Condition::new(
                        ConditionKind::Capacity,
                        format!(
                            "{} free on one node of pool {}{also} (the most free now is {})",
                            quantities(needed, &names),
                            template.pool,
                            quantities(&free, &names)
                        ),
                    ),
                    Edit::AddNodes(vec![like(&template, 1, needed)]),
                )
            };
            Some(with_jobs_ahead(s, job, room))
        }
        Some(gang) => {
            let fit = match reason {
                Reason::Gang { fit, .. } => Some(*fit),
                _ => None,
            };
            let (template, _) = match &gang.node_uniformity_label {
                Some(label) => {
                    let labelled: Vec<&Node> =
                        nodes.iter().copied().filter(|n| n.labels.contains_key(label.as_str())).collect();
                    roomiest(&labelled)?
                }
                None => roomiest(&nodes)?,
            };
            let added = (1..=gang.cardinality as usize).map(|i| like(&template, i, requests)).collect();
            let now = fit.map(|f| format!(" ({f} fit now)")).unwrap_or_default();
            let detail = match &gang.node_uniformity_label {
                Some(label) => {
                    let value = template.labels.get(label.as_str()).cloned().unwrap_or_default();
                    format!(
                        "the {} members of gang {} fit on nodes with the same `{label}` in pool {}, such as \
                         `{label}={value}`{now}",
                        gang.cardinality, gang.id, template.pool
                    )
                }
                None => format!(
                    "room for the {} members of gang {} in pool {} ({} each){now}",
                    gang.cardinality,
                    gang.id,
                    template.pool,
                    quantities(requests, &names)
                ),
            };
            Some(Change::new(Condition::new(ConditionKind::GangCapacity, detail), Edit::AddNodes(added)))
        }
    }
}

/// Labels a node needs to pass the job's selector and the first term of its required affinity.
fn labels_for(job: &JobInfo) -> Labels {
    let r = &job.requirements;
    let mut labels = r.node_selector.clone();
    let term = r
        .node_affinity
        .as_ref()
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .and_then(|sel| sel.node_selector_terms.first());
    for e in term.map(|t| t.match_expressions.as_slice()).unwrap_or_default() {
        match e.operator {
            SelectorOperator::In => {
                if let Some(v) = e.values.first() {
                    labels.entry(e.key.clone()).or_insert_with(|| v.clone());
                }
            }
            SelectorOperator::Exists => {
                labels.entry(e.key.clone()).or_insert_with(|| "true".to_string());
            }
            _ => {}
        }
    }
    labels
}

/// A node the job's constraints accept, with room for it, in `pool` (or its first pool).
fn matching_node(s: &Snapshot, job: &JobInfo, pool: Option<&PoolName>, lead: &str) -> Option<Change> {
    let pool = pool.cloned().or_else(|| job.pools.first().cloned()).unwrap_or_else(PoolName::default_pool);
    // An executor of the pool if it has one; any name serves the scheduler otherwise.
    let executor = match s.nodes.iter().find(|n| n.pool == pool).or(s.nodes.first()) {
        Some(n) => n.executor.clone(),
        None => ExecutorName::new("what-if").ok()?,
    };
    let labels = labels_for(job);
    let name = NodeName::new("what-if-1").ok()?;
    let requests = &job.requirements.requests;
    let names: Vec<&ResourceName> = requests.iter().filter(|(_, v)| *v > 0).map(|(n, _)| n).collect();
    let with = if labels.is_empty() {
        String::new()
    } else {
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(" with labels {}", l.join(", "))
    };
    let room = |needed: &Resources, also: &str| {
        let node = Node {
            name: name.clone(),
            executor: executor.clone(),
            pool: pool.clone(),
            labels: labels.clone(),
            taints: Vec::new(),
            allocatable: needed.clone(),
            unallocatable: Resources::new(),
            unschedulable: false,
        };
        Change::new(
            Condition::new(
                ConditionKind::MatchingNode,
                format!("{lead} pool {pool}{with}, untainted, with {} free{also}", quantities(needed, &names)),
            ),
            Edit::AddNodes(vec![node]),
        )
    };
    Some(with_jobs_ahead(s, job, room))
}

/// `room(requests, "")` for the job alone, and, as its wider rung when jobs of its queue go
/// before it in a pool it may use, `room(their requests and its, " for it and the N jobs …")`.
fn with_jobs_ahead(s: &Snapshot, job: &JobInfo, room: impl Fn(&Resources, &str) -> Change) -> Change {
    let requests = &job.requirements.requests;
    let mut change = room(requests, "");
    let ahead: Vec<&Arc<JobInfo>> = s
        .queues
        .iter()
        .filter(|q| q.queue.name == job.queue)
        .flat_map(|q| q.queued.iter().take_while(|j| j.id != job.id))
        .filter(|j| job.shares_a_pool_with(j))
        .collect();
    if !ahead.is_empty() {
        let mut needed = requests.clone();
        for j in &ahead {
            needed.add(&j.requirements.requests);
        }
        let n = ahead.len();
        let also =
            format!(", for it and the {n} job{} of queue {} ahead of it", if n == 1 { "" } else { "s" }, job.queue);
        change.wider = Some(Box::new(room(&needed, &also)));
    }
    change
}

/// A node of the pool that offers the resource the job requests.
fn resource_node(s: &Snapshot, job: &JobInfo, pool: &PoolName, resource: &ResourceName) -> Option<Change> {
    let requests = &job.requirements.requests;
    let template = matching_nodes(s, job).into_iter().find(|n| &n.pool == pool)?;
    let node = like(template, 1, requests);
    Some(Change {
        wider: None,
        condition: Condition::new(
            ConditionKind::Resource,
            format!(
                "a node of pool {pool} like {} offers {} {resource}",
                template.name,
                requests.quantity_string(resource.as_str())
            ),
        ),
        edit: Edit::AddNodes(vec![node]),
    })
}
