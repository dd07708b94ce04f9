//! Floating resources (Armada's `floatingResources`): resources counted per pool rather than per
//! node — licences, shared file-system slots. A job requests one like any resource
//! (`licence/matlab: 1`); node fit ignores it (no node has it) and the pool checks it: a job
//! starts only when the pool's amount, less what its leased and running jobs and those placed
//! earlier in the cycle hold, covers the request.
//!
//! In the cycle a floating resource is one more slot of the pool's resource vectors: every node
//! offers [`NODE_SLOT`] of it (so no node fit depends on it), the pool's total is the configured
//! amount, and the queues' allocations count it as they count cpu, so evictions, displacements
//! and gang rollbacks keep the pool's use right without any step of their own
//! ([`super::floating_placement`] checks it).

use crate::model::quantity::{Unit, parse_quantity};
use crate::model::{FieldError, PoolName, ResourceName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One floating resource (`[[scheduler.floating_resources]]`; a scenario's
/// `config.floating_resources[]`): its name and how much of it each pool has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloatingResourceConfig {
    /// The name jobs request it by, e.g. `licence/matlab`.
    pub name: ResourceName,
    /// The amount in each pool, as a Kubernetes quantity (`"3"`, `"500m"`); pools not listed
    /// have none.
    pub pools: BTreeMap<PoolName, String>,
}

/// What every node offers of a floating resource in the cycle: more than any job asks for, so
/// node fit never fails on it, and small enough that sums over many nodes stay far from
/// overflow.
pub(crate) const NODE_SLOT: i64 = 1 << 40;

/// Resources that are always node resources and so may not float.
const NODE_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

impl FloatingResourceConfig {
    /// The amount in `pool`, if the pool has it (the quantity was checked by [`validate`]).
    pub fn capacity(&self, pool: &PoolName) -> Option<i64> {
        let q = self.pools.get(pool)?;
        parse_quantity(q, Unit::for_resource(self.name.as_str())).ok()
    }
}

/// Checks `floating_resources`: unique names that are not node resources, at least one pool
/// each, and quantities that parse and are not negative.
pub(crate) fn validate(floating: &[FloatingResourceConfig], indexed: &[ResourceName]) -> Result<(), FieldError> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, f) in floating.iter().enumerate() {
        let at = |key: &str| format!("floating_resources[{i}].{key}");
        let name = f.name.as_str();
        if !seen.insert(name) {
            return Err(FieldError::new(at("name"), format!("{name} is defined twice")));
        }
        if NODE_RESOURCES.contains(&name) || indexed.iter().any(|r| r.as_str() == name) {
            return Err(FieldError::new(
                at("name"),
                format!(
                    "{name} is a node resource (cpu, memory, ephemeral-storage, pods and indexed_resources are \
                     counted per node); a floating resource needs a name of its own, e.g. licence/matlab"
                ),
            ));
        }
        if f.pools.is_empty() {
            return Err(FieldError::new(at("pools"), "at least one pool is needed, e.g. {default = \"3\"}"));
        }
        for (pool, q) in &f.pools {
            let v = parse_quantity(q, Unit::for_resource(name))
                .map_err(|e| FieldError::new(at(&format!("pools.{pool}")), format!("{e}")))?;
            if v < 0 {
                return Err(FieldError::new(at(&format!("pools.{pool}")), "must not be negative"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::config::SchedulerConfig;

    fn parse(yaml: &str) -> Result<SchedulerConfig, String> {
        let c: SchedulerConfig = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.field)?;
        Ok(c)
    }

    #[test]
    fn reads_the_documented_shape_and_amounts() {
        let c = parse("floating_resources: [{name: licence/matlab, pools: {default: \"3\", gpu: 500m}}]").unwrap();
        assert_eq!(
            c.floating_in_pool(&PoolName::default_pool()),
            vec![(ResourceName::new("licence/matlab").unwrap(), 3000)]
        );
        assert_eq!(c.largest_floating("licence/matlab"), Some(3000));
        assert_eq!(c.largest_floating("cpu"), None);
        assert!(c.floating_in_pool(&PoolName::new("other").unwrap()).is_empty());
        let t: SchedulerConfig =
            toml::from_str("floating_resources = [{ name = \"licence/matlab\", pools = { default = \"3\" } }]")
                .unwrap();
        assert_eq!(
            t.floating_resources,
            parse("floating_resources: [{name: licence/matlab, pools: {default: \"3\"}}]").unwrap().floating_resources
        );
    }

    #[test]
    fn bad_entries_are_refused_by_field() {
        assert_eq!(
            parse("floating_resources: [{name: cpu, pools: {default: \"3\"}}]").unwrap_err(),
            "floating_resources[0].name"
        );
        assert_eq!(parse("floating_resources: [{name: l, pools: {}}]").unwrap_err(), "floating_resources[0].pools");
        assert_eq!(
            parse("floating_resources: [{name: l, pools: {default: lots}}]").unwrap_err(),
            "floating_resources[0].pools.default"
        );
        assert_eq!(
            parse("floating_resources: [{name: l, pools: {default: \"-1\"}}]").unwrap_err(),
            "floating_resources[0].pools.default"
        );
        assert_eq!(
            parse("floating_resources: [{name: l, pools: {default: \"1\"}}, {name: l, pools: {default: \"1\"}}]")
                .unwrap_err(),
            "floating_resources[1].name"
        );
        assert!(parse("floating_resources: [{name: l, pool: {default: \"1\"}}]").is_err());
    }
}
