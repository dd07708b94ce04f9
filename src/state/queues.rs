//! Queue commands: create, update, delete, with the rules of the queue tree: a parent exists, the
//! tree has no cycle, a queue with jobs does not become a parent, a parent with children is not
//! deleted.

use super::changes::Change;
use super::command::{RejectKind, Response};
use super::machine::{Applied, QueueState, State, reject};
use crate::model::{Queue, QueueName};
use crate::record::{
    QueuePoliciesWithRetryByQueueRecord, QueuePoliciesWithRetryRecord, QueueRecord, QueueTreeRecord, QueueTreesRecord,
};
use std::collections::BTreeMap;

impl State {
    pub(super) fn create_queue(&mut self, queue: Queue, out: &mut Applied) -> Response {
        if self.queues.contains_key(&queue.name) {
            return reject(RejectKind::Conflict, Some("name"), format!("queue {} already exists", queue.name));
        }
        if let Some(r) = self.check_parent(&queue) {
            return r;
        }
        let tree_changed = !queue.is_flat();
        let policies_changed = has_stored_policies(&queue);
        out.changes.push(Change::PutQueue(QueueRecord::from(queue.clone())));
        self.queues.insert(
            queue.name.clone(),
            QueueState { queue, queued: BTreeMap::new(), demand: Default::default(), counts: BTreeMap::new() },
        );
        if tree_changed {
            out.changes.push(Change::PutQueueTrees(self.queue_trees()));
        }
        if policies_changed {
            out.changes.push(Change::PutQueuePolicies(self.queue_policies()));
        }
        out.effects.schedule = true;
        Response::Ok
    }

    pub(super) fn update_queue(&mut self, queue: Queue, out: &mut Applied) -> Response {
        let Some(q) = self.queues.get(&queue.name) else {
            return reject(RejectKind::NotFound, Some("name"), format!("queue {} does not exist", queue.name));
        };
        let tree_changed = QueueTreeRecord::of(&q.queue) != QueueTreeRecord::of(&queue);
        let policies_changed = QueuePoliciesWithRetryRecord::of(&q.queue) != QueuePoliciesWithRetryRecord::of(&queue);
        if q.queue.parent != queue.parent
            && let Some(r) = self.check_parent(&queue)
        {
            return r;
        }
        if let Some(q) = self.queues.get_mut(&queue.name) {
            q.queue = queue.clone();
        }
        out.changes.push(Change::PutQueue(QueueRecord::from(queue)));
        if tree_changed {
            out.changes.push(Change::PutQueueTrees(self.queue_trees()));
        }
        if policies_changed {
            out.changes.push(Change::PutQueuePolicies(self.queue_policies()));
        }
        out.effects.schedule = true;
        Response::Ok
    }

    pub(super) fn delete_queue(&mut self, name: &QueueName, force: bool, at_ms: i64, out: &mut Applied) -> Response {
        let Some(q) = self.queues.get(name) else {
            return reject(RejectKind::NotFound, Some("name"), format!("queue {name} does not exist"));
        };
        let children = self.children_of(name);
        if !children.is_empty() {
            return reject(
                RejectKind::Conflict,
                None,
                format!(
                    "queue {name} is the parent of {}; delete those queues or give them another parent first",
                    names(&children)
                ),
            );
        }
        let live: u64 = q.counts.iter().filter(|(s, _)| !s.is_terminal()).map(|(_, c)| *c).sum();
        if live > 0 && !force {
            return reject(
                RejectKind::Conflict,
                None,
                format!(
                    "queue {name} has {live} jobs that are not finished; cancel them first or delete with force=true"
                ),
            );
        }
        let tree_changed = !q.queue.is_flat();
        let policies_changed = has_stored_policies(&q.queue);
        if live > 0 {
            let sets: Vec<_> = self.job_sets.keys().filter(|(q, _)| q == name).cloned().collect();
            for (queue, set) in sets {
                self.cancel(&queue, &set, None, None, "queue deleted", at_ms, out);
            }
        }
        // Jobs still being stopped keep their records; only the queue goes, with its client ids
        // (a queue created later under the same name must not answer old ids to new jobs).
        self.queues.remove(name);
        self.client_ids.retain(|(q, _), _| q != name);
        out.changes.push(Change::DeleteClientIds(name.clone()));
        out.changes.push(Change::DeleteQueue(name.clone()));
        if tree_changed {
            out.changes.push(Change::PutQueueTrees(self.queue_trees()));
        }
        if policies_changed {
            out.changes.push(Change::PutQueuePolicies(self.queue_policies()));
        }
        out.effects.schedule = true;
        Response::Ok
    }

    /// The queues whose parent is `name`, in name order.
    pub fn children_of(&self, name: &QueueName) -> Vec<QueueName> {
        self.queues.values().filter(|q| q.queue.parent.as_ref() == Some(name)).map(|q| q.queue.name.clone()).collect()
    }

    /// True if some queue names `name` as its parent: jobs go to leaf queues only.
    pub fn is_parent(&self, name: &QueueName) -> bool {
        self.queues.values().any(|q| q.queue.parent.as_ref() == Some(name))
    }

    /// Why `queue` may not have the parent it names, if it may not: the parent must exist, must
    /// not be the queue or one of its descendants (no cycle), and must hold no live jobs (jobs go
    /// to leaf queues only).
    fn check_parent(&self, queue: &Queue) -> Option<Response> {
        let parent = queue.parent.as_ref()?;
        let Some(p) = self.queues.get(parent) else {
            return Some(reject(RejectKind::Invalid, Some("parent"), format!("parent queue {parent} does not exist")));
        };
        // Walk up from the parent: meeting the queue itself would close a cycle. The walk is
        // bounded by the number of queues, so a malformed tree cannot make it loop.
        let mut at = Some(p);
        for _ in 0..=self.queues.len() {
            let Some(a) = at else { break };
            if a.queue.name == queue.name {
                return Some(reject(
                    RejectKind::Invalid,
                    Some("parent"),
                    format!(
                        "queue {parent} is {} itself or below it in the tree: a queue cannot be its own ancestor",
                        queue.name
                    ),
                ));
            }
            at = a.queue.parent.as_ref().and_then(|n| self.queues.get(n));
        }
        let live: u64 = p.counts.iter().filter(|(s, _)| !s.is_terminal()).map(|(_, c)| *c).sum();
        if live > 0 {
            return Some(reject(
                RejectKind::Conflict,
                Some("parent"),
                format!(
                    "queue {parent} has {live} jobs that are not finished and cannot become a parent: jobs go to leaf queues only"
                ),
            ));
        }
        None
    }

    /// The `queue_tree` record: every queue with tree settings other than the defaults.
    pub(super) fn queue_trees(&self) -> QueueTreesRecord {
        QueueTreesRecord {
            queues: self
                .queues
                .values()
                .filter(|q| !q.queue.is_flat())
                .map(|q| (q.queue.name.clone(), QueueTreeRecord::of(&q.queue)))
                .collect(),
        }
    }
}

impl State {
    /// The `queue_policies` record: every queue with a guarantee, a preemption fence or a retry
    /// policy.
    pub(super) fn queue_policies(&self) -> QueuePoliciesWithRetryByQueueRecord {
        QueuePoliciesWithRetryByQueueRecord {
            queues: self
                .queues
                .values()
                .filter(|q| has_stored_policies(&q.queue))
                .map(|q| (q.queue.name.clone(), QueuePoliciesWithRetryRecord::of(&q.queue)))
                .collect(),
        }
    }
}

/// True if the queue has an entry in the `queue_policies` row: a guarantee, a fence or a retry
/// policy (the scheduler cares only for the first two, [`Queue::has_policies`]).
fn has_stored_policies(q: &Queue) -> bool {
    q.has_policies() || q.retry.is_some()
}

/// `a, b and c`.
fn names(list: &[QueueName]) -> String {
    match list {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => {
            format!("{} and {last}", init.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "))
        }
    }
}
