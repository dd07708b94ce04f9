//! Reservations for jobs that cannot fit piecemeal (Slurm's backfill reservations, Flux, KAI):
//! a gang of eight one-cpu jobs on a busy eight-cpu node never starts if each cpu that frees up
//! goes to the next small job of another queue. With `gang_reservation_after` set, a gang (or a
//! large job) that has waited that long at the head of its queue's order without fitting gets
//! the nodes that free up for it soonest reserved: no other new job starts on them until it fits,
//! except jobs whose deadline ends before the reservation's expected start (backfill).
//!
//! Stateless, so that simulate, the server and replay agree: each cycle decides its reservations
//! from its own inputs. A pool's cycle runs once as usual (first pass). If that leaves a job that
//! qualifies — queued, the first of its queue's order not placed, waiting for room (not a limit,
//! a rate or a missing node), queued for at least `gang_reservation_after` since it was last
//! queued ([`JobTimes`]) — the oldest qualifying ones, up to `max_reservations_per_pool`, get
//! nodes ([`PoolCycle::plan_reservations`]) and the pool's cycle runs again from the same start
//! (same random draws, same rate buckets) with those nodes reserved (second pass). A cpu freed on
//! a reserved node therefore stays free: the first pass may give it away, the second does not.
//!
//! Which nodes: the running jobs' expected ends (their run's start plus their deadline) are taken
//! in order, and the first time at which all the job's (or gang's) members fit, first fit over
//! the nodes with the most room first, within one executor (and one value of the gang's
//! uniformity label), gives both the nodes and the expected start. If the known ends never make
//! room, the nodes with the most room the job could use now are taken, as many as hold it when
//! empty, and the expected start is unknown (then nothing backfills).
//!
//! In the second pass reserved nodes form node types of their own ([`super::node_types`]), so
//! the restriction costs one filter of a job's node types ([`PoolCycle::unreserved_types`]);
//! nothing else changes: fair-share eviction and urgency preemption run as before (a running job
//! evicted in the scheduler's view still returns to its reserved node), and the reserved job is
//! placed as any job when its nodes have room. Jobs that may use reserved nodes bypass the cached
//! verdicts of their class (which speak for jobs that may not). With the option off nothing here
//! runs.

use super::build::node_capacities;
use super::context::PoolCycle;
use super::decisions::Reason;
use super::job::{Origin, Status};
use super::reservation_plan::{JobTimes, PoolReservations, Reservation, ReservedNode};
use super::resvec::{ResVec, fits, sub_from};
use super::snapshot::Snapshot;
use crate::model::JobId;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// True if reservations are on.
#[inline]
pub(crate) fn enabled(cfg: &super::SchedulerConfig) -> bool {
    !cfg.gang_reservation_after.is_zero()
}

/// A job or gang that qualifies for a reservation.
struct Candidate {
    /// The cycle's jobs, queue order.
    members: Vec<u32>,
    queue: u32,
    since_ms: i64,
}

impl<'a> PoolCycle<'a> {
    /// After the first pass: the reservations this pool's cycle holds, or none if no job
    /// qualifies (then the first pass stands).
    pub(super) fn plan_reservations(&mut self, snap: &'a Snapshot, now_ms: i64) -> Option<PoolReservations<'a>> {
        let cfg = self.view().cfg;
        let after = i64::try_from(cfg.gang_reservation_after.as_millis()).unwrap_or(i64::MAX);
        let offered: HashMap<JobId, u32> = self.jobs.queued().map(|j| (self.jobs[j as usize].id, j)).collect();
        let mut cands: Vec<Candidate> = (0..self.queues.len() as u32)
            .filter_map(|q| self.head_waiting_for_room(q, &offered, &snap.job_times))
            .filter(|c| now_ms.saturating_sub(c.since_ms) >= after)
            .collect();
        if cands.is_empty() {
            return None;
        }
        cands.sort_by_key(|c| (c.since_ms, self.jobs[c.members[0] as usize].seq));
        let (capacities, _) = node_capacities(&self.view().nodes, &self.view().layout, &self.view().floating);
        let timeline = self.running_timeline(&snap.job_times);
        let mut node_res = vec![0u32; self.view().nodes.len()];
        let mut list = Vec::new();
        let mut members = HashMap::default();
        for c in cands {
            if list.len() >= cfg.max_reservations_per_pool as usize {
                break;
            }
            let Some((nodes, start)) = self.reserve_nodes(&c, &capacities, &timeline, &node_res, now_ms) else {
                continue;
            };
            let r = list.len() as u32 + 1;
            for &n in &nodes {
                node_res[n as usize] = r;
            }
            for &m in &c.members {
                members.insert(self.jobs[m as usize].id, r);
            }
            list.push(self.reservation(&c, &nodes, start));
        }
        if list.is_empty() {
            return None;
        }
        Some(PoolReservations { list, node_res, type_res: Vec::new(), members, times: &snap.job_times, now_ms })
    }

    /// The first job of queue `q`'s order that the first pass did not place, with its gang, if
    /// it waits for room and its times are known.
    fn head_waiting_for_room(
        &self,
        q: u32,
        offered: &HashMap<JobId, u32>,
        times: &BTreeMap<JobId, JobTimes>,
    ) -> Option<Candidate> {
        let qc = &self.queues[q as usize];
        let positions: Box<dyn Iterator<Item = u32>> = match &qc.order {
            Some(o) => Box::new(o.iter().copied()),
            None => Box::new(0..qc.queued.len() as u32),
        };
        for p in positions {
            if qc.facts.get(p as usize).is_none_or(|f| f.class == u32::MAX) {
                continue;
            }
            // Not offered in the first pass: it waits for its turn, not for room.
            let &j = offered.get(&qc.queued[p as usize].id)?;
            let fate = self.ledger.fate(j);
            if fate.status != Status::Waiting {
                continue;
            }
            if !waits_for_room(fate.reason.as_deref()) {
                return None;
            }
            let members: Vec<u32> = match &self.jobs[j as usize].info.gang {
                Some(g) => self
                    .gang_members(q, g.id.as_str())
                    .into_iter()
                    .filter(|&m| self.jobs[m as usize].was_queued() && self.ledger.status(m) == Status::Waiting)
                    .collect(),
                None => vec![j],
            };
            let mut since = i64::MIN;
            for &m in &members {
                since = since.max(times.get(&self.jobs[m as usize].id)?.since_ms);
            }
            return Some(Candidate { members, queue: q, since_ms: since });
        }
        None
    }

    /// The running jobs of the pool as (node, requests, expected end), for the timeline.
    fn running_timeline(&self, times: &BTreeMap<JobId, JobTimes>) -> Vec<(u32, ResVec, Option<i64>)> {
        self.jobs
            .running()
            .filter_map(|j| {
                let Origin::Running { node } = self.jobs[j as usize].origin() else { return None };
                let end = times.get(&self.jobs[j as usize].id).and_then(JobTimes::expected_end);
                Some((node, self.req(j), end))
            })
            .collect()
    }

    /// The nodes to reserve for `c` (none of them reserved already) and when it is expected to
    /// fit there, or none if it fits on no set of free nodes even when they are empty.
    fn reserve_nodes(
        &mut self,
        c: &Candidate,
        capacities: &[ResVec],
        timeline: &[(u32, ResVec, Option<i64>)],
        taken: &[u32],
        now_ms: i64,
    ) -> Option<(Vec<u32>, Option<i64>)> {
        let mut reqs: Vec<ResVec> = Vec::with_capacity(c.members.len());
        let mut usable = vec![false; self.view().nodes.len()];
        for &m in &c.members {
            let (req, types) = self.job_targets(m).ok()?;
            for (n, &t) in self.view().types.type_of.iter().enumerate() {
                if taken[n] == 0 && types.contains(&t) {
                    usable[n] = true;
                }
            }
            reqs.push(req);
        }
        let label = self.jobs[c.members[0] as usize].info.gang.as_ref().and_then(|g| g.node_uniformity_label.clone());
        let domains = self.reservation_domains(&usable, label.as_deref());
        let mut ends: Vec<i64> = timeline.iter().filter_map(|(n, _, e)| e.filter(|_| usable[*n as usize])).collect();
        ends.push(now_ms);
        ends.retain(|&e| e >= now_ms);
        ends.sort_unstable();
        ends.dedup();
        for &t in &ends {
            let mut free: Vec<ResVec> = capacities.to_vec();
            for (n, req, end) in timeline {
                if end.is_none_or(|e| e > t) {
                    sub_from(&mut free[*n as usize], req);
                }
            }
            if let Some(nodes) = domains.iter().find_map(|d| pack(&reqs, &roomiest_first(d, &free), &free)) {
                return Some((nodes, Some(t)));
            }
        }
        // No known end makes room: the nodes with the most room now, as many as hold it empty.
        let mut free_now: Vec<ResVec> = capacities.to_vec();
        for (n, req, _) in timeline {
            sub_from(&mut free_now[*n as usize], req);
        }
        domains.iter().find_map(|d| pack(&reqs, &roomiest_first(d, &free_now), capacities).map(|nodes| (nodes, None)))
    }

    /// The usable nodes grouped into the domains a gang may use (one executor, and one value of
    /// its uniformity label), in node order.
    fn reservation_domains(&self, usable: &[bool], label: Option<&str>) -> Vec<Vec<u32>> {
        let mut domains: BTreeMap<(&str, Option<&str>), Vec<u32>> = BTreeMap::new();
        for (n, node) in self.view().nodes.iter().enumerate() {
            if !usable[n] {
                continue;
            }
            let value = match label {
                Some(l) => match node.labels.get(l) {
                    Some(v) => Some(v.as_str()),
                    None => continue,
                },
                None => None,
            };
            domains.entry((node.executor.as_str(), value)).or_default().push(n as u32);
        }
        domains.into_values().collect()
    }

    /// The reservation of `c` on `nodes`.
    fn reservation(&self, c: &Candidate, nodes: &[u32], start: Option<i64>) -> Reservation {
        let first = &self.jobs[c.members[0] as usize];
        let mut reserved: Vec<ReservedNode> = nodes
            .iter()
            .map(|&n| {
                let node = self.view().nodes[n as usize];
                ReservedNode { executor: node.executor.clone(), node: node.name.clone() }
            })
            .collect();
        reserved.sort();
        Reservation {
            job_id: first.id,
            jobs: c.members.iter().map(|&m| self.jobs[m as usize].id).collect(),
            gang: first.info.gang.as_ref().map(|g| g.id.clone()),
            queue: self.queues[c.queue as usize].name.clone(),
            pool: self.view().pool.clone(),
            nodes: reserved,
            expected_start_ms: start,
            queued_since_ms: c.since_ms,
            kept_off: 0,
        }
    }

    /// `types` without the reserved nodes' types job `j` may not use, or why it may use none.
    #[inline]
    pub(super) fn unreserved_types(&self, j: u32, types: Vec<u32>) -> Result<Vec<u32>, Reason> {
        let Some(res) = self.view().reservations.as_deref() else { return Ok(types) };
        let id = self.jobs[j as usize].id;
        let (allowed, kept): (Vec<u32>, Vec<u32>) =
            types.iter().partition(|&&t| res.may_use(res.type_res[t as usize], id));
        if allowed.is_empty()
            && let Some(&t) = kept.first()
        {
            let r = &res.list[res.type_res[t as usize] as usize - 1];
            let nodes = (0..self.view().nodes.len())
                .filter(|&n| kept.contains(&self.view().types.type_of[n]))
                .map(|n| self.view().nodes[n].name.clone())
                .collect();
            return Err(Reason::KeptOffReservation { pool: r.pool.clone(), nodes, job: r.job_id });
        }
        Ok(allowed)
    }

    /// True if job `j` may use some reserved node: the cached verdicts of its class speak for
    /// jobs that may not, so it neither reads nor writes them.
    #[inline]
    pub(super) fn bypasses_verdicts(&self, j: u32) -> bool {
        self.view().reservations.as_deref().is_some_and(|r| r.any_access(self.jobs[j as usize].id))
    }

    /// After the second pass: the reserved jobs that still wait say so, jobs that would have
    /// fitted on a reserved node say they were kept off, and the reservations still held (their
    /// jobs not placed) are returned for the decisions.
    pub(super) fn finish_reservations(&mut self) -> Vec<Reservation> {
        let Some(mut res) = self.view().reservations.clone() else { return Vec::new() };
        let held: Vec<Arc<Reason>> = res
            .list
            .iter()
            .map(|r| {
                Arc::new(Reason::HoldsReservation {
                    pool: r.pool.clone(),
                    nodes: r.nodes.iter().map(|n| n.node.clone()).collect(),
                    expected_start_ms: r.expected_start_ms,
                })
            })
            .collect();
        let mut waiting = vec![false; res.list.len()];
        for j in self.jobs.queued() {
            let (id, fate) = (self.jobs[j as usize].id, self.ledger.fate(j));
            if fate.status != Status::Waiting {
                continue;
            }
            if let Some(&r) = res.members.get(&id) {
                waiting[r as usize - 1] = true;
                self.set_reason(j, held[r as usize - 1].clone());
            } else if let Some(reason) = self.kept_off(j, &res) {
                if let Reason::KeptOffReservation { job, .. } = &*reason
                    && let Some(r) = res.list.iter_mut().find(|r| r.job_id == *job)
                {
                    r.kept_off += 1;
                }
                self.set_reason(j, reason);
            }
        }
        res.list.into_iter().zip(waiting).filter(|(_, w)| *w).map(|(r, _)| r).collect()
    }

    /// Why waiting job `j` did not start, if it waits for room and a reserved node it may not
    /// use has that room free.
    fn kept_off(&mut self, j: u32, res: &PoolReservations<'_>) -> Option<Arc<Reason>> {
        let reason = self.ledger.fate(j).reason.as_deref();
        // Kept off every node it matches when it was tried (even if others filled them since).
        if matches!(reason, Some(Reason::KeptOffReservation { .. })) {
            return self.ledger.fate(j).reason.clone();
        }
        if !waits_for_room(reason) {
            return None;
        }
        let job = &self.jobs[j as usize];
        let (id, class) = (job.id, job.class as usize);
        let req = self.view().classes[class].dense.clone().ok()?;
        let types = self.matching_types(self.view().classes[class].constraint);
        let found = (0..self.view().nodes.len()).find(|&n| {
            let r = res.node_res[n];
            r != 0
                && !res.may_use(r, id)
                && types.contains(&self.view().types.type_of[n])
                && self.db.fits_at(n as u32, 0, &req)
        });
        let n = found?;
        let r = &res.list[res.node_res[n] as usize - 1];
        Some(Arc::new(Reason::KeptOffReservation {
            pool: r.pool.clone(),
            nodes: vec![self.view().nodes[n].name.clone()],
            job: r.job_id,
        }))
    }
}

/// True for the reasons a reservation may help: no room (for the job, or for enough of its gang).
fn waits_for_room(reason: Option<&Reason>) -> bool {
    match reason {
        // No room, or no room while the minimum runtime spares the jobs eviction would take.
        Some(Reason::NoCapacity { .. } | Reason::MinRuntime { .. }) => true,
        Some(Reason::Gang { detail, .. }) => {
            detail.as_deref().is_none_or(|d| matches!(d, Reason::NoCapacity { .. } | Reason::MinRuntime { .. }))
        }
        _ => false,
    }
}

/// `nodes` with the most room in `free` first (resources in slot order), then in node order.
fn roomiest_first(nodes: &[u32], free: &[ResVec]) -> Vec<u32> {
    let mut order = nodes.to_vec();
    order.sort_by(|&a, &b| free[b as usize].cmp(&free[a as usize]).then(a.cmp(&b)));
    order
}

/// First fit of `reqs` over the nodes in `order`, each with `room` as given; the nodes used (in
/// node order), or none if some member fits nowhere.
fn pack(reqs: &[ResVec], order: &[u32], room: &[ResVec]) -> Option<Vec<u32>> {
    let mut room: Vec<ResVec> = order.iter().map(|&n| room[n as usize].clone()).collect();
    let mut used = vec![false; order.len()];
    for req in reqs {
        let i = (0..order.len()).find(|&i| fits(req, &room[i]))?;
        sub_from(&mut room[i], req);
        used[i] = true;
    }
    let mut out: Vec<u32> = order.iter().zip(used).filter(|(_, u)| *u).map(|(&n, _)| n).collect();
    out.sort_unstable();
    Some(out)
}
