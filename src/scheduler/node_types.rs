//! Node types: nodes that no job of this cycle can tell apart (same executor, taints, cordon and
//! quarantine state, and values of the labels jobs look at) share a type, so constraint matching runs once
//! per (constraints, type) instead of once per (job, node).

use crate::model::placement::untolerated_taint;
use crate::model::{Node, SchedulingRequirements, Taint};
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Pseudo label key for `matchFields` on `metadata.name`.
const NAME_KEY: &str = "\u{0}metadata.name";

#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyMode {
    /// Only these values are ever compared against.
    Values(BTreeSet<String>),
    /// The exact value matters (numeric comparisons, gang uniformity).
    Full,
}

/// Which labels (and which of their values) the cycle's jobs look at.
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelSpec {
    keys: BTreeMap<String, KeyMode>,
}

impl LabelSpec {
    fn add_value(&mut self, key: &str, value: &str) {
        match self.keys.entry(key.to_string()).or_insert_with(|| KeyMode::Values(BTreeSet::new())) {
            KeyMode::Values(v) => {
                v.insert(value.to_string());
            }
            KeyMode::Full => {}
        }
    }

    fn add_key(&mut self, key: &str) {
        self.keys.entry(key.to_string()).or_insert_with(|| KeyMode::Values(BTreeSet::new()));
    }

    /// Makes the exact value of `key` part of the type.
    pub(crate) fn add_full(&mut self, key: &str) {
        self.keys.insert(key.to_string(), KeyMode::Full);
    }

    /// Records the labels a job's constraints look at.
    pub(crate) fn add_constraints(&mut self, r: &SchedulingRequirements) {
        for (k, v) in &r.node_selector {
            self.add_value(k, v);
        }
        if let Some(sel) =
            r.node_affinity.as_ref().and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        {
            for term in &sel.node_selector_terms {
                for req in &term.match_expressions {
                    self.add_requirement(&req.key, req);
                }
                for req in &term.match_fields {
                    self.add_requirement(NAME_KEY, req);
                }
            }
        }
    }

    fn add_requirement(&mut self, key: &str, req: &crate::model::placement::SelectorRequirement) {
        use crate::model::placement::SelectorOperator::*;
        match req.operator {
            In | NotIn => req.values.iter().for_each(|v| self.add_value(key, v)),
            Exists | DoesNotExist => self.add_key(key),
            Gt | Lt => self.add_full(key),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LabelClass<'a> {
    Absent,
    Other,
    Value(&'a str),
}

/// What sets a node's type apart, borrowed from the node (a cycle keys every node of the pool).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TypeKey<'a> {
    executor: &'a str,
    unschedulable: bool,
    quarantined: bool,
    reservation: u32,
    /// Sorted, without duplicates.
    taints: Vec<&'a Taint>,
    labels: Vec<LabelClass<'a>>,
}

/// One node type.
#[derive(Debug, Clone)]
pub(crate) struct NodeType {
    /// A node of this type; its attributes stand for all of them.
    pub rep: u32,
    /// Executor index (see [`NodeTypes::executors`]).
    pub executor: u32,
    pub nodes: u32,
    pub unschedulable: bool,
    /// Under quarantine: like cordoned, no new placements.
    pub quarantined: bool,
}

/// The partition of a pool's nodes into types.
#[derive(Debug, Clone)]
pub(crate) struct NodeTypes {
    pub types: Vec<NodeType>,
    /// Type of each node.
    pub type_of: Vec<u32>,
}

impl NodeTypes {
    /// Partitions `nodes` (already in a deterministic order). `quarantined[i]` says whether node
    /// `i` is under quarantine (an empty slice: none is).
    pub(crate) fn build(nodes: &[&Node], spec: &LabelSpec, quarantined: &[bool]) -> Self {
        Self::build_reserving(nodes, spec, quarantined, &[])
    }

    /// [`Self::build`] with nodes reserved: `reserved[i]` is 0, or 1 + the index of the
    /// reservation holding node `i` ([`super::reservation`]); nodes of different reservations
    /// never share a type (an empty slice: none is reserved).
    pub(crate) fn build_reserving(nodes: &[&Node], spec: &LabelSpec, quarantined: &[bool], reserved: &[u32]) -> Self {
        let executors: BTreeSet<&str> = nodes.iter().map(|n| n.executor.as_str()).collect();
        let exec_index: HashMap<&str, u32> = executors.iter().enumerate().map(|(i, &e)| (e, i as u32)).collect();
        let mut by_key: HashMap<TypeKey, u32> = HashMap::default();
        let mut types = Vec::new();
        let mut type_of = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let mut taints: Vec<&Taint> = n.taints.iter().collect();
            taints.sort();
            taints.dedup();
            let labels = spec
                .keys
                .iter()
                .map(|(k, mode)| {
                    let v = if k == NAME_KEY { Some(n.name.as_str()) } else { n.labels.get(k).map(String::as_str) };
                    match (v, mode) {
                        (None, _) => LabelClass::Absent,
                        (Some(v), KeyMode::Full) => LabelClass::Value(v),
                        (Some(v), KeyMode::Values(vals)) if vals.contains(v) => LabelClass::Value(v),
                        (Some(_), KeyMode::Values(_)) => LabelClass::Other,
                    }
                })
                .collect();
            let in_quarantine = quarantined.get(i).copied().unwrap_or(false);
            let key = TypeKey {
                executor: n.executor.as_str(),
                unschedulable: n.unschedulable,
                quarantined: in_quarantine,
                reservation: reserved.get(i).copied().unwrap_or(0),
                taints,
                labels,
            };
            let t = *by_key.entry(key).or_insert_with(|| {
                types.push(NodeType {
                    rep: i as u32,
                    executor: exec_index.get(n.executor.as_str()).copied().unwrap_or(0),
                    nodes: 0,
                    unschedulable: n.unschedulable,
                    quarantined: in_quarantine,
                });
                (types.len() - 1) as u32
            });
            types[t as usize].nodes += 1;
            type_of.push(t);
        }
        NodeTypes { types, type_of }
    }

    /// Types whose nodes accept a job with these constraints (cordoned and quarantined types
    /// never do).
    pub(crate) fn matching(&self, nodes: &[&Node], r: &SchedulingRequirements) -> Vec<u32> {
        (0..self.types.len() as u32)
            .filter(|&t| {
                let ty = &self.types[t as usize];
                !ty.unschedulable && !ty.quarantined && mismatch(nodes[ty.rep as usize], r).is_none()
            })
            .collect()
    }

    /// Why no node accepts the constraints, as counts per cause.
    pub(crate) fn describe_mismatch(&self, nodes: &[&Node], r: &SchedulingRequirements) -> String {
        let mut causes: BTreeMap<String, u32> = BTreeMap::new();
        for ty in &self.types {
            let cause = if ty.unschedulable {
                "cordoned".to_string()
            } else if ty.quarantined {
                "quarantined (too many failures of the node)".to_string()
            } else {
                mismatch(nodes[ty.rep as usize], r).unwrap_or_else(|| "no room".to_string())
            };
            *causes.entry(cause).or_default() += ty.nodes;
        }
        let mut out = String::new();
        for (i, (cause, count)) in causes.iter().enumerate() {
            if i > 0 {
                out.push_str("; ");
            }
            let _ = write!(out, "{count} node{} {cause}", if *count == 1 { "" } else { "s" });
        }
        if out.is_empty() {
            out.push_str("the pool has no nodes");
        }
        out
    }

    /// The value of label `key` on nodes of type `t`.
    pub(crate) fn label<'a>(&self, nodes: &[&'a Node], t: u32, key: &str) -> Option<&'a str> {
        nodes[self.types[t as usize].rep as usize].labels.get(key).map(String::as_str)
    }
}

/// The first constraint `node` breaks, described for a human; `None` if it accepts the job.
pub(crate) fn mismatch(node: &Node, r: &SchedulingRequirements) -> Option<String> {
    if let Some(t) = untolerated_taint(&node.taints, &r.tolerations) {
        return Some(format!("have untolerated taint {}={}:{:?}", t.key, t.value, t.effect));
    }
    if let Some((k, v)) = r.node_selector.iter().find(|(k, v)| node.labels.get(*k) != Some(*v)) {
        return Some(format!("do not match node selector {k}={v}"));
    }
    if let Some(a) = &r.node_affinity
        && !a.matches(node.name.as_str(), &node.labels)
    {
        return Some("do not match the required node affinity".to_string());
    }
    None
}

#[cfg(test)]
pub(crate) fn labels(pairs: &[(&str, &str)]) -> crate::model::Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ExecutorName, NodeName, PoolName, Resources, TaintEffect, Toleration};

    fn node(name: &str, exec: &str, l: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            name: NodeName::new(name).unwrap(),
            executor: ExecutorName::new(exec).unwrap(),
            pool: PoolName::default_pool(),
            labels: labels(l),
            taints,
            allocatable: Resources::parse([("cpu", "1")]).unwrap(),
            unallocatable: Resources::new(),
            unschedulable: false,
        }
    }

    #[test]
    fn unreferenced_labels_do_not_split_types() {
        let ns = [
            node("a", "e", &[("kubernetes.io/hostname", "a"), ("rack", "r1")], vec![]),
            node("b", "e", &[("kubernetes.io/hostname", "b"), ("rack", "r2")], vec![]),
            node("c", "e", &[("kubernetes.io/hostname", "c"), ("rack", "r3")], vec![]),
        ];
        let refs: Vec<&Node> = ns.iter().collect();
        let mut spec = LabelSpec::default();
        let req = SchedulingRequirements { node_selector: labels(&[("rack", "r1")]), ..Default::default() };
        spec.add_constraints(&req);
        let types = NodeTypes::build(&refs, &spec, &[]);
        // r1 is referenced; r2 and r3 are both "other".
        assert_eq!(types.types.len(), 2);
        assert_eq!(types.matching(&refs, &req), vec![0]);
        let any = SchedulingRequirements::default();
        assert_eq!(types.matching(&refs, &any), vec![0, 1]);
    }

    #[test]
    fn quarantined_nodes_match_nothing_and_say_why() {
        let ns = [node("a", "e", &[], vec![]), node("b", "e", &[], vec![]), node("c", "e", &[], vec![])];
        let refs: Vec<&Node> = ns.iter().collect();
        let any = SchedulingRequirements::default();
        let types = NodeTypes::build(&refs, &LabelSpec::default(), &[false, true, false]);
        // a and c share a type; b, quarantined, has its own, which no job may use.
        assert_eq!(types.types.len(), 2);
        assert_eq!(types.type_of, vec![0, 1, 0]);
        assert_eq!(types.matching(&refs, &any), vec![0]);
        let all = NodeTypes::build(&refs, &LabelSpec::default(), &[true, true, true]);
        assert!(all.matching(&refs, &any).is_empty());
        assert_eq!(all.describe_mismatch(&refs, &any), "3 nodes quarantined (too many failures of the node)");
    }

    #[test]
    fn taints_and_reasons() {
        let gpu = Taint { key: "gpu".into(), value: "true".into(), effect: TaintEffect::NoSchedule };
        let ns = [node("a", "e", &[], vec![gpu.clone()]), node("b", "e", &[], vec![gpu])];
        let refs: Vec<&Node> = ns.iter().collect();
        let types = NodeTypes::build(&refs, &LabelSpec::default(), &[]);
        assert_eq!(types.types.len(), 1);
        let plain = SchedulingRequirements::default();
        assert!(types.matching(&refs, &plain).is_empty());
        assert_eq!(types.describe_mismatch(&refs, &plain), "2 nodes have untolerated taint gpu=true:NoSchedule");
        let tol = SchedulingRequirements {
            tolerations: vec![Toleration { key: "gpu".into(), value: "true".into(), ..Default::default() }],
            ..Default::default()
        };
        assert_eq!(types.matching(&refs, &tol), vec![0]);
    }
}
