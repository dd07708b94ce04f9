//! The node database of one pool during one cycle: what every node has free at every priority
//! level, indexed for best-fit search.
//!
//! **Levels.** With distinct priority-class priorities `p0 < p1 < … < pk-1`, a node's free
//! resources are kept at `1 + 2k` levels: level 0 counts every job on the node (placing there
//! displaces nobody); level `E_i = 1 + 2i` treats evicted jobs of priority `<= p_i` and running
//! jobs of priority `< p_i` as free; level `R_i = 2 + 2i` also frees running jobs of priority
//! `p_i`. A job of priority `p_j` may search levels `0..=E_j`: it may displace evicted jobs of
//! its own or lower priority (fair-share preemption never displaces a higher class) and
//! urgency-preempt running jobs of strictly lower priority. Searching levels in increasing order
//! makes the lowest priority class possible go first. When the pool has earmarked nodes, a guest
//! level `G = 1` comes before them (and the others move up by one): guests on earmarked nodes are
//! freed there, for the jobs at home on those nodes ([`Levels::with_guest_level`]).
//!
//! **Tiers.** Within a level, nodes used (by non-evicted jobs) only by the job's queue come
//! first, then empty nodes, then the rest; within a tier, the node with the least free of the
//! indexed resources (lexicographically) that fits: best fit. At an `E_i` level the placement
//! takes the places of the evicted jobs that would return last, wherever they are
//! ([`super::return_order`]); at an `R_i` level (and when that search gives up) it compares the
//! first few nodes in this order by whom they would displace (lowest class, then the readiest
//! victims, [`Occupant::readiness`]) before tier and best fit decide.
//!
//! **Index.** Per level and node type, ordered sets keyed by the free amounts of the indexed
//! resources, in buckets by all amounts but the last so that a search passes over nodes short of
//! a later resource ([`super::key_set`]). A level's index is only built when a job first searches
//! it (cycles without preemption never build more than level 0) and is kept in step afterwards.

use super::config::MAX_INDEXED_RESOURCES;
use super::free_max::FreeMax;
use super::key_set::{Key, KeySet};
use super::resvec::{ResVec, add_to, fits, sub_from};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

/// True if the node of `key` has at least `lower`'s amounts of every indexed resource: what a fit
/// needs, read from the key itself. A search walks many keys, and most fail here, without
/// touching the node (a cache miss each at scale).
#[inline(always)]
fn key_fits(key: &Key, lower: &Key) -> bool {
    key.0.iter().zip(&lower.0).all(|(a, r)| a >= r)
}

/// How many copies of `req` fit in `free` together (`u32::MAX` if `req` asks for nothing).
fn copies(req: &[i64], free: &[i64]) -> u32 {
    let mut n = i64::from(u32::MAX);
    for (&r, &a) in req.iter().zip(free) {
        if r > a {
            return 0;
        }
        if r > 0 {
            n = n.min(a / r);
        }
    }
    n as u32
}

/// A job holding (or, if evicted, still occupying) resources on a node.
#[derive(Debug, Clone)]
pub(crate) struct Occupant {
    pub job: u32,
    pub queue: u32,
    /// Lowest level at which this job counts as free.
    pub freed_at: u8,
    pub evicted: bool,
    /// Submit sequence: among equal victims the newest goes first.
    pub seq: u64,
    /// Evicted jobs: place in the order they would return ([`super::return_order`]); of the
    /// evicted jobs on a node, the one that would return last gives its place up first. 0 for
    /// running jobs.
    pub return_rank: u32,
    pub req: ResVec,
}

impl Occupant {
    /// How readily the occupant gives up its place to a job that must displace someone, among
    /// occupants freed at the same level (all evicted, or all running): an evicted job's return
    /// rank, a running job's queue's `overshare`. Higher goes first.
    pub(crate) fn readiness(&self, overshare: &impl Fn(u32) -> f64) -> f64 {
        if self.evicted { f64::from(self.return_rank) } else { overshare(self.queue) }
    }
}

/// One node's state.
#[derive(Debug, Clone)]
pub(crate) struct NodeEntry {
    pub type_id: u32,
    /// Free resources per level.
    pub free: Vec<ResVec>,
    pub occupants: Vec<Occupant>,
    /// Non-evicted jobs per queue on this node.
    users: SmallVec<[(u32, u32); 2]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Empty,
    Sole(u32),
    Shared,
}

impl NodeEntry {
    fn tier(&self) -> Tier {
        match self.users.as_slice() {
            [] => Tier::Empty,
            [(q, _)] => Tier::Sole(*q),
            _ => Tier::Shared,
        }
    }

    /// Takes `occ`'s resources at the levels below its `freed_at` and counts it among the node's
    /// users (unless evicted).
    fn hold(&mut self, occ: Occupant) {
        for l in 0..occ.freed_at as usize {
            sub_from(&mut self.free[l], &occ.req);
        }
        self.seat(occ);
    }

    /// Lists `occ` among the node's occupants and counts it among its users (unless evicted),
    /// leaving the free amounts to the caller.
    fn seat(&mut self, occ: Occupant) {
        if !occ.evicted {
            match self.users.iter_mut().find(|(q, _)| *q == occ.queue) {
                Some(u) => u.1 += 1,
                None => {
                    self.users.push((occ.queue, 1));
                    self.users.sort_unstable();
                }
            }
        }
        self.occupants.push(occ);
    }
}

#[derive(Debug, Clone, PartialEq)]
struct TypeIndex {
    empty: KeySet,
    nonempty: KeySet,
    sole: HashMap<u32, KeySet>,
}

/// A [`TypeIndex`]'s keys, gathered before its sets are built.
#[derive(Debug, Clone, Default)]
struct TypeKeys {
    empty: Vec<Key>,
    nonempty: Vec<Key>,
    sole: HashMap<u32, Vec<Key>>,
}

impl TypeIndex {
    /// The nodes of search tier `tier` for `queue`: 0 = used only by it, 1 = empty, 2 = the rest.
    fn tier(&self, tier: u8, queue: u32) -> Option<&KeySet> {
        match tier {
            0 => self.sole.get(&queue),
            1 => Some(&self.empty),
            _ => Some(&self.nonempty),
        }
    }
}

/// Priority levels of a cycle.
#[derive(Debug, Clone)]
pub(crate) struct Levels {
    /// Distinct priorities, ascending.
    pub prios: Vec<i32>,
    /// Level of `E_0`: 1, or 2 when level 1 is the guest level.
    base: u8,
}

impl Levels {
    pub(crate) fn new(mut prios: Vec<i32>) -> Self {
        prios.sort_unstable();
        prios.dedup();
        Levels { prios, base: 1 }
    }
    /// Levels with a guest level `G = 1` below every priority level: guests on earmarked nodes
    /// (`super::earmark`) are freed there, so a job at home on such a node displaces them before
    /// anyone else, whatever their class.
    pub(crate) fn with_guest_level(prios: Vec<i32>) -> Self {
        Levels { base: 2, ..Levels::new(prios) }
    }
    pub(crate) fn count(&self) -> usize {
        self.base as usize + 2 * self.prios.len()
    }
    /// Index of a priority in `prios`.
    pub(crate) fn index_of(&self, prio: i32) -> usize {
        self.prios.binary_search(&prio).unwrap_or(0)
    }
    pub(crate) fn evicted_freed_at(&self, priority_level: usize) -> u8 {
        (self.base as usize + 2 * priority_level) as u8
    }
    pub(crate) fn running_freed_at(&self, priority_level: usize) -> u8 {
        (self.base as usize + 1 + 2 * priority_level) as u8
    }
    /// The level of jobs no search reaches: running jobs of the top priority, and running
    /// non-preemptible jobs of any priority.
    pub(crate) fn never_freed(&self) -> u8 {
        (self.count() - 1) as u8
    }
    /// Highest level a job of this priority may search.
    pub(crate) fn max_search_level(&self, priority_level: usize) -> u8 {
        (self.base as usize + 2 * priority_level) as u8
    }
    /// The guest level, if there is one.
    pub(crate) fn guest_level(&self) -> Option<u8> {
        (self.base == 2).then_some(1)
    }
    /// True if level `l` is an `E_i` level: the first to free evicted jobs of priority `p_i`.
    pub(crate) fn is_eviction_level(&self, l: u8) -> bool {
        (0..self.prios.len()).any(|i| self.evicted_freed_at(i) == l)
    }
}

/// The node database.
#[derive(Debug, Clone)]
pub(crate) struct NodeDb {
    pub nodes: Vec<NodeEntry>,
    /// Nodes of each type.
    pub type_nodes: Vec<Vec<u32>>,
    key_slots: [Option<usize>; MAX_INDEXED_RESOURCES],
    /// How many of the key's amounts are indexed resources (the rest stay zero).
    key_used: usize,
    levels: usize,
    /// Occupants freed exactly at each level; a level with none is identical to the one below.
    freed_counts: Vec<u32>,
    indexes: Vec<Option<Vec<TypeIndex>>>,
    /// Free resources summed over each type's nodes, per level: `[level][type]`.
    type_free: Vec<Vec<ResVec>>,
    /// The largest free amounts over each type's nodes, per level, built with the level's index.
    maxes: Vec<Option<Vec<FreeMax>>>,
}

impl NodeDb {
    /// Nodes with their capacities and types; `key_slots` are the layout slots of the indexed
    /// resources.
    pub(crate) fn new(
        capacities: Vec<ResVec>,
        type_of: &[u32],
        n_types: usize,
        key_slots: &[Option<usize>],
        levels: usize,
    ) -> Self {
        let mut ks = [None; MAX_INDEXED_RESOURCES];
        for (i, s) in key_slots.iter().take(MAX_INDEXED_RESOURCES).enumerate() {
            ks[i] = *s;
        }
        let mut type_nodes = vec![Vec::new(); n_types];
        let width = capacities.first().map(|c| c.len()).unwrap_or(0);
        let mut type_free: Vec<ResVec> = vec![smallvec::smallvec![0; width]; n_types];
        for (i, c) in capacities.iter().enumerate() {
            add_to(&mut type_free[type_of[i] as usize], c);
        }
        let nodes = capacities
            .into_iter()
            .enumerate()
            .map(|(i, cap)| {
                type_nodes[type_of[i] as usize].push(i as u32);
                // Slice copies: `vec![cap; levels]` clones a `SmallVec` element by element.
                let mut free: Vec<ResVec> = Vec::with_capacity(levels);
                if levels > 0 {
                    free.extend((1..levels).map(|_| ResVec::from_slice(&cap)));
                    free.push(cap);
                }
                NodeEntry { type_id: type_of[i], free, occupants: Vec::new(), users: SmallVec::new() }
            })
            .collect();
        NodeDb {
            nodes,
            type_nodes,
            key_slots: ks,
            key_used: key_slots.len().min(MAX_INDEXED_RESOURCES),
            levels,
            freed_counts: vec![0; levels],
            indexes: vec![None; levels],
            type_free: vec![type_free; levels],
            maxes: vec![None; levels],
        }
    }

    fn key_of(&self, v: &[i64], node: u32) -> Key {
        let mut k = [0i64; MAX_INDEXED_RESOURCES];
        for (i, s) in self.key_slots.iter().enumerate() {
            if let Some(s) = s {
                k[i] = v[*s];
            }
        }
        (k, node)
    }

    /// True if level `l` frees nothing beyond level `l - 1` anywhere in the pool.
    pub(crate) fn level_is_redundant(&self, l: u8) -> bool {
        l > 0 && self.freed_counts[l as usize] == 0
    }

    fn index_insert(idx: &mut TypeIndex, tier: Tier, key: Key) {
        match tier {
            Tier::Empty => {
                idx.empty.insert(key);
            }
            Tier::Sole(q) => {
                idx.nonempty.insert(key);
                let empty = &idx.empty;
                idx.sole.entry(q).or_insert_with(|| empty.new_like()).insert(key);
            }
            Tier::Shared => {
                idx.nonempty.insert(key);
            }
        }
    }

    fn index_remove(idx: &mut TypeIndex, tier: Tier, key: &Key) {
        match tier {
            Tier::Empty => {
                idx.empty.remove(key);
            }
            Tier::Sole(q) => {
                idx.nonempty.remove(key);
                if let Some(s) = idx.sole.get_mut(&q) {
                    s.remove(key);
                }
            }
            Tier::Shared => {
                idx.nonempty.remove(key);
            }
        }
    }

    fn ensure_index(&mut self, level: usize) {
        if self.indexes[level].is_some() {
            return;
        }
        self.indexes[level] = Some(self.fresh_index(level));
        self.ensure_max(level);
    }

    /// Level `level`'s index built from the nodes as they are.
    fn fresh_index(&self, level: usize) -> Vec<TypeIndex> {
        // Keys gathered per set and each set built at once from its sorted keys: cheaper than
        // inserting node by node (the first search of a level pays this, most cycles).
        let mut keys: Vec<TypeKeys> = vec![TypeKeys::default(); self.type_nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let key = self.key_of(&n.free[level], i as u32);
            let k = &mut keys[n.type_id as usize];
            match n.tier() {
                Tier::Empty => k.empty.push(key),
                Tier::Sole(q) => {
                    k.nonempty.push(key);
                    k.sole.entry(q).or_default().push(key);
                }
                Tier::Shared => k.nonempty.push(key),
            }
        }
        let set = |mut v: Vec<Key>| -> KeySet {
            v.sort_unstable();
            KeySet::from_sorted(self.key_used, v)
        };
        keys.into_iter()
            .map(|k| TypeIndex {
                empty: set(k.empty),
                nonempty: set(k.nonempty),
                sole: k.sole.into_iter().map(|(q, v)| (q, set(v))).collect(),
            })
            .collect()
    }

    fn ensure_max(&mut self, level: usize) {
        if self.maxes[level].is_some() {
            return;
        }
        let width = self.nodes.first().map_or(0, |n| n.free[level].len());
        let maxes = (0..self.type_nodes.len()).map(|t| self.recompute_max(level, t, width)).collect();
        self.maxes[level] = Some(maxes);
    }

    fn recompute_max(&self, level: usize, t: usize, width: usize) -> FreeMax {
        FreeMax::over(width, self.type_nodes[t].iter().map(|&n| &self.nodes[n as usize].free[level]))
    }

    /// Keeps the maxima of levels below `upto` in step with node `n`'s free amounts moving by
    /// `req` (`sign` 1: freed, -1: taken).
    fn track_max(&mut self, n: u32, upto: usize, req: &[i64], sign: i64) {
        let node = &self.nodes[n as usize];
        let t = node.type_id as usize;
        for l in 0..upto {
            let Some(m) = self.maxes[l].as_mut().map(|m| &mut m[t]) else { continue };
            for (s, &r) in req.iter().enumerate() {
                if r != 0 {
                    let old = node.free[l][s];
                    m.moved(s, old, old + sign * r);
                }
            }
        }
    }

    /// True if no node of type `t` has room for `req` at `level` in some resource (as far as
    /// the kept maxima know; a stale one says nothing).
    #[inline]
    fn type_too_small(&self, level: usize, t: u32, req: &[i64]) -> bool {
        let Some(m) = self.maxes[level].as_ref().map(|m| &m[t as usize]) else { return false };
        req.iter().enumerate().any(|(s, &r)| r > 0 && m.slot(s).is_some_and(|max| max < r))
    }

    /// The node types of `types` a search for `req` at `level` looks at: those too small for it
    /// in some resource (as far as the kept maxima know) are left out.
    #[inline]
    fn open_types(&self, level: usize, types: &[u32], req: &[i64]) -> SmallVec<[u32; 8]> {
        types.iter().copied().filter(|&t| !self.type_too_small(level, t, req)).collect()
    }

    /// Applies `change` to node `n`, keeping built indexes in step for levels below `upto`
    /// (all levels if the node's tier changes). `change` leaves the free amounts of levels from
    /// `upto` on as they were.
    fn update(&mut self, n: u32, upto: usize, change: impl FnOnce(&mut NodeEntry)) {
        let upto = upto.min(self.levels);
        let node = &self.nodes[n as usize];
        let old_tier = node.tier();
        let t = node.type_id as usize;
        let old_keys: SmallVec<[Option<Key>; 8]> =
            (0..upto).map(|l| self.indexes[l].as_ref().map(|_| self.key_of(&node.free[l], n))).collect();
        change(&mut self.nodes[n as usize]);
        let new_tier = self.nodes[n as usize].tier();
        let limit = if new_tier != old_tier { self.levels } else { upto };
        for l in 0..limit {
            if self.indexes[l].is_none() {
                continue;
            }
            let new = self.key_of(&self.nodes[n as usize].free[l], n);
            // Above `upto` the key stays; only the tier moved.
            let old = old_keys.get(l).copied().flatten().unwrap_or(new);
            if new == old && new_tier == old_tier {
                continue;
            }
            if let Some(idx) = self.indexes[l].as_mut() {
                Self::index_remove(&mut idx[t], old_tier, &old);
                Self::index_insert(&mut idx[t], new_tier, new);
            }
        }
    }

    /// True if every built index holds what building it afresh would.
    #[cfg(test)]
    fn indexes_match_a_rebuild(&self) -> bool {
        (0..self.levels).all(|level| match &self.indexes[level] {
            None => true,
            Some(built) => {
                let fresh = self.fresh_index(level);
                // A queue's sole-tier set may stay behind empty when its last node leaves it.
                let trimmed = |idx: &[TypeIndex]| -> Vec<TypeIndex> {
                    idx.iter()
                        .map(|t| {
                            let mut t = t.clone();
                            t.sole.retain(|_, s| !s.is_empty());
                            t
                        })
                        .collect()
                };
                trimmed(built) == trimmed(&fresh)
            }
        })
    }

    /// Puts a job on a node.
    pub(crate) fn add(&mut self, n: u32, occ: Occupant) {
        let upto = occ.freed_at as usize;
        self.freed_counts[upto] += 1;
        let t = self.nodes[n as usize].type_id as usize;
        for l in 0..upto {
            sub_from(&mut self.type_free[l][t], &occ.req);
        }
        self.track_max(n, upto, &occ.req, -1);
        self.update(n, upto, |node| node.hold(occ));
    }

    /// Puts the jobs running at the start of the cycle on their nodes (each node's in the given
    /// order), as [`Self::add`] would one by one. Before the first search no index or maximum is
    /// built, so no key has to move, and a node's free amounts can be taken once per level for
    /// all its jobs instead of once per level and job: with tens of thousands of running jobs,
    /// `add` one by one was a quarter of a cycle under load. After a search it is `add` one by
    /// one.
    pub(crate) fn load(&mut self, running: Vec<(u32, Occupant)>) {
        let searched = self.indexes.iter().any(Option::is_some) || self.maxes.iter().any(Option::is_some);
        if searched {
            for (n, occ) in running {
                self.add(n, occ);
            }
            return;
        }
        // Each node's jobs are seated in their order in `running`; then each node's free amounts
        // are taken down once, for all its new jobs.
        let mut added = vec![0u32; self.nodes.len()];
        for &(n, _) in &running {
            added[n as usize] += 1;
        }
        for (node, &k) in self.nodes.iter_mut().zip(&added) {
            node.occupants.reserve_exact(k as usize);
        }
        for (n, occ) in running {
            self.freed_counts[occ.freed_at as usize] += 1;
            self.nodes[n as usize].seat(occ);
        }
        let width = self.nodes.first().map_or(0, |n| n.free[0].len());
        let zero: ResVec = smallvec::smallvec![0; width];
        // What the node's jobs freed exactly at each level take: `freed_at[l]`.
        let mut freed_at: Vec<ResVec> = vec![zero.clone(); self.levels];
        for (n, &k) in added.iter().enumerate() {
            if k == 0 {
                continue;
            }
            freed_at.iter_mut().for_each(|f| f.fill(0));
            let node = &mut self.nodes[n];
            for occ in &node.occupants[node.occupants.len() - k as usize..] {
                add_to(&mut freed_at[occ.freed_at as usize], &occ.req);
            }
            // A job freed at `f` takes its resources at every level below `f`: level `l` loses
            // what the jobs freed above it take.
            let mut above = zero.clone();
            for l in (0..self.levels).rev() {
                if l + 1 < self.levels {
                    add_to(&mut above, &freed_at[l + 1]);
                }
                sub_from(&mut node.free[l], &above);
                sub_from(&mut self.type_free[l][node.type_id as usize], &above);
            }
        }
    }

    /// Takes a job off a node, returning its occupancy.
    pub(crate) fn remove(&mut self, n: u32, job: u32) -> Option<Occupant> {
        let pos = self.nodes[n as usize].occupants.iter().position(|o| o.job == job)?;
        let upto = self.nodes[n as usize].occupants[pos].freed_at as usize;
        self.freed_counts[upto] -= 1;
        let t = self.nodes[n as usize].type_id as usize;
        for l in 0..upto {
            add_to(&mut self.type_free[l][t], &self.nodes[n as usize].occupants[pos].req);
        }
        let req = self.nodes[n as usize].occupants[pos].req.clone();
        self.track_max(n, upto, &req, 1);
        let mut out = None;
        self.update(n, upto, |node| {
            let occ = node.occupants.swap_remove(pos);
            for l in 0..upto {
                add_to(&mut node.free[l], &occ.req);
            }
            if !occ.evicted
                && let Some(i) = node.users.iter().position(|(q, _)| *q == occ.queue)
            {
                node.users[i].1 -= 1;
                if node.users[i].1 == 0 {
                    node.users.remove(i);
                }
            }
            out = Some(occ);
        });
        out
    }

    /// Best node for `req` at `level` among nodes of `types`, by tier then best fit.
    // Inlined into its callers, as it was when the placement had one: the hottest search of a
    // cycle.
    #[inline(always)]
    pub(crate) fn find(&mut self, level: u8, types: &[u32], queue: u32, req: &[i64]) -> Option<u32> {
        let level = level as usize;
        self.ensure_index(level);
        let idx = self.indexes[level].as_ref()?;
        let lower = self.key_of(req, 0);
        let open = self.open_types(level, types, req);
        for tier in 0..3 {
            let mut best: Option<Key> = None;
            for &t in &open {
                let Some(set) = idx[t as usize].tier(tier, queue) else { continue };
                for key in set.fitting_from(&lower) {
                    if best.as_ref().is_some_and(|b| key >= b) {
                        break;
                    }
                    if key_fits(key, &lower) && fits(req, &self.nodes[key.1 as usize].free[level]) {
                        best = Some(*key);
                        break;
                    }
                }
            }
            if let Some(b) = best {
                return Some(b.1);
            }
        }
        None
    }

    /// True if `want` copies of `req` fit at `level` on the nodes of `types`, as found within the
    /// first `budget` nodes looked at (false if not, or not found within them). Each copy placed
    /// takes exactly one of the places counted, so then `want` copies placed one after another
    /// all find a place at `level`. The budget bounds the walk where the room is scattered over
    /// many nodes that fit nothing.
    pub(crate) fn has_room_for(&mut self, level: u8, types: &[u32], req: &[i64], want: u32, budget: usize) -> bool {
        let level = level as usize;
        self.ensure_index(level);
        let Some(idx) = self.indexes[level].as_ref() else { return false };
        let lower = self.key_of(req, 0);
        let (mut count, mut looked) = (0u32, 0usize);
        for t in self.open_types(level, types, req) {
            // Every node of the type is in one of the two.
            for set in [&idx[t as usize].empty, &idx[t as usize].nonempty] {
                // Every key from `lower` on counts against the budget, as it always has.
                for key in set.range_from(&lower) {
                    looked += 1;
                    if looked > budget {
                        return false;
                    }
                    if !key_fits(key, &lower) {
                        continue;
                    }
                    count = count.saturating_add(copies(req, &self.nodes[key.1 as usize].free[level]));
                    if count >= want {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Up to `k` nodes where `req` fits at `level`, in the order [`find`](Self::find) prefers
    /// them (tier, then best fit); the first is what `find` returns.
    pub(crate) fn find_candidates(&mut self, level: u8, types: &[u32], queue: u32, req: &[i64], k: usize) -> Vec<u32> {
        let level = level as usize;
        self.ensure_index(level);
        let Some(idx) = self.indexes[level].as_ref() else { return Vec::new() };
        let lower = self.key_of(req, 0);
        let open = self.open_types(level, types, req);
        let mut out = Vec::with_capacity(k);
        for tier in 0..3 {
            // The `want` smallest fitting keys over all types, sorted; a type's scan stops at
            // the first key that could not make the list.
            let want = k - out.len();
            let mut found: Vec<Key> = Vec::with_capacity(want + 1);
            for &t in &open {
                let Some(set) = idx[t as usize].tier(tier, queue) else { continue };
                for key in set.fitting_from(&lower) {
                    if found.len() == want && found.last().is_some_and(|last| key >= last) {
                        break;
                    }
                    if key_fits(key, &lower) && fits(req, &self.nodes[key.1 as usize].free[level]) {
                        let at = found.partition_point(|f| f < key);
                        found.insert(at, *key);
                        found.truncate(want);
                    }
                }
            }
            out.extend(found.into_iter().map(|key| key.1));
            if out.len() >= k {
                break;
            }
        }
        out
    }

    /// Over node `n`'s occupants freed at or below `level`: the lowest level they are freed at,
    /// and their largest [`Occupant::readiness`] (bounds on what displacing any of them costs).
    pub(crate) fn eligible_bounds(&self, n: u32, level: u8, overshare: impl Fn(u32) -> f64) -> (u8, f64) {
        let (mut lowest, mut most) = (u8::MAX, f64::NEG_INFINITY);
        for o in self.nodes[n as usize].occupants.iter().filter(|o| o.freed_at <= level) {
            lowest = lowest.min(o.freed_at);
            most = most.max(o.readiness(&overshare));
        }
        (lowest, most)
    }

    /// True if `req` fits on node `n` at `level`.
    pub(crate) fn fits_at(&self, n: u32, level: u8, req: &[i64]) -> bool {
        fits(req, &self.nodes[n as usize].free[level as usize])
    }

    /// The jobs to displace on node `n` so that `req` fits, using only occupants freed at or
    /// below `level`: lowest level first, then the readiest ([`Occupant::readiness`]: of evicted
    /// jobs the one that would return last, of running jobs those of the queue furthest above its
    /// fair share), then the newest; jobs not actually needed are kept.
    pub(crate) fn victims(&self, n: u32, level: u8, req: &[i64], overshare: impl Fn(u32) -> f64) -> Vec<u32> {
        self.victim_occupants(n, level, req, overshare).into_iter().map(|o| o.job).collect()
    }

    /// [`victims`](Self::victims), as the occupants themselves.
    pub(crate) fn victim_occupants(
        &self,
        n: u32,
        level: u8,
        req: &[i64],
        overshare: impl Fn(u32) -> f64,
    ) -> Vec<&Occupant> {
        self.pick_victims(n, level, req, overshare, |_| true)
    }

    /// The jobs to displace on node `n` so that `req` fits, as [`victims`](Self::victims), but
    /// counting as free only the occupants `allowed` accepts; none if those do not make room.
    pub(crate) fn victims_within(
        &self,
        n: u32,
        level: u8,
        req: &[i64],
        overshare: impl Fn(u32) -> f64,
        allowed: impl Fn(&Occupant) -> bool,
    ) -> Option<Vec<u32>> {
        let node = &self.nodes[n as usize];
        let mut free = node.free[0].clone();
        for o in node.occupants.iter().filter(|o| o.freed_at <= level && allowed(o)) {
            add_to(&mut free, &o.req);
        }
        if !fits(req, &free) {
            return None;
        }
        Some(self.pick_victims(n, level, req, overshare, allowed).into_iter().map(|o| o.job).collect())
    }

    /// The occupants `allowed` accepts, freed at or below `level`, to displace on node `n` so
    /// that `req` fits, in the order of [`victims`](Self::victims); those not needed are kept.
    fn pick_victims(
        &self,
        n: u32,
        level: u8,
        req: &[i64],
        overshare: impl Fn(u32) -> f64,
        allowed: impl Fn(&Occupant) -> bool,
    ) -> Vec<&Occupant> {
        let node = &self.nodes[n as usize];
        let mut cands: Vec<&Occupant> = node.occupants.iter().filter(|o| o.freed_at <= level && allowed(o)).collect();
        cands.sort_by(|a, b| {
            a.freed_at
                .cmp(&b.freed_at)
                .then_with(|| b.readiness(&overshare).total_cmp(&a.readiness(&overshare)))
                .then_with(|| b.seq.cmp(&a.seq))
                .then_with(|| a.job.cmp(&b.job))
        });
        let mut free = node.free[0].clone();
        let mut removed: Vec<&Occupant> = Vec::new();
        for c in cands {
            if fits(req, &free) {
                break;
            }
            add_to(&mut free, &c.req);
            removed.push(c);
        }
        // Keep back whoever is not needed, most protected first.
        let mut keep = vec![false; removed.len()];
        for i in (0..removed.len()).rev() {
            let mut trial = free.clone();
            sub_from(&mut trial, &removed[i].req);
            if fits(req, &trial) {
                free = trial;
                keep[i] = true;
            }
        }
        removed.into_iter().zip(keep).filter(|(_, k)| !k).map(|(o, _)| o).collect()
    }

    /// Free resources summed over the nodes of type `t` at `level`.
    pub(crate) fn type_free(&self, level: u8, t: u32) -> &ResVec {
        &self.type_free[level as usize][t as usize]
    }

    /// Largest free amount per slot over nodes of `types` at `level`: from the kept maxima,
    /// recomputing those gone stale.
    pub(crate) fn max_free(&mut self, level: u8, types: &[u32], slots: usize) -> ResVec {
        let level = level as usize;
        self.ensure_max(level);
        let mut best: ResVec = smallvec::smallvec![i64::MIN; slots];
        for &t in types {
            let t = t as usize;
            if self.maxes[level].as_ref().is_some_and(|m| m[t].stale()) {
                let fresh = self.recompute_max(level, t, slots);
                if let Some(m) = self.maxes[level].as_mut() {
                    m[t] = fresh;
                }
            }
            if let Some(m) = self.maxes[level].as_ref().and_then(|m| m[t].get()) {
                for (b, f) in best.iter_mut().zip(m) {
                    *b = (*b).max(*f);
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smallvec::smallvec;

    fn occ(job: u32, queue: u32, freed_at: u8, evicted: bool, cpu: i64) -> Occupant {
        Occupant { job, queue, freed_at, evicted, seq: job as u64, return_rank: 0, req: smallvec![cpu] }
    }

    fn db(caps: &[i64]) -> NodeDb {
        let n = caps.len();
        NodeDb::new(caps.iter().map(|c| smallvec![*c]).collect(), &vec![0; n], 1, &[Some(0)], 5)
    }

    #[test]
    fn prefers_own_queue_then_empty_then_best_fit() {
        let mut d = db(&[32, 32, 16]);
        // Empty nodes: best fit picks the 16-cpu node.
        assert_eq!(d.find(0, &[0], 0, &[4]), Some(2));
        d.add(0, occ(1, 0, 2, false, 30));
        // Queue 0's own node has 2 free: too little for 4 → empty tier, best fit = node 2.
        assert_eq!(d.find(0, &[0], 0, &[4]), Some(2));
        assert_eq!(d.find(0, &[0], 0, &[2]), Some(0));
        // Queue 1 prefers empty nodes over the node queue 0 uses.
        assert_eq!(d.find(0, &[0], 1, &[2]), Some(2));
        d.add(2, occ(2, 1, 2, false, 16));
        d.add(1, occ(3, 1, 2, false, 1));
        // No empty node left: queue 1's own node (1) first.
        assert_eq!(d.find(0, &[0], 1, &[1]), Some(1));
        // Queue 2 has no node of its own and no empty node: shared tier, best fit = node 0 (2 free).
        assert_eq!(d.find(0, &[0], 2, &[1]), Some(0));
        assert_eq!(d.find(0, &[0], 2, &[40]), None);
    }

    #[test]
    fn levels_free_lower_priorities() {
        // Priorities [20000, 30000]: levels 0, E0=1, R0=2, E1=3, R1=4.
        let lv = Levels::new(vec![30000, 20000]);
        assert_eq!(lv.count(), 5);
        let mut d = db(&[32]);
        d.add(0, occ(1, 0, lv.running_freed_at(1), false, 10)); // default-class job
        d.add(0, occ(2, 0, lv.running_freed_at(0), false, 20)); // preemptible job
        // At default priority (search up to E1 = 3): 22 free; at preemptible (up to E0 = 1): 2.
        assert!(d.fits_at(0, lv.max_search_level(1), &[22]));
        assert!(!d.fits_at(0, lv.max_search_level(1), &[23]));
        assert!(d.fits_at(0, lv.max_search_level(0), &[2]));
        assert!(!d.fits_at(0, lv.max_search_level(0), &[3]));
        assert_eq!(d.victims(0, 3, &[22], |_| 0.0), vec![2]);
        assert!(d.level_is_redundant(1));
        assert!(!d.level_is_redundant(2));
        let eviction: Vec<u8> = (0..lv.count() as u8).filter(|&l| lv.is_eviction_level(l)).collect();
        assert_eq!(eviction, vec![1, 3]);
    }

    #[test]
    fn the_guest_level_frees_guests_before_any_priority_level() {
        // Priorities [20000, 30000] with a guest level: 0, G=1, E0=2, R0=3, E1=4, R1=5.
        let lv = Levels::with_guest_level(vec![30000, 20000]);
        assert_eq!((lv.count(), lv.guest_level()), (6, Some(1)));
        assert_eq!((lv.evicted_freed_at(0), lv.running_freed_at(0), lv.max_search_level(1)), (2, 3, 4));
        assert_eq!(Levels::new(vec![1]).guest_level(), None);
        let mut d = NodeDb::new(vec![smallvec![10]], &[0], 1, &[Some(0)], lv.count());
        d.add(0, occ(1, 0, lv.running_freed_at(0), false, 4)); // a preemptible job at home
        d.add(0, occ(2, 1, 1, false, 4)); // a guest of the default class
        d.add(0, occ(3, 1, 1, true, 2)); // an evicted guest
        // At G only the guests are free; at E1 the job at home too, but guests go first (the newest
        // first).
        assert!(d.fits_at(0, 1, &[6]) && !d.fits_at(0, 1, &[7]));
        assert_eq!(d.victims(0, 1, &[6], |_| 0.0), vec![3, 2]);
        assert_eq!(d.victims(0, 1, &[2], |_| 0.0), vec![3]);
        assert_eq!(d.victims(0, 4, &[10], |_| 0.0), vec![3, 2, 1]);
    }

    #[test]
    fn index_tracks_updates() {
        let mut d = db(&[8, 8]);
        assert_eq!(d.find(0, &[0], 0, &[8]), Some(0));
        d.add(0, occ(1, 0, 2, false, 8));
        assert_eq!(d.find(0, &[0], 0, &[8]), Some(1));
        d.add(1, occ(2, 1, 2, false, 4));
        assert_eq!(d.find(0, &[0], 0, &[8]), None);
        let o = d.remove(0, 1).unwrap();
        assert_eq!(o.job, 1);
        assert_eq!(d.find(0, &[0], 0, &[8]), Some(0));
    }

    #[test]
    fn victims_minimal_and_newest_first() {
        let mut d = db(&[10]);
        d.add(0, occ(1, 0, 2, false, 4));
        d.add(0, occ(2, 0, 2, false, 4));
        d.add(0, occ(3, 0, 2, false, 2));
        // Need 4: the newest (job 3, 2 cpu) is not enough alone; then job 2 (4 cpu) suffices and
        // job 3 is kept back.
        assert_eq!(d.victims(0, 3, &[4], |_| 0.0), vec![2]);
    }

    /// Loading the running jobs leaves the db as adding them one by one does, whether or not a
    /// search built an index before (then loading is adding), and searches answer alike after.
    mod loading {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn loading_is_adding_one_by_one(
                caps in proptest::collection::vec((1i64..=16, 1i64..=16), 1..8),
                jobs in proptest::collection::vec((0usize..8, 0i64..=4, 0i64..=4, 0u8..=3, any::<bool>(), 0u32..3), 0..40),
                searched_first in any::<bool>(),
            ) {
                let n = caps.len();
                let type_of: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
                let fresh = || NodeDb::new(caps.iter().map(|&(c, m)| smallvec![c, m]).collect(), &type_of, 2, &[Some(0), Some(1)], 4);
                let (mut added, mut loaded) = (fresh(), fresh());
                if searched_first {
                    added.find(0, &[0, 1], 0, &[1, 1]);
                    loaded.find(0, &[0, 1], 0, &[1, 1]);
                }
                let running: Vec<(u32, Occupant)> = jobs
                    .iter()
                    .enumerate()
                    .map(|(i, &(at, cpu, mem, freed_at, evicted, queue))| {
                        let req: ResVec = smallvec![cpu, mem];
                        ((at % n) as u32, Occupant { job: i as u32, queue, freed_at, evicted, seq: i as u64, return_rank: 0, req })
                    })
                    .collect();
                for (node, occ) in running.clone() {
                    added.add(node, occ);
                }
                loaded.load(running);
                prop_assert_eq!(format!("{loaded:?}"), format!("{added:?}"));
                for level in 0..4u8 {
                    for queue in 0..3 {
                        for req in [[1i64, 1], [4, 2], [8, 8]] {
                            prop_assert_eq!(loaded.find(level, &[0, 1], queue, &req), added.find(level, &[0, 1], queue, &req));
                        }
                    }
                }
                prop_assert!(loaded.indexes_match_a_rebuild());
            }
        }
    }

    /// The room found for copies of a request is what placing them one after another finds.
    mod room {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn room_found_is_room_placing_finds(
                caps in proptest::collection::vec((0i64..=16, 0i64..=16), 1..8),
                running in proptest::collection::vec((0usize..8, 0i64..=6, 0i64..=6), 0..12),
                req in (0i64..=5, 0i64..=5),
                types in prop_oneof![Just(vec![0u32]), Just(vec![1u32]), Just(vec![0u32, 1])],
                want in 1u32..12,
                budget in prop_oneof![Just(usize::MAX), 1usize..6],
            ) {
                let n = caps.len();
                let type_of: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
                let mut d = NodeDb::new(caps.iter().map(|&(c, m)| smallvec![c, m]).collect(), &type_of, 2, &[Some(0), Some(1)], 4);
                for (i, &(at, cpu, mem)) in running.iter().enumerate() {
                    // Over-committed nodes (negative free amounts) included.
                    d.add((at % n) as u32, Occupant { job: i as u32, queue: i as u32 % 3, freed_at: 2, evicted: false, seq: i as u64, return_rank: 0, req: smallvec![cpu, mem] });
                }
                let req: ResVec = smallvec![req.0, req.1];
                let room = d.has_room_for(0, &types, &req, want, budget);
                let mut placed = 0u32;
                while placed < want {
                    let Some(node) = d.find(0, &types, 0, &req) else { break };
                    placed += 1;
                    d.add(node, Occupant { job: 1000 + placed, queue: 0, freed_at: 2, evicted: false, seq: 0, return_rank: 0, req: req.clone() });
                }
                // Room found means every copy finds a place; without a budget, the converse too.
                if room || budget == usize::MAX {
                    prop_assert_eq!(room, placed == want);
                }
            }
        }
    }

    /// Two resources, two node types: the kept maxima answer as a walk over every node would,
    /// and a search never misses a node that fits, whatever adds and removes came before.
    mod kept_maxima {
        use super::*;
        use proptest::prelude::*;

        fn walked(d: &NodeDb, level: usize, types: &[u32]) -> ResVec {
            let mut best: ResVec = smallvec![i64::MIN; 2];
            for &t in types {
                for &n in &d.type_nodes[t as usize] {
                    for (b, f) in best.iter_mut().zip(&d.nodes[n as usize].free[level]) {
                        *b = (*b).max(*f);
                    }
                }
            }
            best
        }

        proptest! {
            #[test]
            fn maxima_match_a_walk_over_the_nodes(
                caps in proptest::collection::vec((1i64..=16, 1i64..=16), 1..8),
                steps in proptest::collection::vec((any::<bool>(), 0usize..8, 1i64..=6, 1i64..=6, 1u8..=3), 1..60),
            ) {
                let n = caps.len();
                let type_of: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
                let mut d = NodeDb::new(caps.iter().map(|&(c, m)| smallvec![c, m]).collect(), &type_of, 2, &[Some(0), Some(1)], 4);
                let mut placed: Vec<(u32, u32)> = Vec::new();
                let mut next = 0u32;
                for (add, at, cpu, mem, freed_at) in steps {
                    if add || placed.is_empty() {
                        let node = (at % n) as u32;
                        let req: ResVec = smallvec![cpu, mem];
                        if d.fits_at(node, 0, &req) {
                            next += 1;
                            d.add(node, Occupant { job: next, queue: next % 3, freed_at, evicted: false, seq: u64::from(next), return_rank: 0, req });
                            placed.push((node, next));
                        }
                    } else {
                        let (node, job) = placed.swap_remove(at % placed.len());
                        prop_assert!(d.remove(node, job).is_some());
                    }
                    prop_assert!(d.indexes_match_a_rebuild());
                    for level in 0..4u8 {
                        for types in [&[0u32][..], &[1], &[0, 1]] {
                            let want = walked(&d, level as usize, types);
                            let req: ResVec = smallvec![cpu, mem];
                            let fits_somewhere = types.iter().any(|&t| d.type_nodes[t as usize].iter().any(|&n| d.fits_at(n, level, &req)));
                            prop_assert_eq!(d.find(level, types, 0, &req).is_some(), fits_somewhere);
                            prop_assert_eq!(d.max_free(level, types, 2), want);
                        }
                    }
                }
            }
        }
    }
}
