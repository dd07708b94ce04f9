//! Progressive filling of one pool: each queue offers its next candidate gang (evicted jobs,
//! jobs offered again after a rebalance and queued jobs, merged in queue order); the most urgent
//! turn goes first, then the queue whose cost after scheduling is lowest. After the last
//! rebalance, evicted jobs whose place nobody kept are reclaimed.
//!
//! Apart from [`super::placement`], which places one candidate, and [`super::eviction`], which
//! decides what to evict and when to rebalance.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::job::{Origin, Status};
use super::queue::{Candidate, Turn};
use super::queue_order::CycleOrderKey;
use super::rate_limit::RateLimits;
use super::rate_limit::RateScope;
use super::resvec::add_to;
use smallvec::SmallVec;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::sync::Arc;

/// Where a queue's next candidate comes from. The three streams are merged in queue order
/// ([`CycleOrderKey`]); on equal keys the stream listed first goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stream {
    /// Jobs evicted in this cycle (`CycleQueue::evicted`, one entry per gang): they may return to their
    /// nodes.
    Evicted,
    /// Jobs that waited for room, offered again after a rebalance (`CycleQueue::retry`).
    Retry,
    /// Queued jobs not offered yet (`CycleQueue::order`, or `CycleQueue::src` when that is in order).
    Queued,
}

/// The head of a stream: its key, the stream, and a job (`Evicted`, `Retry`) or a position in
/// `queued` (`Queued`).
type Head = (CycleOrderKey, Stream, u32);

/// The stream head to take next: the first in queue order, on equal keys the first stream.
#[inline]
fn first_head(heads: [Option<Head>; 3]) -> Option<(Stream, u32)> {
    // Unrolled: this runs once per candidate, and an iterator over the array cost several times
    // more.
    let earlier = |a: Option<Head>, b: Option<Head>| match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 < x.0 || (y.0 == x.0 && y.1 < x.1) { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    };
    let [a, b, c] = heads;
    earlier(earlier(a, b), c).map(|(_, stream, at)| (stream, at))
}

impl<'a> PoolCycle<'a> {
    /// Progressive filling until every queue has nothing more to offer.
    /// Fills, then rebalances a bounded number of times.
    pub(super) fn fill(&mut self, rate: &mut RateLimits) {
        loop {
            if self.tree.is_some() {
                self.fill_tree(rate);
                if !self.eviction().rebalance() {
                    break;
                }
                continue;
            }
            let mut heap = BinaryHeap::new();
            for q in 0..self.queues.len() as u32 {
                if let Some(t) = self.advance(q, rate) {
                    heap.push(t);
                }
            }
            // The queue whose turn it is takes its next turn in place: one sift down instead of a
            // pop and a push. Turns are totally ordered (the queue breaks ties), so the order of
            // turns is the same either way.
            while let Some(mut top) = heap.peek_mut() {
                let q = top.queue;
                let failed = match self.queues[q as usize].current.take() {
                    Some(cand) => self.attempt(q, cand, rate),
                    None => None,
                };
                match self.advance_past(q, rate, failed) {
                    Some(t) => *top = t,
                    None => {
                        PeekMut::pop(top);
                    }
                }
            }
            if !self.eviction().rebalance() {
                break;
            }
        }
        self.reclaim();
    }

    /// Evicted jobs whose place was taken by a job that later gave it up again (withdrawn in a
    /// rebalance, or its gang broke) return if their node still has room: nothing else will use
    /// that room in this cycle, and preempting them would help no one.
    fn reclaim(&mut self) {
        let mut evicted: Vec<u32> =
            (0..self.jobs.len() as u32).filter(|&j| self.ledger.status(j) == Status::Evicted).collect();
        evicted.sort_by_key(|&j| (self.jobs[j as usize].queue, self.order_key(j), j));
        for j in evicted {
            if self.ledger.status(j) != Status::Evicted {
                continue;
            }
            let job = &self.jobs[j as usize];
            match job.info.gang.clone() {
                None => {
                    self.return_evicted(j);
                }
                Some(g) => {
                    let members: SmallVec<[u32; 1]> = self
                        .gang_members(job.queue, g.id.as_str())
                        .into_iter()
                        .filter(|&m| self.ledger.status(m) == Status::Evicted)
                        .collect();
                    let req = self.view().layout.zero();
                    let cand = Candidate { jobs: members, evicted: true, gang: Some(g), req };
                    self.return_evicted_gang(&cand);
                }
            }
        }
    }

    /// Position in `queued` of the queue's next queued job to offer, skipping jobs not for this
    /// pool, members of gangs already offered, and gang members before their gang's last.
    pub(super) fn peek_queued(&mut self, q: u32) -> Option<u32> {
        let qc = &mut self.queues[q as usize];
        loop {
            let pos = match &qc.order {
                Some(o) => *o.get(qc.queued_pos)?,
                None => {
                    if qc.queued_pos >= qc.queued.len() {
                        return None;
                    }
                    qc.queued_pos as u32
                }
            };
            let sj = &qc.facts[pos as usize];
            if sj.class == u32::MAX {
                qc.queued_pos += 1;
                continue;
            }
            // A gang is offered where its last queued member stands in queue order, as in Armada:
            // a job of the queue that came between its members goes first.
            if sj.gang
                && let Some(g) = &qc.queued[pos as usize].gang
                && (qc.gangs_done.contains(g.id.as_str())
                    || qc.queued_gangs.get(g.id.as_str()).and_then(|m| m.last()).is_some_and(|last| *last != pos))
            {
                qc.queued_pos += 1;
                continue;
            }
            return Some(pos);
        }
    }

    /// Position of the queue's next queued job to offer, unless the global rate limit or the
    /// lookback limit stops the queue's queued jobs (noted once, for the rest of the cycle).
    fn next_queued(&mut self, q: u32, lookback: usize) -> Option<u32> {
        if self.queues[q as usize].queued_stopped {
            return None;
        }
        let pos = self.peek_queued(q)?;
        let stop = match self.ledger.rate_stop() {
            Some(r) => r.clone(),
            None if self.queues[q as usize].taken >= lookback => Arc::new(Reason::LookbackLimit {
                queue: self.queues[q as usize].name.clone(),
                limit: self.view().cfg.max_queue_lookback,
            }),
            None => return Some(pos),
        };
        let qc = &mut self.queues[q as usize];
        qc.queued_stopped = true;
        qc.note.get_or_insert(stop);
        None
    }

    /// Moves queue `q` to its next candidate and returns its turn, if it has one.
    pub(super) fn advance(&mut self, q: u32, rate: &mut RateLimits) -> Option<Turn> {
        self.advance_past(q, rate, None)
    }

    /// [`Self::advance`], after the queue's last candidate, a single queued job, failed on its
    /// class's verdict (`failed`: the job, whose reason is the verdict). The queued jobs alike
    /// that come next (the same class and priority class, not in gangs) fail on the same verdict
    /// without a turn each. Each would have had the next turn at once: its turn equals the one
    /// just taken (the same urgency and cost after, as nothing was added to the queue), and what
    /// its attempt reads (the queue's allocation and limits, the rate buckets, floating
    /// resources, the verdict) has not changed. Under load most of the jobs a cycle looks at
    /// fail so, behind a full pool. Not with reservations: a job with access to one does not
    /// share its class's verdict.
    fn advance_past(&mut self, q: u32, rate: &mut RateLimits, failed: Option<u32>) -> Option<Turn> {
        let failed = failed.filter(|_| self.view().reservations.is_none());
        if self.ledger.rate_stop().is_none() && rate.global_exhausted() {
            self.ledger.stop_for_rate(Arc::new(Reason::RateLimited { scope: RateScope::Global }));
        }
        let lookback =
            if self.view().cfg.max_queue_lookback == 0 { usize::MAX } else { self.view().cfg.max_queue_lookback };
        loop {
            let next_queued = self.next_queued(q, lookback);
            let qc = &self.queues[q as usize];
            let next_evicted = qc.evicted.get(qc.evicted_pos).copied();
            let next_retry = qc.retry.get(qc.retry_pos).copied();
            let heads: [Option<Head>; 3] = [
                next_evicted.map(|e| (self.order_key(e), Stream::Evicted, e)),
                next_retry.map(|r| (self.order_key(r), Stream::Retry, r)),
                next_queued
                    .map(|pos| (self.queued_key(&qc.facts[pos as usize]).with_evicted(false), Stream::Queued, pos)),
            ];
            let (stream, at) = first_head(heads)?;
            let members = match stream {
                Stream::Evicted => {
                    self.queues[q as usize].evicted_pos += 1;
                    self.members_still(q, at, Status::Evicted)
                }
                Stream::Retry => {
                    self.queues[q as usize].retry_pos += 1;
                    self.members_still(q, at, Status::Waiting)
                }
                Stream::Queued => {
                    if let Some(j) = failed
                        && self.alike(j, q, at)
                        && let Some(verdict) = self.ledger.fate(j).reason.clone()
                    {
                        let taken = self.take_queued(q, at);
                        self.ledger.count_tried(taken.len());
                        for m in taken {
                            self.set_reason(m, verdict.clone());
                        }
                        continue;
                    }
                    self.take_queued(q, at)
                }
            };
            if members.is_empty() {
                continue;
            }
            let first = members[0];
            let req = if members.len() == 1 {
                self.req(first)
            } else {
                let mut req = self.view().layout.zero();
                for &m in &members {
                    add_to(&mut req, &self.req(m));
                }
                req
            };
            let urgency = self.jobs[first as usize].class_priority;
            let qc = &self.queues[q as usize];
            let cost_after = (self.view().cost.share_with(&qc.alloc, &req) + qc.usage_offset) * qc.priority_factor;
            let gang = if members.len() > 1 || self.jobs[first as usize].gang {
                self.jobs[first as usize].info.gang.clone()
            } else {
                None
            };
            let evicted = stream == Stream::Evicted;
            let qc = &mut self.queues[q as usize];
            qc.current = Some(Candidate { jobs: members, evicted, gang, req });
            return Some(Turn::new(urgency, cost_after, q));
        }
    }

    /// True if the queued job at position `pos` of queue `q`'s `queued` is like cycle job `j`:
    /// of its class and priority class, and not in a gang.
    #[inline]
    fn alike(&self, j: u32, q: u32, pos: u32) -> bool {
        let (job, f) = (&self.jobs[j as usize], &self.queues[q as usize].facts[pos as usize]);
        f.class == job.class && f.priority_class == job.priority_class && !f.gang
    }

    /// Job `first` of queue `q`, with the other members of its gang, if it still has status
    /// `expected`; none if it no longer has (it went with its gang's first member, or was dealt
    /// with since it was listed).
    fn members_still(&self, q: u32, first: u32, expected: Status) -> SmallVec<[u32; 1]> {
        if self.ledger.status(first) != expected {
            return SmallVec::new();
        }
        let job = &self.jobs[first as usize];
        match &job.info.gang {
            Some(g) => {
                self.gang_members(q, g.id.as_str()).into_iter().filter(|&m| self.ledger.status(m) == expected).collect()
            }
            None => smallvec::smallvec![first],
        }
    }

    /// Takes the queued job at position `pos` of queue `q`'s `queued`, with the queued members of its
    /// gang, into the cycle.
    pub(super) fn take_queued(&mut self, q: u32, pos: u32) -> SmallVec<[u32; 1]> {
        let qc = &mut self.queues[q as usize];
        qc.queued_pos += 1;
        let src = qc.queued;
        let gang = if qc.facts[pos as usize].gang { src[pos as usize].gang.as_ref() } else { None };
        let Some(g) = gang else {
            // Most jobs: no positions to gather.
            qc.taken += 1;
            let sj = qc.facts[pos as usize].clone();
            return smallvec::smallvec![self.new_job(&sj, &src[pos as usize], q, Origin::Queued)];
        };
        qc.gangs_done.insert(g.id.as_str());
        let positions: SmallVec<[u32; 1]> = qc
            .queued_gangs
            .get(g.id.as_str())
            .map(|m| m.iter().copied().collect())
            .unwrap_or_else(|| smallvec::smallvec![pos]);
        qc.taken += positions.len();
        let mut members: SmallVec<[u32; 1]> = SmallVec::with_capacity(positions.len());
        for &p in &positions {
            let sj = self.queues[q as usize].facts[p as usize].clone();
            members.push(self.new_job(&sj, &src[p as usize], q, Origin::Queued));
        }
        self.set_offered_gang(q, g.id.as_str(), members.to_vec());
        members
    }
}

#[cfg(test)]
mod tests {
    use super::super::queue_order::QueueOrderKey;
    use super::*;

    #[test]
    fn turns_pop_urgent_then_cheapest_then_name() {
        let mut h = BinaryHeap::new();
        h.push(Turn::new(20000, 0.1, 0));
        h.push(Turn::new(30000, 0.9, 2));
        h.push(Turn::new(20000, 0.1, 1));
        h.push(Turn::new(20000, 0.05, 3));
        let order: Vec<u32> = std::iter::from_fn(|| h.pop().map(|t| t.queue)).collect();
        assert_eq!(order, vec![2, 3, 0, 1]);
    }

    proptest::proptest! {
        /// The fill loop takes a queue's next turn in the heap's top place; that gives the turns
        /// in the order a pop and a push would, ties in urgency and cost included.
        #[test]
        fn taking_the_next_turn_in_place_keeps_the_order_of_turns(
            starts in proptest::collection::vec((0i32..3, 0u8..4), 1..12),
            nexts in proptest::collection::vec(proptest::option::of((0i32..3, 0u8..4)), 0..80),
        ) {
            let turn = |(urgency, cost): (i32, u8), queue: usize| Turn::new(urgency, f64::from(cost) / 4.0, queue as u32);
            let initial = || -> BinaryHeap<Turn> { starts.iter().enumerate().map(|(q, &t)| turn(t, q)).collect() };
            let mut script = nexts.iter();
            let mut popped_and_pushed = Vec::new();
            let mut heap = initial();
            while let Some(top) = heap.pop() {
                popped_and_pushed.push(top.queue);
                if let Some(Some(t)) = script.next() {
                    heap.push(turn(*t, top.queue as usize));
                }
            }
            let mut script = nexts.iter();
            let mut in_place = Vec::new();
            let mut heap = initial();
            while let Some(mut top) = heap.peek_mut() {
                in_place.push(top.queue);
                match script.next() {
                    Some(Some(t)) => *top = turn(*t, top.queue as usize),
                    _ => {
                        PeekMut::pop(top);
                    }
                }
            }
            proptest::prop_assert_eq!(in_place, popped_and_pushed);
        }
    }

    #[test]
    fn stream_heads_go_in_queue_order_then_stream_order() {
        let key = |class_priority, priority, seq, evicted| {
            QueueOrderKey::new(class_priority, priority, seq).with_evicted(evicted)
        };
        let heads = [
            Some((key(10, 0, 5, false), Stream::Queued, 0)),
            Some((key(10, 0, 5, false), Stream::Retry, 1)),
            Some((key(10, 0, 5, false), Stream::Evicted, 2)),
        ];
        assert_eq!(first_head(heads), Some((Stream::Evicted, 2)));
        let heads =
            [None, Some((key(10, 0, 5, false), Stream::Retry, 1)), Some((key(10, 0, 5, false), Stream::Queued, 0))];
        assert_eq!(first_head(heads), Some((Stream::Retry, 1)));
        let heads =
            [Some((key(10, 2, 9, true), Stream::Evicted, 2)), None, Some((key(10, 0, 5, false), Stream::Queued, 0))];
        assert_eq!(first_head(heads), Some((Stream::Evicted, 2)));
        let heads = [
            Some((key(5, 0, 0, true), Stream::Evicted, 2)),
            Some((key(10, 3, 9, false), Stream::Retry, 1)),
            Some((key(10, 1, 7, false), Stream::Queued, 0)),
        ];
        assert_eq!(first_head(heads), Some((Stream::Queued, 0)));
        assert_eq!(first_head([None, None, None]), None);
    }
}
