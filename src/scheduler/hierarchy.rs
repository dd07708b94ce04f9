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
//! Urgency preemption still compares priority-class priorities: offsets and priority fences only
//! order. A `preemption_policy = fence` queue keeps its subtree's urgency preemption inside it
//! ([`Fences`]; placement enforces it, [`super::fence`]). Guaranteed resources are floors of the
//! shares at every level ([`super::guarantee`]).
//!
//! This file holds the tree, its shares and its picks; the cycle's steps through it (filling,
//! shares, reports) are in `fill_tree.rs`.

use super::fairness::{CostModel, water_fill};
use super::guarantee::{below_floor_cost, effective_guarantees, guaranteed_part, water_fill_floored};
use super::queue::{CycleQueue, Turn};
use super::resvec::{ResVec, add_to};
use crate::model::{PreemptionPolicy, PriorityPolicy, QueueName, SortPriority};
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
    /// The part of each queue's (subtree's) demand its guarantee covers, after nesting and
    /// scaling ([`super::guarantee::guaranteed_part`]); all 0 when no queue has a guarantee.
    guaranteed_part: Vec<f64>,
    /// Whether each queue's guarantee was scaled down (of some resource).
    guarantee_scaled: Vec<bool>,
    /// Each queue's guarantee floor in this cycle (the share of the part of its demand its
    /// guarantee covers), which orders it first while its share is below it.
    floor: Vec<f64>,
    /// The preemption fences, if any queue has one.
    fences: Option<Fences>,
}

/// The preemption fences of a pool's queue tree (`preemption_policy = fence`), kept by the cycle
/// apart from the tree, which progressive filling holds while it places jobs.
#[derive(Debug, Clone)]
pub(super) struct Fences {
    /// The innermost fenced queue at or above each queue, or [`ROOT`].
    fence_root: Vec<u32>,
    /// Each queue's position in pre-order and the size of its subtree: `q` is inside `f`'s
    /// subtree when `enter[f] <= enter[q] < enter[f] + size[f]`.
    enter: Vec<u32>,
    size: Vec<u32>,
}

impl Fences {
    /// The innermost preemption fence at or above queue `q`, if any.
    #[inline]
    pub(super) fn fence_of(&self, q: u32) -> Option<u32> {
        let f = self.fence_root[q as usize];
        (f != ROOT).then_some(f)
    }

    /// True if queue `q` is in the subtree of queue `f` (itself included).
    #[inline]
    pub(super) fn within(&self, f: u32, q: u32) -> bool {
        let (e, s) = (self.enter[f as usize], self.size[f as usize]);
        (e..e + s).contains(&self.enter[q as usize])
    }
}

/// Shares through the tree, per queue (parents get their subtree's).
#[derive(Debug, Clone, Default)]
pub(super) struct TreeShares {
    /// Fair shares: weights divided level by level (above the guarantee floors, if any).
    pub plain: Vec<f64>,
    /// Demand-capped (water-filled) fair shares, above the guarantee floors.
    pub adjusted: Vec<f64>,
    /// Guarantee floors: the share of the part of the demand the guarantee covers, resource by
    /// resource, after nesting and scaling.
    pub floor: Vec<f64>,
    /// Whether the queue's guarantee was scaled down because its level's add up to more.
    pub scaled: Vec<bool>,
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
        if !force && queues.iter().all(|q| q.snap.queue.is_flat() && !q.snap.queue.has_policies()) {
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
            queues.iter().map(|q| q.snap.queue.preemption_policy == PreemptionPolicy::Fence).collect(),
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
        preemption_fence: Vec<bool>,
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
        let mut fence_root = vec![ROOT; n];
        for &v in post.iter().rev() {
            let (vi, p) = (v as usize, parent[v as usize]);
            sort_off[vi] = sort_disabled[vi] || (p != ROOT && sort_off[p as usize]);
            fence_root[vi] = if preemption_fence[vi] {
                v
            } else if p != ROOT {
                fence_root[p as usize]
            } else {
                ROOT
            };
        }
        let fences = preemption_fence.iter().any(|f| *f).then(|| {
            let (enter, size) = pre_order(&post, &parent, &roots, &children);
            Fences { fence_root, enter, size }
        });
        Hierarchy {
            guaranteed_part: vec![0.0; n],
            guarantee_scaled: vec![false; n],
            floor: vec![0.0; n],
            fences,
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
        Self::assemble(parent, vec![false; n], vec![0; n], vec![false; n], vec![false; n], 0, ResVec::new())
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

    /// Sets each queue's guarantee from its configured amounts and its own demand (per resource
    /// slot, `total` being the pool's): guarantees are nested and scaled resource by resource
    /// ([`effective_guarantees`]), then each queue (or subtree) is guaranteed the part of its
    /// demand that holds the smaller of its guarantee and its demand of every resource.
    pub(super) fn set_guarantees(&mut self, guaranteed: &[ResVec], demand: &[ResVec], total: &ResVec) {
        let n = self.parent.len();
        let has_own: Vec<bool> = guaranteed.iter().map(|g| g.iter().any(|x| *x > 0)).collect();
        let mut amounts = vec![vec![0.0; total.len()]; n];
        self.guarantee_scaled = vec![false; n];
        for (s, &t) in total.iter().enumerate().filter(|(_, t)| **t > 0) {
            let own: Vec<f64> = guaranteed.iter().map(|g| g[s].max(0) as f64 / t as f64).collect();
            if own.iter().all(|x| *x <= 0.0) {
                continue;
            }
            let (eff, scaled) = effective_guarantees(&own, &has_own, &self.roots, &self.children, &self.post);
            for v in 0..n {
                amounts[v][s] = eff[v] * t as f64;
                self.guarantee_scaled[v] |= scaled[v];
            }
        }
        let mut subtree: Vec<ResVec> = demand.to_vec();
        for &v in &self.post {
            let p = self.parent[v as usize];
            if p != ROOT {
                let (a, b) = split_pair(&mut subtree, p as usize, v as usize);
                add_to(a, b);
            }
        }
        self.guaranteed_part = (0..n).map(|v| guaranteed_part(&amounts[v], &subtree[v])).collect();
    }

    /// Keeps the guarantee floors that order progressive filling in this cycle.
    pub(super) fn set_floors(&mut self, floor: &[f64]) {
        self.floor.clone_from_slice(floor);
    }

    /// The preemption fences, if any queue has one.
    pub(super) fn fences(&self) -> Option<&Fences> {
        self.fences.as_ref()
    }

    /// Hierarchical fair shares from each queue's own demand share and whether it is active.
    pub(super) fn shares(&self, weights: &[f64], own_demand: &[f64], own_active: &[bool]) -> TreeShares {
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
        let (floor, scaled) = if self.guaranteed_part.iter().any(|g| *g > 0.0) {
            let part = &self.guaranteed_part;
            let floor: Vec<f64> = (0..n).map(|v| if active[v] { part[v] * demand[v] } else { 0.0 }).collect();
            (floor, self.guarantee_scaled.clone())
        } else {
            (vec![0.0; n], vec![false; n])
        };
        let mut plain = vec![0.0; n];
        let mut adjusted = vec![0.0; n];
        let divide = |kids: &[u32], total_plain: f64, total_adjusted: f64, plain: &mut [f64], adj: &mut [f64]| {
            let live: Vec<u32> = kids.iter().copied().filter(|&c| active[c as usize]).collect();
            let w: Vec<f64> = live.iter().map(|&c| weights[c as usize]).collect();
            let d: Vec<f64> = live.iter().map(|&c| demand[c as usize]).collect();
            let f: Vec<f64> = live.iter().map(|&c| floor[c as usize]).collect();
            let sum_w: f64 = w.iter().sum();
            let (plain_of, filled) = if f.iter().any(|x| *x > 0.0) {
                let unbounded = vec![f64::INFINITY; live.len()];
                (water_fill_floored(total_plain, &w, &unbounded, &f), water_fill_floored(total_adjusted, &w, &d, &f))
            } else {
                let p = w.iter().map(|wk| if sum_w > 0.0 { wk / sum_w * total_plain } else { 0.0 }).collect();
                (p, water_fill(total_adjusted, &w, &d))
            };
            for (k, &c) in live.iter().enumerate() {
                plain[c as usize] = plain_of[k];
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
        TreeShares { plain, adjusted, floor, scaled }
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
            let floor = tree.floor[ci];
            let cost = if tree.children[ci].is_empty() {
                let below = match (&queues[ci].current, floor > 0.0) {
                    (Some(cand), true) => below_floor_cost(cost.share_with(&queues[ci].alloc, &cand.req), floor),
                    _ => None,
                };
                below.unwrap_or_else(|| turns[ci].map_or(f64::INFINITY, |t| t.cost_after))
            } else {
                match &queues[leaf as usize].current {
                    Some(cand) => {
                        let after = cost.share_with(&tree.alloc[ci], &cand.req);
                        below_floor_cost(after, floor).unwrap_or(after * queues[ci].priority_factor)
                    }
                    None => f64::INFINITY,
                }
            };
            consider(Choice { leaf, priority, cost, index: c });
        }
        (best, highest)
    }
}

/// Each queue's position in a pre-order walk of the tree and the size of its subtree.
fn pre_order(post: &[u32], parent: &[u32], roots: &[u32], children: &[Vec<u32>]) -> (Vec<u32>, Vec<u32>) {
    let n = parent.len();
    let mut size = vec![1u32; n];
    for &v in post {
        let p = parent[v as usize];
        if p != ROOT {
            size[p as usize] += size[v as usize];
        }
    }
    let mut enter = vec![0u32; n];
    let mut next = 0u32;
    let mut stack: Vec<u32> = roots.iter().rev().copied().collect();
    while let Some(v) = stack.pop() {
        enter[v as usize] = next;
        next += 1;
        stack.extend(children[v as usize].iter().rev());
    }
    (enter, size)
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
