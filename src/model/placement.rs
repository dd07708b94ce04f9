//! Kubernetes-style placement constraints: taints, tolerations, node selectors and required node
//! affinity, with the matching rules the Kubernetes scheduler applies.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Node labels.
pub type Labels = BTreeMap<String, String>;

/// Effect of a taint: `NoSchedule` and `NoExecute` keep jobs that do not tolerate it off the node;
/// `PreferNoSchedule` is only a preference, which Convoy does not act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum TaintEffect {
    /// Jobs that do not tolerate the taint are not placed on the node.
    NoSchedule,
    /// A preference only: Convoy places jobs on the node regardless.
    PreferNoSchedule,
    /// Like `NoSchedule` for placement; Convoy does not evict running jobs for it (Kubernetes
    /// may).
    NoExecute,
}

/// A node taint: jobs that do not tolerate it are not placed on the node (unless the effect is
/// only `PreferNoSchedule`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Taint {
    /// Taint key, e.g. `nvidia.com/gpu`.
    pub key: String,
    /// Taint value (default empty).
    #[serde(default)]
    pub value: String,
    /// What the taint does to jobs that do not tolerate it.
    pub effect: TaintEffect,
}

/// How a toleration matches a taint's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Key and value must both match (the default).
    #[default]
    Equal,
    /// The key must match, with any value.
    Exists,
}

/// A job's toleration of taints.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Toleration {
    /// Empty key with `Exists` tolerates everything.
    #[serde(default)]
    pub key: String,
    /// How the taint is matched (default `Equal`).
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value to match with `Equal`; ignored with `Exists`.
    #[serde(default)]
    pub value: String,
    /// `None` tolerates every effect.
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// True if this toleration tolerates `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(e) = self.effect
            && e != taint.effect
        {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint with a scheduling effect that none of `tolerations` tolerates.
pub(crate) fn untolerated_taint<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// Operator of a node selector requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent, or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's value, as an integer, is greater than the one value.
    Gt,
    /// The label's value, as an integer, is less than the one value.
    Lt,
}

/// One requirement on a node label (or, in `matchFields`, on `metadata.name`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SelectorRequirement {
    /// Label key (`metadata.name` in `matchFields`).
    pub key: String,
    /// How the label is compared with `values`.
    pub operator: SelectorOperator,
    /// At least one for `In` and `NotIn`, none for `Exists` and `DoesNotExist`, one integer for
    /// `Gt` and `Lt`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl SelectorRequirement {
    /// True if a node with label value `value` (None = label absent) satisfies the requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt { v > bound } else { v < bound }
            }
        }
    }

    /// Checks the rules Kubernetes applies to a requirement's values.
    pub fn validate(&self) -> Result<(), String> {
        match self.operator {
            SelectorOperator::In | SelectorOperator::NotIn if self.values.is_empty() => {
                Err(format!("requirement on {:?}: operator {:?} needs at least one value", self.key, self.operator))
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if !self.values.is_empty() => {
                Err(format!("requirement on {:?}: operator {:?} takes no values", self.key, self.operator))
            }
            SelectorOperator::Gt | SelectorOperator::Lt
                if self.values.len() != 1 || self.values[0].parse::<i64>().is_err() =>
            {
                Err(format!(
                    "requirement on {:?}: operator {:?} needs exactly one integer value",
                    self.key, self.operator
                ))
            }
            _ if self.key.is_empty() => Err("requirement with an empty key".to_string()),
            _ => Ok(()),
        }
    }
}

/// A node selector term: all expressions and fields must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    /// Requirements on the node's labels.
    #[serde(default)]
    pub match_expressions: Vec<SelectorRequirement>,
    /// Only `metadata.name` is supported, as in Kubernetes.
    #[serde(default)]
    pub match_fields: Vec<SelectorRequirement>,
}

impl NodeSelectorTerm {
    /// True if a node with `name` and `labels` satisfies every requirement of the term.
    pub fn matches(&self, name: &str, labels: &Labels) -> bool {
        self.match_expressions.iter().all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self.match_fields.iter().all(|r| r.key == "metadata.name" && r.matches(Some(name)))
    }
}

/// The required part of a Kubernetes node selector (terms are ORed).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    /// Terms, one of which must match; none at all matches every node.
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// Kubernetes `NodeAffinity`; only the required terms constrain placement.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    /// What a node must satisfy for the job to be placed on it; a running job is not moved when
    /// its node stops satisfying it.
    #[serde(default)]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
}

impl NodeAffinity {
    /// True if the node satisfies at least one required term (or there are none).
    pub fn matches(&self, name: &str, labels: &Labels) -> bool {
        match &self.required_during_scheduling_ignored_during_execution {
            None => true,
            Some(sel) if sel.node_selector_terms.is_empty() => true,
            Some(sel) => sel.node_selector_terms.iter().any(|t| t.matches(name, labels)),
        }
    }

    /// Validates every requirement.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(sel) = &self.required_during_scheduling_ignored_during_execution {
            for t in &sel.node_selector_terms {
                for r in t.match_expressions.iter().chain(&t.match_fields) {
                    r.validate()?;
                }
                if let Some(f) = t.match_fields.iter().find(|f| f.key != "metadata.name") {
                    return Err(format!("matchFields key {:?} is not supported (only metadata.name)", f.key));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(p: &[(&str, &str)]) -> Labels {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn tolerations() {
        let t = Taint { key: "gpu".into(), value: "true".into(), effect: TaintEffect::NoSchedule };
        let eq = Toleration {
            key: "gpu".into(),
            operator: TolerationOperator::Equal,
            value: "true".into(),
            effect: Some(TaintEffect::NoSchedule),
        };
        let wrong_val = Toleration { value: "false".into(), ..eq.clone() };
        let exists_any = Toleration { key: String::new(), operator: TolerationOperator::Exists, ..Default::default() };
        let wrong_effect = Toleration { effect: Some(TaintEffect::NoExecute), ..eq.clone() };
        assert!(eq.tolerates(&t));
        assert!(!wrong_val.tolerates(&t));
        assert!(exists_any.tolerates(&t));
        assert!(!wrong_effect.tolerates(&t));
        let soft = Taint { effect: TaintEffect::PreferNoSchedule, ..t.clone() };
        assert_eq!(untolerated_taint(std::slice::from_ref(&soft), &[]), None);
        assert_eq!(untolerated_taint(std::slice::from_ref(&t), &[]), Some(&t));
    }

    #[test]
    fn affinity_terms() {
        let aff: NodeAffinity = serde_json::from_str(
            r#"{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
                {"matchExpressions":[{"key":"rack","operator":"NotIn","values":["r2"]},{"key":"cores","operator":"Gt","values":["8"]}]},
                {"matchFields":[{"key":"metadata.name","operator":"In","values":["special"]}]}]}}"#,
        )
        .unwrap();
        assert!(aff.validate().is_ok());
        assert!(aff.matches("n1", &labels(&[("rack", "r1"), ("cores", "16")])));
        assert!(!aff.matches("n1", &labels(&[("rack", "r2"), ("cores", "16")])));
        assert!(!aff.matches("n1", &labels(&[("rack", "r1"), ("cores", "8")])));
        assert!(aff.matches("special", &labels(&[("rack", "r2")])));
        let bad = SelectorRequirement { key: "a".into(), operator: SelectorOperator::In, values: vec![] };
        assert!(bad.validate().is_err());
    }
}
