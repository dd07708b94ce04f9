//! Validated names and identifiers. Each kind of name is its own type so a queue name can never be
//! passed where a job-set name is expected.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

/// Reads a string with `F` without copying it when the input lends it (JSON text without
/// escapes): an agent's poll lists thousands of run ids, and each went through a `String` first.
struct StrVisitor<F>(F);

impl<'de, T, E: fmt::Display, F: FnOnce(&str) -> Result<T, E>> serde::de::Visitor<'de> for StrVisitor<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<Er: serde::de::Error>(self, v: &str) -> Result<T, Er> {
        (self.0)(v).map_err(Er::custom)
    }
    // As `String` does: formats that hand strings over as bytes.
    fn visit_bytes<Er: serde::de::Error>(self, v: &[u8]) -> Result<T, Er> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(Er::invalid_value(serde::de::Unexpected::Bytes(v), &self)),
        }
    }
}

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {value:?} is invalid: {rule}")]
pub struct NameError {
    /// What kind of name it was, e.g. `queue name`.
    pub kind: &'static str,
    /// The refused text.
    pub value: String,
    /// The rule it broke, for people.
    pub rule: &'static str,
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $kind:literal, $max:literal, $extra:literal, $rule:literal) => {
        name_type!(
            @with $(#[$doc])* $ty, $kind, $rule,
            |s: &str| !s.is_empty()
                && s.len() <= $max
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || $extra.as_bytes().contains(&b)),
            name_schema($kind, $max, $extra, $rule)
        );
    };
    (@with $(#[$doc:meta])* $ty:ident, $kind:literal, $rule:literal, $valid:expr, $schema:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $ty(Arc<str>);

        impl $ty {
            /// Validates and wraps a name.
            pub fn new(s: &str) -> Result<Self, NameError> {
                let valid: fn(&str) -> bool = $valid;
                if valid(s) {
                    Ok(Self(Arc::from(s)))
                } else {
                    Err(NameError { kind: $kind, value: s.to_string(), rule: $rule })
                }
            }

            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Address of the shared text: equal addresses mean equal names, so hot paths can
            /// memoise lookups without reading the text.
            pub fn ptr_key(&self) -> usize {
                self.0.as_ptr() as usize
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", &*self.0)
            }
        }

        impl std::str::FromStr for $ty {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, NameError> {
                Self::new(s)
            }
        }

        impl std::borrow::Borrow<str> for $ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(StrVisitor(Self::new))
            }
        }

        /// A string with the rules of [`Self::new`].
        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $schema
            }
        }

        impl utoipa::ToSchema for $ty {}
    };
}

/// The OpenAPI schema of a name: 1 to `max` characters of letters, digits and `extra`, starting
/// with a letter or digit.
fn name_schema(
    kind: &str,
    max: usize,
    extra: &str,
    rule: &str,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    // Inside a character class only `-` (and `\`, `]`, `^`, which names never allow) needs escaping.
    let class: String = extra.chars().map(|c| if c == '-' { "\\-".to_string() } else { c.to_string() }).collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(format!("A {kind}: {rule}.")))
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(format!("^[A-Za-z0-9][A-Za-z0-9{class}]{{0,{}}}$", max - 1)))
        .into()
}

/// The OpenAPI schema of a job set name: no control characters, 1 to 1,024 bytes (a schema's
/// `maxLength` counts characters, so it bounds what a name of single-byte characters may be).
fn job_set_name_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "A job set name: 1 to 1,024 bytes (UTF-8) of any characters except control characters, \
             e.g. `scheduled__2026-11-23T10:00:00+00:00`. In a URL path, percent-encode it (`/` as `%2F`, \
             space as `%20`).",
        ))
        .min_length(Some(1))
        .max_length(Some(MAX_JOB_SET_NAME_BYTES))
        .pattern(Some("^[^\\p{Cc}]+$"))
        .examples(["scheduled__2026-11-23T10:00:00+00:00"])
        .into()
}

name_type!(
    /// Name of a queue: 1–63 characters, letters, digits, `.`, `_`, `-`, starting with a letter or digit.
    QueueName, "queue name", 63, "._-", "1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
);
/// Longest job set name, in bytes (Armada's limit).
pub(crate) const MAX_JOB_SET_NAME_BYTES: usize = 1024;

name_type!(
    @with
    /// Name of a job set (a user's group of related jobs within a queue). As Armada's: any
    /// characters but control characters (Airflow's run ids carry `+`, `:` and spaces), 1 to
    /// 1,024 bytes of UTF-8. Control characters stay out because the store separates key parts
    /// with a 0 byte and names end up in logs and headers.
    JobSetName, "job set name", "1-1024 bytes of any characters except control characters",
    |s: &str| !s.is_empty() && s.len() <= MAX_JOB_SET_NAME_BYTES && !s.chars().any(char::is_control),
    job_set_name_schema()
);
name_type!(
    /// Name of a priority class.
    PriorityClassName, "priority class name", 63, "._-", "1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
);
name_type!(
    /// Name of a resource: `cpu`, `memory`, `nvidia.com/gpu`, any extended resource name.
    ResourceName, "resource name", 253, "._-/", "1-253 characters of letters, digits, '.', '_', '-' or '/', starting with a letter or digit"
);
name_type!(
    /// Name of an executor (one Kubernetes cluster or one bare-metal agent).
    ExecutorName, "executor name", 253, "._-:", "1-253 characters of letters, digits, '.', '_', '-' or ':', starting with a letter or digit"
);
name_type!(
    /// Name of a node within its executor.
    NodeName, "node name", 253, "._-:", "1-253 characters of letters, digits, '.', '_', '-' or ':', starting with a letter or digit"
);
name_type!(
    /// Name of a pool: nodes are grouped into pools and scheduled pool by pool.
    PoolName, "pool name", 63, "._-", "1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
);

impl ResourceName {
    /// `cpu`.
    pub fn cpu() -> Self {
        Self(Arc::from("cpu"))
    }
    /// `memory`.
    pub fn memory() -> Self {
        Self(Arc::from("memory"))
    }
    /// `nvidia.com/gpu`.
    pub fn gpu() -> Self {
        Self(Arc::from("nvidia.com/gpu"))
    }
}

impl PoolName {
    /// The pool nodes belong to when none is given.
    pub fn default_pool() -> Self {
        Self(Arc::from("default"))
    }
}

impl JobSetName {
    /// The job set used when none is given.
    pub fn default_set() -> Self {
        Self(Arc::from("default"))
    }
}

impl ExecutorName {
    /// The executor used when none is given.
    pub fn default_executor() -> Self {
        Self(Arc::from("default"))
    }
}

macro_rules! ulid_type {
    ($(#[$doc:meta])* $ty:ident, $kind:literal) => {
        $(#[$doc])*
        // Held as two 64-bit halves, high first, rather than as a `u128`: the same order, value
        // and hash, but aligned to 8 bytes instead of 16, so the many records that carry an id
        // (a cycle's jobs, its unscheduled list, the state's indexes) are not padded to 16.
        #[derive(Clone, Copy, PartialEq, Eq, Default)]
        pub struct $ty([u64; 2]);

        impl $ty {
            /// Builds an id from its 128-bit value.
            #[inline]
            pub fn from_u128(v: u128) -> Self {
                Self([(v >> 64) as u64, v as u64])
            }
            /// The id's 128-bit value (big-endian sortable).
            #[inline]
            pub fn as_u128(self) -> u128 {
                (u128::from(self.0[0]) << 64) | u128::from(self.0[1])
            }
            /// Builds an id from a millisecond timestamp and 80 random/sequence bits, as the leader does.
            pub fn from_parts(ms: u64, rand: u128) -> Self {
                Self::from_ulid(ulid::Ulid::from_parts(ms, rand))
            }
            /// The id of a ULID.
            pub fn from_ulid(u: ulid::Ulid) -> Self {
                Self::from_u128(u.0)
            }
            /// The id as a ULID.
            pub fn ulid(self) -> ulid::Ulid {
                ulid::Ulid(self.as_u128())
            }
        }

        /// Ordered as the 128-bit value: the order of ids is the order they were made in.
        impl Ord for $ty {
            #[inline]
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.as_u128().cmp(&other.as_u128())
            }
        }

        impl PartialOrd for $ty {
            #[inline]
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        /// Hashes the 128-bit value, as the `u128` it was held as did: hash maps of ids keep
        /// their layout.
        impl std::hash::Hash for $ty {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                state.write_u128(self.as_u128());
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.ulid(), f)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.ulid(), f)
            }
        }

        impl std::str::FromStr for $ty {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, NameError> {
                ulid::Ulid::from_string(s).map(Self::from_ulid).map_err(|_| NameError {
                    kind: $kind,
                    value: s.to_string(),
                    rule: "must be a 26-character ULID",
                })
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.collect_str(&self.ulid())
                } else {
                    s.serialize_u128(self.as_u128())
                }
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                if d.is_human_readable() {
                    d.deserialize_str(StrVisitor(|s: &str| s.parse::<Self>()))
                } else {
                    Ok(Self::from_u128(u128::deserialize(d)?))
                }
            }
        }

        /// A 26-character ULID string, as in JSON.
        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                ulid_schema($kind)
            }
        }

        impl utoipa::ToSchema for $ty {}
    };
}

/// The OpenAPI schema of an id: a ULID in Crockford base 32 (written in upper case, read in
/// either case).
fn ulid_schema(kind: &str) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::Custom("ulid".into())))
        .description(Some(format!("A {kind}: a 26-character ULID.")))
        .min_length(Some(26))
        .max_length(Some(26))
        .pattern(Some("^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$"))
        .examples(["01J9Z8Q6M3X2V7N5K4H1G0F9E8"])
        .into()
}

ulid_type!(
    /// Identifier of a job: a ULID chosen by the leader at submission.
    JobId, "job id"
);
ulid_type!(
    /// Identifier of one attempt to run a job.
    RunId, "run id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_validate() {
        assert!(QueueName::new("team-a_1.x").is_ok());
        assert!(QueueName::new("").is_err());
        assert!(QueueName::new("-a").is_err());
        assert!(QueueName::new("a b").is_err());
        assert!(QueueName::new(&"a".repeat(64)).is_err());
        assert!(ResourceName::new("nvidia.com/gpu").is_ok());
        let e = QueueName::new("a b").unwrap_err();
        assert!(e.to_string().contains("queue name \"a b\""), "{e}");
    }

    #[test]
    fn job_set_names_take_any_characters_but_control_ones() {
        for ok in ["scheduled__2026-11-23T10:00:00+00:00", "a b/c", "-x", "名前", "%2F", &"a".repeat(1024)] {
            assert_eq!(JobSetName::new(ok).map(|n| n.to_string()), Ok(ok.to_string()), "{ok:?}");
        }
        for bad in ["", "a\0b", "tab\there", "new\nline", "\u{7f}", "\u{85}", &"a".repeat(1025)] {
            assert!(JobSetName::new(bad).is_err(), "{bad:?}");
        }
        // The limit is in bytes: 512 two-byte characters fit, 513 do not.
        assert!(JobSetName::new(&"é".repeat(512)).is_ok());
        assert!(JobSetName::new(&"é".repeat(513)).is_err());
        let e = JobSetName::new("a\nb").unwrap_err();
        assert_eq!(
            e.to_string(),
            "job set name \"a\\nb\" is invalid: 1-1024 bytes of any characters except control characters"
        );
    }

    #[test]
    fn ids_serialize_as_text_in_json() {
        let id = JobId::from_parts(1_700_000_000_000, 42);
        let s = serde_json::to_string(&id).unwrap();
        assert_eq!(s.len(), 28);
        let back: JobId = serde_json::from_str(&s).unwrap();
        assert_eq!(back, id);
        assert!(serde_json::from_str::<JobId>("\"nope\"").is_err());
    }

    proptest::proptest! {
        /// An id held as two halves orders, hashes, prints and encodes as the `u128` it was held
        /// as: hash maps keyed by ids keep their layout and stored ids read back the same.
        #[test]
        fn ids_in_halves_behave_as_their_u128(a: u128, b: u128) {
            use std::hash::{BuildHasher, BuildHasherDefault};
            let (x, y) = (JobId::from_u128(a), JobId::from_u128(b));
            proptest::prop_assert_eq!(x.as_u128(), a);
            proptest::prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            proptest::prop_assert_eq!(x == y, a == b);
            let hasher = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
            proptest::prop_assert_eq!(hasher.hash_one(x), hasher.hash_one(ulid::Ulid(a)));
            proptest::prop_assert_eq!(
                rustc_hash::FxBuildHasher.hash_one(x),
                rustc_hash::FxBuildHasher.hash_one(ulid::Ulid(a))
            );
            proptest::prop_assert_eq!(x.to_string(), ulid::Ulid(a).to_string());
            proptest::prop_assert_eq!(x.to_string().parse::<JobId>().ok(), Some(x));
            proptest::prop_assert_eq!(x.ulid(), ulid::Ulid(a));
        }
    }

    #[test]
    fn ids_are_aligned_to_eight_bytes() {
        assert_eq!(std::mem::size_of::<JobId>(), 16);
        assert_eq!(std::mem::align_of::<JobId>(), 8);
        // A record of an id and a pointer takes 24 bytes, not 32.
        assert_eq!(std::mem::size_of::<(JobId, Arc<u64>)>(), 24);
    }
}
