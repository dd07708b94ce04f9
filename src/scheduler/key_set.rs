//! One tier of the node index: node keys (the free amounts of the indexed resources, then the
//! node) in lexicographic order, held in buckets by all amounts but the last.
//!
//! A search for room wants the first key, in that order, whose every amount is at least the
//! job's. Over one ordered set, every key from the job's key on had to be walked, and in a busy
//! pool most of those nodes have enough of the leading resources and too little of the last
//! (CPU left where the memory is gone): at 30,000 nodes half full of preemptible jobs, level-0
//! searches walked about 1,900 keys each, and the cycle grew with the square of the nodes. In
//! buckets, a search passes over a bucket whose leading amounts are short of the job's, and starts
//! each other bucket at the job's last amount ([`KeySet::fitting_from`]): what it skips are
//! exactly keys that cannot fit, and the keys it yields come in the same order, so the node chosen
//! is the same. Buckets are as many as the distinct leading amounts (whole CPUs on a node, say),
//! not as many as the nodes.

use super::config::MAX_INDEXED_RESOURCES;
use std::collections::{BTreeMap, BTreeSet};

/// Index key: free amounts of the indexed resources, then the node index for uniqueness.
pub(crate) type Key = ([i64; MAX_INDEXED_RESOURCES], u32);

/// Amounts of a key that name its bucket: the first `prefix`, the rest zero.
type Bucket = [i64; MAX_INDEXED_RESOURCES];

/// An ordered set of [`Key`]s, bucketed by their leading amounts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeySet {
    /// How many leading amounts name a bucket.
    prefix: usize,
    /// Never holds an empty bucket, so two sets of the same keys are equal.
    buckets: BTreeMap<Bucket, BTreeSet<Key>>,
}

impl KeySet {
    /// An empty set of keys with `used` indexed amounts (the rest are zero): bucketed by all but
    /// the last.
    pub(crate) fn new(used: usize) -> KeySet {
        KeySet { prefix: used.clamp(1, MAX_INDEXED_RESOURCES) - 1, buckets: BTreeMap::new() }
    }

    /// An empty set bucketed as this one.
    pub(crate) fn new_like(&self) -> KeySet {
        KeySet { prefix: self.prefix, buckets: BTreeMap::new() }
    }

    fn bucket(&self, key: &Key) -> Bucket {
        let mut b = [0; MAX_INDEXED_RESOURCES];
        b[..self.prefix].copy_from_slice(&key.0[..self.prefix]);
        b
    }

    /// A set of `keys`, sorted ascending (built in bulk, cheaper than inserting one by one).
    pub(crate) fn from_sorted(used: usize, keys: Vec<Key>) -> KeySet {
        let mut set = KeySet::new(used);
        let mut keys = keys.into_iter().peekable();
        while let Some(first) = keys.next() {
            let b = set.bucket(&first);
            let mut run = vec![first];
            while let Some(k) = keys.next_if(|k| set.bucket(k) == b) {
                run.push(k);
            }
            set.buckets.insert(b, run.into_iter().collect());
        }
        set
    }

    pub(crate) fn insert(&mut self, key: Key) {
        self.buckets.entry(self.bucket(&key)).or_default().insert(key);
    }

    pub(crate) fn remove(&mut self, key: &Key) {
        let b = self.bucket(key);
        if let Some(keys) = self.buckets.get_mut(&b) {
            keys.remove(key);
            if keys.is_empty() {
                self.buckets.remove(&b);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Every key from `lower` on, in order.
    pub(crate) fn range_from<'a>(&'a self, lower: &'a Key) -> impl Iterator<Item = &'a Key> + 'a {
        let (first, p) = (self.bucket(lower), self.prefix);
        self.buckets.range(first..).flat_map(move |(b, keys)| {
            // A later bucket from its very first key: amounts past the prefix may be negative (a
            // node whose jobs hold more than it has left).
            let mut start = ([i64::MIN; MAX_INDEXED_RESOURCES], 0);
            start.0[..p].copy_from_slice(&b[..p]);
            keys.range(if *b == first { *lower } else { start }..)
        })
    }

    /// The keys from `lower` on, in order, less keys that cannot have every amount at least
    /// `lower`'s: buckets whose leading amounts fall short, and in each other bucket the keys
    /// whose last amounts come before `lower`'s.
    pub(crate) fn fitting_from<'a>(&'a self, lower: &'a Key) -> impl Iterator<Item = &'a Key> + 'a {
        let p = self.prefix;
        self.buckets
            .range(self.bucket(lower)..)
            .filter(move |(b, _)| b[..p].iter().zip(&lower.0[..p]).all(|(a, r)| a >= r))
            .flat_map(move |(b, keys)| {
                let mut start = lower.0;
                start[..p].copy_from_slice(&b[..p]);
                keys.range((start, 0)..)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fits(key: &Key, lower: &Key) -> bool {
        key.0.iter().zip(&lower.0).all(|(a, r)| a >= r)
    }

    /// Keys of small amounts, some negative (a node over-committed after it shrank).
    fn key() -> impl Strategy<Value = Key> {
        ([-2i64..6, -2i64..6, -1i64..3, -1i64..2], 0u32..40)
    }

    #[test]
    fn a_bucket_emptied_is_dropped() {
        let mut s = KeySet::new(3);
        s.insert(([4, 1, 0, 0], 7));
        s.remove(&([4, 1, 0, 0], 7));
        assert!(s.is_empty());
        assert_eq!(s, KeySet::new(3));
    }

    #[test]
    fn a_search_passes_over_nodes_short_of_a_later_resource() {
        // (gpu, cpu, memory): many nodes with CPU to spare and no memory, one that fits.
        let mut keys: Vec<Key> = (0..100).map(|n| ([0, 8 + n % 5, 1, 0], n as u32)).collect();
        keys.push(([0, 12, 64, 0], 100));
        keys.sort_unstable();
        let s = KeySet::from_sorted(3, keys);
        let lower = ([0, 4, 16, 0], 0);
        assert_eq!(s.fitting_from(&lower).collect::<Vec<_>>(), vec![&([0, 12, 64, 0], 100)]);
        assert_eq!(s.range_from(&lower).count(), 101);
    }

    #[test]
    fn a_range_keeps_keys_with_negative_amounts_in_later_buckets() {
        // A node whose jobs hold more memory than it has: a negative amount past the prefix.
        let keys = vec![([0, 4, 8, 0], 1), ([0, 6, -3, 0], 2), ([0, 6, 2, 0], 3)];
        let s = KeySet::from_sorted(3, keys.clone());
        let lower = ([0, 4, 16, 0], 0);
        assert_eq!(s.range_from(&lower).collect::<Vec<_>>(), vec![&keys[1], &keys[2]]);
        assert_eq!(s.fitting_from(&lower).count(), 0);
    }

    proptest! {
        /// Built, inserted into and removed from, it holds what an ordered set holds, yields
        /// `range_from` as that set's range, and `fitting_from` skips only keys that do not fit.
        #[test]
        fn it_searches_as_one_ordered_set(
            used in 1usize..=MAX_INDEXED_RESOURCES,
        start in prop::collection::vec(key(), 0..60),
            added in prop::collection::vec(key(), 0..30),
            removed in prop::collection::vec(key(), 0..30),
            lowers in prop::collection::vec(([0i64..6, 0i64..6, 0i64..3, 0i64..2], 0u32..1), 1..8),
        ) {
            let mut plain: BTreeSet<Key> = start.iter().copied().collect();
            let mut set = KeySet::from_sorted(used, plain.iter().copied().collect());
            for k in &added {
                plain.insert(*k);
                set.insert(*k);
            }
            for k in removed.iter().chain(start.iter().step_by(3)) {
                plain.remove(k);
                set.remove(k);
            }
            prop_assert_eq!(&set, &KeySet::from_sorted(used, plain.iter().copied().collect()));
            prop_assert_eq!(set.is_empty(), plain.is_empty());
            for (lower, _) in &lowers {
                let lower = (*lower, 0);
                let all: Vec<Key> = plain.range(lower..).copied().collect();
                prop_assert_eq!(set.range_from(&lower).copied().collect::<Vec<_>>(), all.clone());
                let fitting: Vec<Key> = set.fitting_from(&lower).copied().collect();
                let want: Vec<Key> = all.iter().filter(|k| fits(k, &lower)).copied().collect();
                let got: Vec<Key> = fitting.iter().filter(|k| fits(k, &lower)).copied().collect();
                prop_assert_eq!(got, want);
                // What it yields is in order and a part of the plain range.
                prop_assert!(fitting.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(fitting.iter().all(|k| plain.contains(k) && *k >= lower));
            }
        }
    }
}
