//! Kubernetes namespaces of jobs, and the pods that runs became.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

/// Longest namespace Kubernetes accepts (a DNS-1123 label).
pub(super) const MAX_NAMESPACE_LEN: usize = 63;

/// Why a namespace was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("namespace {value:?} is invalid: {rule}")]
pub struct NamespaceError {
    /// The refused text.
    pub value: String,
    /// The rule it broke, for people.
    pub rule: &'static str,
}

/// The Kubernetes namespace a job's pod, services and ingresses are created in: a DNS-1123 label
/// (1 to 63 lower-case letters, digits and `-`, starting and ending with a letter or digit), as
/// Kubernetes requires of namespace names. A job without one runs in its agent's configured
/// namespace.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// Validates and wraps a namespace name.
    pub fn new(s: &str) -> Result<Self, NamespaceError> {
        let err = |rule| Err(NamespaceError { value: s.to_string(), rule });
        if s.is_empty() || s.len() > MAX_NAMESPACE_LEN {
            return err("must be 1 to 63 characters");
        }
        if !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return err("must hold only lower-case letters, digits and '-' (a DNS-1123 label)");
        }
        if s.starts_with('-') || s.ends_with('-') {
            return err("must start and end with a lower-case letter or digit (a DNS-1123 label)");
        }
        Ok(Self(Arc::from(s)))
    }

    /// The namespace as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl std::str::FromStr for Namespace {
    type Err = NamespaceError;
    fn from_str(s: &str) -> Result<Self, NamespaceError> {
        Self::new(s)
    }
}

impl Serialize for Namespace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Namespace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::new(&s).map_err(serde::de::Error::custom)
    }
}

/// A string with the rules of [`Namespace::new`].
impl utoipa::PartialSchema for Namespace {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A Kubernetes namespace: a DNS-1123 label (1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit)."))
            .min_length(Some(1))
            .max_length(Some(MAX_NAMESPACE_LEN))
            .pattern(Some("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"))
            .into()
    }
}

impl utoipa::ToSchema for Namespace {}

/// The Kubernetes pod a run became, as its agent reported it. Runs of runtimes without pods
/// (processes, the fake runtime) have none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPod {
    /// The pod's name (`armada-<job id in lower case>-0`).
    pub name: String,
    /// The namespace it runs in.
    pub namespace: String,
    /// The pod's uid (its Kubernetes id).
    pub uid: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_1123_labels_are_namespaces() {
        for ok in ["a", "default", "team-a", "0", "a1-b2", &"x".repeat(63)] {
            assert_eq!(Namespace::new(ok).map(|n| n.to_string()), Ok(ok.to_string()));
        }
    }

    #[test]
    fn every_broken_rule_is_named() {
        let rule = |s: &str| Namespace::new(s).unwrap_err().rule;
        assert_eq!(rule(""), "must be 1 to 63 characters");
        assert_eq!(rule(&"x".repeat(64)), "must be 1 to 63 characters");
        for bad in ["Team", "a_b", "a.b", "ä", "a b"] {
            assert_eq!(rule(bad), "must hold only lower-case letters, digits and '-' (a DNS-1123 label)", "{bad}");
        }
        for bad in ["-a", "a-", "-"] {
            assert_eq!(rule(bad), "must start and end with a lower-case letter or digit (a DNS-1123 label)", "{bad}");
        }
        assert_eq!(
            Namespace::new("A").unwrap_err().to_string(),
            "namespace \"A\" is invalid: must hold only lower-case letters, digits and '-' (a DNS-1123 label)"
        );
    }

    #[test]
    fn serde_checks_the_rules() {
        assert_eq!(serde_json::from_str::<Namespace>("\"ns-1\"").unwrap().as_str(), "ns-1");
        assert!(serde_json::from_str::<Namespace>("\"NS\"").is_err());
    }
}
