//! The queue tree (YuniKorn's hierarchy, priority fences and offsets) within one pool's cycle.
//!
//! Queues name a `parent`; queues without one hang from an implicit root. When every queue of
//! the snapshot is flat ([`Queue::is_flat`]) there is no tree and the cycle runs Armada's flat
//! progressive filling unchanged. Otherwise:
//!
//! - **Hierarchical fair shares**: at each level the parent's share is divided among its active
//!   children by weight (`1 / priority_factor`); the adjusted share is water-filled with demand
//!   caps within the parent (a subtree's demand is the sum of its queues' demand shares), so what
//!   a capped child leaves goes to its siblings first. Leaves get the product of the levels.
//! - **Effective priority**: a leaf's is the priority-class priority of its next candidate plus
//!   its offset; a parent's the highest of its children's plus its offset. A `fence` queue shows
//!   its parent the default priority class's priority plus its offset. Sums saturate at the
//!   bounds of an i32.
//! - **Picking**: from the root down, among the children with something to offer, the highest
//!   effective priority first (ignored where `sort_priority = disabled`, set on the queue or an
//!   ancestor), then the child furthest below its share (the lowest cost of its subtree's
//!   allocation with the candidate added, times its priority factor), then the name; the leaf
//!   reached offers its next candidate.
//!
//! Urgency preemption still compares priority-class priorities: offsets and fences only order.
//!
//! This file holds the tree, its shares and its picks; the cycle's steps through it (filling,
//! shares, reports) are in `fill_tree.rs`.

use super::fairness::{CostModel, water_fill};
use super::queue::{CycleQueue, Turn};
use super::resvec::{ResVec, add_to};
use crate::model::{PriorityPolicy, QueueName, SortPriority};
use std::collections::BTreeMap;

#[cfg(test)]
thread_local! {
    /// Tests: recompute the whole tree at every pick, the reference the incremental picks must
    /// match.
    pub(super) static FULL_PICKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sentinel for "no parent" (a child of the implicit root).
const ROOT: u32 = u32::MAX;

/// One pool's queue tree over the cycle's queues (indices into the cycle's queues).
#[derive(Debug, Clone)]
pub(super) struct Hierarchy {
    /// Parent of each queue, or [`ROOT`].
    parent: Vec<u32>,
    /// Children of each queue, in name order.
    children: Vec<Vec<u32>>,
    /// Children of the root, in name order.
    roots: Vec<u32>,
    /// Every queue, children before their parents.
    post: Vec<u32>,
    /// Shown to the parent instead of the subtree's priority.
    fence: Vec<bool>,
    offset: Vec<i32>,
    /// Priorities do not order this queue's children (set here or on an ancestor).
    sort_off: Vec<bool>,
    /// Priority of the default priority class: what a fence shows, before its offset.
    default_priority: i32,
    /// Scratch: each subtree's allocation, refreshed at every pick.
    alloc: Vec<ResVec>,
    /// Scratch: each subtree's offer (leaf, priority shown to the parent), at every pick.
    offer: Vec<Option<(u32, i32)>>,
    /// Scratch: queues whose `alloc` and `offer` must be recomputed at the next pick (a queue
    /// that changed, and its ancestors); all of them when `fresh` is false.
    stale: Vec<bool>,
    /// Whether `alloc` and `offer` hold the last pick's values for every queue not `stale`.
    fresh: bool,
    /// Each queue's priority as its parent saw it at the cycle's first pick.
    first_priorities: BTreeMap<QueueName, i32>,
    recorded: bool,
}

/// One option at a node of the tree: where it leads, its priority and its cost.
#[derive(Clone, Copy)]
struct Choice {
    leaf: u32,
    priority: i32,
    cost: f64,
    index: u32,
}

impl Hierarchy {
    /// The tree of `queues` (in the cycle's order), or none when every queue is flat and
    /// `force` is not set. A parent missing from the snapshot, or a cycle (which validation
    /// prevents), makes a queue a child of the root.
    pub(super) fn build(
        queues: &[CycleQueue<'_>],
        default_priority: i32,
        zero: ResVec,
        force: bool,
    ) -> Option<Box<Hierarchy>> {
        if !force && queues.iter().all(|q| q.snap.queue.is_flat()) {
            return None;
        }
        let n = queues.len();
        let index: BTreeMap<&str, u32> = queues.iter().enumerate().map(|(i, q)| (q.name.as_str(), i as u32)).collect();
        let mut parent: Vec<u32> = queues
            .iter()
            .map(|q| q.snap.queue.parent.as_ref().and_then(|p| index.get(p.as_str()).copied()).unwrap_or(ROOT))
            .collect();
        // Cut cycles: a queue whose walk up does not reach the root within n steps hangs from it.
        for i in 0..n {
            let mut at = parent[i];
            let mut steps = 0;
            while at != ROOT && steps <= n {
                at = parent[at as usize];
                steps += 1;
            }
            if at != ROOT {
                parent[i] = ROOT;
            }
        }
        Some(Box::new(Self::assemble(
            parent,
            queues.iter().map(|q| q.snap.queue.priority_policy == PriorityPolicy::Fence).collect(),
            queues.iter().map(|q| q.snap.queue.priority_offset).collect(),
            queues.iter().map(|q| q.snap.queue.sort_priority == SortPriority::Disabled).collect(),
            default_priority,
            zero,
        )))
    }

    /// The tree of the given parents (which must form no cycle) and settings.
    fn assemble(
        parent: Vec<u32>,
        fence: Vec<bool>,
        offset: Vec<i32>,
        sort_disabled: Vec<bool>,
        default_priority: i32,
        zero: ResVec,
    ) -> Hierarchy {
        let n = parent.len();
        let mut children = vec![Vec::new(); n];
        let mut roots = Vec::new();
        for (i, &p) in parent.iter().enumerate() {
            if p == ROOT {
                roots.push(i as u32);
            } else {
                children[p as usize].push(i as u32);
            }
        }
        // Post-order by an explicit stack (no recursion on a deep tree).
        let mut post = Vec::with_capacity(n);
        let mut stack: Vec<(u32, bool)> = roots.iter().rev().map(|&r| (r, false)).collect();
        while let Some((v, expanded)) = stack.pop() {
            if expanded {
                post.push(v);
            } else {
                stack.push((v, true));
                stack.extend(children[v as usize].iter().rev().map(|&c| (c, false)));
            }
        }
        let mut sort_off = vec![false; n];
        for &v in post.iter().rev() {
            let p = parent[v as usize];
            sort_off[v as usize] = sort_disabled[v as usize] || (p != ROOT && sort_off[p as usize]);
        }
        Hierarchy {
            fence,
            offset,
            sort_off,
            default_priority,
            alloc: vec![zero; n],
            offer: vec![None; n],
            stale: vec![false; n],
            fresh: false,
            parent,
            children,
            roots,
            post,
            first_priorities: BTreeMap::new(),
            recorded: false,
        }
    }

    /// A tree of plain queues from each queue's parent (tests).
    #[cfg(test)]
    pub(super) fn of_parents(parents: &[Option<usize>]) -> Hierarchy {
        let n = parents.len();
        let parent = parents.iter().map(|p| p.map_or(ROOT, |p| p as u32)).collect();
        Self::assemble(parent, vec![false; n], vec![0; n], vec![false; n], 0, ResVec::new())
    }

    /// True if queue `q` has children.
    pub(super) fn is_parent(&self, q: u32) -> bool {
        !self.children[q as usize].is_empty()
    }

    /// Queue `q`'s parent, if it has one.
    pub(super) fn parent_of(&self, q: u32) -> Option<u32> {
        let p = self.parent[q as usize];
        (p != ROOT).then_some(p)
    }

    /// Every queue, children before their parents.
    pub(super) fn post_order(&self) -> &[u32] {
        &self.post
    }

    /// Marks queue `q` and its ancestors for recomputing at the next pick.
    pub(super) fn mark_stale(&mut self, q: u32) {
        let mut at = q;
        while at != ROOT && !self.stale[at as usize] {
            self.stale[at as usize] = true;
            at = self.parent[at as usize];
        }
    }

    /// The priority queue `v` shows its parent, given the highest priority inside it.
    fn shown(&self, v: u32, inner: i32) -> i32 {
        let base = if self.fence[v as usize] { self.default_priority } else { inner };
        base.saturating_add(self.offset[v as usize])
    }

    /// Hierarchical fair shares: per queue, `(fair share, adjusted fair share)`, from each
    /// queue's own demand share and whether it is active. Parents get their subtree's shares.
    pub(super) fn shares(&self, weights: &[f64], own_demand: &[f64], own_active: &[bool]) -> (Vec<f64>, Vec<f64>) {
        let n = self.parent.len();
        let mut demand = own_demand.to_vec();
        let mut active = own_active.to_vec();
        for &v in &self.post {
            let p = self.parent[v as usize];
            if p != ROOT {
                demand[p as usize] += demand[v as usize];
                active[p as usize] |= active[v as usize];
            }
        }
        let mut plain = vec![0.0; n];
        let mut adjusted = vec![0.0; n];
        let divide = |kids: &[u32], total_plain: f64, total_adjusted: f64, plain: &mut [f64], adj: &mut [f64]| {
            let live: Vec<u32> = kids.iter().copied().filter(|&c| active[c as usize]).collect();
            let w: Vec<f64> = live.iter().map(|&c| weights[c as usize]).collect();
            let d: Vec<f64> = live.iter().map(|&c| demand[c as usize]).collect();
            let sum_w: f64 = w.iter().sum();
            let filled = water_fill(total_adjusted, &w, &d);
            for (k, &c) in live.iter().enumerate() {
                plain[c as usize] = if sum_w > 0.0 { w[k] / sum_w * total_plain } else { 0.0 };
                adj[c as usize] = filled[k];
            }
        };
        divide(&self.roots, 1.0, 1.0, &mut plain, &mut adjusted);
        for &v in self.post.iter().rev() {
            let kids = &self.children[v as usize];
            if !kids.is_empty() {
                let (p, a) = (plain[v as usize], adjusted[v as usize]);
                divide(kids, p, a, &mut plain, &mut adjusted);
            }
        }
        (plain, adjusted)
    }

    /// Starts progressive filling through the tree: the first pick recomputes every queue.
    pub(super) fn start_picks(&mut self) {
        self.fresh = false;
    }

    /// Once, at the cycle's first pick: each queue's priority as its parent sees it then.
    pub(super) fn record_first_offers(&mut self, queues: &[CycleQueue<'_>]) {
        if !self.recorded {
            self.recorded = true;
            self.first_priorities =
                (0..queues.len()).filter_map(|v| self.offer[v].map(|(_, p)| (queues[v].name.clone(), p))).collect();
        }
    }

    /// Each queue's priority as its parent saw it at the cycle's first pick.
    pub(super) fn first_priorities(&self) -> &BTreeMap<QueueName, i32> {
        &self.first_priorities
    }

    /// Tests: makes the next pick recompute every queue.
    #[cfg(test)]
    pub(super) fn forget_picks(&mut self) {
        self.fresh = false;
    }

    /// The leaf whose candidate goes next, if any queue has one.
    pub(super) fn pick(&mut self, queues: &[CycleQueue<'_>], cost: &CostModel, turns: &[Option<Turn>]) -> Option<u32> {
        let tree = self;
        let all = !tree.fresh;
        tree.fresh = true;
        for k in 0..tree.post.len() {
            let v = tree.post[k];
            let vi = v as usize;
            if !all && !tree.stale[vi] {
                continue;
            }
            tree.stale[vi] = false;
            tree.alloc[vi].clone_from_slice(&queues[vi].alloc);
            for i in 0..tree.children[vi].len() {
                let c = tree.children[vi][i] as usize;
                let (a, b) = split_pair(&mut tree.alloc, vi, c);
                add_to(a, b);
            }
            let offer = if tree.children[vi].is_empty() {
                turns[vi].map(|t| (v, tree.shown(v, t.urgency)))
            } else {
                let (best, highest) =
                    tree.best_choice(queues, cost, &tree.children[vi], turns, Some(v), tree.sort_off[vi]);
                best.map(|b| (b.leaf, tree.shown(v, highest)))
            };
            tree.offer[vi] = offer;
        }
        tree.best_choice(queues, cost, &tree.roots, turns, None, false).0.map(|b| b.leaf)
    }

    /// Among `kids` (and the candidate of `own`, a parent's own queued jobs if any), the best
    /// choice, and the highest priority among them.
    fn best_choice(
        &self,
        queues: &[CycleQueue<'_>],
        cost: &CostModel,
        kids: &[u32],
        turns: &[Option<Turn>],
        own: Option<u32>,
        sort_off: bool,
    ) -> (Option<Choice>, i32) {
        let tree = self;
        let mut best: Option<Choice> = None;
        let mut highest = i32::MIN;
        let mut consider = |c: Choice| {
            highest = highest.max(c.priority);
            let better = match &best {
                None => true,
                Some(b) => {
                    let by_priority = if sort_off { std::cmp::Ordering::Equal } else { c.priority.cmp(&b.priority) };
                    by_priority.then_with(|| b.cost.total_cmp(&c.cost)).then_with(|| b.index.cmp(&c.index)).is_gt()
                }
            };
            if better {
                best = Some(c);
            }
        };
        if let Some(v) = own
            && let Some(t) = turns[v as usize]
        {
            consider(Choice { leaf: v, priority: t.urgency, cost: t.cost_after, index: v });
        }
        for &c in kids {
            let ci = c as usize;
            let Some((leaf, priority)) = tree.offer[ci] else { continue };
            let cost = if tree.children[ci].is_empty() {
                turns[ci].map_or(f64::INFINITY, |t| t.cost_after)
            } else {
                match &queues[leaf as usize].current {
                    Some(cand) => cost.share_with(&tree.alloc[ci], &cand.req) * queues[ci].priority_factor,
                    None => f64::INFINITY,
                }
            };
            consider(Choice { leaf, priority, cost, index: c });
        }
        (best, highest)
    }
}

/// `(&mut v[a], &v[b])` for `a != b`.
fn split_pair(v: &mut [ResVec], a: usize, b: usize) -> (&mut ResVec, &ResVec) {
    if a < b {
        let (lo, hi) = v.split_at_mut(b);
        (&mut lo[a], &hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(a);
        (&mut hi[0], &lo[b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_fill_caps_in_cascade_and_divides_a_parent_share() {
        let s = water_fill(1.0, &[1.0; 4], &[0.05, 0.2, 0.3, 1.0]);
        let want = [0.05, 0.2, 0.3, 0.45];
        assert!(s.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{s:?}");
        // Half a pool between two children, one wanting 10%: the other gets 40%.
        let s = water_fill(0.5, &[1.0, 1.0], &[0.1, 1.0]);
        assert!((s[0] - 0.1).abs() < 1e-12 && (s[1] - 0.4).abs() < 1e-12, "{s:?}");
        // Nothing to divide.
        assert_eq!(water_fill(0.0, &[1.0], &[1.0]), vec![0.0]);
    }
}
