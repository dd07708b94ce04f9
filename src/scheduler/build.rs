//! Building one pool's cycle from the snapshot: its nodes and resource layout, the running jobs
//! on them, each queue's queued jobs checked for order, eligibility, gangs and demand, the node
//! index, and the queues' fair shares and limits.
//!
//! This is the only step that reads the snapshot as a whole; the steps after it work on the
//! [`PoolCycle`] it returns.

use super::config::SchedulerConfig;
use super::context::PoolCycle;
use super::earmark::Earmarks;
use super::fairness::{CostModel, adjusted_fair_shares, fair_shares};
use super::hierarchy::Hierarchy;
use super::job::{Class, Constraint, JobFacts, Origin};
use super::node_types::{LabelSpec, NodeTypes};
use super::nodedb::{Levels, NodeDb, Occupant};
use super::prefetch;
use super::queue::CycleQueue;
use super::queue_order::QueueOrderKey;
use super::resvec::{Layout, ResVec, add_to, sub_from};
use super::snapshot::{JobInfo, QueueSnapshot, Snapshot};
use super::usage::{QueueUsage, decay};
use super::view::{PoolView, PriorityClassInfo};
use crate::model::{Node, PoolName, ResourceName, SchedulingRequirements};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl<'a> PoolCycle<'a> {
    /// Builds the pool's view: nodes, running jobs, queues and their candidates. Nodes in
    /// `quarantined` (executor, node) take no new placements.
    pub(super) fn new(
        snap: &'a Snapshot,
        cfg: &'a SchedulerConfig,
        pool: &PoolName,
        done: &HashSet<crate::model::JobId>,
        quarantined: &HashSet<(&str, &str)>,
        now_ms: i64,
    ) -> Self {
        Self::new_reserving(snap, cfg, pool, done, quarantined, now_ms, None)
    }

    /// [`Self::new`] with nodes reserved ([`super::reservation`]: a reservation's second pass).
    pub(super) fn new_reserving(
        snap: &'a Snapshot,
        cfg: &'a SchedulerConfig,
        pool: &PoolName,
        done: &HashSet<crate::model::JobId>,
        quarantined: &HashSet<(&str, &str)>,
        now_ms: i64,
        reservations: Option<super::reservation_plan::PoolReservations<'a>>,
    ) -> Self {
        let (nodes, node_index) = pool_nodes(snap, pool);
        let floating_amounts = if cfg.floating_resources.is_empty() { Vec::new() } else { cfg.floating_in_pool(pool) };
        let layout = resource_layout(cfg, &nodes, &floating_amounts);
        let floating: Vec<(usize, i64)> =
            floating_amounts.iter().filter_map(|(r, a)| Some((layout.slot(r.as_str())?, *a))).collect();
        let earmarked = super::earmark::any_earmarked(&nodes);
        let prios: Vec<i32> = cfg.priority_classes.iter().map(|p| p.priority).collect();
        let levels = if earmarked { Levels::with_guest_level(prios) } else { Levels::new(prios) };
        let priority_classes = cycle_priority_classes(cfg, &levels);
        let default_priority_class =
            cfg.priority_classes.iter().position(|p| p.name == cfg.default_priority_class).unwrap_or(0) as u16;
        let (capacities, total) = node_capacities(&nodes, &layout, &floating);
        let cost = CostModel::new(cfg, &layout, &total);

        // Queues in name order.
        let mut qsnaps: Vec<&QueueSnapshot> = snap.queues.iter().collect();
        qsnaps.sort_by(|a, b| a.queue.name.cmp(&b.queue.name));
        qsnaps.dedup_by(|a, b| a.queue.name == b.queue.name);
        let queue_index: HashMap<&str, u32> =
            qsnaps.iter().enumerate().map(|(i, q)| (q.queue.name.as_str(), i as u32)).collect();
        let queues: Vec<CycleQueue> =
            qsnaps.iter().map(|qs| CycleQueue::new(qs, &layout, priority_classes.len())).collect();

        let earmarks = if earmarked { Earmarks::new(&nodes, &queue_index, qsnaps.len()) } else { Earmarks::default() };
        let view = PoolView {
            cfg,
            pool: pool.clone(),
            nodes,
            layout,
            levels,
            priority_classes,
            default_priority_class,
            types: NodeTypes { types: vec![], type_of: vec![] },
            classes: vec![],
            constraints: vec![],
            cost,
            total,
            earmarks,
            floating,
            reservations: reservations.map(Box::new),
        };
        let mut cycle = PoolCycle::empty(view, queues);
        cycle.tree =
            Hierarchy::build(&cycle.queues, cycle.view().default_priority(), cycle.view().layout.zero(), false);
        cycle.fences = cycle.tree.as_ref().and_then(|t| t.fences().cloned()).map(Box::new);
        // The cycle's jobs: the running ones, and at most the lookback of each queue's queued
        // ones (a cordoned queue offers none). Sized once: the list is long under load.
        let lookback = if cfg.max_queue_lookback == 0 { usize::MAX } else { cfg.max_queue_lookback };
        let offered = |q: &&QueueSnapshot| if q.queue.cordoned { 0 } else { q.queued.len().min(lookback) };
        cycle.reserve_jobs(snap.running.len() + qsnaps.iter().map(offered).sum::<usize>());
        let mut interner = Interner::default();
        let running = cycle.add_running(snap, &node_index, &queue_index, &mut interner, now_ms);
        let uniformity = cycle.read_queued(&qsnaps, pool, done, &mut interner, now_ms);

        cycle.build_node_db(capacities, uniformity, earmarked, quarantined);
        cycle.place_running(running);
        cycle.jobs.running_added();
        cycle.compute_shares();
        cycle.compute_limits();
        cycle.view_is_built();
        cycle
    }

    /// The running jobs on this pool's nodes become the cycle's first jobs; returns each one's
    /// (job, node), to be placed once the node db is built.
    fn add_running(
        &mut self,
        snap: &'a Snapshot,
        node_index: &HashMap<(&str, &str), u32>,
        queue_index: &HashMap<&str, u32>,
        interner: &mut Interner<'a>,
        now_ms: i64,
    ) -> Vec<(u32, u32)> {
        let mut running: Vec<(u32, u32)> = Vec::with_capacity(snap.running.len());
        let cfg = self.view().cfg;
        let min_runtime = cfg.min_runtime_set();
        // Runs come in submission order, so neighbours often share a node and a queue: the last
        // lookup is tried first, by the names' addresses (shared names) and then their text.
        let same = |a: NameAt, b: NameAt| a.0 == b.0 || a.1 == b.1;
        let mut last_node: Option<(NameAt, NameAt, u32)> = None;
        let mut last_queue: Option<(NameAt, u32)> = None;
        let mut memo: SmallVec<[(usize, u16); 8]> = SmallVec::new();
        for r in prefetch::ahead(&snap.running, |r| &*r.job) {
            let executor = (r.executor.ptr_key(), r.executor.as_str());
            let node_name = (r.node.ptr_key(), r.node.as_str());
            let node = match last_node {
                Some((e, n, i)) if same(n, node_name) && same(e, executor) => i,
                _ => {
                    let Some(&i) = node_index.get(&(executor.1, node_name.1)) else { continue };
                    last_node = Some((executor, node_name, i));
                    i
                }
            };
            let queue_name = (r.job.queue.ptr_key(), r.job.queue.as_str());
            let q = match last_queue {
                Some((name, i)) if same(name, queue_name) => i,
                _ => {
                    let Some(&i) = queue_index.get(queue_name.1) else { continue };
                    last_queue = Some((queue_name, i));
                    i
                }
            };
            let pc = self.priority_class_of_memo(&mut memo, &r.job);
            let sj = JobFacts::of(&r.job, self.intern(interner, &r.job), pc);
            let j = self.new_job(&sj, &r.job, q, Origin::Running { node });
            if min_runtime {
                let pc = cfg.priority_classes.get(sj.priority_class as usize);
                self.min_runtime.add_running(cfg, pc, r.leased_at_ms, now_ms);
            }
            if let Some(g) = &r.job.gang {
                self.add_running_member(q, g.id.as_str(), j);
            }
            running.push((j, node));
        }
        running
    }

    /// Queued jobs: one pass per queue checks order, eligibility, gangs and demand; jobs become
    /// cycle jobs only when their turn comes. Returns the node-uniformity labels the gangs name.
    fn read_queued(
        &mut self,
        qsnaps: &[&'a QueueSnapshot],
        pool: &PoolName,
        done: &HashSet<crate::model::JobId>,
        interner: &mut Interner<'a>,
        now_ms: i64,
    ) -> BTreeSet<&'a str> {
        let mut memo: SmallVec<[(usize, u16); 8]> = SmallVec::new();
        let mut uniformity: BTreeSet<&'a str> = BTreeSet::new();
        for (qi, qs) in qsnaps.iter().enumerate() {
            // A cordoned queue's queued jobs are not offered and claim no share (Armada counts a
            // cordoned queue's demand as what it runs); its running jobs stay as they are.
            let queued: &'a [Arc<JobInfo>] = if qs.queue.cordoned { &[] } else { &qs.queued };
            // A job in retry back-off is counted out like one of another pool.
            let eligible = |j: &JobInfo| {
                (done.is_empty() || !done.contains(&j.id))
                    && (j.pools.is_empty() || j.pools.contains(pool))
                    && super::backoff::held_until(j, now_ms).is_none()
            };
            let mut facts: Vec<JobFacts> = Vec::with_capacity(queued.len());
            let mut sorted = true;
            let mut any = false;
            let mut prev: Option<QueueOrderKey> = None;
            let mut queued_gangs: HashMap<&'a str, Vec<u32>> = HashMap::default();
            let mut demand = self.view().layout.zero();
            for (i, j) in prefetch::ahead(queued, |j| &**j).enumerate() {
                if !eligible(j) {
                    facts.push(JobFacts { class: u32::MAX, ..JobFacts::of(j, 0, 0) });
                    continue;
                }
                any = true;
                let pc = self.priority_class_of_memo(&mut memo, j);
                let c = self.intern(interner, j);
                let sj = JobFacts::of(j, c, pc);
                let k = self.queued_key(&sj);
                if prev.is_some_and(|p| p > k) {
                    sorted = false;
                }
                prev = Some(k);
                facts.push(sj);
                if qs.queued_demand.is_none()
                    && let Ok(v) = &self.view().classes[c as usize].dense
                {
                    add_to(&mut demand, v);
                }
                if let Some(g) = &j.gang {
                    queued_gangs.entry(g.id.as_str()).or_default().push(i as u32);
                    if let Some(l) = &g.node_uniformity_label {
                        uniformity.insert(l.as_str());
                    }
                }
            }
            if let Some(d) = qs.queued_demand.as_ref().filter(|_| !qs.queue.cordoned) {
                demand = self.view().layout.dense_lossy(d);
            }
            let order = (!sorted).then(|| {
                let key = |i: u32| self.queued_key(&facts[i as usize]);
                let mut o: Vec<u32> =
                    (0..queued.len() as u32).filter(|&i| facts[i as usize].class != u32::MAX).collect();
                o.sort_by_key(|&i| key(i));
                for members in queued_gangs.values_mut() {
                    members.sort_by_key(|&i| key(i));
                }
                o
            });
            let qc = &mut self.queues[qi];
            qc.queued = queued;
            qc.facts = facts;
            qc.order = order;
            qc.queued_gangs = queued_gangs;
            qc.demand = demand;
            qc.active = any;
        }
        uniformity
    }

    /// Node types from the labels this cycle's jobs look at, and the node db over them.
    fn build_node_db(
        &mut self,
        capacities: Vec<ResVec>,
        uniformity: BTreeSet<&str>,
        earmarked: bool,
        quarantined: &HashSet<(&str, &str)>,
    ) {
        let mut spec = LabelSpec::default();
        for c in &self.view().constraints {
            spec.add_constraints(c.reqs);
        }
        for j in self.jobs.iter() {
            if let Some(l) = j.info.gang.as_ref().and_then(|g| g.node_uniformity_label.as_deref()) {
                spec.add_full(l);
            }
        }
        for l in uniformity {
            spec.add_full(l);
        }
        if earmarked {
            // Each node type is wholly earmarked for one set of queues, or not at all.
            spec.add_full(crate::model::RESERVED_FOR_LABEL);
        }
        // Quarantined nodes get types of their own, which match no job (like cordoned ones).
        let in_quarantine: Vec<bool> = if quarantined.is_empty() {
            Vec::new()
        } else {
            self.view().nodes.iter().map(|n| quarantined.contains(&(n.executor.as_str(), n.name.as_str()))).collect()
        };
        // Reserved nodes get types of their own, one set per reservation.
        let types = match self.view().reservations.as_ref() {
            Some(r) => NodeTypes::build_reserving(&self.view().nodes, &spec, &in_quarantine, r.node_marks()),
            None => NodeTypes::build(&self.view().nodes, &spec, &in_quarantine),
        };
        self.set_node_types(types);
        let key_slots: Vec<Option<usize>> =
            self.view().cfg.indexed_resources.iter().map(|r| self.view().layout.slot(r.as_str())).collect();
        self.db = NodeDb::new(
            capacities,
            &self.view().types.type_of,
            self.view().types.types.len(),
            &key_slots,
            self.view().levels.count(),
        );
    }

    /// Puts the running jobs on their nodes and counts them in their queues' allocations.
    fn place_running(&mut self, running: Vec<(u32, u32)>) {
        let mut occupants = Vec::with_capacity(running.len());
        for (j, node) in running {
            let job = &self.jobs[j as usize];
            // A slice copy: `SmallVec::clone` pushes element by element (once per running job).
            let req = match &self.view().classes[job.class as usize].dense {
                Ok(v) => ResVec::from_slice(v),
                Err(_) => self.view().layout.dense_lossy(&job.info.requirements.requests),
            };
            let (q, pc) = (job.queue as usize, job.priority_class as usize);
            add_to(&mut self.queues[q].alloc, &req);
            add_to(&mut self.queues[q].alloc_by_priority_class[pc], &req);
            self.queues[q].active = true;
            let occ = Occupant {
                job: j,
                queue: job.queue,
                freed_at: self.freed_at(j, node, false),
                evicted: false,
                seq: job.seq,
                return_rank: 0,
                req,
            };
            occupants.push((node, occ));
        }
        self.db.load(occupants);
    }

    fn compute_shares(&mut self) {
        for q in &mut self.queues {
            q.alloc_start = q.alloc.clone();
            add_to(&mut q.demand, &q.alloc);
        }
        let active: Vec<usize> = (0..self.queues.len()).filter(|&i| self.queues[i].active).collect();
        let weights: Vec<f64> = active.iter().map(|&i| 1.0 / self.queues[i].priority_factor).collect();
        let demands: Vec<f64> = active.iter().map(|&i| self.view().cost.share(&self.queues[i].demand)).collect();
        let plain = fair_shares(&weights);
        let adjusted = adjusted_fair_shares(&weights, &demands);
        for (k, &i) in active.iter().enumerate() {
            let q = &mut self.queues[i];
            q.fair_share = plain[k];
            q.adjusted_fair_share = adjusted[k];
        }
        let (view, queues) = self.view_and_queues();
        for q in queues {
            q.actual_share = view.cost.share(&q.alloc);
            q.overshare = q.actual_share - q.adjusted_fair_share;
            q.usage = q.actual_share;
        }
        if self.tree.is_some() {
            self.tree_shares();
        }
    }

    fn compute_limits(&mut self) {
        let caps = |fractions: &BTreeMap<ResourceName, f64>, layout: &Layout, total: &ResVec| -> Option<ResVec> {
            if fractions.is_empty() {
                return None;
            }
            let mut v: ResVec = smallvec::smallvec![i64::MAX; layout.len()];
            for (r, f) in fractions {
                if let Some(s) = layout.slot(r.as_str()) {
                    v[s] = (total[s] as f64 * f).floor() as i64;
                } else {
                    // A limit on a resource the pool does not have: nothing may be used.
                    continue;
                }
            }
            Some(v)
        };
        let (view, queues) = self.view_and_queues();
        for q in queues {
            q.limit = caps(&q.snap.queue.resource_limits, &view.layout, &view.total);
            for (i, pc) in view.cfg.priority_classes.iter().enumerate() {
                let mut f = pc.max_resource_fraction_per_queue.clone();
                if let Some(over) = q.snap.queue.resource_limits_by_priority_class.get(&pc.name) {
                    f.extend(over.iter().map(|(k, v)| (k.clone(), *v)));
                }
                q.priority_class_limits[i] = caps(&f, &view.layout, &view.total);
            }
        }
    }

    /// The class of `info`'s requirements, added if new.
    fn intern(&mut self, interner: &mut Interner<'a>, info: &'a JobInfo) -> u32 {
        let reqs: &SchedulingRequirements = &info.requirements;
        let ptr = reqs as *const SchedulingRequirements;
        if let Some((p, c)) = interner.last
            && p == ptr
        {
            return c;
        }
        let c = self.intern_at(interner, info);
        interner.last = Some((ptr, c));
        c
    }

    /// [`Self::intern`] past the last lookup: by address, then by fingerprint and equality.
    fn intern_at(&mut self, interner: &mut Interner<'a>, info: &'a JobInfo) -> u32 {
        let reqs: &'a SchedulingRequirements = &info.requirements;
        let ptr = reqs as *const SchedulingRequirements;
        if let Some(&c) = interner.by_ptr.get(&ptr) {
            return c;
        }
        let fp = info.requirements.fingerprint();
        if let Some(cands) = interner.classes.get(&fp)
            && let Some(&c) = cands.iter().find(|&&c| *self.view().classes[c as usize].reqs == *reqs)
        {
            interner.by_ptr.insert(ptr, c);
            return c;
        }
        let cfp = constraint_fingerprint(reqs);
        let constraint = match interner
            .constraints
            .get(&cfp)
            .and_then(|v| v.iter().find(|&&c| same_constraints(self.view().constraints[c as usize].reqs, reqs)))
        {
            Some(&c) => c,
            None => {
                let c = self.view_while_building().add_constraint(Constraint { reqs });
                interner.constraints.entry(cfp).or_default().push(c);
                c
            }
        };
        let class = Class { reqs, dense: self.view().layout.dense(&reqs.requests), constraint };
        let c = self.view_while_building().add_class(class);
        interner.classes.entry(fp).or_default().push(c);
        interner.by_ptr.insert(ptr, c);
        c
    }

    /// Index of the job's priority class (unknown names get the default class).
    pub(super) fn priority_class_of(&self, info: &JobInfo) -> u16 {
        let name = info.priority_class.as_str();
        self.view()
            .priority_classes
            .iter()
            .position(|p| p.name.as_str() == name)
            .map(|p| p as u16)
            .unwrap_or(self.view().default_priority_class)
    }

    /// Like [`Self::priority_class_of`], memoised by the address of the class name (no string reads when
    /// jobs share their class names, as the state indexes make them).
    fn priority_class_of_memo(&self, memo: &mut SmallVec<[(usize, u16); 8]>, info: &JobInfo) -> u16 {
        let key = info.priority_class.ptr_key();
        if let Some(&(_, pc)) = memo.iter().find(|(k, _)| *k == key) {
            return pc;
        }
        let pc = self.priority_class_of(info);
        if memo.len() < 8 {
            memo.push((key, pc));
        }
        pc
    }
}

/// A name's address and text: names the state shares compare by address before text.
type NameAt<'a> = (usize, &'a str);

/// Interns requirements by fingerprint.
#[derive(Default)]
struct Interner<'a> {
    classes: HashMap<u64, SmallVec<[u32; 1]>>,
    constraints: HashMap<u64, SmallVec<[u32; 1]>>,
    by_ptr: HashMap<*const SchedulingRequirements, u32>,
    /// The last requirements looked up: jobs alike tend to come together (the state interns
    /// equal requirements, so they share an address).
    last: Option<(*const SchedulingRequirements, u32)>,
    _p: std::marker::PhantomData<&'a ()>,
}

/// The pool's nodes, in (executor, name) order without duplicates, and their index.
fn pool_nodes<'a>(snap: &'a Snapshot, pool: &PoolName) -> (Vec<&'a Node>, HashMap<(&'a str, &'a str), u32>) {
    let mut nodes: Vec<&Node> = snap.nodes.iter().filter(|n| &n.pool == pool).collect();
    nodes.sort_by(|a, b| (a.executor.as_str(), a.name.as_str()).cmp(&(b.executor.as_str(), b.name.as_str())));
    nodes.dedup_by(|a, b| a.executor == b.executor && a.name == b.name);
    let node_index: HashMap<(&str, &str), u32> =
        nodes.iter().enumerate().map(|(i, n)| ((n.executor.as_str(), n.name.as_str()), i as u32)).collect();
    (nodes, node_index)
}

/// Slots: fairness and index resources first, then everything nodes offer, then the pool's
/// floating resources.
fn resource_layout(cfg: &SchedulerConfig, nodes: &[&Node], floating: &[(ResourceName, i64)]) -> Layout {
    let mut names: Vec<ResourceName> = cfg.dominant_resource_fairness_resources.clone();
    names.extend(cfg.indexed_resources.iter().cloned());
    names.extend(cfg.resource_cost_weights.keys().cloned());
    let node_res: BTreeSet<ResourceName> = nodes.iter().flat_map(|n| n.allocatable.names().cloned()).collect();
    names.extend(node_res);
    names.extend(floating.iter().map(|(r, _)| r.clone()));
    Layout::new(names)
}

/// The configured priority classes with their priority levels.
fn cycle_priority_classes(cfg: &SchedulerConfig, levels: &Levels) -> Vec<PriorityClassInfo> {
    cfg.priority_classes
        .iter()
        .map(|p| PriorityClassInfo {
            name: p.name.clone(),
            priority: p.priority,
            preemptible: p.preemptible,
            priority_level: levels.index_of(p.priority) as u8,
        })
        .collect()
}

/// What each node offers in all (allocatable minus unallocatable), and the pool's total. Of a
/// floating resource (slot, pool amount) every node offers [`super::floating::NODE_SLOT`] and the
/// pool's total is its amount.
pub(super) fn node_capacities(nodes: &[&Node], layout: &Layout, floating: &[(usize, i64)]) -> (Vec<ResVec>, ResVec) {
    let capacities: Vec<ResVec> = nodes
        .iter()
        .map(|n| {
            let mut c = layout.dense_lossy(&n.allocatable);
            if !n.unallocatable.is_zero() {
                sub_from(&mut c, &layout.dense_lossy(&n.unallocatable));
            }
            for &(s, _) in floating {
                c[s] = super::floating::NODE_SLOT;
            }
            c
        })
        .collect();
    let mut total = layout.zero();
    for c in &capacities {
        add_to(&mut total, c);
    }
    for &(s, amount) in floating {
        total[s] = amount;
    }
    (capacities, total)
}

fn constraint_fingerprint(r: &SchedulingRequirements) -> u64 {
    let c = SchedulingRequirements { requests: Default::default(), ..r.clone() };
    c.fingerprint()
}

fn same_constraints(a: &SchedulingRequirements, b: &SchedulingRequirements) -> bool {
    a.node_selector == b.node_selector && a.tolerations == b.tolerations && a.node_affinity == b.node_affinity
}

impl PoolCycle<'_> {
    /// Sets each queue's usage for the cycle, from the record and the time: the decayed average,
    /// or (with no half-time, or no record for the queue yet) its current share. Its cost in
    /// progressive filling is then that plus what the cycle adds to its share.
    pub(super) fn start_usage(&mut self, recorded: &QueueUsage, now_ms: i64) {
        let h = self.view().cfg.queue_usage_halftime;
        if h.is_zero() {
            return;
        }
        let pool = recorded.pools.get(&self.view().pool);
        for q in &mut self.queues {
            q.usage = match pool.and_then(|p| p.get(&q.name)) {
                Some(s) => decay(s.usage, s.current, now_ms - recorded.at_ms, h),
                None => q.actual_share,
            };
            q.usage_offset = q.usage - q.actual_share;
        }
    }
}
