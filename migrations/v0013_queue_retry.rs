//! Version 13: the `queue_policies` meta row holds each queue's retry policy beside its guarantee
//! and preemption policy. This step rewrites a version 12 row in the new record, every queue
//! without a retry policy (none had one); a database without the row is left as it is.

use crate::record::codec::{decode, encode};
use crate::store::StoreError;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// The table and key this step reads and writes, frozen as of version 13.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const QUEUE_POLICIES: &str = "queue_policies";

/// A queue's guarantee (fixed-point amounts by resource name) and preemption policy (its
/// variant's position), frozen as of version 12.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Policies {
    guaranteed: BTreeMap<String, i64>,
    preemption_policy: u32,
}

/// A retry policy, frozen as of version 13 (version 11's job retry record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Retry {
    max_attempts: u32,
    on_exit_codes: Vec<i32>,
    on_oom: bool,
    on_node_failure: bool,
    backoff_ms: u64,
}

/// The row: by queue name (a name is its text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ByQueue<P> {
    queues: BTreeMap<String, P>,
}

/// Version 13's entry of a queue: version 12's and its retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PoliciesV13 {
    policies: Policies,
    retry: Option<Retry>,
}

/// Converts the row.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let mut meta = tx.open_table(META)?;
    let Some(old) = meta.get(QUEUE_POLICIES)?.map(|v| v.value().to_vec()) else { return Ok(()) };
    let new = convert(&old)?;
    meta.insert(QUEUE_POLICIES, new.as_slice())?;
    Ok(())
}

/// A version 12 `queue_policies` value as version 13's.
fn convert(bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let old: ByQueue<Policies> = decode(bytes)
        .map_err(|source| StoreError::Corrupt { what: "version 12 meta.queue_policies".into(), source })?;
    let queues = old.queues.into_iter().map(|(name, policies)| (name, PoliciesV13 { policies, retry: None }));
    let new = ByQueue { queues: queues.collect() };
    encode(&new).map_err(|source| StoreError::Encode { what: "version 13 queue policies", source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_12_row_gains_no_retry_policies() {
        let old: BTreeMap<String, Policies> = [
            ("physics".to_string(), Policies { guaranteed: [("cpu".to_string(), 6_000)].into(), preemption_policy: 1 }),
            ("science".to_string(), Policies { guaranteed: BTreeMap::new(), preemption_policy: 0 }),
        ]
        .into();
        let new: ByQueue<PoliciesV13> =
            decode(&convert(&encode(&ByQueue { queues: old.clone() }).unwrap()).unwrap()).unwrap();
        let back: BTreeMap<String, Policies> = new
            .queues
            .into_iter()
            .map(|(n, p)| {
                assert_eq!(p.retry, None);
                (n, p.policies)
            })
            .collect();
        assert_eq!(back, old);
    }
}
