//! Gang placement: all members in one executor (and, with a node-uniformity label, on nodes that
//! share the label's value), all-or-nothing down to the minimum cardinality.
//!
//! Every candidate domain (executor, label value) is tried inside a transaction and rolled back;
//! the best one — most members placed, then least preemption, then the tightest fit — is then
//! placed for real. A gang that does not fit changes nothing.
//!
//! The domains themselves, and how a trial's fit is measured, only read the pool
//! ([`super::gang_domains`]). The trial stays a step of the whole cycle (`impl PoolCycle`): each
//! member is placed as any job is ([`super::placement`]), which may displace running jobs and
//! break their gangs, and so touches the queues, the node db, the ledger, the jobs, the gangs,
//! the return order and the pool policy's state; a narrower borrow would list every one of them.

use super::context::PoolCycle;
use super::decisions::Reason;
use super::job::Status;
use super::queue::Candidate;
use super::resvec::ResVec;
use smallvec::SmallVec;
use std::sync::Arc;

/// How many nodes `PoolCycle::whole_fit` looks at for the gang's places before it leaves the
/// question to the trial. A domain with room usually shows it on its first few nodes (an empty
/// one, or the roomiest); one without room for the whole gang can take a walk over most of its
/// nodes to say so, which costs more than the trial it would save.
const WHOLE_FIT_BUDGET: usize = 16;

#[cfg(test)]
thread_local! {
    /// Tests: run every trial, the reference the trials judged without running must match.
    pub(super) static TRIALS_ALWAYS_RUN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The node types of `types` that are in domain `dom`.
fn in_domain(types: &[u32], dom: &[u32]) -> SmallVec<[u32; 8]> {
    types.iter().copied().filter(|t| dom.contains(t)).collect()
}

/// Outcome of trying a gang in one domain.
#[derive(Debug, Clone)]
struct Trial {
    placed: usize,
    max_level: u8,
    leftover: [i64; 4],
    /// Why the first member that did not fit did not (computed when it failed).
    first_failure: Option<Arc<Reason>>,
}

impl PoolCycle<'_> {
    /// Places a queued gang; returns how many members were placed.
    pub(super) fn place_gang(&mut self, _q: u32, cand: &Candidate) -> usize {
        let Some(gang) = cand.gang.clone() else { return 0 };
        let members: Vec<u32> = cand.jobs.to_vec();
        let present = members.len() as u32;
        let gang_reason = |fit: u32, detail: Option<Arc<Reason>>| Reason::Gang {
            gang: gang.id.clone(),
            fit,
            cardinality: gang.cardinality,
            minimum: gang.min_cardinality,
            detail,
        };
        if present < gang.min_cardinality {
            let reason =
                Reason::GangIncomplete { gang: gang.id.clone(), queued: present, cardinality: gang.cardinality };
            self.fail_members(&members, reason);
            return 0;
        }
        let targets = match self.member_targets(&members) {
            Ok(t) => t,
            Err(detail) => {
                self.fail_members(&members, gang_reason(0, Some(Arc::new(detail))));
                return 0;
            }
        };
        let label = gang.node_uniformity_label.as_deref();
        let domains = self.gang_domains().of(&targets, label);
        if domains.is_empty() {
            let detail = label
                .map(|l| format!("no matching node has label {l}"))
                .unwrap_or_else(|| "no matching node".to_string());
            let no_node = Reason::NoMatchingNode { pool: self.view().pool.clone(), detail };
            self.fail_members(&members, gang_reason(0, Some(Arc::new(no_node))));
            return 0;
        }
        // Gangs of identical members share verdicts, and a domain without enough free resources
        // in total is not worth a trial.
        let first = &self.jobs[members[0] as usize];
        let same_class = members.iter().all(|&m| self.jobs[m as usize].class == first.class);
        let cached = same_class && !members.iter().any(|&m| self.bypasses_verdicts(m));
        let cache_key = cached.then(|| self.gang_domains().shape(members[0], present, &gang));
        if let Some(r) = cache_key.as_ref().and_then(|k| self.ledger.gang_verdict(k)) {
            let r = r.clone();
            for &m in &members {
                self.set_reason(m, r.clone());
            }
            return 0;
        }
        let max_level = self.view().levels.max_search_level(first.priority_level as usize);
        // Pool policies other than fair_share preempt by their own rules, which the levels do not
        // count: every domain gets a trial there.
        let domains = if same_class && self.policy.is_none() {
            self.gang_domains().viable(domains, &targets[0].0, gang.min_cardinality, max_level)
        } else {
            domains
        };
        let best = self.best_domain(&members, &targets, &domains);
        let mark = self.begin();
        let trial = self.place_members(&members, &targets, &domains[best]);
        if trial.placed < gang.min_cardinality as usize || trial.placed == 0 {
            self.rollback(mark);
            let reason = gang_reason(trial.placed as u32, trial.first_failure);
            // A gang inside a preemption fence may fail where a gang like it outside would not.
            if let Some(k) = cache_key.filter(|_| self.fence_if_any(members[0]).is_none()) {
                self.ledger.set_gang_verdict(k, Arc::new(reason.clone()));
            }
            self.fail_members(&members, reason);
            return 0;
        }
        self.commit(mark);
        // Members beyond what fit fail for good.
        let reason = Arc::new(gang_reason(trial.placed as u32, None));
        for &m in &members {
            if self.ledger.status(m) == Status::Waiting {
                self.ledger.change(m, |f| {
                    f.status = Status::Failed;
                    f.reason = Some(reason.clone());
                });
                self.ledger.note_failed(m);
            }
        }
        trial.placed
    }

    /// True if jobs `a` and `b` (of one gang) search alike: same priority class and priority,
    /// which is all a placement looks at beyond the requests and node types.
    fn search_alike(&self, a: u32, b: u32) -> bool {
        let (a, b) = (&self.jobs[a as usize], &self.jobs[b as usize]);
        a.priority_class == b.priority_class && a.priority_level == b.priority_level && a.priority == b.priority
    }

    /// Every member waits, for one reason.
    fn fail_members(&mut self, members: &[u32], reason: Reason) {
        let reason = Arc::new(reason);
        for &m in members {
            self.set_reason(m, reason.clone());
        }
    }

    /// Every member's requests and node types, or why one of them fits nowhere.
    fn member_targets(&mut self, members: &[u32]) -> Result<Vec<(ResVec, Vec<u32>)>, Reason> {
        let mut targets: Vec<(ResVec, Vec<u32>)> = Vec::with_capacity(members.len());
        for &m in members {
            targets.push(self.job_targets(m)?);
        }
        Ok(targets)
    }

    /// The domain to place the gang in: each is tried inside a transaction and rolled back; the
    /// best places most members, then preempts least, then fits tightest.
    fn best_domain(&mut self, members: &[u32], targets: &[(ResVec, Vec<u32>)], domains: &[Vec<u32>]) -> usize {
        if domains.len() == 1 {
            return 0;
        }
        // What the whole gang takes from a domain's free resources when it fits without
        // displacing anyone: then a domain's trial can be judged before it is run.
        let mut asked = [0i64; 4];
        for (req, _) in targets {
            let r = self.gang_domains().indexed(req);
            for k in 0..4 {
                asked[k] += r[k];
            }
        }
        let judged = self.trials_can_be_judged(members, targets);
        let mut best: Option<(usize, Trial)> = None;
        for (d, dom) in domains.iter().enumerate() {
            // Once the gang fits whole without displacing anyone, another domain can only win by
            // being left tighter, and the tightest it can be left is its free amounts less the
            // gang's: a domain that cannot beat the best that way is not tried.
            if let Some((_, b)) = &best
                && b.placed == members.len()
                && b.max_level == 0
            {
                let mut bound = self.gang_domains().leftover(dom);
                for k in 0..4 {
                    bound[k] -= asked[k];
                }
                if bound >= b.leftover {
                    continue;
                }
            }
            let whole = if judged { self.whole_fit(members.len(), &targets[0], dom, &asked) } else { None };
            let trial = match whole {
                Some(t) => t,
                None => {
                    let mark = self.begin();
                    let trial = self.place_members(members, targets, dom);
                    self.rollback(mark);
                    trial
                }
            };
            let better = match &best {
                None => true,
                Some((_, b)) => {
                    (std::cmp::Reverse(trial.placed), trial.max_level, trial.leftover)
                        < (std::cmp::Reverse(b.placed), b.max_level, b.leftover)
                }
            };
            if better {
                best = Some((d, trial));
            }
        }
        best.map(|(d, _)| d).unwrap_or(0)
    }

    /// True if the gang's trials in domains where it fits whole at level 0 can be judged without
    /// running them ([`Self::whole_fit`]): members that ask for the same on the same node types,
    /// placed the plain way (no pool policy, earmark or fence).
    fn trials_can_be_judged(&self, members: &[u32], targets: &[(ResVec, Vec<u32>)]) -> bool {
        #[cfg(test)]
        if TRIALS_ALWAYS_RUN.with(std::cell::Cell::get) {
            return false;
        }
        self.policy.is_none()
            && !self.view().earmarks.active()
            && members.iter().all(|&m| self.fence_for(m).is_none())
            // A job takes room at level 0 only if some level above frees it.
            && self.view().levels.count() > 1
            && targets.first().is_some_and(|first| targets.iter().all(|t| t == first))
    }

    /// The trial's outcome in domain `dom` for a gang of `members` alike members, each asking
    /// `target` ([`Self::trials_can_be_judged`]), if they fit whole there at level 0
    /// ([`super::nodedb::NodeDb::has_room_for`]): every member placed at level 0 displacing
    /// nobody, the domain left its free amounts less `asked`. Such a trial, rolled back, leaves
    /// nothing behind that a decision reads. None: the trial has to run.
    fn whole_fit(
        &mut self,
        members: usize,
        target: &(ResVec, Vec<u32>),
        dom: &[u32],
        asked: &[i64; 4],
    ) -> Option<Trial> {
        let (req, types) = target;
        let types = in_domain(types, dom);
        if !self.db.has_room_for(0, &types, req, members as u32, WHOLE_FIT_BUDGET) {
            return None;
        }
        let mut leftover = self.gang_domains().leftover(dom);
        for k in 0..4 {
            leftover[k] -= asked[k];
        }
        Some(Trial { placed: members, max_level: 0, leftover, first_failure: None })
    }

    /// Places as many members as fit in the domain (node types `dom`).
    fn place_members(&mut self, members: &[u32], targets: &[(ResVec, Vec<u32>)], dom: &[u32]) -> Trial {
        let mut trial = Trial { placed: 0, max_level: 0, leftover: [0; 4], first_failure: None };
        // Members that found no place since the last placement: the db has not changed since,
        // so a member asking for the same on the same nodes would search in vain.
        let mut in_vain: SmallVec<[usize; 2]> = SmallVec::new();
        for (i, &m) in members.iter().enumerate() {
            let (req, types) = &targets[i];
            if in_vain.iter().any(|&f| targets[f] == targets[i] && self.search_alike(members[f], m)) {
                continue;
            }
            let types = in_domain(types, dom);
            match self.try_place(m, &types, req) {
                Some(level) => {
                    trial.placed += 1;
                    trial.max_level = trial.max_level.max(level);
                    in_vain.clear();
                }
                None => {
                    in_vain.push(i);
                    if trial.first_failure.is_none() {
                        let prio = self.jobs[m as usize].priority_level;
                        let reason = match self.fence_stop.take() {
                            Some(fence) => self.fence_reason(fence),
                            None => self.no_capacity_reason(&types, req, prio),
                        };
                        trial.first_failure = Some(Arc::new(reason));
                    }
                }
            }
        }
        trial.leftover = self.gang_domains().leftover(dom);
        trial
    }
}
