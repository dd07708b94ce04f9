//! Gangs: jobs that must be scheduled together, described by annotations (Convoy's
//! `convoy.io/gang-*` or Armada's `armadaproject.io/gang*` spellings, see [`super::annotations`]).

use super::annotations::{self, GANG_CARDINALITY, GANG_ID, GANG_MINIMUM_CARDINALITY, GANG_NODE_UNIFORMITY_LABEL};
use super::queue::FieldError;
use std::collections::BTreeMap;

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

impl GangSpec {
    /// Reads gang annotations. No gang id → not a gang. A gang id without a cardinality is a
    /// gang of one. Errors name the annotation as it was spelled; a misspelled gang annotation
    /// (e.g. `armadaproject.io/gang-id`) is refused, naming the right spelling.
    pub fn from_annotations(ann: &BTreeMap<String, String>) -> Result<Option<GangSpec>, FieldError> {
        annotations::check_spellings(ann)?;
        let Some((id_key, id)) = annotations::lookup(ann, GANG_ID)? else {
            for s in [GANG_CARDINALITY, GANG_MINIMUM_CARDINALITY, GANG_NODE_UNIFORMITY_LABEL] {
                if let Some((key, _)) = annotations::lookup(ann, s)? {
                    return Err(FieldError::new(
                        format!("annotations.{key}"),
                        format!("is set but the gang id ({} or {}) is not", GANG_ID.convoy, GANG_ID.armada),
                    ));
                }
            }
            return Ok(None);
        };
        if id.is_empty() || id.len() > 253 {
            return Err(FieldError::new(format!("annotations.{id_key}"), "must be 1-253 characters"));
        }
        let parse = |s| -> Result<Option<(&'static str, u32)>, FieldError> {
            match annotations::lookup(ann, s)? {
                None => Ok(None),
                Some((key, v)) => {
                    v.trim().parse::<u32>().ok().filter(|n| *n >= 1).map(|n| Some((key, n))).ok_or_else(|| {
                        FieldError::new(format!("annotations.{key}"), format!("must be an integer >= 1, got {v:?}"))
                    })
                }
            }
        };
        let cardinality = parse(GANG_CARDINALITY)?.map_or(1, |(_, n)| n);
        let (min_key, min_cardinality) = parse(GANG_MINIMUM_CARDINALITY)?.unwrap_or(("", cardinality));
        if min_cardinality > cardinality {
            return Err(FieldError::new(
                format!("annotations.{min_key}"),
                format!("{min_cardinality} is above the gang cardinality {cardinality}"),
            ));
        }
        let node_uniformity_label = match annotations::lookup(ann, GANG_NODE_UNIFORMITY_LABEL)? {
            Some((key, "")) => return Err(FieldError::new(format!("annotations.{key}"), "must not be empty")),
            Some((_, v)) => Some(v.to_string()),
            None => None,
        };
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
        // Armada's spellings, exactly as its clients send them.
        let g = GangSpec::from_annotations(&ann(&[
            ("armadaproject.io/gangId", "g1"),
            ("armadaproject.io/gangCardinality", "4"),
            ("armadaproject.io/gangMinimumCardinality", "2"),
            ("armadaproject.io/gangNodeUniformityLabel", "rack"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            g,
            GangSpec {
                id: "g1".into(),
                cardinality: 4,
                min_cardinality: 2,
                node_uniformity_label: Some("rack".into())
            }
        );
        // Mixed spellings, and the same setting in both with the same value.
        let g = GangSpec::from_annotations(&ann(&[
            ("convoy.io/gang-id", "g1"),
            ("armadaproject.io/gangId", "g1"),
            ("armadaproject.io/gangCardinality", "3"),
            ("convoy.io/gang-minimum-cardinality", "1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((g.id.as_str(), g.cardinality, g.min_cardinality), ("g1", 3, 1));
        assert_eq!(GangSpec::from_annotations(&ann(&[])).unwrap(), None);
        // failFast alone does not make a gang.
        assert_eq!(GangSpec::from_annotations(&ann(&[("armadaproject.io/failFast", "true")])).unwrap(), None);
    }

    #[test]
    fn rejects_bad_values_naming_the_annotation() {
        let e = GangSpec::from_annotations(&ann(&[("convoy.io/gang-id", "g"), ("convoy.io/gang-cardinality", "x")]))
            .unwrap_err();
        assert_eq!(e.field, "annotations.convoy.io/gang-cardinality");
        let e = GangSpec::from_annotations(&ann(&[
            ("armadaproject.io/gangId", "g"),
            ("armadaproject.io/gangCardinality", "0"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangCardinality");
        assert_eq!(e.message, "must be an integer >= 1, got \"0\"");
        let e = GangSpec::from_annotations(&ann(&[
            ("armadaproject.io/gangId", "g"),
            ("armadaproject.io/gangCardinality", "2"),
            ("armadaproject.io/gangMinimumCardinality", "3"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangMinimumCardinality");
        assert_eq!(e.message, "3 is above the gang cardinality 2");
        let e = GangSpec::from_annotations(&ann(&[("armadaproject.io/gangId", "")])).unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangId");
        let e = GangSpec::from_annotations(&ann(&[
            ("armadaproject.io/gangId", "g"),
            ("armadaproject.io/gangNodeUniformityLabel", ""),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangNodeUniformityLabel");
        let e = GangSpec::from_annotations(&ann(&[("armadaproject.io/gangCardinality", "2")])).unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangCardinality");
        assert!(e.message.contains("gang id"), "{}", e.message);
    }

    #[test]
    fn conflicting_spellings_are_refused() {
        let e = GangSpec::from_annotations(&ann(&[
            ("convoy.io/gang-id", "g"),
            ("armadaproject.io/gangId", "g"),
            ("convoy.io/gang-cardinality", "2"),
            ("armadaproject.io/gangCardinality", "3"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangCardinality");
        assert!(e.message.contains("convoy.io/gang-cardinality is \"2\""), "{}", e.message);
    }

    #[test]
    fn the_old_kebab_case_armada_spellings_are_refused() {
        // These were accepted before and are not Armada's: refused, naming the right key, so that
        // a gang never silently runs as independent jobs.
        let e = GangSpec::from_annotations(&ann(&[
            ("armadaproject.io/gang-id", "g1"),
            ("armadaproject.io/gang-cardinality", "4"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gang-cardinality");
        assert!(e.message.ends_with("spelled armadaproject.io/gangCardinality"), "{}", e.message);
    }
}
