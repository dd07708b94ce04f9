//! What a job needs from a node: resource requests and placement constraints.

use super::placement::{Labels, NodeAffinity, Toleration};
use super::resources::Resources;
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// The scheduling-relevant part of a job's pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchedulingRequirements {
    /// Effective requests (sum of containers, max with init containers).
    pub requests: Resources,
    /// Labels a node must carry (Kubernetes `nodeSelector`).
    #[serde(default)]
    pub node_selector: Labels,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Required node affinity terms.
    #[serde(default)]
    pub node_affinity: Option<NodeAffinity>,
}

impl SchedulingRequirements {
    /// A stable 64-bit fingerprint, so the scheduler can group identical requirements without
    /// comparing them field by field. Equal requirements have equal fingerprints.
    pub fn fingerprint(&self) -> u64 {
        // FNV-1a over the Hash stream: stable across runs and platforms, unlike RandomState.
        struct Fnv(u64);
        impl Hasher for Fnv {
            fn finish(&self) -> u64 {
                self.0
            }
            fn write(&mut self, bytes: &[u8]) {
                for b in bytes {
                    self.0 ^= u64::from(*b);
                    self.0 = self.0.wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        self.hash(&mut h);
        h.finish()
    }
}

/// Shared, immutable requirements with their fingerprint computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirements {
    inner: std::sync::Arc<SchedulingRequirements>,
    fingerprint: u64,
}

impl Requirements {
    /// Wraps requirements, computing the fingerprint.
    pub fn new(r: SchedulingRequirements) -> Self {
        let fingerprint = r.fingerprint();
        Self { inner: std::sync::Arc::new(r), fingerprint }
    }

    /// The fingerprint.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// How many holders share this allocation.
    pub fn strong_count(&self) -> usize {
        std::sync::Arc::strong_count(&self.inner)
    }

    /// True if both point at the same allocation (a cheap equality fast path).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::ops::Deref for Requirements {
    type Target = SchedulingRequirements;
    fn deref(&self) -> &SchedulingRequirements {
        &self.inner
    }
}

impl Serialize for Requirements {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.inner.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Requirements {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::new(SchedulingRequirements::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_and_value_based() {
        let a = SchedulingRequirements { requests: Resources::parse([("cpu", "1")]).unwrap(), ..Default::default() };
        let b = a.clone();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = SchedulingRequirements { requests: Resources::parse([("cpu", "2")]).unwrap(), ..Default::default() };
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
