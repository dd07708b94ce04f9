//! Dense resource vectors for the hot path: each resource the pool knows gets a slot, so fit
//! checks and sums are plain integer loops instead of map lookups.

use crate::model::{ResourceName, Resources};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

/// Amounts per slot of a [`Layout`].
pub(crate) type ResVec = SmallVec<[i64; 6]>;

/// Which resource lives in which slot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layout {
    names: Vec<ResourceName>,
    index: HashMap<ResourceName, usize>,
}

impl Layout {
    /// Slots for `names`, in the given order, without duplicates.
    pub(crate) fn new(names: impl IntoIterator<Item = ResourceName>) -> Self {
        let mut l = Layout::default();
        for n in names {
            if !l.index.contains_key(&n) {
                l.index.insert(n.clone(), l.names.len());
                l.names.push(n);
            }
        }
        l
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn slot(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub(crate) fn name(&self, slot: usize) -> &ResourceName {
        &self.names[slot]
    }

    pub(crate) fn zero(&self) -> ResVec {
        smallvec::smallvec![0; self.names.len()]
    }

    /// Dense form of `r`; `Err` names a non-zero resource that has no slot.
    pub(crate) fn dense(&self, r: &Resources) -> Result<ResVec, ResourceName> {
        let mut v = self.zero();
        for (name, amount) in r.iter() {
            match self.index.get(name) {
                Some(&i) => v[i] = amount,
                None if amount <= 0 => {}
                None => return Err(name.clone()),
            }
        }
        Ok(v)
    }

    /// Dense form of `r`, dropping resources without a slot.
    pub(crate) fn dense_lossy(&self, r: &Resources) -> ResVec {
        let mut v = self.zero();
        for (name, amount) in r.iter() {
            if let Some(&i) = self.index.get(name) {
                v[i] = amount;
            }
        }
        v
    }

    /// Back to named resources.
    pub(crate) fn named(&self, v: &[i64]) -> Resources {
        self.names.iter().cloned().zip(v.iter().copied()).filter(|(_, a)| *a != 0).collect()
    }
}

#[inline]
pub(crate) fn fits(req: &[i64], avail: &[i64]) -> bool {
    req.iter().zip(avail).all(|(r, a)| r <= a)
}

#[inline]
pub(crate) fn add_to(acc: &mut [i64], v: &[i64]) {
    for (a, b) in acc.iter_mut().zip(v) {
        *a += *b;
    }
}

#[inline]
pub(crate) fn sub_from(acc: &mut [i64], v: &[i64]) {
    for (a, b) in acc.iter_mut().zip(v) {
        *a -= *b;
    }
}
