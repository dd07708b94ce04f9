//! `[agent.fake]`: the fake runtime's section (the declared node groups and the journal).

use super::{AgentConfigError, check_reserved_for, invalid, warn_unusual_resources};
use crate::model::{Labels, NodeName, PoolName, QueueName, Resources, Taint};
use serde::{Deserialize, Serialize};

/// `[agent.fake]`: declared nodes, simulated jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeConfig {
    /// Groups of identical nodes (`[[agent.fake.node_groups]]`).
    #[serde(default)]
    pub node_groups: Vec<FakeNodeGroup>,
    /// Record each run's start and end in `<data_dir>/fake-runs.jsonl`, so that a restarted
    /// agent finds its runs again (as the process runtime does from its run directories).
    /// Default: false (runs live in memory, and a restart loses them as a node loss would).
    #[serde(default)]
    pub journal: bool,
}

/// A group of identical fake nodes, named `<name_prefix>-<index>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeNodeGroup {
    /// Number of nodes in the group (at least 1).
    pub count: u32,
    /// Node names are this prefix, a dash and the index from 0. Default: `fake`.
    #[serde(default = "default_fake_prefix")]
    pub name_prefix: String,
    /// Pool of the nodes. Default: `default`.
    #[serde(default = "PoolName::default_pool")]
    pub pool: PoolName,
    /// What each node offers, e.g. `{ cpu = "32", memory = "128Gi" }`.
    pub allocatable: Resources,
    /// Labels of each node.
    #[serde(default)]
    pub labels: Labels,
    /// Taints of each node.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Queues the nodes are earmarked for (as `[agent.process] reserved_for`). Default: none.
    #[serde(default)]
    pub reserved_for: Vec<QueueName>,
}

impl FakeConfig {
    /// Checks the section's keys (`agent.fake.*`); the error names the first offending one.
    pub(super) fn validate(&self) -> Result<(), AgentConfigError> {
        if self.node_groups.is_empty() {
            return Err(invalid("fake.node_groups", "the fake runtime needs at least one node group"));
        }
        let mut prefixes = std::collections::HashSet::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            let key = format!("fake.node_groups[{i}]");
            if g.count == 0 {
                return Err(invalid(&format!("{key}.count"), "must be at least 1"));
            }
            let sample = format!("{}-{}", g.name_prefix, g.count - 1);
            if let Err(e) = NodeName::new(&sample) {
                return Err(invalid(&format!("{key}.name_prefix"), e.to_string()));
            }
            if !prefixes.insert(g.name_prefix.as_str()) {
                return Err(invalid(
                    &format!("{key}.name_prefix"),
                    format!("{:?} is used by two groups", g.name_prefix),
                ));
            }
            check_reserved_for(&key, &g.reserved_for, &g.labels)?;
            warn_unusual_resources(&format!("{key}.allocatable"), &g.allocatable);
            if g.allocatable.is_zero() {
                return Err(invalid(
                    &format!("{key}.allocatable"),
                    "a node must offer something, e.g. { cpu = \"8\", memory = \"32Gi\" }",
                ));
            }
        }
        Ok(())
    }
}

fn default_fake_prefix() -> String {
    "fake".to_string()
}
