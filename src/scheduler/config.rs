//! Scheduler configuration: the `[scheduler]` section of the server config and the `config` block
//! of a simulation scenario (same keys, same defaults).

pub use super::floating::FloatingResourceConfig;
use super::quarantine::QuarantineConfig;
use crate::model::duration::serde_text;
use crate::model::{FieldError, PoolName, PoolPolicy, PriorityClass, PriorityClassName, ResourceName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How a queue's resource usage is turned into one number for fair share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FairnessModel {
    /// Dominant resource fairness: `max_r(alloc_r / total_r)` over
    /// `dominant_resource_fairness_resources`.
    #[default]
    DominantResource,
    /// The older asset-fairness cost `Σ_r w_r · alloc_r` (cpu in cores, memory in GiB, other
    /// resources in units) divided by the same sum over the pool, with `w_r` from
    /// `resource_cost_weights`.
    WeightedSum,
}

/// Scheduler settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Priority classes jobs may name.
    pub priority_classes: Vec<PriorityClass>,
    /// Class given to jobs that name none.
    pub default_priority_class: PriorityClassName,
    /// Probability that a node's preemptible jobs are evicted for fair-share rebalancing in a
    /// cycle (0 disables fair-share preemption).
    pub node_eviction_probability: f64,
    /// Queues whose share is at most this fraction of the larger of their fair share and their
    /// adjusted fair share are never evicted.
    pub protected_fraction_of_fair_share: f64,
    /// At most this many queued jobs per queue are tried in one cycle (0 = no limit).
    pub max_queue_lookback: usize,
    /// Jobs per second for the global token bucket (0 = unlimited).
    pub maximum_scheduling_rate: f64,
    /// Size of the global token bucket.
    pub maximum_scheduling_burst: u64,
    /// Jobs per second for each queue's token bucket (0 = unlimited).
    pub maximum_per_queue_scheduling_rate: f64,
    /// Size of each queue's token bucket.
    pub maximum_per_queue_scheduling_burst: u64,
    /// Resources that count for dominant resource fairness.
    pub dominant_resource_fairness_resources: Vec<ResourceName>,
    /// Cost model for fair share.
    pub fairness_model: FairnessModel,
    /// Weights for the weighted-sum cost model.
    pub resource_cost_weights: BTreeMap<ResourceName, f64>,
    /// Resources (at most 4) that order nodes for best fit: a job goes to the node with the least
    /// free of the first, then the second, …
    pub indexed_resources: Vec<ResourceName>,
    /// The leader runs a cycle at most this often while cycles are expensive; while they are
    /// cheap (a fifth of this or less to decide), sooner: five times the last one's decision
    /// time, and never sooner than a tenth of this.
    #[serde(with = "serde_text")]
    pub schedule_interval_min: Duration,
    /// …and at least this often.
    #[serde(with = "serde_text")]
    pub schedule_interval_max: Duration,
    /// Node quarantine (off unless `max_failures` is set).
    pub quarantine: QuarantineConfig,
    /// Half-time of the moving average of each queue's usage that orders queues in progressive
    /// filling (HTCondor's priority decay): recent usage counts more, and the average approaches
    /// the current usage with this half-time. 0 (the default) orders queues by their current
    /// usage alone. Also read as `queue_usage_halftime_seconds` (the `convoy simulate` spelling).
    #[serde(with = "serde_text", alias = "queue_usage_halftime_seconds")]
    pub queue_usage_halftime: Duration,
    /// Per-pool policy (`[scheduler.pools.<pool>]`): pools not listed are scheduled by
    /// `fair_share` (see [`super::policy`] and docs/pool-policies.md).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<PoolName, PoolPolicyConfig>,
    /// Fair-share eviction spares a running job until it has run this long, counted from when
    /// its run was leased (the time the scheduler's view holds); a priority class may override
    /// it. 0 (the default) spares none. Also read as `min_runtime_before_preemption_seconds`.
    #[serde(
        with = "serde_text",
        alias = "min_runtime_before_preemption_seconds",
        skip_serializing_if = "Duration::is_zero"
    )]
    pub min_runtime_before_preemption: Duration,
    /// Urgency preemption (a more urgent class taking the room) spares a running job until it
    /// has run this long. 0 (the default) spares none. Also read as
    /// `min_runtime_before_urgency_preemption_seconds`.
    #[serde(
        with = "serde_text",
        alias = "min_runtime_before_urgency_preemption_seconds",
        skip_serializing_if = "Duration::is_zero"
    )]
    pub min_runtime_before_urgency_preemption: Duration,
    /// Resources counted per pool rather than per node (licences, shared file-system slots):
    /// Armada's floating resources ([`super::floating`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub floating_resources: Vec<FloatingResourceConfig>,
    /// A gang or job that waited this long at the head of its queue's order without fitting gets
    /// the nodes that free up for it soonest reserved ([`super::reservation`]); zero (or `"off"`,
    /// the default) turns reservations off. Also read as `gang_reservation_after_seconds` (the
    /// `convoy simulate` spelling). Left out of the serialized form while off, so that a
    /// configuration without it records (and hashes) as before.
    #[serde(
        with = "super::reservation_plan::serde_after",
        alias = "gang_reservation_after_seconds",
        skip_serializing_if = "Duration::is_zero"
    )]
    pub gang_reservation_after: Duration,
    /// Most reservations held at once in one pool (default 1).
    #[serde(skip_serializing_if = "super::reservation_plan::is_default_max")]
    pub max_reservations_per_pool: u32,
}

/// Most resources that may order nodes for best fit.
pub const MAX_INDEXED_RESOURCES: usize = 4;

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            priority_classes: PriorityClass::defaults(),
            default_priority_class: PriorityClassName::new("default").expect("valid literal"),
            node_eviction_probability: 1.0,
            protected_fraction_of_fair_share: 1.0,
            max_queue_lookback: 1000,
            maximum_scheduling_rate: 0.0,
            maximum_scheduling_burst: 0,
            maximum_per_queue_scheduling_rate: 0.0,
            maximum_per_queue_scheduling_burst: 0,
            dominant_resource_fairness_resources: vec![
                ResourceName::cpu(),
                ResourceName::memory(),
                ResourceName::gpu(),
            ],
            fairness_model: FairnessModel::DominantResource,
            resource_cost_weights: [
                (ResourceName::cpu(), 1.0),
                (ResourceName::memory(), 0.0),
                (ResourceName::gpu(), 0.0),
            ]
            .into_iter()
            .collect(),
            indexed_resources: vec![ResourceName::gpu(), ResourceName::cpu(), ResourceName::memory()],
            schedule_interval_min: Duration::from_millis(100),
            schedule_interval_max: Duration::from_secs(5),
            quarantine: QuarantineConfig::default(),
            queue_usage_halftime: Duration::ZERO,
            pools: BTreeMap::new(),
            min_runtime_before_preemption: Duration::ZERO,
            min_runtime_before_urgency_preemption: Duration::ZERO,
            floating_resources: Vec::new(),
            gang_reservation_after: Duration::ZERO,
            max_reservations_per_pool: super::reservation_plan::DEFAULT_MAX_PER_POOL,
        }
    }
}

impl SchedulerConfig {
    /// Checks every rule; the error names the key.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.priority_classes.is_empty() {
            return Err(FieldError::new("priority_classes", "at least one priority class is needed"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, pc) in self.priority_classes.iter().enumerate() {
            if !seen.insert(pc.name.clone()) {
                return Err(FieldError::new(
                    format!("priority_classes[{i}].name"),
                    format!("{} is defined twice", pc.name),
                ));
            }
            pc.validate().map_err(|e| e.within(&format!("priority_classes[{i}]")))?;
        }
        if !seen.contains(&self.default_priority_class) {
            return Err(FieldError::new(
                "default_priority_class",
                format!("{} is not one of the priority classes", self.default_priority_class),
            ));
        }
        let fraction = |key: &str, v: f64| {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(FieldError::new(key, format!("must be between 0 and 1, got {v}")))
            }
        };
        fraction("node_eviction_probability", self.node_eviction_probability)?;
        if !(self.protected_fraction_of_fair_share.is_finite() && self.protected_fraction_of_fair_share >= 0.0) {
            return Err(FieldError::new("protected_fraction_of_fair_share", "must be a number >= 0"));
        }
        for (key, rate, burst) in [
            ("maximum_scheduling", self.maximum_scheduling_rate, self.maximum_scheduling_burst),
            (
                "maximum_per_queue_scheduling",
                self.maximum_per_queue_scheduling_rate,
                self.maximum_per_queue_scheduling_burst,
            ),
        ] {
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(FieldError::new(format!("{key}_rate"), "must be a number >= 0 (0 = unlimited)"));
            }
            if rate > 0.0 && burst == 0 {
                return Err(FieldError::new(format!("{key}_burst"), "must be >= 1 when the rate is set"));
            }
        }
        if self.dominant_resource_fairness_resources.is_empty()
            && self.fairness_model == FairnessModel::DominantResource
        {
            return Err(FieldError::new("dominant_resource_fairness_resources", "at least one resource is needed"));
        }
        for (r, w) in &self.resource_cost_weights {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(FieldError::new(format!("resource_cost_weights.{r}"), "must be a number >= 0"));
            }
        }
        if self.fairness_model == FairnessModel::WeightedSum && self.resource_cost_weights.values().all(|w| *w == 0.0) {
            return Err(FieldError::new(
                "resource_cost_weights",
                "at least one weight must be > 0 for the weighted_sum model",
            ));
        }
        if self.indexed_resources.is_empty() || self.indexed_resources.len() > MAX_INDEXED_RESOURCES {
            return Err(FieldError::new("indexed_resources", format!("needs 1 to {MAX_INDEXED_RESOURCES} resources")));
        }
        if self.schedule_interval_min.is_zero() {
            return Err(FieldError::new("schedule_interval_min", "must be > 0"));
        }
        if self.schedule_interval_max < self.schedule_interval_min {
            return Err(FieldError::new("schedule_interval_max", "must be >= schedule_interval_min"));
        }
        self.quarantine.validate()?;
        for (pool, p) in &self.pools {
            p.validate().map_err(|e| e.within(&format!("pools.{pool}")))?;
        }
        super::floating::validate(&self.floating_resources, &self.indexed_resources)?;
        if self.max_reservations_per_pool == 0 {
            return Err(FieldError::new(
                "max_reservations_per_pool",
                "must be >= 1 (turn reservations off with gang_reservation_after = \"off\")",
            ));
        }
        Ok(())
    }

    /// How long fair-share eviction spares a running job of priority class `pc` (its class's
    /// override, else the global setting); zero: not at all.
    pub fn min_runtime_for(&self, pc: &PriorityClass) -> Duration {
        pc.min_runtime_before_preemption.unwrap_or(self.min_runtime_before_preemption)
    }

    /// True if some minimum runtime before preemption is set (globally, for urgency, or for a
    /// class).
    pub fn min_runtime_set(&self) -> bool {
        !self.min_runtime_before_preemption.is_zero()
            || !self.min_runtime_before_urgency_preemption.is_zero()
            || self.priority_classes.iter().any(|pc| pc.min_runtime_before_preemption.is_some_and(|d| !d.is_zero()))
    }

    /// The priority class called `name`.
    pub fn priority_class(&self, name: &str) -> Option<&PriorityClass> {
        self.priority_classes.iter().find(|pc| pc.name.as_str() == name)
    }
}

/// One pool's settings (`[scheduler.pools.<pool>]`; a scenario's `config.pools.<pool>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolPolicyConfig {
    /// The policy (default `fair_share`).
    #[serde(default)]
    pub policy: PoolPolicy,
    /// `priority`: a pending job that does not fit preempts running preemptible jobs of strictly
    /// lower job priority (default false). `proportional`: preemptible jobs of queues above their
    /// target are preempted (default true). Not allowed with `fair_share`, whose preemption
    /// follows `node_eviction_probability` and the priority classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<bool>,
}

impl PoolPolicyConfig {
    /// Whether the pool preempts, with the policy's default when `preemption` is not given.
    pub fn preemption(&self) -> bool {
        self.preemption.unwrap_or(self.policy == PoolPolicy::Proportional)
    }

    /// Checks the rules serde cannot; the error names the key (relative to the pool's table).
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.policy == PoolPolicy::FairShare && self.preemption.is_some() {
            return Err(FieldError::new(
                "preemption",
                "means nothing with policy fair_share (its preemption follows node_eviction_probability and the \
                 priority classes); remove it, or choose policy priority or proportional",
            ));
        }
        Ok(())
    }
}

impl SchedulerConfig {
    /// The floating resource called `name`, if one is configured.
    pub fn floating_resource(&self, name: &str) -> Option<&FloatingResourceConfig> {
        self.floating_resources.iter().find(|f| f.name.as_str() == name)
    }

    /// The floating resources `pool` has, with their amounts, in the configuration's order.
    pub fn floating_in_pool(&self, pool: &PoolName) -> Vec<(ResourceName, i64)> {
        self.floating_resources.iter().filter_map(|f| Some((f.name.clone(), f.capacity(pool)?))).collect()
    }

    /// The largest amount of floating resource `name` in any pool (none: not floating).
    pub fn largest_floating(&self, name: &str) -> Option<i64> {
        let f = self.floating_resource(name)?;
        Some(f.pools.keys().filter_map(|p| f.capacity(p)).max().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        SchedulerConfig::default().validate().unwrap();
    }

    #[test]
    fn rejects_bad_keys_by_name() {
        let c = SchedulerConfig { node_eviction_probability: 2.0, ..Default::default() };
        assert_eq!(c.validate().unwrap_err().field, "node_eviction_probability");
        let c = SchedulerConfig { maximum_scheduling_rate: 10.0, ..Default::default() };
        assert_eq!(c.validate().unwrap_err().field, "maximum_scheduling_burst");
        let c =
            SchedulerConfig { default_priority_class: PriorityClassName::new("nope").unwrap(), ..Default::default() };
        assert_eq!(c.validate().unwrap_err().field, "default_priority_class");
    }

    #[test]
    fn parses_partial_yaml() {
        let c: SchedulerConfig =
            serde_yaml_ng::from_str("max_queue_lookback: 5\nschedule_interval_min: 250ms\n").unwrap();
        assert_eq!(c.max_queue_lookback, 5);
        assert_eq!(c.schedule_interval_min, Duration::from_millis(250));
        assert_eq!(c.priority_classes.len(), 2);
        assert!(serde_yaml_ng::from_str::<SchedulerConfig>("bogus_key: 1").is_err());
    }

    #[test]
    fn usage_halftime_reads_text_or_seconds_under_both_names() {
        assert_eq!(SchedulerConfig::default().queue_usage_halftime, Duration::ZERO);
        let c: SchedulerConfig = serde_yaml_ng::from_str("queue_usage_halftime_seconds: 3600\n").unwrap();
        assert_eq!(c.queue_usage_halftime, Duration::from_secs(3600));
        let c: SchedulerConfig = toml::from_str("queue_usage_halftime = \"2h\"\n").unwrap();
        assert_eq!(c.queue_usage_halftime, Duration::from_secs(7200));
        let e = serde_yaml_ng::from_str::<SchedulerConfig>("queue_usage_halftime_seconds: -1\n").unwrap_err();
        assert!(e.to_string().contains("non-negative"), "{e}");
    }
}
