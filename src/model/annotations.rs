//! The job annotations Convoy acts on, in both spellings it accepts: its own (`convoy.io/…`,
//! kebab-case) and Armada's (`armadaproject.io/…`, camelCase, exactly as Armada's clients send
//! them). A setting may be given in either spelling, or in both with the same value.
//!
//! A key that is one of these spelled differently (`armadaproject.io/gang-id`,
//! `convoy.io/gangId`, `armadaproject.io/failfast`) is refused with the right spelling: Armada
//! would ignore it, and a gang that silently runs as independent jobs is worse than an error.

use super::queue::FieldError;
use std::collections::BTreeMap;

/// One setting and its two spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setting {
    /// Convoy's key.
    pub convoy: &'static str,
    /// Armada's key.
    pub armada: &'static str,
}

/// Gang id: jobs of a queue with the same value form one gang.
pub(crate) const GANG_ID: Setting = Setting { convoy: "convoy.io/gang-id", armada: "armadaproject.io/gangId" };
/// Number of members of the gang.
pub(crate) const GANG_CARDINALITY: Setting =
    Setting { convoy: "convoy.io/gang-cardinality", armada: "armadaproject.io/gangCardinality" };
/// Fewest members that may be placed (the rest fail).
pub(crate) const GANG_MINIMUM_CARDINALITY: Setting =
    Setting { convoy: "convoy.io/gang-minimum-cardinality", armada: "armadaproject.io/gangMinimumCardinality" };
/// Label whose value must be the same on the nodes of all members.
pub(crate) const GANG_NODE_UNIFORMITY_LABEL: Setting =
    Setting { convoy: "convoy.io/gang-node-uniformity-label", armada: "armadaproject.io/gangNodeUniformityLabel" };
/// `true`: a run that is lost (it never started on its node, or its node went away) fails the
/// job instead of sending it back to the queue.
pub(crate) const FAIL_FAST: Setting = Setting { convoy: "convoy.io/fail-fast", armada: "armadaproject.io/failFast" };

/// Every setting Convoy reads from annotations.
pub(crate) const ALL: [Setting; 5] =
    [GANG_ID, GANG_CARDINALITY, GANG_MINIMUM_CARDINALITY, GANG_NODE_UNIFORMITY_LABEL, FAIL_FAST];

/// A key with case, `-` and `_` ignored: how near misses are recognised.
fn folded(key: &str) -> String {
    key.chars().filter(|c| *c != '-' && *c != '_').flat_map(char::to_lowercase).collect()
}

/// Refuses keys that spell one of [`ALL`] differently (case, dashes, underscores), naming the
/// right spelling. Runs in time linear in the number of annotations.
pub(crate) fn check_spellings(ann: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for key in ann.keys() {
        // Only the two prefixes can hold a near miss; skip everything else cheaply.
        if !(key.starts_with("convoy.io/") || key.starts_with("armadaproject.io/")) {
            continue;
        }
        let f = folded(key);
        for s in ALL {
            for right in [s.convoy, s.armada] {
                if key != right && f == folded(right) {
                    return Err(FieldError::new(
                        format!("annotations.{key}"),
                        format!("is not an annotation Convoy or Armada reads; the key is spelled {right}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The value of `setting`, with the key it was read from (Convoy's if both are set). Both
/// spellings set to different values is an error naming Armada's key.
pub(crate) fn lookup(ann: &BTreeMap<String, String>, s: Setting) -> Result<Option<(&'static str, &str)>, FieldError> {
    match (ann.get(s.convoy), ann.get(s.armada)) {
        (None, None) => Ok(None),
        (Some(v), None) => Ok(Some((s.convoy, v))),
        (None, Some(v)) => Ok(Some((s.armada, v))),
        (Some(c), Some(a)) if c.trim() == a.trim() => Ok(Some((s.convoy, c))),
        (Some(c), Some(a)) => Err(FieldError::new(
            format!("annotations.{}", s.armada),
            format!("is {a:?} but {} is {c:?}: set one of the two, or both to the same value", s.convoy),
        )),
    }
}

/// Whether a job fails at once when a run is lost ([`FAIL_FAST`]): `true` or `false` (any case;
/// absent means false).
pub(crate) fn fail_fast(ann: &BTreeMap<String, String>) -> Result<bool, FieldError> {
    let Some((key, v)) = lookup(ann, FAIL_FAST)? else { return Ok(false) };
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(FieldError::new(format!("annotations.{key}"), format!("must be \"true\" or \"false\", got {v:?}"))),
    }
}

/// [`fail_fast`] on annotations that were validated at submission: a value that does not read
/// as `true` is false (as Armada reads it).
pub(crate) fn is_fail_fast(ann: &BTreeMap<String, String>) -> bool {
    fail_fast(ann).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn near_misses_name_the_right_spelling() {
        for (wrong, right) in [
            ("armadaproject.io/gang-id", "armadaproject.io/gangId"),
            ("armadaproject.io/gang-cardinality", "armadaproject.io/gangCardinality"),
            ("armadaproject.io/gang-minimum-cardinality", "armadaproject.io/gangMinimumCardinality"),
            ("armadaproject.io/gang-node-uniformity-label", "armadaproject.io/gangNodeUniformityLabel"),
            ("armadaproject.io/gangid", "armadaproject.io/gangId"),
            ("armadaproject.io/failfast", "armadaproject.io/failFast"),
            ("armadaproject.io/fail-fast", "armadaproject.io/failFast"),
            ("convoy.io/gangId", "convoy.io/gang-id"),
            ("convoy.io/gang_cardinality", "convoy.io/gang-cardinality"),
            ("convoy.io/failFast", "convoy.io/fail-fast"),
        ] {
            let e = check_spellings(&ann(&[(wrong, "x")])).unwrap_err();
            assert_eq!(e.field, format!("annotations.{wrong}"));
            assert!(e.message.ends_with(&format!("the key is spelled {right}")), "{wrong}: {}", e.message);
        }
        let right: Vec<(&str, &str)> = ALL.iter().flat_map(|s| [(s.convoy, "1"), (s.armada, "1")]).collect();
        check_spellings(&ann(&right)).unwrap();
        // Other keys under the prefixes are not Convoy's business.
        check_spellings(&ann(&[("armadaproject.io/gangSize", "3"), ("convoy.io/team", "x")])).unwrap();
    }

    #[test]
    fn both_spellings_must_agree() {
        let a = ann(&[("convoy.io/gang-id", "g"), ("armadaproject.io/gangId", "g")]);
        assert_eq!(lookup(&a, GANG_ID).unwrap(), Some(("convoy.io/gang-id", "g")));
        let a = ann(&[("armadaproject.io/gangId", "g")]);
        assert_eq!(lookup(&a, GANG_ID).unwrap(), Some(("armadaproject.io/gangId", "g")));
        let a = ann(&[("convoy.io/gang-id", "g"), ("armadaproject.io/gangId", "h")]);
        let e = lookup(&a, GANG_ID).unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/gangId");
        assert_eq!(e.message, "is \"h\" but convoy.io/gang-id is \"g\": set one of the two, or both to the same value");
    }

    #[test]
    fn fail_fast_values() {
        assert!(!fail_fast(&ann(&[])).unwrap());
        assert!(fail_fast(&ann(&[("armadaproject.io/failFast", "true")])).unwrap());
        assert!(fail_fast(&ann(&[("convoy.io/fail-fast", "True")])).unwrap());
        assert!(!fail_fast(&ann(&[("armadaproject.io/failFast", "false")])).unwrap());
        let e = fail_fast(&ann(&[("armadaproject.io/failFast", "yes")])).unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/failFast");
        assert!(e.message.contains("\"yes\""), "{}", e.message);
        let e =
            fail_fast(&ann(&[("armadaproject.io/failFast", "true"), ("convoy.io/fail-fast", "false")])).unwrap_err();
        assert_eq!(e.field, "annotations.armadaproject.io/failFast");
        assert!(is_fail_fast(&ann(&[("armadaproject.io/failFast", "true")])));
        assert!(!is_fail_fast(&ann(&[("armadaproject.io/failFast", "maybe")])));
    }
}
