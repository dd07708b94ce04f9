//! `api.Jobs/GetActiveQueues`: per pool, the queues with a job whose run holds a node there
//! (leased, pending or running), read from the state machine's memory, as Armada reads them from
//! its jobs and runs.

use super::pb;
use crate::model::{JobState, PoolName, QueueName, RunState};
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet};

/// The active queues of `state`'s live runs.
pub(super) fn active_queues(state: &State) -> pb::GetActiveQueuesResponse {
    let live = state.active_runs().filter_map(|(run_id, job)| {
        let job = &job.record;
        let run = job.runs.iter().rev().find(|r| r.run_id == run_id)?;
        let holds_a_node = matches!(job.state, JobState::Leased | JobState::Pending | JobState::Running)
            && matches!(run.state, RunState::Leased | RunState::Pending | RunState::Running);
        holds_a_node.then_some((&run.pool, &job.queue))
    });
    by_pool(live)
}

/// Queue names by pool, each pool's in name order and once.
fn by_pool<'a>(runs: impl Iterator<Item = (&'a PoolName, &'a QueueName)>) -> pb::GetActiveQueuesResponse {
    let mut pools: BTreeMap<&PoolName, BTreeSet<&QueueName>> = BTreeMap::new();
    for (pool, queue) in runs {
        pools.entry(pool).or_default().insert(queue);
    }
    pb::GetActiveQueuesResponse {
        active_queues_by_pool: pools
            .into_iter()
            .map(|(pool, queues)| {
                (pool.to_string(), pb::ActiveQueues { queues: queues.into_iter().map(ToString::to_string).collect() })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_grouped_by_pool_once_each_in_name_order() {
        let p = |s: &str| PoolName::new(s).unwrap();
        let q = |s: &str| QueueName::new(s).unwrap();
        let runs = [(p("gpu"), q("b")), (p("default"), q("b")), (p("gpu"), q("a")), (p("gpu"), q("b"))];
        let got = by_pool(runs.iter().map(|(p, q)| (p, q)));
        let got: BTreeMap<String, Vec<String>> =
            got.active_queues_by_pool.into_iter().map(|(k, v)| (k, v.queues)).collect();
        assert_eq!(
            got,
            BTreeMap::from([
                ("default".to_string(), vec!["b".to_string()]),
                ("gpu".to_string(), vec!["a".to_string(), "b".to_string()]),
            ])
        );
        assert!(by_pool(std::iter::empty()).active_queues_by_pool.is_empty());
    }
}
