//! Queue commands: create, update, delete.

use super::changes::Change;
use super::command::{RejectKind, Response};
use super::machine::{Applied, QueueState, State, reject};
use crate::model::{Queue, QueueName};
use crate::record::QueueRecord;
use std::collections::BTreeMap;

impl State {
    pub(super) fn create_queue(&mut self, queue: Queue, out: &mut Applied) -> Response {
        if self.queues.contains_key(&queue.name) {
            return reject(RejectKind::Conflict, Some("name"), format!("queue {} already exists", queue.name));
        }
        out.changes.push(Change::PutQueue(QueueRecord::from(queue.clone())));
        self.queues.insert(
            queue.name.clone(),
            QueueState { queue, queued: BTreeMap::new(), demand: Default::default(), counts: BTreeMap::new() },
        );
        out.effects.schedule = true;
        Response::Ok
    }

    pub(super) fn update_queue(&mut self, queue: Queue, out: &mut Applied) -> Response {
        let Some(q) = self.queues.get_mut(&queue.name) else {
            return reject(RejectKind::NotFound, Some("name"), format!("queue {} does not exist", queue.name));
        };
        q.queue = queue.clone();
        out.changes.push(Change::PutQueue(QueueRecord::from(queue)));
        out.effects.schedule = true;
        Response::Ok
    }

    pub(super) fn delete_queue(&mut self, name: &QueueName, force: bool, at_ms: i64, out: &mut Applied) -> Response {
        let Some(q) = self.queues.get(name) else {
            return reject(RejectKind::NotFound, Some("name"), format!("queue {name} does not exist"));
        };
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
        out.effects.schedule = true;
        Response::Ok
    }
}
