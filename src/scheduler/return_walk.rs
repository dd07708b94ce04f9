//! The evicted jobs in the order they would give their places up, last to return first
//! ([`super::return_order`] ranks them), and the walk that finds the node where a job takes the
//! places of the evicted jobs that would return last. Reads only the node db and the jobs, so the
//! cycle can lend it those while it updates its own list.

use super::job::{Fate, Status};
use super::nodedb::{NodeDb, Occupant};
use super::resvec::{ResVec, add_to, fits};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

/// The evicted jobs of one pool's cycle, the one that would return last first.
#[derive(Debug)]
pub(super) struct ReturnWalk {
    /// Evicted jobs, the one that would return last first; entries before `head` are gone for
    /// good, later ones are checked when read.
    order: Vec<u32>,
    head: usize,
    /// Lowest return rank given so far: each eviction ranks its jobs below the ones before, so
    /// that jobs still evicted from an earlier round give their places up first.
    rank_floor: u32,
    /// Scratch for [`ReturnWalk::fair_share_node`]: per node visited, its free room plus what
    /// the evicted jobs walked so far would leave.
    room_if_evicted_leave: HashMap<u32, ResVec>,
}

impl Default for ReturnWalk {
    fn default() -> Self {
        ReturnWalk { order: Vec::new(), head: 0, rank_floor: u32::MAX, room_if_evicted_leave: HashMap::default() }
    }
}

/// Job `j`'s node and occupancy if it is evicted and still holds its place there.
pub(super) fn evicted_occupant<'d>(db: &'d NodeDb, fates: &[Fate], j: u32) -> Option<(u32, &'d Occupant)> {
    let fate = &fates[j as usize];
    if fate.status != Status::Evicted {
        return None;
    }
    let n = fate.node?;
    db.nodes[n as usize].occupants.iter().find(|o| o.job == j && o.evicted).map(|o| (n, o))
}

impl ReturnWalk {
    /// The first of `count` return ranks below every rank given so far (which it becomes).
    pub(super) fn ranks_below(&mut self, count: usize) -> u32 {
        self.rank_floor = self.rank_floor.saturating_sub(count as u32);
        self.rank_floor
    }

    /// After an eviction: the jobs still evicted from earlier rounds (but not `chosen` again)
    /// keep their order, and the jobs just evicted (`order`, first to return first) follow, last
    /// to return first.
    pub(super) fn restart(&mut self, db: &NodeDb, fates: &[Fate], chosen: &BTreeSet<u32>, order: &[u32]) {
        let mut walk: Vec<u32> = self.order[self.head..]
            .iter()
            .copied()
            .filter(|&j| j != GONE && !chosen.contains(&j) && evicted_occupant(db, fates, j).is_some())
            .collect();
        walk.extend(order.iter().rev());
        self.order = walk;
        self.head = 0;
    }

    /// The node where a job needing `req` on nodes of `types` takes the places of the evicted
    /// jobs freed at eviction level `level` that would return last: walking the evicted jobs from
    /// the last to return, the first node where what they free (with everything freed below
    /// `level`) makes room.
    ///
    /// Lower levels were searched first, so every node with room at this level needs some evicted
    /// job of this level to go, and the walk finds one of them if there is any. It stops after
    /// [`WALK_LIMIT`] evicted jobs, though (a large job among many small evicted ones, or evicted
    /// jobs on nodes the job may not use): then None, and the caller chooses among the nodes its
    /// tier and best-fit order ranks first, still by return rank.
    pub(super) fn fair_share_node(
        &mut self,
        db: &NodeDb,
        fates: &[Fate],
        recording: bool,
        level: u8,
        types: &[u32],
        req: &ResVec,
    ) -> Option<u32> {
        let below = (level - 1) as usize;
        let free = &mut self.room_if_evicted_leave;
        free.clear();
        let mut found = None;
        let mut visited = 0;
        let mut i = self.head;
        while i < self.order.len() && visited < WALK_LIMIT {
            let j = self.order[i];
            i += 1;
            if j == GONE {
                continue;
            }
            visited += 1;
            let Some((n, occ)) = evicted_occupant(db, fates, j) else {
                // Returned or displaced: gone for good, unless it happened in a trial that may
                // still be rolled back.
                if !recording {
                    self.order[i - 1] = GONE;
                }
                continue;
            };
            let node = &db.nodes[n as usize];
            if occ.freed_at as usize != below + 1 || !types.contains(&node.type_id) {
                continue;
            }
            let f = free.entry(n).or_insert_with(|| node.free[below].clone());
            add_to(f, &occ.req);
            if fits(req, f) {
                found = Some(n);
                break;
            }
        }
        while self.head < self.order.len() && self.order[self.head] == GONE {
            self.head += 1;
        }
        found
    }
}

/// Evicted jobs one placement looks at before falling back on the tier and best-fit order:
/// enough for jobs the size of the evicted ones, few enough that a cycle with many evicted jobs
/// stays fast.
const WALK_LIMIT: usize = 64;

/// An entry of [`ReturnWalk::order`] that no longer holds a place.
const GONE: u32 = u32::MAX;
