//! Stored placement constraints: taints (of nodes), tolerations and required node affinity (of
//! jobs). The domain types in `model::placement` are also read from Kubernetes JSON; these are
//! not, so the two can evolve apart.

use crate::model::placement::{
    NodeSelector, NodeSelectorTerm, SelectorOperator, SelectorRequirement, TolerationOperator,
};
use crate::model::{NodeAffinity, Taint, TaintEffect, Toleration};
use serde::{Deserialize, Serialize};

/// Effect of a taint. Format: state schema 2, log format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaintEffectRecord {
    /// Jobs that do not tolerate it are not placed.
    NoSchedule,
    /// A preference only.
    PreferNoSchedule,
    /// Jobs that do not tolerate it are not placed (and would be evicted in Kubernetes).
    NoExecute,
}

impl From<TaintEffect> for TaintEffectRecord {
    fn from(e: TaintEffect) -> Self {
        match e {
            TaintEffect::NoSchedule => Self::NoSchedule,
            TaintEffect::PreferNoSchedule => Self::PreferNoSchedule,
            TaintEffect::NoExecute => Self::NoExecute,
        }
    }
}

impl From<TaintEffectRecord> for TaintEffect {
    fn from(e: TaintEffectRecord) -> Self {
        match e {
            TaintEffectRecord::NoSchedule => Self::NoSchedule,
            TaintEffectRecord::PreferNoSchedule => Self::PreferNoSchedule,
            TaintEffectRecord::NoExecute => Self::NoExecute,
        }
    }
}

/// A node taint. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintRecord {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// What the taint does to jobs that do not tolerate it.
    pub effect: TaintEffectRecord,
}

impl From<Taint> for TaintRecord {
    fn from(t: Taint) -> Self {
        let Taint { key, value, effect } = t;
        TaintRecord { key, value, effect: effect.into() }
    }
}

impl From<TaintRecord> for Taint {
    fn from(t: TaintRecord) -> Self {
        let TaintRecord { key, value, effect } = t;
        Taint { key, value, effect: effect.into() }
    }
}

/// How a toleration matches a taint's value. Format: state schema 2, log format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TolerationOperatorRecord {
    /// Key and value must be equal.
    Equal,
    /// The key must exist (any value).
    Exists,
}

/// A job's toleration of taints. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TolerationRecord {
    /// Taint key (empty with `Exists`: every taint).
    pub key: String,
    /// How the value is compared.
    pub operator: TolerationOperatorRecord,
    /// Taint value to match.
    pub value: String,
    /// Only taints of this effect (`None`: every effect).
    pub effect: Option<TaintEffectRecord>,
}

impl From<Toleration> for TolerationRecord {
    fn from(t: Toleration) -> Self {
        let Toleration { key, operator, value, effect } = t;
        let operator = match operator {
            TolerationOperator::Equal => TolerationOperatorRecord::Equal,
            TolerationOperator::Exists => TolerationOperatorRecord::Exists,
        };
        TolerationRecord { key, operator, value, effect: effect.map(Into::into) }
    }
}

impl From<TolerationRecord> for Toleration {
    fn from(t: TolerationRecord) -> Self {
        let TolerationRecord { key, operator, value, effect } = t;
        let operator = match operator {
            TolerationOperatorRecord::Equal => TolerationOperator::Equal,
            TolerationOperatorRecord::Exists => TolerationOperator::Exists,
        };
        Toleration { key, operator, value, effect: effect.map(Into::into) }
    }
}

/// Operator of a node selector requirement. Format: state schema 2, log format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperatorRecord {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label exists.
    Exists,
    /// The label does not exist.
    DoesNotExist,
    /// The label's value, as an integer, is greater than the one value.
    Gt,
    /// The label's value, as an integer, is less than the one value.
    Lt,
}

/// One requirement on a node label or field. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorRequirementRecord {
    /// Label key (or `metadata.name` in match fields).
    pub key: String,
    /// How the values are compared.
    pub operator: SelectorOperatorRecord,
    /// Values to compare with.
    pub values: Vec<String>,
}

impl From<SelectorRequirement> for SelectorRequirementRecord {
    fn from(r: SelectorRequirement) -> Self {
        let SelectorRequirement { key, operator, values } = r;
        let operator = match operator {
            SelectorOperator::In => SelectorOperatorRecord::In,
            SelectorOperator::NotIn => SelectorOperatorRecord::NotIn,
            SelectorOperator::Exists => SelectorOperatorRecord::Exists,
            SelectorOperator::DoesNotExist => SelectorOperatorRecord::DoesNotExist,
            SelectorOperator::Gt => SelectorOperatorRecord::Gt,
            SelectorOperator::Lt => SelectorOperatorRecord::Lt,
        };
        SelectorRequirementRecord { key, operator, values }
    }
}

impl From<SelectorRequirementRecord> for SelectorRequirement {
    fn from(r: SelectorRequirementRecord) -> Self {
        let SelectorRequirementRecord { key, operator, values } = r;
        let operator = match operator {
            SelectorOperatorRecord::In => SelectorOperator::In,
            SelectorOperatorRecord::NotIn => SelectorOperator::NotIn,
            SelectorOperatorRecord::Exists => SelectorOperator::Exists,
            SelectorOperatorRecord::DoesNotExist => SelectorOperator::DoesNotExist,
            SelectorOperatorRecord::Gt => SelectorOperator::Gt,
            SelectorOperatorRecord::Lt => SelectorOperator::Lt,
        };
        SelectorRequirement { key, operator, values }
    }
}

/// A node selector term: every requirement must hold. Format: state schema 2, log format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSelectorTermRecord {
    /// Requirements on node labels.
    pub match_expressions: Vec<SelectorRequirementRecord>,
    /// Requirements on node fields (`metadata.name`).
    pub match_fields: Vec<SelectorRequirementRecord>,
}

/// Required node affinity: a node must satisfy one of the terms. Format: state schema 2, log
/// format 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAffinityRecord {
    /// The required terms (ORed); `None` when the affinity has no required part.
    pub required_terms: Option<Vec<NodeSelectorTermRecord>>,
}

impl From<NodeAffinity> for NodeAffinityRecord {
    fn from(a: NodeAffinity) -> Self {
        let NodeAffinity { required_during_scheduling_ignored_during_execution: required } = a;
        let required_terms = required.map(|NodeSelector { node_selector_terms }| {
            node_selector_terms
                .into_iter()
                .map(|NodeSelectorTerm { match_expressions, match_fields }| NodeSelectorTermRecord {
                    match_expressions: match_expressions.into_iter().map(Into::into).collect(),
                    match_fields: match_fields.into_iter().map(Into::into).collect(),
                })
                .collect()
        });
        NodeAffinityRecord { required_terms }
    }
}

impl From<NodeAffinityRecord> for NodeAffinity {
    fn from(a: NodeAffinityRecord) -> Self {
        let required = a.required_terms.map(|terms| NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|NodeSelectorTermRecord { match_expressions, match_fields }| NodeSelectorTerm {
                    match_expressions: match_expressions.into_iter().map(Into::into).collect(),
                    match_fields: match_fields.into_iter().map(Into::into).collect(),
                })
                .collect(),
        });
        NodeAffinity { required_during_scheduling_ignored_during_execution: required }
    }
}
