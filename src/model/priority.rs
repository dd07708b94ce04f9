//! Priority classes: how urgent a job is and whether fair-share preemption may evict it.

use super::names::PriorityClassName;
use super::queue::{FieldError, ResourceFractions, validate_fractions};
use serde::{Deserialize, Serialize};

/// A priority class, from configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityClass {
    /// Name jobs give in `priority_class`; unique among the configured classes.
    pub name: PriorityClassName,
    /// Higher is more urgent. A job may urgency-preempt running jobs of strictly lower priority.
    pub priority: i32,
    /// Jobs of this class may be evicted by fair-share preemption.
    #[serde(default)]
    pub preemptible: bool,
    /// Per queue, the maximum fraction of a pool this class's jobs may use.
    #[serde(default)]
    pub max_resource_fraction_per_queue: ResourceFractions,
    /// Overrides `[scheduler] min_runtime_before_preemption` for this class's jobs: fair-share
    /// eviction spares a job of this class until it has run this long (0 = never spared). Also
    /// read as `min_runtime_before_preemption_seconds`.
    #[serde(
        default,
        with = "crate::model::duration::serde_text_opt",
        alias = "min_runtime_before_preemption_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_runtime_before_preemption: Option<std::time::Duration>,
}

impl PriorityClass {
    /// The two classes every installation starts with: `default` (30000, not preemptible) and
    /// `preemptible` (20000, preemptible).
    pub fn defaults() -> Vec<PriorityClass> {
        vec![
            PriorityClass {
                name: PriorityClassName::new("default").expect("valid literal"),
                priority: 30000,
                preemptible: false,
                max_resource_fraction_per_queue: Default::default(),
                min_runtime_before_preemption: None,
            },
            PriorityClass {
                name: PriorityClassName::new("preemptible").expect("valid literal"),
                priority: 20000,
                preemptible: true,
                max_resource_fraction_per_queue: Default::default(),
                min_runtime_before_preemption: None,
            },
        ]
    }

    /// Checks field rules.
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_fractions("max_resource_fraction_per_queue", &self.max_resource_fraction_per_queue)
    }
}
