//! The largest free amount of each resource over one node type's nodes at one level, kept in
//! step with the node db so that "no node has enough cpu" is answered without walking every node.
//!
//! Each slot keeps its maximum and how many nodes hold it. A node rising above the maximum
//! raises it; a node leaving the maximum lowers the count, and when no node holds it any more the
//! slot is stale until it is asked for, then recomputed from the nodes. Best fit places on the
//! nodes with the least room, so the roomiest nodes, which hold the maximum, change rarely.

use super::resvec::ResVec;

/// Maxima of one node type at one level.
#[derive(Debug, Clone)]
pub(crate) struct FreeMax {
    max: ResVec,
    /// Nodes at `max`, per slot; 0 = stale.
    holders: Vec<u32>,
}

impl FreeMax {
    /// The maxima over `frees` (the free amounts of the type's nodes at the level).
    pub(crate) fn over<'a>(width: usize, frees: impl Iterator<Item = &'a ResVec>) -> Self {
        let mut m = FreeMax { max: smallvec::smallvec![i64::MIN; width], holders: vec![0; width] };
        for f in frees {
            for s in 0..width {
                m.raise(s, f[s]);
            }
        }
        m
    }

    fn raise(&mut self, s: usize, v: i64) {
        if v > self.max[s] {
            self.max[s] = v;
            self.holders[s] = 1;
        } else if v == self.max[s] {
            self.holders[s] += 1;
        }
    }

    /// A node's free amount in slot `s` moved from `old` to `new`.
    #[inline]
    pub(crate) fn moved(&mut self, s: usize, old: i64, new: i64) {
        if self.holders[s] == 0 || old == new {
            return;
        }
        if old == self.max[s] {
            if new > old {
                self.holders[s] = 1;
                self.max[s] = new;
            } else {
                self.holders[s] -= 1;
            }
            return;
        }
        self.raise(s, new);
    }

    /// True if some slot must be recomputed before it can be read.
    pub(crate) fn stale(&self) -> bool {
        self.holders.contains(&0)
    }

    /// The maxima, if none is stale.
    pub(crate) fn get(&self) -> Option<&ResVec> {
        (!self.stale()).then_some(&self.max)
    }

    /// Slot `s`'s maximum, if it is known.
    #[inline]
    pub(crate) fn slot(&self, s: usize) -> Option<i64> {
        (self.holders[s] > 0).then(|| self.max[s])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smallvec::smallvec;

    fn recomputed(frees: &[ResVec]) -> ResVec {
        FreeMax::over(frees[0].len(), frees.iter()).max
    }

    #[test]
    fn the_maximum_follows_moves_and_goes_stale_only_when_its_last_holder_leaves() {
        let mut frees: Vec<ResVec> = vec![smallvec![4, 10], smallvec![4, 6], smallvec![2, 10]];
        let mut m = FreeMax::over(2, frees.iter());
        assert_eq!(m.get(), Some(&smallvec![4, 10]));
        // One of two holders of cpu 4 drops: still known.
        m.moved(0, 4, 1);
        frees[0][0] = 1;
        assert_eq!(m.slot(0), Some(4));
        // The last one drops: stale until recomputed.
        m.moved(0, 4, 3);
        frees[1][0] = 3;
        assert_eq!(m.slot(0), None);
        assert!(m.get().is_none());
        // A rise while stale is not trusted either: a node not seen since may hold more.
        m.moved(0, 2, 5);
        frees[2][0] = 5;
        assert_eq!(m.slot(0), None);
        let m = FreeMax::over(2, frees.iter());
        assert_eq!(m.get(), Some(&recomputed(&frees)));
        assert_eq!(m.slot(0), Some(5));
    }

    #[test]
    fn a_rise_above_the_maximum_is_the_new_maximum() {
        let frees: Vec<ResVec> = vec![smallvec![4], smallvec![2]];
        let mut m = FreeMax::over(1, frees.iter());
        m.moved(0, 2, 6);
        assert_eq!(m.slot(0), Some(6));
        // The old holder (4) leaving no longer matters.
        m.moved(0, 4, 0);
        assert_eq!(m.slot(0), Some(6));
        m.moved(0, 6, 5);
        assert_eq!(m.slot(0), None);
    }
}
