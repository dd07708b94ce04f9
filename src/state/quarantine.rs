//! Node quarantine in the replicated state: failures counted against nodes as run events report
//! them, and an admin lifting a quarantine. The counting rules are `scheduler::quarantine`'s;
//! the times are the commands' (chosen by the leader), so every member counts the same.

use super::changes::Change;
use super::command::{RejectKind, Response};
use super::machine::{Applied, State, reject};
use crate::model::{ExecutorName, NodeName};
use crate::record::{NodeFailureRecord, NodeHealthRecord, QuarantineRecord};
use crate::scheduler::{NodeFailure, NodeHealth, Quarantine, QuarantinePolicy};

impl State {
    /// Counts a failure against `node` under `policy` (nothing when the policy is off).
    pub(super) fn count_node_failure(
        &mut self,
        node: (ExecutorName, NodeName),
        failure: NodeFailure,
        policy: &QuarantinePolicy,
        out: &mut Applied,
    ) {
        if policy.max_failures == 0 {
            return;
        }
        let health = self.node_health.entry(node.clone()).or_default();
        if health.record(failure, policy) {
            // Less room from now on: the scheduler's next cycle should know.
            out.effects.schedule = true;
        }
        out.changes.push(Change::PutNodeHealth(health_record(&node, health)));
    }

    pub(super) fn lift_quarantine(
        &mut self,
        executor: ExecutorName,
        node: NodeName,
        at_ms: i64,
        out: &mut Applied,
    ) -> Response {
        let key = (executor, node);
        let quarantined = self.node_health.get(&key).is_some_and(|h| h.quarantined_at(at_ms).is_some());
        if !quarantined {
            return reject(
                RejectKind::NotFound,
                None,
                format!("node {} of executor {} is not quarantined", key.1, key.0),
            );
        }
        self.node_health.remove(&key);
        out.changes.push(Change::DeleteNodeHealth { executor: key.0, node: key.1 });
        out.effects.schedule = true;
        Response::Ok
    }

    /// Puts a node's health read back from storage into memory (start-up, snapshot install).
    pub fn restore_node_health(&mut self, r: NodeHealthRecord) {
        let NodeHealthRecord { executor, node, failures, quarantine } = r;
        let health = NodeHealth {
            failures: failures
                .into_iter()
                .map(|f| NodeFailure { at_ms: f.at_ms, fault: f.fault.into(), job: f.job_id })
                .collect(),
            quarantine: quarantine.map(|q| Quarantine { since_ms: q.since_ms, until_ms: q.until_ms, reason: q.reason }),
        };
        self.node_health.insert((executor, node), health);
    }
}

/// The stored form of a node's health.
pub(super) fn health_record(node: &(ExecutorName, NodeName), h: &NodeHealth) -> NodeHealthRecord {
    NodeHealthRecord {
        executor: node.0.clone(),
        node: node.1.clone(),
        failures: h
            .failures
            .iter()
            .map(|f| NodeFailureRecord { at_ms: f.at_ms, fault: f.fault.into(), job_id: f.job })
            .collect(),
        quarantine: h.quarantine.as_ref().map(|q| QuarantineRecord {
            since_ms: q.since_ms,
            until_ms: q.until_ms,
            reason: q.reason.clone(),
        }),
    }
}
