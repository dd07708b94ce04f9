//! What a job needs from a node: resource requests and placement constraints.

use super::placement::{Labels, NodeAffinity, Toleration};
use super::resources::Resources;
use std::hash::{Hash, Hasher};

/// The scheduling-relevant part of a job's pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SchedulingRequirements {
    /// Effective requests (sum of containers, max with init containers).
    pub requests: Resources,
    /// Labels a node must carry (Kubernetes `nodeSelector`).
    pub node_selector: Labels,
    /// Taints the job tolerates (Kubernetes `tolerations`).
    pub tolerations: Vec<Toleration>,
    /// Required node affinity terms.
    pub node_affinity: Option<NodeAffinity>,
}

impl SchedulingRequirements {
    /// A stable 64-bit fingerprint, so the scheduler can group identical requirements without
    /// comparing them field by field. Equal requirements have equal fingerprints.
    pub fn fingerprint(&self) -> u64 {
        // Multiply-rotate over the Hash stream, eight bytes at a step: stable across runs and
        // platforms (unlike RandomState), and cheap on the resource and label names it mostly
        // reads (this runs for every submitted job).
        struct StableHasher(u64);
        impl StableHasher {
            fn mix(&mut self, word: u64) {
                self.0 = (self.0 ^ word).wrapping_mul(0x100_0000_01b3).rotate_left(23);
            }
        }
        impl Hasher for StableHasher {
            fn finish(&self) -> u64 {
                self.0
            }
            fn write(&mut self, bytes: &[u8]) {
                let mut words = bytes.chunks_exact(8);
                for w in &mut words {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(w);
                    self.mix(u64::from_le_bytes(b));
                }
                let rest = words.remainder();
                if !rest.is_empty() {
                    let mut b = [0u8; 8];
                    b[..rest.len()].copy_from_slice(rest);
                    // The length keeps "a" and "a\0" apart.
                    self.mix(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
                }
            }
        }
        let mut h = StableHasher(0xcbf2_9ce4_8422_2325);
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
        let mut d = a.clone();
        d.node_selector.insert("zone".into(), "a".into());
        assert_ne!(a.fingerprint(), d.fingerprint());
        // The same on every run and platform (no per-process seed).
        assert_eq!(a.fingerprint(), 315_550_321_646_231_959);
    }
}
