//! One scheduling cycle: for each pool, evict for fair share, then fill by progressive filling,
//! then turn what happened into decisions.

use super::config::SchedulerConfig;
use super::decisions::{
    Decisions, Failure, Lease, PoolReport, Preemption, PreemptionReason, QueueShare, Reason, Unscheduled,
};
use super::fairness::{CostModel, adjusted_fair_shares, fair_shares};
use super::node_types::{LabelSpec, NodeTypes};
use super::nodedb::{Levels, NodeDb, Occupant};
use super::queue_order::{QueueOrderKey, Turn};
use super::rate_limit::RateLimits;
use super::resvec::{Layout, ResVec, add_to, sub_from};
use super::snapshot::{JobInfo, QueueSnapshot, Snapshot};
use crate::model::{GangSpec, Node, PoolName, QueueName, ResourceName, SchedulingRequirements};
use rand_core::{Rng, SeedableRng};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

/// Runs one scheduling cycle. Pure: the same snapshot, config, seed and `now_ms` always give the
/// same decisions.
pub fn schedule(snapshot: &Snapshot, cfg: &SchedulerConfig, seed: u64, now_ms: i64) -> Decisions {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut rate = RateLimits::start(&snapshot.rate_limits, cfg, now_ms);
    let mut decisions = Decisions::default();
    let pools: BTreeSet<&PoolName> = snapshot.nodes.iter().map(|n| &n.pool).collect();
    let mut done: HashSet<crate::model::JobId> = HashSet::default();
    for pool in pools {
        let mut cycle = PoolCycle::new(snapshot, cfg, pool, &done);
        cycle.evict(&mut rng);
        cycle.fill(&mut rate);
        cycle.finish(&mut decisions, &mut done);
    }
    // Queued jobs no pool could take at all.
    let pools: BTreeSet<&PoolName> = snapshot.nodes.iter().map(|n| &n.pool).collect();
    let no_pool = Arc::new(Reason::NoPool);
    for qs in &snapshot.queues {
        for j in &qs.queued {
            if !j.pools.is_empty() && !j.pools.iter().any(|p| pools.contains(p)) {
                decisions.unscheduled.push(Unscheduled { job_id: j.id, reason: no_pool.clone() });
            }
        }
        if pools.is_empty() && !qs.queued.is_empty() {
            decisions.queue_notes.entry(qs.queue.name.clone()).or_insert_with(|| no_pool.clone());
        }
    }
    decisions.rate_limits = rate.finish();
    decisions
}

/// Where a job started the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Queued,
    Running { node: u32 },
}

/// What has happened to a job so far in this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// Queued and not placed (yet).
    Waiting,
    /// Queued and placed in this cycle.
    Placed,
    /// Running and untouched.
    Running,
    /// Evicted for fair share (a running job, or one placed earlier in this cycle), not (yet)
    /// back. Occupies its node until displaced.
    Evicted,
    /// Evicted and back on its node.
    Returned,
    /// Running (or returned) and removed for a more urgent job or for fair share.
    Preempted,
    /// Gang member beyond what fit.
    Failed,
}

/// A job taking part in the cycle.
#[derive(Debug, Clone)]
pub(super) struct CJob<'a> {
    pub info: &'a Arc<JobInfo>,
    pub id: crate::model::JobId,
    pub priority: u32,
    pub seq: u64,
    /// Member of a gang.
    pub gang: bool,
    pub queue: u32,
    pub class: u32,
    pub prio_idx: u8,
    pub class_priority: i32,
    pub pc: u16,
    pub origin: Origin,
    pub status: Status,
    pub displaced_by: Option<u32>,
    pub reason: Option<Arc<Reason>>,
    /// The node the job is on (or, evicted, still occupies or came from).
    pub node: Option<u32>,
}

impl CJob<'_> {
    /// The node the job holds resources on, if any.
    pub(super) fn node(&self) -> Option<u32> {
        match self.status {
            Status::Placed | Status::Running | Status::Evicted | Status::Returned => self.node,
            Status::Waiting | Status::Preempted | Status::Failed => None,
        }
    }

    /// True if the job holds a place at the end of the cycle.
    pub(super) fn scheduled(&self) -> bool {
        matches!(self.status, Status::Placed | Status::Returned | Status::Running)
    }

    /// The job's place in its queue's order, evicted jobs first.
    pub(super) fn order_key(&self) -> QueueOrderKey {
        QueueOrderKey::queued(self.class_priority, self.priority, self.seq).with_evicted(self.status == Status::Evicted)
    }
}

/// The facts about a queued job the cycle needs, copied out of its `JobInfo` once.
#[derive(Debug, Clone)]
pub(super) struct SrcJob {
    pub id: crate::model::JobId,
    pub seq: u64,
    pub priority: u32,
    pub class: u32,
    pub pc: u16,
    pub gang: bool,
}

impl SrcJob {
    fn of(info: &JobInfo, class: u32, pc: u16) -> Self {
        SrcJob { id: info.id, seq: info.submit_seq, priority: info.priority, class, pc, gang: info.gang.is_some() }
    }
}

/// Interned requirements: jobs with equal requirements share a class.
#[derive(Debug)]
pub(super) struct Class<'a> {
    pub reqs: &'a SchedulingRequirements,
    /// Dense requests, or the requested resource no node of the pool has.
    pub dense: Result<ResVec, ResourceName>,
    pub constraint: u32,
}

/// Interned constraints (selector, tolerations, affinity).
#[derive(Debug)]
pub(super) struct Constraint<'a> {
    pub reqs: &'a SchedulingRequirements,
    pub matching: Option<Vec<u32>>,
}

/// A queue's next gang.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub jobs: SmallVec<[u32; 1]>,
    pub evicted: bool,
    pub gang: Option<Arc<GangSpec>>,
    pub req: ResVec,
}

/// A queue during the cycle.
#[derive(Debug)]
pub(super) struct QCtx<'a> {
    pub snap: &'a QueueSnapshot,
    pub name: QueueName,
    pub priority_factor: f64,
    pub alloc: ResVec,
    pub alloc_by_pc: Vec<ResVec>,
    /// Absolute caps per slot (i64::MAX = none).
    pub limit: Option<ResVec>,
    pub pc_limits: Vec<Option<ResVec>>,
    /// Evicted jobs in queue order (gangs first-member order).
    pub evicted: Vec<u32>,
    pub evicted_pos: usize,
    /// The queue's queued jobs as given.
    pub src: &'a [Arc<JobInfo>],
    /// What the cycle needs of each job of `src`, copied in one pass so later steps need not
    /// read the jobs again (`class == u32::MAX`: not for this pool).
    pub srcs: Vec<SrcJob>,
    /// Positions in `src` in queue order, when `src` is not already in order.
    pub order: Option<Vec<u32>>,
    /// Gang members (positions in `src`, in queue order) by gang id.
    pub gang_src: HashMap<&'a str, Vec<u32>>,
    /// Gangs already offered.
    pub gangs_done: HashSet<&'a str>,
    /// Next position (in queue order) to look at.
    pub queued_pos: usize,
    /// Queued jobs offered so far, against the lookback limit.
    pub taken: usize,
    /// Jobs offered again after a rebalance, in queue order.
    pub retry: Vec<u32>,
    pub retry_pos: usize,
    /// Why the rest of the queue waits (lookback, rate limit).
    pub note: Option<Arc<Reason>>,
    pub queued_stopped: bool,
    pub current: Option<Candidate>,
    pub demand: ResVec,
    pub alloc_start: ResVec,
    pub active: bool,
    pub fair_share: f64,
    pub adjusted_fair_share: f64,
    pub actual_share: f64,
    /// Start share minus adjusted fair share: the victim preference among equals.
    pub overshare: f64,
}

/// Undo record for gang transactions.
#[derive(Debug, Clone)]
pub(super) enum Undo {
    Added { node: u32, job: u32 },
    Removed { node: u32, occ: Occupant },
    Status { job: u32, status: Status, displaced_by: Option<u32>, reason: Option<Arc<Reason>>, node: Option<u32> },
    Alloc { queue: u32, pc: u16, req: ResVec, added: bool },
}

/// Per-priority-class facts for the cycle.
#[derive(Debug, Clone)]
pub(super) struct PcInfo {
    pub name: crate::model::PriorityClassName,
    pub priority: i32,
    pub preemptible: bool,
    pub prio_idx: u8,
}

/// A gang of identical members as far as placement goes: (class, priority level, members,
/// minimum cardinality, uniformity label).
pub(super) type GangShape = (u32, u8, u32, u32, Option<String>);

/// One pool's cycle.
pub(super) struct PoolCycle<'a> {
    pub cfg: &'a SchedulerConfig,
    pub pool: PoolName,
    pub nodes: Vec<&'a Node>,
    pub layout: Layout,
    pub levels: Levels,
    pub pcs: Vec<PcInfo>,
    pub default_pc: u16,
    pub types: NodeTypes,
    pub db: NodeDb,
    pub classes: Vec<Class<'a>>,
    pub constraints: Vec<Constraint<'a>>,
    pub jobs: Vec<CJob<'a>>,
    pub queues: Vec<QCtx<'a>>,
    pub cost: CostModel,
    pub total: ResVec,
    pub undo: Vec<Undo>,
    pub recording: bool,
    /// (class, priority level) → why nothing fits; valid until a displacement frees more than it takes.
    pub unschedulable: HashMap<(u32, u8), Arc<Reason>>,
    /// Same for gangs of identical members.
    pub gang_unschedulable: HashMap<GangShape, Arc<Reason>>,
    /// Running gang members by (queue, gang id).
    pub running_gangs: HashMap<(u32, &'a str), Vec<u32>>,
    /// Members of queued gangs offered in this cycle, by (queue, gang id).
    pub created_gangs: HashMap<(u32, &'a str), Vec<u32>>,
    /// Nodes drawn for fair-share eviction this cycle.
    pub eviction_nodes: Vec<bool>,
    /// Evict-and-refill rounds after the first fill.
    pub rebalances: usize,
    /// Jobs `0..running_count` are the ones running at the start.
    pub running_count: usize,
    /// Gang members failed in this cycle.
    pub failed: Vec<u32>,
    pub global_rate_stopped: Option<Arc<Reason>>,
    pub evicted_count: usize,
    pub jobs_tried: usize,
}

/// Interns requirements by fingerprint.
struct Interner<'a> {
    classes: HashMap<u64, SmallVec<[u32; 1]>>,
    constraints: HashMap<u64, SmallVec<[u32; 1]>>,
    by_ptr: HashMap<*const SchedulingRequirements, u32>,
    _p: std::marker::PhantomData<&'a ()>,
}

fn constraint_fingerprint(r: &SchedulingRequirements) -> u64 {
    let c = SchedulingRequirements { requests: Default::default(), ..r.clone() };
    c.fingerprint()
}

fn same_constraints(a: &SchedulingRequirements, b: &SchedulingRequirements) -> bool {
    a.node_selector == b.node_selector && a.tolerations == b.tolerations && a.node_affinity == b.node_affinity
}

impl<'a> PoolCycle<'a> {
    fn intern(&mut self, interner: &mut Interner<'a>, info: &'a JobInfo) -> u32 {
        let reqs: &'a SchedulingRequirements = &info.requirements;
        let ptr = reqs as *const SchedulingRequirements;
        if let Some(&c) = interner.by_ptr.get(&ptr) {
            return c;
        }
        let fp = info.requirements.fingerprint();
        if let Some(cands) = interner.classes.get(&fp)
            && let Some(&c) = cands.iter().find(|&&c| *self.classes[c as usize].reqs == *reqs)
        {
            interner.by_ptr.insert(ptr, c);
            return c;
        }
        let cfp = constraint_fingerprint(reqs);
        let constraint = match interner
            .constraints
            .get(&cfp)
            .and_then(|v| v.iter().find(|&&c| same_constraints(self.constraints[c as usize].reqs, reqs)))
        {
            Some(&c) => c,
            None => {
                self.constraints.push(Constraint { reqs, matching: None });
                let c = (self.constraints.len() - 1) as u32;
                interner.constraints.entry(cfp).or_default().push(c);
                c
            }
        };
        self.classes.push(Class { reqs, dense: self.layout.dense(&reqs.requests), constraint });
        let c = (self.classes.len() - 1) as u32;
        interner.classes.entry(fp).or_default().push(c);
        interner.by_ptr.insert(ptr, c);
        c
    }

    /// Index of the job's priority class (unknown names get the default class).
    pub(super) fn pc_of(&self, info: &JobInfo) -> u16 {
        let name = info.priority_class.as_str();
        self.pcs.iter().position(|p| p.name.as_str() == name).map(|p| p as u16).unwrap_or(self.default_pc)
    }

    /// Like [`Self::pc_of`], memoised by the address of the class name (no string reads when
    /// jobs share their class names, as the state indexes make them).
    fn pc_of_memo(&self, memo: &mut SmallVec<[(usize, u16); 8]>, info: &JobInfo) -> u16 {
        let key = info.priority_class.ptr_key();
        if let Some(&(_, pc)) = memo.iter().find(|(k, _)| *k == key) {
            return pc;
        }
        let pc = self.pc_of(info);
        if memo.len() < 8 {
            memo.push((key, pc));
        }
        pc
    }

    /// Place of a queued job in its queue's order.
    pub(super) fn queued_key(&self, src: &SrcJob) -> QueueOrderKey {
        QueueOrderKey::queued(self.pcs[src.pc as usize].priority, src.priority, src.seq)
    }

    fn new_job(&mut self, src: &SrcJob, info: &'a Arc<JobInfo>, queue: u32, origin: Origin) -> u32 {
        let (class, pc) = (src.class, src.pc);
        let p = &self.pcs[pc as usize];
        self.jobs.push(CJob {
            info,
            id: src.id,
            priority: src.priority,
            seq: src.seq,
            gang: src.gang,
            queue,
            class,
            prio_idx: p.prio_idx,
            class_priority: p.priority,
            pc,
            origin,
            status: if origin == Origin::Queued { Status::Waiting } else { Status::Running },
            displaced_by: None,
            reason: None,
            node: match origin {
                Origin::Running { node } => Some(node),
                Origin::Queued => None,
            },
        });
        (self.jobs.len() - 1) as u32
    }

    /// Builds the pool's view: nodes, running jobs, queues and their candidates.
    pub(super) fn new(
        snap: &'a Snapshot,
        cfg: &'a SchedulerConfig,
        pool: &PoolName,
        done: &HashSet<crate::model::JobId>,
    ) -> Self {
        let mut nodes: Vec<&Node> = snap.nodes.iter().filter(|n| &n.pool == pool).collect();
        nodes.sort_by(|a, b| (a.executor.as_str(), a.name.as_str()).cmp(&(b.executor.as_str(), b.name.as_str())));
        nodes.dedup_by(|a, b| a.executor == b.executor && a.name == b.name);
        let node_index: HashMap<(&str, &str), u32> =
            nodes.iter().enumerate().map(|(i, n)| ((n.executor.as_str(), n.name.as_str()), i as u32)).collect();

        // Slots: fairness and index resources first, then everything nodes offer.
        let mut names: Vec<ResourceName> = cfg.dominant_resource_fairness_resources.clone();
        names.extend(cfg.indexed_resources.iter().cloned());
        names.extend(cfg.resource_cost_weights.keys().cloned());
        let node_res: BTreeSet<ResourceName> = nodes.iter().flat_map(|n| n.allocatable.names().cloned()).collect();
        names.extend(node_res);
        let layout = Layout::new(names);

        let levels = Levels::new(cfg.priority_classes.iter().map(|p| p.priority).collect());
        let pcs: Vec<PcInfo> = cfg
            .priority_classes
            .iter()
            .map(|p| PcInfo {
                name: p.name.clone(),
                priority: p.priority,
                preemptible: p.preemptible,
                prio_idx: levels.index_of(p.priority) as u8,
            })
            .collect();
        let default_pc =
            cfg.priority_classes.iter().position(|p| p.name == cfg.default_priority_class).unwrap_or(0) as u16;

        let capacities: Vec<ResVec> = nodes
            .iter()
            .map(|n| {
                let mut c = layout.dense_lossy(&n.allocatable);
                sub_from(&mut c, &layout.dense_lossy(&n.unallocatable));
                c
            })
            .collect();
        let mut total = layout.zero();
        for c in &capacities {
            add_to(&mut total, c);
        }
        let cost = CostModel::new(cfg, &layout, &total);

        // Queues in name order.
        let mut qsnaps: Vec<&QueueSnapshot> = snap.queues.iter().collect();
        qsnaps.sort_by(|a, b| a.queue.name.cmp(&b.queue.name));
        qsnaps.dedup_by(|a, b| a.queue.name == b.queue.name);
        let queue_index: HashMap<&str, u32> =
            qsnaps.iter().enumerate().map(|(i, q)| (q.queue.name.as_str(), i as u32)).collect();
        let queues: Vec<QCtx> = qsnaps
            .iter()
            .map(|qs| QCtx {
                snap: qs,
                name: qs.queue.name.clone(),
                priority_factor: qs.queue.priority_factor,
                alloc: layout.zero(),
                alloc_by_pc: vec![layout.zero(); pcs.len()],
                limit: None,
                pc_limits: vec![None; pcs.len()],
                evicted: vec![],
                evicted_pos: 0,
                src: &[],
                srcs: vec![],
                order: None,
                gang_src: HashMap::default(),
                gangs_done: HashSet::default(),
                queued_pos: 0,
                taken: 0,
                retry: vec![],
                retry_pos: 0,
                note: None,
                queued_stopped: false,
                current: None,
                demand: layout.zero(),
                alloc_start: layout.zero(),
                active: false,
                fair_share: 0.0,
                adjusted_fair_share: 0.0,
                actual_share: 0.0,
                overshare: 0.0,
            })
            .collect();

        let mut cycle = PoolCycle {
            cfg,
            pool: pool.clone(),
            nodes,
            layout,
            levels,
            pcs,
            default_pc,
            types: NodeTypes { types: vec![], type_of: vec![] },
            db: NodeDb::new(vec![], &[], 0, &[], 1),
            classes: vec![],
            constraints: vec![],
            jobs: vec![],
            queues,
            cost,
            total,
            undo: vec![],
            recording: false,
            unschedulable: HashMap::default(),
            gang_unschedulable: HashMap::default(),
            running_gangs: HashMap::default(),
            created_gangs: HashMap::default(),
            eviction_nodes: vec![],
            rebalances: 0,
            running_count: 0,
            failed: vec![],
            global_rate_stopped: None,
            evicted_count: 0,
            jobs_tried: 0,
        };
        let mut interner = Interner {
            classes: HashMap::default(),
            constraints: HashMap::default(),
            by_ptr: HashMap::default(),
            _p: Default::default(),
        };

        // Running jobs on this pool's nodes.
        let mut running: Vec<(u32, u32)> = Vec::new(); // (job, node)
        for r in &snap.running {
            let Some(&node) = node_index.get(&(r.executor.as_str(), r.node.as_str())) else { continue };
            let Some(&q) = queue_index.get(r.job.queue.as_str()) else { continue };
            let sj = SrcJob::of(&r.job, cycle.intern(&mut interner, &r.job), cycle.pc_of(&r.job));
            let j = cycle.new_job(&sj, &r.job, q, Origin::Running { node });
            if let Some(g) = &r.job.gang {
                cycle.running_gangs.entry((q, g.id.as_str())).or_default().push(j);
            }
            running.push((j, node));
        }

        // Queued jobs: one pass per queue checks order, eligibility, gangs and demand; jobs become
        // cycle jobs only when their turn comes.
        let mut memo: SmallVec<[(usize, u16); 8]> = SmallVec::new();
        let mut uniformity: BTreeSet<&'a str> = BTreeSet::new();
        for (qi, qs) in qsnaps.iter().enumerate() {
            let src: &'a [Arc<JobInfo>] = &qs.queued;
            let eligible = |j: &JobInfo| {
                (done.is_empty() || !done.contains(&j.id)) && (j.pools.is_empty() || j.pools.contains(pool))
            };
            let mut srcs: Vec<SrcJob> = Vec::with_capacity(src.len());
            let mut sorted = true;
            let mut any = false;
            let mut prev: Option<QueueOrderKey> = None;
            let mut gang_src: HashMap<&'a str, Vec<u32>> = HashMap::default();
            let mut demand = cycle.layout.zero();
            for (i, j) in src.iter().enumerate() {
                if !eligible(j) {
                    srcs.push(SrcJob { class: u32::MAX, ..SrcJob::of(j, 0, 0) });
                    continue;
                }
                any = true;
                let pc = cycle.pc_of_memo(&mut memo, j);
                let c = cycle.intern(&mut interner, j);
                let sj = SrcJob::of(j, c, pc);
                let k = cycle.queued_key(&sj);
                if prev.is_some_and(|p| p > k) {
                    sorted = false;
                }
                prev = Some(k);
                srcs.push(sj);
                if qs.queued_demand.is_none()
                    && let Ok(v) = &cycle.classes[c as usize].dense
                {
                    add_to(&mut demand, v);
                }
                if let Some(g) = &j.gang {
                    gang_src.entry(g.id.as_str()).or_default().push(i as u32);
                    if let Some(l) = &g.node_uniformity_label {
                        uniformity.insert(l.as_str());
                    }
                }
            }
            if let Some(d) = &qs.queued_demand {
                demand = cycle.layout.dense_lossy(d);
            }
            let order = (!sorted).then(|| {
                let key = |i: u32| cycle.queued_key(&srcs[i as usize]);
                let mut o: Vec<u32> = (0..src.len() as u32).filter(|&i| srcs[i as usize].class != u32::MAX).collect();
                o.sort_by_key(|&i| key(i));
                for members in gang_src.values_mut() {
                    members.sort_by_key(|&i| key(i));
                }
                o
            });
            let qc = &mut cycle.queues[qi];
            qc.src = src;
            qc.srcs = srcs;
            qc.order = order;
            qc.gang_src = gang_src;
            qc.demand = demand;
            qc.active = any;
        }

        let lookback = if cfg.max_queue_lookback == 0 { usize::MAX } else { cfg.max_queue_lookback };
        let expected: usize = cycle.queues.iter().map(|q| q.srcs.len().min(lookback)).sum();
        cycle.jobs.reserve(expected);

        // Node types from the labels this cycle's jobs look at.
        let mut spec = LabelSpec::default();
        for c in &cycle.constraints {
            spec.add_constraints(c.reqs);
        }
        for j in &cycle.jobs {
            if let Some(l) = j.info.gang.as_ref().and_then(|g| g.node_uniformity_label.as_deref()) {
                spec.add_full(l);
            }
        }
        for l in uniformity {
            spec.add_full(l);
        }
        cycle.types = NodeTypes::build(&cycle.nodes, &spec);
        let key_slots: Vec<Option<usize>> =
            cfg.indexed_resources.iter().map(|r| cycle.layout.slot(r.as_str())).collect();
        cycle.db =
            NodeDb::new(capacities, &cycle.types.type_of, cycle.types.types.len(), &key_slots, cycle.levels.count());

        for (j, node) in running {
            let job = &cycle.jobs[j as usize];
            let req = cycle.classes[job.class as usize]
                .dense
                .clone()
                .unwrap_or_else(|_| cycle.layout.dense_lossy(&job.info.requirements.requests));
            let occ = Occupant {
                job: j,
                queue: job.queue,
                freed_at: cycle.levels.running_freed_at(job.prio_idx as usize),
                evicted: false,
                seq: job.seq,
                req: req.clone(),
            };
            let (q, pc) = (job.queue as usize, job.pc as usize);
            cycle.db.add(node, occ);
            add_to(&mut cycle.queues[q].alloc, &req);
            add_to(&mut cycle.queues[q].alloc_by_pc[pc], &req);
            cycle.queues[q].active = true;
        }
        cycle.running_count = cycle.jobs.len();
        cycle.compute_shares();
        cycle.compute_limits();
        cycle
    }

    /// Dense requests of a job (running jobs with resources the pool no longer knows keep the
    /// known part).
    pub(super) fn req(&self, j: u32) -> ResVec {
        let job = &self.jobs[j as usize];
        match &self.classes[job.class as usize].dense {
            Ok(v) => v.clone(),
            Err(_) => self.layout.dense_lossy(&job.info.requirements.requests),
        }
    }

    fn compute_shares(&mut self) {
        for q in &mut self.queues {
            q.alloc_start = q.alloc.clone();
            add_to(&mut q.demand, &q.alloc);
        }
        let active: Vec<usize> = (0..self.queues.len()).filter(|&i| self.queues[i].active).collect();
        let weights: Vec<f64> = active.iter().map(|&i| 1.0 / self.queues[i].priority_factor).collect();
        let demands: Vec<f64> = active.iter().map(|&i| self.cost.share(&self.queues[i].demand)).collect();
        let plain = fair_shares(&weights);
        let adjusted = adjusted_fair_shares(&weights, &demands);
        for (k, &i) in active.iter().enumerate() {
            let q = &mut self.queues[i];
            q.fair_share = plain[k];
            q.adjusted_fair_share = adjusted[k];
        }
        for q in &mut self.queues {
            q.actual_share = self.cost.share(&q.alloc);
            q.overshare = q.actual_share - q.adjusted_fair_share;
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
        for q in &mut self.queues {
            q.limit = caps(&q.snap.queue.resource_limits, &self.layout, &self.total);
            for (i, pc) in self.cfg.priority_classes.iter().enumerate() {
                let mut f = pc.max_resource_fraction_per_queue.clone();
                if let Some(over) = q.snap.queue.resource_limits_by_priority_class.get(&pc.name) {
                    f.extend(over.iter().map(|(k, v)| (k.clone(), *v)));
                }
                q.pc_limits[i] = caps(&f, &self.layout, &self.total);
            }
        }
    }

    /// Progressive filling until every queue has nothing more to offer.
    /// Fills, then rebalances a bounded number of times.
    pub(super) fn fill(&mut self, rate: &mut RateLimits) {
        loop {
            let mut heap = BinaryHeap::new();
            for q in 0..self.queues.len() as u32 {
                if let Some(t) = self.advance(q, rate) {
                    heap.push(t);
                }
            }
            while let Some(turn) = heap.pop() {
                let q = turn.queue;
                if let Some(cand) = self.queues[q as usize].current.take() {
                    self.attempt(q, cand, rate);
                }
                if let Some(t) = self.advance(q, rate) {
                    heap.push(t);
                }
            }
            if !self.rebalance() {
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
            (0..self.jobs.len() as u32).filter(|&j| self.jobs[j as usize].status == Status::Evicted).collect();
        evicted.sort_by_key(|&j| (self.jobs[j as usize].queue, self.jobs[j as usize].order_key(), j));
        for j in evicted {
            let job = &self.jobs[j as usize];
            if job.status != Status::Evicted {
                continue;
            }
            match job.info.gang.clone() {
                None => {
                    self.return_evicted(j);
                }
                Some(g) => {
                    let members: SmallVec<[u32; 1]> = self
                        .gang_members(job.queue, g.id.as_str())
                        .into_iter()
                        .filter(|&m| self.jobs[m as usize].status == Status::Evicted)
                        .collect();
                    let req = self.layout.zero();
                    let cand = Candidate { jobs: members, evicted: true, gang: Some(g), req };
                    self.return_evicted_gang(&cand);
                }
            }
        }
    }

    /// Every member (running or offered this cycle) of a gang.
    pub(super) fn gang_members(&self, q: u32, id: &str) -> Vec<u32> {
        let mut out: Vec<u32> = self.running_gangs.get(&(q, id)).cloned().unwrap_or_default();
        out.extend(self.created_gangs.get(&(q, id)).into_iter().flatten().copied());
        out
    }

    /// Position in `src` of the queue's next queued job to offer, skipping jobs not for this
    /// pool and members of gangs already offered.
    fn peek_queued(&mut self, q: u32) -> Option<u32> {
        let qc = &mut self.queues[q as usize];
        loop {
            let pos = match &qc.order {
                Some(o) => *o.get(qc.queued_pos)?,
                None => {
                    if qc.queued_pos >= qc.src.len() {
                        return None;
                    }
                    qc.queued_pos as u32
                }
            };
            let sj = &qc.srcs[pos as usize];
            if sj.class == u32::MAX {
                qc.queued_pos += 1;
                continue;
            }
            if sj.gang
                && let Some(g) = &qc.src[pos as usize].gang
                && qc.gangs_done.contains(g.id.as_str())
            {
                qc.queued_pos += 1;
                continue;
            }
            return Some(pos);
        }
    }

    /// Moves queue `q` to its next candidate and returns its turn, if it has one.
    fn advance(&mut self, q: u32, rate: &mut RateLimits) -> Option<Turn> {
        if self.global_rate_stopped.is_none() && rate.global_exhausted() {
            self.global_rate_stopped =
                Some(Arc::new(Reason::RateLimited { scope: super::decisions::RateScope::Global }));
        }
        let lookback = if self.cfg.max_queue_lookback == 0 { usize::MAX } else { self.cfg.max_queue_lookback };
        loop {
            let qc = &self.queues[q as usize];
            let next_evicted = qc.evicted.get(qc.evicted_pos).copied();
            let mut next_queued = if qc.queued_stopped { None } else { self.peek_queued(q) };
            if next_queued.is_some() {
                let stop = match &self.global_rate_stopped {
                    Some(r) => Some(r.clone()),
                    None if self.queues[q as usize].taken >= lookback => Some(Arc::new(Reason::LookbackLimit {
                        queue: self.queues[q as usize].name.clone(),
                        limit: self.cfg.max_queue_lookback,
                    })),
                    None => None,
                };
                if let Some(r) = stop {
                    let qc = &mut self.queues[q as usize];
                    qc.queued_stopped = true;
                    qc.note.get_or_insert(r);
                    next_queued = None;
                }
            }
            let next_retry = {
                let qc = &self.queues[q as usize];
                qc.retry.get(qc.retry_pos).copied()
            };
            // The three streams (evicted, offered again, queued) merge in queue order.
            let queued_key = next_queued.map(|w| self.queued_key(&self.queues[q as usize].srcs[w as usize]));
            let mut pick: Option<(QueueOrderKey, u8)> = None;
            for (key, stream) in [
                (next_evicted.map(|e| self.jobs[e as usize].order_key()), 0u8),
                (next_retry.map(|r| self.jobs[r as usize].order_key()), 1),
                (queued_key, 2),
            ] {
                if let Some(k) = key
                    && pick.is_none_or(|(best, _)| k < best)
                {
                    pick = Some((k, stream));
                }
            }
            let (_, stream) = pick?;
            let take_evicted = stream == 0;
            let members: SmallVec<[u32; 1]> = match stream {
                0 | 1 => {
                    let qc = &mut self.queues[q as usize];
                    let (first, expected) = if stream == 0 {
                        qc.evicted_pos += 1;
                        (next_evicted, Status::Evicted)
                    } else {
                        qc.retry_pos += 1;
                        (next_retry, Status::Waiting)
                    };
                    let first = first?;
                    let job = &self.jobs[first as usize];
                    // Skip jobs already dealt with (members of a gang handled with its first member).
                    if job.status != expected {
                        continue;
                    }
                    match &job.info.gang {
                        Some(g) => self
                            .gang_members(q, g.id.as_str())
                            .into_iter()
                            .filter(|&m| self.jobs[m as usize].status == expected)
                            .collect(),
                        None => smallvec::smallvec![first],
                    }
                }
                _ => {
                    let pos = next_queued?;
                    self.queues[q as usize].queued_pos += 1;
                    let src = self.queues[q as usize].src;
                    let gang = if self.queues[q as usize].srcs[pos as usize].gang {
                        src[pos as usize].gang.as_ref()
                    } else {
                        None
                    };
                    let positions: SmallVec<[u32; 1]> = match gang {
                        Some(g) => {
                            let qc = &mut self.queues[q as usize];
                            qc.gangs_done.insert(g.id.as_str());
                            qc.gang_src
                                .get(g.id.as_str())
                                .map(|m| m.iter().copied().collect())
                                .unwrap_or_else(|| smallvec::smallvec![pos])
                        }
                        None => smallvec::smallvec![pos],
                    };
                    self.queues[q as usize].taken += positions.len();
                    let members: SmallVec<[u32; 1]> = positions
                        .iter()
                        .map(|&p| {
                            let sj = self.queues[q as usize].srcs[p as usize].clone();
                            self.new_job(&sj, &src[p as usize], q, Origin::Queued)
                        })
                        .collect();
                    if let Some(g) = gang {
                        self.created_gangs.insert((q, g.id.as_str()), members.to_vec());
                    }
                    members
                }
            };
            if members.is_empty() {
                continue;
            }
            let first = members[0];
            let req = if members.len() == 1 {
                self.req(first)
            } else {
                let mut req = self.layout.zero();
                for &m in &members {
                    add_to(&mut req, &self.req(m));
                }
                req
            };
            let urgency = self.jobs[first as usize].class_priority;
            let qc = &self.queues[q as usize];
            let cost_after = self.cost.share_with(&qc.alloc, &req) * qc.priority_factor;
            let gang = if members.len() > 1 || self.jobs[first as usize].gang {
                self.jobs[first as usize].info.gang.clone()
            } else {
                None
            };
            let qc = &mut self.queues[q as usize];
            qc.current = Some(Candidate { jobs: members, evicted: take_evicted, gang, req });
            return Some(Turn { urgency, cost_after, queue: q });
        }
    }

    /// Marks `j` as tried and not scheduled.
    pub(super) fn set_reason(&mut self, j: u32, reason: Arc<Reason>) {
        if self.recording {
            let job = &self.jobs[j as usize];
            self.undo.push(Undo::Status {
                job: j,
                status: job.status,
                displaced_by: job.displaced_by,
                reason: job.reason.clone(),
                node: job.node,
            });
        }
        self.jobs[j as usize].reason = Some(reason);
    }

    /// Turns the cycle's outcome into decisions.
    pub(super) fn finish(self, out: &mut Decisions, done: &mut HashSet<crate::model::JobId>) {
        // Who finally took a victim's place: follow displacements of displacers.
        // (A displacer that was itself displaced, or moved elsewhere, passes the place on.)
        let resolve = |mut x: u32, node: Option<u32>| -> u32 {
            for _ in 0..self.jobs.len() {
                let j = &self.jobs[x as usize];
                let holds = j.scheduled() && (node.is_none() || j.node == node);
                match (holds, j.displaced_by) {
                    (false, Some(y)) => x = y,
                    _ => break,
                }
            }
            x
        };
        for (ji, j) in self.jobs.iter().enumerate() {
            let new = j.origin == Origin::Queued;
            match j.status {
                Status::Placed | Status::Returned if new => {
                    let Some(n) = j.node.map(|n| self.nodes[n as usize]) else { continue };
                    done.insert(j.id);
                    out.leases.push(Lease {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        pool: self.pool.clone(),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                    });
                }
                Status::Evicted | Status::Preempted if !new => {
                    let Some(n) = j.node.map(|n| self.nodes[n as usize]) else { continue };
                    // Who holds the place this job lost, if anyone still does.
                    let holder = |x: u32| {
                        let m = &self.jobs[x as usize];
                        let by = resolve(m.displaced_by?, m.node);
                        let b = &self.jobs[by as usize];
                        (b.scheduled() && b.node == m.node).then_some(by)
                    };
                    let cascaded = matches!(j.reason.as_deref(), Some(Reason::GangMemberLost { .. }));
                    let own = if cascaded { None } else { holder(ji as u32) };
                    // A gang member that kept its place went because another member lost one.
                    let via_gang = match (&own, &j.info.gang) {
                        (None, Some(g)) => self
                            .gang_members(j.queue, g.id.as_str())
                            .into_iter()
                            .find_map(holder)
                            .or_else(|| j.displaced_by.map(|by| resolve(by, None)))
                            .map(|by| (g.id.clone(), by)),
                        _ => None,
                    };
                    let reason = match (own, via_gang) {
                        (Some(by), _) => {
                            let b = &self.jobs[by as usize];
                            if b.class_priority > j.class_priority {
                                PreemptionReason::Urgency {
                                    by: b.id,
                                    by_priority_class: self.pcs[b.pc as usize].name.clone(),
                                }
                            } else {
                                PreemptionReason::FairShare { by: b.id, by_queue: b.info.queue.clone() }
                            }
                        }
                        (None, Some((gang, by))) => {
                            let b = &self.jobs[by as usize];
                            PreemptionReason::GangMember { gang, by: b.id, by_queue: b.info.queue.clone() }
                        }
                        (None, None) => PreemptionReason::NotRescheduled {
                            reason: j.reason.as_deref().cloned().unwrap_or(Reason::NoCapacity {
                                pool: self.pool.clone(),
                                missing: "its resources".to_string(),
                            }),
                        },
                    };
                    out.preemptions.push(Preemption {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        executor: n.executor.clone(),
                        node: n.name.clone(),
                        reason,
                    });
                }
                Status::Failed => {
                    done.insert(j.id);
                    out.failures.push(Failure {
                        job_id: j.id,
                        queue: j.info.queue.clone(),
                        reason: j.reason.as_deref().cloned().unwrap_or(Reason::NoPool),
                    });
                }
                // Placed earlier in the cycle, then evicted again and not back: stays queued.
                Status::Evicted | Status::Waiting | Status::Preempted => {
                    let reason = match (j.displaced_by, &j.reason) {
                        (Some(by), _) if j.status != Status::Waiting => {
                            Some(Arc::new(Reason::Displaced { by: self.jobs[resolve(by, j.node) as usize].id }))
                        }
                        (_, r) => r.clone(),
                    };
                    if let Some(r) = reason {
                        out.unscheduled.push(Unscheduled { job_id: j.id, reason: r });
                    }
                }
                Status::Running | Status::Placed | Status::Returned => {}
            }
        }
        for q in &self.queues {
            if let Some(n) = &q.note {
                out.queue_notes.entry(q.name.clone()).or_insert_with(|| n.clone());
            }
        }
        out.pools.push(PoolReport {
            pool: self.pool.clone(),
            total: self.layout.named(&self.total),
            nodes: self.nodes.len(),
            queues: self
                .queues
                .iter()
                .filter(|q| q.active)
                .map(|q| QueueShare {
                    queue: q.name.clone(),
                    weight: 1.0 / q.priority_factor,
                    fair_share: q.fair_share,
                    adjusted_fair_share: q.adjusted_fair_share,
                    actual_share: q.actual_share,
                    share_after: self.cost.share(&q.alloc),
                    allocated: self.layout.named(&q.alloc),
                    demand: self.layout.named(&q.demand),
                })
                .collect(),
            evicted: self.evicted_count,
            jobs_tried: self.jobs_tried,
        });
    }

    /// A uniform draw in [0, 1).
    pub(super) fn draw(rng: &mut rand_pcg::Pcg64) -> f64 {
        (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
