//! Queues: the unit of fair share.

use super::names::{PriorityClassName, QueueName, ResourceName};
use super::resources::Resources;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Maximum fraction of a pool's resources, per resource name.
pub(super) type ResourceFractions = BTreeMap<ResourceName, f64>;

/// A queue. Weight is `1 / priority_factor`: a queue with factor 2 gets half the share of a queue
/// with factor 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Queue {
    /// Queue name, unique in the cluster.
    pub name: QueueName,
    /// Share divisor: a queue with factor 2 gets half the share of a queue with factor 1 (> 0).
    #[serde(default = "default_priority_factor")]
    #[schema(default = 1.0, exclusive_minimum = 0.0)]
    pub priority_factor: f64,
    /// Users who may submit to and cancel in this queue.
    #[serde(default)]
    pub owners: Vec<String>,
    /// Groups whose members may submit to and cancel in this queue.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Maximum fraction of a pool this queue may use, per resource.
    #[serde(default)]
    #[schema(value_type = BTreeMap<ResourceName, f64>)]
    pub resource_limits: ResourceFractions,
    /// Maximum fraction of a pool this queue's jobs of one priority class may use.
    #[serde(default)]
    #[schema(value_type = BTreeMap<PriorityClassName, BTreeMap<ResourceName, f64>>)]
    pub resource_limits_by_priority_class: BTreeMap<PriorityClassName, ResourceFractions>,
    /// A cordoned queue takes submissions but none of its queued jobs is scheduled (as Armada's
    /// cordon); its running jobs keep running.
    #[serde(default)]
    pub cordoned: bool,
    /// Free-form labels for people and tools; Convoy does not act on them.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The parent queue, if this queue is a child in the queue tree (absent: a top-level queue).
    /// Jobs are submitted to leaf queues only; a parent's share is divided among its children.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent: Option<QueueName>,
    /// Added to the queue's priority when it competes with its siblings (saturating at the
    /// bounds of an i32).
    #[serde(default)]
    pub priority_offset: i32,
    /// `fence`: the priorities inside this queue's subtree are not visible outside it.
    #[serde(default)]
    pub priority_policy: PriorityPolicy,
    /// `disabled`: priorities are ignored when ordering this queue's children (and, inherited,
    /// in its whole subtree); fair share alone decides.
    #[serde(default)]
    pub sort_priority: SortPriority,
    /// Resources the queue is guaranteed in every pool (YuniKorn's `guaranteed`, Kueue's nominal
    /// quota): its share is at least the smaller of this and its demand; the rest of the pool is
    /// divided by fair share. A parent's guarantee is divided among its children. Guarantees
    /// that add up to more than a pool are scaled down in proportion.
    #[serde(default, skip_serializing_if = "Resources::is_zero")]
    #[schema(value_type = BTreeMap<String, String>)]
    pub guaranteed: Resources,
    /// `fence`: no job inside this queue's subtree displaces a job outside it by urgency
    /// (priority-class preemption); fair-share eviction between subtrees is unchanged.
    #[serde(default, skip_serializing_if = "PreemptionPolicy::is_default")]
    pub preemption_policy: PreemptionPolicy,
    /// When a failed run of the queue's jobs is retried (Armada's queue retry policy), for jobs
    /// without a `retry` of their own (a job's own policy wins whole). A queue without one
    /// takes the nearest ancestor's ([`super::queue_retry_policy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<super::job_retry::JobRetryPolicy>,
}

/// Whether a queue's subtree may urgency-preempt jobs outside it (YuniKorn's
/// `preemption.policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreemptionPolicy {
    /// Jobs of the subtree may displace lower-priority jobs anywhere in the pool.
    #[default]
    Default,
    /// Jobs of the subtree displace by urgency only jobs inside it.
    Fence,
}

impl PreemptionPolicy {
    /// True for the default policy (left out of JSON, as queues before it had none).
    pub fn is_default(&self) -> bool {
        *self == PreemptionPolicy::Default
    }
}

impl std::fmt::Display for PreemptionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PreemptionPolicy::Default => "default",
            PreemptionPolicy::Fence => "fence",
        })
    }
}

/// Whether a queue's subtree shows its priorities to the rest of the tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PriorityPolicy {
    /// Seen from outside, the queue has the highest priority of its jobs or children, plus its
    /// offset.
    #[default]
    Default,
    /// Seen from outside, the queue has the default priority class's priority plus its offset,
    /// whatever its jobs ask for; inside, its children still compete by priority.
    Fence,
}

/// Whether priorities order a queue's children (inherited by the subtree only when disabled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SortPriority {
    /// The child with the highest priority goes first; fair share breaks ties.
    #[default]
    Enabled,
    /// Priorities are ignored inside this queue and its subtree: fair share alone decides.
    Disabled,
}

impl std::fmt::Display for PriorityPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PriorityPolicy::Default => "default",
            PriorityPolicy::Fence => "fence",
        })
    }
}

impl std::fmt::Display for SortPriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SortPriority::Enabled => "enabled",
            SortPriority::Disabled => "disabled",
        })
    }
}

fn default_priority_factor() -> f64 {
    1.0
}

impl Queue {
    /// A queue with default settings.
    pub fn new(name: QueueName, priority_factor: f64) -> Self {
        Self {
            name,
            priority_factor,
            owners: vec![],
            groups: vec![],
            resource_limits: BTreeMap::new(),
            resource_limits_by_priority_class: BTreeMap::new(),
            cordoned: false,
            labels: BTreeMap::new(),
            parent: None,
            priority_offset: 0,
            priority_policy: PriorityPolicy::Default,
            sort_priority: SortPriority::Enabled,
            guaranteed: Resources::new(),
            preemption_policy: PreemptionPolicy::Default,
            retry: None,
        }
    }

    /// True if the queue uses none of the tree's settings: no parent, no offset, no fence,
    /// priorities sorted. A pool whose queues are all flat and have no policies
    /// ([`Queue::has_policies`]) is scheduled as Armada does.
    pub fn is_flat(&self) -> bool {
        self.parent.is_none()
            && self.priority_offset == 0
            && self.priority_policy == PriorityPolicy::Default
            && self.sort_priority == SortPriority::Enabled
    }

    /// True if the queue has a guarantee or a preemption fence (stored beside the tree settings
    /// since state schema 12).
    pub fn has_policies(&self) -> bool {
        !self.guaranteed.is_zero() || self.preemption_policy != PreemptionPolicy::Default
    }

    /// The queue's weight in fair share.
    pub fn weight(&self) -> f64 {
        1.0 / self.priority_factor
    }

    /// Checks field rules; the error names the field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.priority_factor.is_finite() && self.priority_factor > 0.0) {
            return Err(FieldError::new(
                "priority_factor",
                format!("must be a finite number > 0, got {}", self.priority_factor),
            ));
        }
        if self.parent.as_ref() == Some(&self.name) {
            return Err(FieldError::new("parent", format!("queue {} cannot be its own parent", self.name)));
        }
        validate_fractions("resource_limits", &self.resource_limits)?;
        if let Some((r, v)) = self.guaranteed.iter().find(|(_, v)| *v < 0) {
            return Err(FieldError::new(format!("guaranteed.{r}"), format!("must not be negative, got {v}")));
        }
        if let Some(r) = &self.retry {
            super::RetryPolicy::check(r).map_err(|e| e.within("retry"))?;
        }
        for (pc, f) in &self.resource_limits_by_priority_class {
            validate_fractions(&format!("resource_limits_by_priority_class.{pc}"), f)?;
        }
        Ok(())
    }
}

/// Checks that every fraction is within [0, 1].
pub(super) fn validate_fractions(field: &str, f: &ResourceFractions) -> Result<(), FieldError> {
    for (r, v) in f {
        if !(v.is_finite() && (0.0..=1.0).contains(v)) {
            return Err(FieldError::new(
                format!("{field}.{r}"),
                format!("must be a fraction between 0 and 1, got {v}"),
            ));
        }
    }
    Ok(())
}

/// A rule broken by one field of an input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Path of the offending field, e.g. `jobs[3].pod_spec.containers`; empty for the whole input.
    pub field: String,
    /// What is wrong, for people.
    pub message: String,
}

impl FieldError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }

    /// Prefixes the field path, e.g. `jobs[3]` + `pod_spec.containers`.
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = if self.field.is_empty() { prefix.to_string() } else { format!("{prefix}.{}", self.field) };
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_fields() {
        let mut q = Queue::new(QueueName::new("a").unwrap(), 0.0);
        assert_eq!(q.validate().unwrap_err().field, "priority_factor");
        q.priority_factor = 2.0;
        assert!((q.weight() - 0.5).abs() < 1e-12);
        q.resource_limits.insert(ResourceName::cpu(), 1.5);
        assert_eq!(q.validate().unwrap_err().field, "resource_limits.cpu");
        q.resource_limits.clear();
        q.parent = Some(q.name.clone());
        assert_eq!(q.validate().unwrap_err().field, "parent");
    }

    #[test]
    fn tree_fields_default_and_parse() {
        let q: Queue = serde_json::from_str(r#"{"name": "a"}"#).unwrap();
        assert!(q.is_flat());
        let q: Queue = serde_json::from_str(
            r#"{"name": "a", "parent": "t", "priority_offset": -5, "priority_policy": "fence", "sort_priority": "disabled"}"#,
        )
        .unwrap();
        assert_eq!(q.parent.as_ref().map(|p| p.as_str()), Some("t"));
        assert_eq!(
            (q.priority_offset, q.priority_policy, q.sort_priority),
            (-5, PriorityPolicy::Fence, SortPriority::Disabled)
        );
        assert!(!q.is_flat());
        let e = serde_json::from_str::<Queue>(r#"{"name": "a", "priority_offset": 3000000000}"#).unwrap_err();
        assert!(e.to_string().contains("i32"), "{e}");
        assert!(serde_json::from_str::<Queue>(r#"{"name": "a", "priority_policy": "wall"}"#).is_err());
    }

    #[test]
    fn policies_default_parse_and_are_refused_by_field() {
        let q: Queue = serde_json::from_str(r#"{"name": "a"}"#).unwrap();
        assert!(!q.has_policies());
        // Left out of JSON at their defaults, as queues before them had none.
        let json = serde_json::to_value(&q).unwrap();
        assert!(json.get("guaranteed").is_none() && json.get("preemption_policy").is_none(), "{json}");
        let q: Queue = serde_json::from_str(
            r#"{"name": "a", "guaranteed": {"cpu": "6", "memory": "8Gi"}, "preemption_policy": "fence"}"#,
        )
        .unwrap();
        assert_eq!((q.guaranteed.get("cpu"), q.guaranteed.get("memory")), (6000, 8 << 30));
        assert_eq!(q.preemption_policy, PreemptionPolicy::Fence);
        assert!(q.has_policies() && q.is_flat());
        assert!(q.validate().is_ok());
        let json = serde_json::to_value(&q).unwrap();
        assert_eq!(json["guaranteed"]["cpu"], "6");
        assert_eq!(json["preemption_policy"], "fence");
        let e = serde_json::from_str::<Queue>(r#"{"name": "a", "preemption_policy": "wall"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
        let e = serde_json::from_str::<Queue>(r#"{"name": "a", "guaranteed": {"cpu": "lots"}}"#).unwrap_err();
        assert!(e.to_string().contains("cpu"), "{e}");
        let mut q = Queue::new(QueueName::new("a").unwrap(), 1.0);
        q.guaranteed.set(ResourceName::cpu(), -1);
        assert_eq!(q.validate().unwrap_err().field, "guaranteed.cpu");
    }
}
