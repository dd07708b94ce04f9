//! The `priority` pool policy (Determined's priority scheduler).
//!
//! Every queued job of the pool, whatever its queue, is taken in one order: job priority
//! ascending (lower number first), then submission order. Jobs requesting a GPU and zero-slot
//! jobs (no `nvidia.com/gpu`) form two lines ordered and blocked separately. Within a line, once
//! a job (or gang) waits for room, no job of a strictly higher priority number starts in this
//! cycle, even where it would fit: it waits "behind" that job (head-of-line blocking). Jobs of
//! equal priority are still tried in submission order. A job that waits for something room
//! cannot give it (a queue or class limit, a rate limit, no node matching its constraints, more
//! than any node it may use offers) blocks nobody.
//!
//! With preemption, a job that does not fit preempts running jobs of its line with a strictly
//! higher priority number whose priority class is preemptible, lowest priority first (latest
//! started first among equals), and only where that makes it fit
//! ([`PoolCycle::try_place_policy`]). Gangs are placed whole or not at all.

use super::super::context::PoolCycle;
use super::super::decisions::Reason;
use super::super::queue::Candidate;
use super::super::rate_limit::RateLimits;
use super::super::resvec::add_to;
use std::sync::Arc;

impl PoolCycle<'_> {
    /// Fills the pool by strict priority.
    pub(in super::super) fn fill_by_priority(&mut self, rate: &mut RateLimits) {
        // (priority, submit sequence, queue, position in the queue's src)
        let mut order: Vec<(u32, u64, u32, u32)> = Vec::new();
        for (q, qc) in self.queues.iter().enumerate() {
            for (pos, sj) in qc.facts.iter().enumerate() {
                if sj.class != u32::MAX {
                    order.push((sj.priority, sj.seq, q as u32, pos as u32));
                }
            }
        }
        order.sort_unstable();
        let lookback =
            if self.view().cfg.max_queue_lookback == 0 { usize::MAX } else { self.view().cfg.max_queue_lookback };
        // Per line (zero-slot, GPU): the first job that waits for room, its priority, and the
        // reason of the jobs behind it (one for all of them).
        let mut blocked: [Option<(u32, Arc<Reason>)>; 2] = [None, None];
        for (prio, _, q, pos) in order {
            let qc = &self.queues[q as usize];
            if qc.queued_stopped {
                continue;
            }
            if qc.facts[pos as usize].gang
                && let Some(g) = &qc.queued[pos as usize].gang
                && qc.gangs_done.contains(g.id.as_str())
            {
                continue;
            }
            if self.stop_queued(q, lookback, rate) {
                continue;
            }
            let members = self.take_queued(q, pos);
            let Some(&first) = members.first() else { continue };
            let line = usize::from(members.iter().any(|&m| self.in_gpu_line(m)));
            if let Some((p, reason)) = &blocked[line]
                && prio > *p
            {
                let reason = reason.clone();
                for &m in &members {
                    self.set_reason(m, reason.clone());
                }
                continue;
            }
            let gang = if members.len() > 1 || self.jobs[first as usize].gang {
                self.jobs[first as usize].info.gang.clone()
            } else {
                None
            };
            let mut req = self.view().layout.zero();
            for &m in &members {
                add_to(&mut req, &self.req(m));
            }
            self.attempt(q, Candidate { jobs: members.clone(), evicted: false, gang, req }, rate);
            if members.iter().any(|&m| self.ledger.scheduled(m)) || blocked[line].is_some() {
                continue;
            }
            let waits = self.ledger.fate(first).reason.as_deref().is_some_and(Self::waits_for_room);
            if waits && self.could_ever_fit(&members) {
                blocked[line] = Some((prio, self.behind(first)));
            }
        }
    }
}
