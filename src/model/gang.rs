//! Gangs: jobs that must be scheduled together, described by annotations.

use super::queue::FieldError;
use std::collections::BTreeMap;

/// Annotation prefixes accepted for gang settings (Convoy's own and Armada's).
const PREFIXES: [&str; 2] = ["convoy.io/", "armadaproject.io/"];

/// A job's gang membership.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GangSpec {
    /// Gang id, unique within the queue.
    pub id: String,
    /// Number of members.
    pub cardinality: u32,
    /// The gang is placed if at least this many members fit; the others fail.
    pub min_cardinality: u32,
    /// All members go to nodes with the same value of this label.
    pub node_uniformity_label: Option<String>,
}

fn lookup<'a>(ann: &'a BTreeMap<String, String>, key: &str) -> Option<(String, &'a str)> {
    PREFIXES.iter().find_map(|p| {
        let full = format!("{p}{key}");
        ann.get(&full).map(|v| (full, v.as_str()))
    })
}

impl GangSpec {
    /// Reads gang annotations. No `gang-id` → not a gang. A gang id without a cardinality is a
    /// gang of one.
    pub fn from_annotations(ann: &BTreeMap<String, String>) -> Result<Option<GangSpec>, FieldError> {
        if !ann.keys().any(|k| k.contains("/gang-")) {
            return Ok(None);
        }
        let Some((_, id)) = lookup(ann, "gang-id") else {
            for k in ["gang-cardinality", "gang-minimum-cardinality", "gang-node-uniformity-label"] {
                if let Some((full, _)) = lookup(ann, k) {
                    return Err(FieldError::new(format!("annotations.{full}"), "is set but gang-id is not"));
                }
            }
            return Ok(None);
        };
        if id.is_empty() || id.len() > 253 {
            return Err(FieldError::new("annotations.convoy.io/gang-id", "must be 1-253 characters"));
        }
        let parse = |key: &str| -> Result<Option<u32>, FieldError> {
            match lookup(ann, key) {
                None => Ok(None),
                Some((full, v)) => v.trim().parse::<u32>().ok().filter(|n| *n >= 1).map(Some).ok_or_else(|| {
                    FieldError::new(format!("annotations.{full}"), format!("must be an integer >= 1, got {v:?}"))
                }),
            }
        };
        let cardinality = parse("gang-cardinality")?.unwrap_or(1);
        let min_cardinality = parse("gang-minimum-cardinality")?.unwrap_or(cardinality);
        if min_cardinality > cardinality {
            return Err(FieldError::new(
                "annotations.convoy.io/gang-minimum-cardinality",
                format!("{min_cardinality} is above the gang cardinality {cardinality}"),
            ));
        }
        let node_uniformity_label = lookup(ann, "gang-node-uniformity-label").map(|(_, v)| v.to_string());
        if node_uniformity_label.as_deref() == Some("") {
            return Err(FieldError::new("annotations.convoy.io/gang-node-uniformity-label", "must not be empty"));
        }
        Ok(Some(GangSpec { id: id.to_string(), cardinality, min_cardinality, node_uniformity_label }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parses_both_spellings() {
        let g = GangSpec::from_annotations(&ann(&[("convoy.io/gang-id", "g1"), ("convoy.io/gang-cardinality", "4")]))
            .unwrap()
            .unwrap();
        assert_eq!((g.cardinality, g.min_cardinality), (4, 4));
        let g = GangSpec::from_annotations(&ann(&[
            ("armadaproject.io/gang-id", "g1"),
            ("armadaproject.io/gang-cardinality", "4"),
            ("armadaproject.io/gang-minimum-cardinality", "2"),
            ("armadaproject.io/gang-node-uniformity-label", "rack"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((g.cardinality, g.min_cardinality, g.node_uniformity_label.as_deref()), (4, 2, Some("rack")));
        assert_eq!(GangSpec::from_annotations(&ann(&[])).unwrap(), None);
    }

    #[test]
    fn rejects_bad_values() {
        let e = GangSpec::from_annotations(&ann(&[("convoy.io/gang-id", "g"), ("convoy.io/gang-cardinality", "x")]))
            .unwrap_err();
        assert_eq!(e.field, "annotations.convoy.io/gang-cardinality");
        let e = GangSpec::from_annotations(&ann(&[
            ("convoy.io/gang-id", "g"),
            ("convoy.io/gang-cardinality", "2"),
            ("convoy.io/gang-minimum-cardinality", "3"),
        ]))
        .unwrap_err();
        assert!(e.message.contains("above"));
        assert!(GangSpec::from_annotations(&ann(&[("convoy.io/gang-cardinality", "2")])).is_err());
    }
}
