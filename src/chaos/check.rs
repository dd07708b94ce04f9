//! The history checker: what a fault run must never show, and the figures it yields.
//!
//! - every acknowledged submission is on every server, and no job key (client id) is stored
//!   twice;
//! - no job has two runs live at once, by the servers' records and by the agents' journals;
//! - every job reaches an end state;
//! - job states only move forward: each job's events follow the lifecycle, and linearizable
//!   reads, in real-time order, never see a job go back;
//! - a linearizable read sees every write acknowledged before it began.
//!
//! It is a pure function of the [`History`]: a failing run can be checked again from its saved
//! history.

use super::history::{History, Op, OpKind, OpResult, Outcome, StoredJob};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Violations are described up to this many; the counts are always whole.
const DESCRIBED: usize = 20;

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Verdict {
    /// Jobs acknowledged to clients.
    pub acknowledged: usize,
    /// Acknowledged jobs missing on some server.
    pub lost: usize,
    /// Extra copies of a job key (client id) stored.
    pub duplicated: usize,
    /// Jobs with two runs live at once.
    pub double_runs: usize,
    /// Jobs not in an end state after healing.
    pub unfinished: usize,
    /// Jobs whose state moved backwards (events or reads).
    pub backwards: usize,
    /// Linearizable reads that missed a write acknowledged before they began.
    pub stale_reads: usize,
    /// The first violations, in words.
    pub violations: Vec<String>,
}

impl Verdict {
    /// True if nothing that must never happen happened.
    pub fn correct(&self) -> bool {
        self.lost + self.duplicated + self.double_runs + self.unfinished + self.backwards + self.stale_reads == 0
    }

    fn note(&mut self, what: String) {
        if self.violations.len() < DESCRIBED {
            self.violations.push(what);
        }
    }
}

/// Checks a history.
pub fn check(h: &History) -> Verdict {
    let mut v = Verdict::default();
    let acked = acknowledged_jobs(h);
    v.acknowledged = acked.len();
    check_stored(h, &acked, &mut v);
    check_runs(h, &mut v);
    check_events(h, &mut v);
    check_reads(h, &mut v);
    v
}

/// Acknowledged jobs: id → key, from the acknowledged submissions.
fn acknowledged_jobs(h: &History) -> BTreeMap<String, String> {
    let mut acked = BTreeMap::new();
    for op in &h.ops {
        if let (OpKind::Submit { keys, .. }, Outcome::Ok { result: OpResult::Submitted { job_ids } }) =
            (&op.kind, &op.outcome)
        {
            for (id, key) in job_ids.iter().zip(keys) {
                acked.insert(id.clone(), key.clone());
            }
        }
    }
    acked
}

fn is_terminal(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled" | "preempted")
}

/// Lost, duplicated and unfinished jobs, on every server.
fn check_stored(h: &History, acked: &BTreeMap<String, String>, v: &mut Verdict) {
    let mut lost: HashSet<&str> = HashSet::new();
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unfinished: BTreeMap<&str, &str> = BTreeMap::new();
    for (server, jobs) in &h.stored {
        let by_id: HashMap<&str, &StoredJob> = jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        for (id, key) in acked {
            match by_id.get(id.as_str()) {
                None => {
                    if lost.insert(id) {
                        v.note(format!("acknowledged job {id} (key {key}) is missing on server {server}"));
                    }
                }
                Some(j) if j.key.as_deref() != Some(key.as_str()) => {
                    v.note(format!(
                        "job {id} was acknowledged for key {key} but server {server} has it as {:?}",
                        j.key
                    ));
                    lost.insert(id);
                }
                Some(_) => {}
            }
        }
        let mut here: BTreeMap<&str, usize> = BTreeMap::new();
        for j in jobs {
            if let Some(k) = &j.key {
                *here.entry(k.as_str()).or_default() += 1;
            }
            if !is_terminal(&j.state) {
                unfinished.insert(j.id.as_str(), j.state.as_str());
            }
        }
        for (k, n) in here {
            let most = copies.entry(k).or_default();
            *most = (*most).max(n);
        }
    }
    v.lost = lost.len();
    for (k, n) in copies.iter().filter(|(_, n)| **n > 1) {
        v.duplicated += n - 1;
        v.note(format!("key {k} is stored {n} times"));
    }
    v.unfinished = unfinished.len();
    for (id, state) in unfinished.iter().take(DESCRIBED) {
        v.note(format!("job {id} is still {state} after healing"));
    }
}

/// Two runs of one job live at once: by the agents' journals (what really ran), and by each
/// server's record of the runs.
fn check_runs(h: &History, v: &mut Verdict) {
    let mut doubled: BTreeSet<String> = BTreeSet::new();
    let mut by_job: BTreeMap<&str, Vec<(i64, i64, &str, usize)>> = BTreeMap::new();
    for r in &h.agent_runs {
        by_job.entry(r.job_id.as_str()).or_default().push((r.start_ms, r.end_ms, r.run_id.as_str(), r.agent));
    }
    for (job, mut runs) in by_job {
        runs.sort();
        for w in runs.windows(2) {
            if w[1].0 < w[0].1 && doubled.insert(job.to_string()) {
                v.note(format!(
                    "job {job} ran twice at once: run {} on agent {} ({}..{}) and run {} on agent {} from {}",
                    w[0].2, w[0].3, w[0].0, w[0].1, w[1].2, w[1].3, w[1].0
                ));
            }
        }
    }
    for (server, jobs) in &h.stored {
        for j in jobs {
            let mut runs: Vec<(i64, Option<i64>)> =
                j.runs.iter().map(|r| (r.leased_ms.unwrap_or(i64::MIN), r.finished_ms)).collect();
            runs.sort();
            let overlaps = runs.windows(2).any(|w| w[0].1.is_none_or(|end| w[1].0 < end));
            if overlaps && doubled.insert(j.id.clone()) {
                v.note(format!("server {server} records runs of job {} that overlap: {:?}", j.id, j.runs));
            }
        }
    }
    v.double_runs = doubled.len();
}

/// Where a job is in its life, by its events: 0 none, 1 submitted, 2 queued, 3 leased,
/// 4 pending, 5 running, 6 over.
fn next_phase(phase: u8, event: &str) -> Option<u8> {
    let live = (1..=5).contains(&phase);
    let on_node = (3..=5).contains(&phase);
    match event {
        "submitted" if phase == 0 => Some(1),
        "queued" if phase == 1 => Some(2),
        "leased" if phase == 2 => Some(3),
        "pending" if phase == 3 => Some(4),
        "running" if phase == 3 || phase == 4 => Some(5),
        "succeeded" if on_node => Some(6),
        "failed" | "cancelled" | "preempted" if live => Some(6),
        "requeued" if on_node => Some(2),
        "cancel_requested" | "preempt_requested" | "reprioritized" if live => Some(phase),
        _ => None,
    }
}

/// Each job's events, as the first server that has it records them, follow the lifecycle.
fn check_events(h: &History, v: &mut Verdict) {
    let mut seen: HashSet<&str> = HashSet::new();
    for (server, jobs) in &h.stored {
        for j in jobs {
            if !seen.insert(j.id.as_str()) {
                continue;
            }
            let mut phase = 0;
            for (i, e) in j.events.iter().enumerate() {
                match next_phase(phase, e) {
                    Some(p) => phase = p,
                    None => {
                        v.backwards += 1;
                        v.note(format!(
                            "job {} on server {server}: event {e} (#{i}) cannot follow {:?}",
                            j.id,
                            &j.events[..i]
                        ));
                        break;
                    }
                }
            }
        }
    }
}

/// A read's place in a job's life: (attempt, step), an end state last of all.
fn read_rank(state: &str, runs: usize) -> (usize, u8) {
    match state {
        s if is_terminal(s) => (usize::MAX, 0),
        "queued" => (runs + 1, 0),
        "leased" => (runs, 1),
        "pending" => (runs, 2),
        _ => (runs, 3),
    }
}

/// Linearizable reads: never older than what a read that ended before them saw, never missing a
/// write acknowledged before they began.
fn check_reads(h: &History, v: &mut Verdict) {
    let mut reads: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    let mut writes: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &h.ops {
        match &op.kind {
            OpKind::Read { job_id } if matches!(op.outcome, Outcome::Ok { .. }) => {
                reads.entry(job_id.as_str()).or_default().push(op)
            }
            OpKind::Cancel { job_id } | OpKind::Reprioritize { job_id, .. } => {
                writes.entry(job_id.as_str()).or_default().push(op)
            }
            _ => {}
        }
    }
    let submitted_at = submission_times(h);
    let mut backwards: BTreeSet<&str> = BTreeSet::new();
    for (job, mut rs) in reads {
        rs.sort_by(|a, b| a.invoke_ms.total_cmp(&b.invoke_ms));
        let job_writes = writes.get(job).map(Vec::as_slice).unwrap_or_default();
        for (i, r) in rs.iter().enumerate() {
            let Outcome::Ok { result } = &r.outcome else { continue };
            if let Some(stale) = stale(job, r, result, job_writes, submitted_at.get(job)) {
                v.stale_reads += 1;
                v.note(stale);
            }
            // Every read that ended before this one began saw no later state.
            for earlier in rs[..i].iter().filter(|e| e.complete_ms < r.invoke_ms) {
                let Outcome::Ok { result: before } = &earlier.outcome else { continue };
                if went_back(before, result) && backwards.insert(job) {
                    v.note(format!("job {job}: a read saw {result:?} after an earlier read saw {before:?}"));
                }
            }
        }
    }
    v.backwards += backwards.len();
}

/// Whether `after` shows the job earlier in its life than `before`.
fn went_back(before: &OpResult, after: &OpResult) -> bool {
    match (before, after) {
        (OpResult::Found { .. }, OpResult::NotFound) => true,
        (OpResult::Found { state: s0, runs: n0, .. }, OpResult::Found { state: s1, runs: n1, .. }) => {
            read_rank(s1, *n1) < read_rank(s0, *n0) || (is_terminal(s0) && s0 != s1)
        }
        _ => false,
    }
}

/// When each acknowledged job's submission was acknowledged.
fn submission_times(h: &History) -> HashMap<&str, f64> {
    let mut at = HashMap::new();
    for op in &h.ops {
        if let Outcome::Ok { result: OpResult::Submitted { job_ids } } = &op.outcome {
            for id in job_ids {
                at.insert(id.as_str(), op.complete_ms);
            }
        }
    }
    at
}

/// Why read `r` of `job` (answering `result`) missed a write acknowledged before it began, if it
/// did.
fn stale(job: &str, r: &Op, result: &OpResult, writes: &[&Op], submitted: Option<&f64>) -> Option<String> {
    let found = match result {
        OpResult::Found { state, priority, .. } => Some((state.as_str(), *priority)),
        _ => None,
    };
    if submitted.is_some_and(|at| *at < r.invoke_ms) && found.is_none() {
        return Some(format!("a read of job {job} found nothing although its submission was acknowledged before"));
    }
    let (state, priority) = found?;
    let done_before = |w: &&&Op| matches!(w.outcome, Outcome::Ok { .. }) && w.complete_ms < r.invoke_ms;
    if writes.iter().filter(done_before).any(|w| matches!(w.kind, OpKind::Cancel { .. })) && !is_terminal(state) {
        return Some(format!("a read of job {job} saw it {state} after a cancel was acknowledged"));
    }
    // The priority: when every change not refused was acknowledged before the read began, the
    // last one holds (a client makes one change at a time, so they are ordered).
    let changes: Vec<&&Op> = writes
        .iter()
        .filter(|w| matches!(w.kind, OpKind::Reprioritize { .. }) && w.invoke_ms < r.complete_ms)
        .filter(|w| !matches!(w.outcome, Outcome::Failed { .. }))
        .collect();
    if changes.iter().all(done_before)
        && let Some(last) = changes.iter().max_by(|a, b| a.complete_ms.total_cmp(&b.complete_ms))
        && let OpKind::Reprioritize { priority: want, .. } = last.kind
        && want != priority
        && !is_terminal(state)
    {
        return Some(format!("a read of job {job} saw priority {priority} after {want} was acknowledged"));
    }
    None
}

/// Figures of a fault run: how soon writes were acknowledged again after each fault, and how
/// long requests to servers on the majority side waited.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Per fault kind, for each fault: seconds from the injection to the first acknowledged
    /// write invoked after it and sent first to a server on the majority side (a client that
    /// happens to send to the paused or cut-off server waits for it, whatever the others do);
    /// none: no such write was acknowledged before the run ended.
    pub first_ack_s: BTreeMap<String, Vec<Option<f64>>>,
    /// The longest a request to a server on the majority side waited, in seconds, and when.
    pub longest_majority_wait_s: f64,
    /// The server and the time (ms) of that request.
    pub longest_at: Option<(usize, f64)>,
}

/// How long after a fault's healing its minority servers still count as such (catching up).
const HEAL_GRACE_MS: f64 = 2_000.0;

/// The figures of `h`.
pub fn figures(h: &History) -> Figures {
    let mut f = Figures::default();
    for fault in &h.faults {
        let first = h
            .ops
            .iter()
            .filter(|op| op.kind.is_write() && op.invoke_ms >= fault.injected_ms)
            .filter(|op| op.attempts.first().is_none_or(|a| !fault.minority.contains(&a.server)))
            .filter(|op| matches!(op.outcome, Outcome::Ok { .. }))
            .map(|op| (op.complete_ms - fault.injected_ms) / 1000.0)
            .min_by(f64::total_cmp);
        f.first_ack_s.entry(fault.kind.clone()).or_default().push(first);
    }
    for a in h.ops.iter().flat_map(|op| &op.attempts) {
        let minority = h.faults.iter().any(|fault| {
            fault.minority.contains(&a.server)
                && a.start_ms <= fault.healed_ms + HEAL_GRACE_MS
                && a.end_ms >= fault.injected_ms
        });
        let waited = (a.end_ms - a.start_ms) / 1000.0;
        if !minority && waited > f.longest_majority_wait_s {
            f.longest_majority_wait_s = waited;
            f.longest_at = Some((a.server, a.start_ms));
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::{AgentRun, Attempt, StoredRun};

    fn op(client: usize, kind: OpKind, invoke: f64, complete: f64, outcome: Outcome) -> Op {
        Op { client, kind, invoke_ms: invoke, complete_ms: complete, outcome, attempts: Vec::<Attempt>::new() }
    }

    fn submit(key: &str, id: &str, at: f64) -> Op {
        op(
            0,
            OpKind::Submit { job_set: "s".into(), keys: vec![key.into()], with_client_ids: true },
            at,
            at + 1.0,
            Outcome::Ok { result: OpResult::Submitted { job_ids: vec![id.into()] } },
        )
    }

    fn read(id: &str, invoke: f64, complete: f64, state: &str, runs: usize, priority: u32) -> Op {
        let result = OpResult::Found { state: state.into(), priority, runs };
        op(0, OpKind::Read { job_id: id.into() }, invoke, complete, Outcome::Ok { result })
    }

    fn stored(id: &str, key: &str, state: &str, events: &[&str]) -> StoredJob {
        StoredJob {
            id: id.into(),
            key: Some(key.into()),
            client_id: Some(key.into()),
            state: state.into(),
            runs: vec![],
            events: events.iter().map(|e| e.to_string()).collect(),
        }
    }

    const DONE: &[&str] = &["submitted", "queued", "leased", "pending", "running", "succeeded"];

    fn healthy() -> History {
        History {
            ops: vec![
                submit("k1", "j1", 0.0),
                read("j1", 5.0, 6.0, "running", 1, 0),
                read("j1", 7.0, 8.0, "succeeded", 1, 0),
            ],
            faults: vec![],
            stored: vec![
                (0, vec![stored("j1", "k1", "succeeded", DONE)]),
                (1, vec![stored("j1", "k1", "succeeded", DONE)]),
            ],
            agent_runs: vec![AgentRun { agent: 0, run_id: "r1".into(), job_id: "j1".into(), start_ms: 10, end_ms: 20 }],
        }
    }

    #[test]
    fn figures_time_the_first_acknowledged_write_after_each_fault_and_leave_out_the_minority() {
        use crate::chaos::history::Fault;
        let mut h = healthy();
        let attempt = |server, start, end| Attempt { server, start_ms: start, end_ms: end, status: Some(200) };
        let mut slow = submit("k2", "j2", 1_000.0);
        slow.complete_ms = 2_500.0;
        slow.attempts = vec![attempt(0, 1_000.0, 2_400.0), attempt(1, 2_400.0, 2_500.0)];
        let mut stuck = read("j1", 1_100.0, 9_000.0, "running", 1, 0);
        stuck.attempts = vec![attempt(2, 1_100.0, 9_000.0)];
        // Sent to the paused server, and answered when it woke: not the cluster's answer.
        let mut woke = submit("k3", "j3", 950.0);
        woke.complete_ms = 2_000.0;
        woke.attempts = vec![attempt(2, 950.0, 2_000.0)];
        h.ops.extend([slow, stuck, woke]);
        h.faults.push(Fault {
            kind: "pause_leader".into(),
            target: "server 2".into(),
            minority: vec![2],
            injected_ms: 900.0,
            healed_ms: 8_000.0,
        });
        let f = figures(&h);
        assert_eq!(f.first_ack_s["pause_leader"], vec![Some(1.6)]);
        // The paused server's 7.9 s is left out; the relay's 1.4 s is the longest.
        assert!((f.longest_majority_wait_s - 1.4).abs() < 1e-9, "{f:?}");
        assert_eq!(f.longest_at, Some((0, 1_000.0)));
    }

    #[test]
    fn a_clean_history_passes() {
        let v = check(&healthy());
        assert!(v.correct(), "{v:?}");
        assert_eq!(v.acknowledged, 1);
    }

    #[test]
    fn a_job_missing_on_one_server_is_lost_and_a_key_stored_twice_is_a_duplicate() {
        let mut h = healthy();
        h.stored[1].1.clear();
        let v = check(&h);
        assert_eq!(v.lost, 1, "{v:?}");
        let mut h = healthy();
        h.stored[0].1.push(stored("j2", "k1", "succeeded", DONE));
        let v = check(&h);
        assert_eq!((v.duplicated, v.lost), (1, 0), "{v:?}");
    }

    #[test]
    fn overlapping_runs_in_the_journals_or_the_records_are_double_runs() {
        let mut h = healthy();
        h.agent_runs.push(AgentRun { agent: 1, run_id: "r2".into(), job_id: "j1".into(), start_ms: 15, end_ms: 30 });
        assert_eq!(check(&h).double_runs, 1);
        // One after the other is fine.
        h.agent_runs[1].start_ms = 20;
        assert!(check(&h).correct());
        let mut h = healthy();
        h.stored[0].1[0].runs = vec![
            StoredRun { run_id: "a".into(), leased_ms: Some(1), finished_ms: None },
            StoredRun { run_id: "b".into(), leased_ms: Some(5), finished_ms: Some(9) },
        ];
        assert_eq!(check(&h).double_runs, 1);
    }

    #[test]
    fn a_job_not_over_after_healing_is_unfinished() {
        let mut h = healthy();
        for (_, jobs) in &mut h.stored {
            jobs[0].state = "running".into();
        }
        assert_eq!(check(&h).unfinished, 1);
    }

    #[test]
    fn events_out_of_the_lifecycle_and_reads_going_back_are_caught() {
        let mut h = healthy();
        h.stored[0].1[0].events = vec!["submitted".into(), "queued".into(), "running".into()];
        assert_eq!(check(&h).backwards, 1);
        // A requeue starts the job over: fine.
        let mut h = healthy();
        let requeued = ["submitted", "queued", "leased", "requeued", "leased", "running", "succeeded"];
        h.stored[0].1[0].events = requeued.iter().map(|e| e.to_string()).collect();
        assert!(check(&h).correct(), "{:?}", check(&h));
        // A read that began after another ended sees no earlier state; overlapping ones may.
        let mut h = healthy();
        h.ops.push(read("j1", 9.0, 10.0, "running", 1, 0));
        assert_eq!(check(&h).backwards, 1);
        let mut h = healthy();
        h.ops.push(read("j1", 5.5, 10.0, "pending", 1, 0));
        assert!(check(&h).correct());
        // A second run is later than the first one running.
        let mut h = healthy();
        h.ops.push(read("j1", 5.5, 5.8, "running", 1, 0));
        h.ops.push(read("j1", 6.1, 6.2, "queued", 1, 0));
        assert!(check(&h).correct(), "{:?}", check(&h));
    }

    /// A history with the submission alone (no reads yet).
    fn submitted() -> History {
        let mut h = healthy();
        h.ops.truncate(1);
        h
    }

    #[test]
    fn a_read_missing_an_acknowledged_write_is_stale() {
        let mut h = submitted();
        let missing = op(0, OpKind::Read { job_id: "j1".into() }, 2.0, 3.0, Outcome::Ok { result: OpResult::NotFound });
        h.ops.push(missing);
        assert_eq!(check(&h).stale_reads, 1);
        // Begun before the submission was acknowledged: it may miss it.
        let mut h = submitted();
        let early = op(0, OpKind::Read { job_id: "j1".into() }, 0.5, 3.0, Outcome::Ok { result: OpResult::NotFound });
        h.ops.push(early);
        assert!(check(&h).correct(), "{:?}", check(&h));
        let mut h = submitted();
        let ok = Outcome::Ok { result: OpResult::Done };
        h.ops.push(op(0, OpKind::Reprioritize { job_id: "j1".into(), priority: 7 }, 2.0, 3.0, ok.clone()));
        h.ops.push(read("j1", 4.0, 4.5, "queued", 0, 0));
        assert_eq!(check(&h).stale_reads, 1);
        h.ops.pop();
        h.ops.push(read("j1", 4.0, 4.5, "queued", 0, 7));
        assert!(check(&h).correct(), "{:?}", check(&h));
        let mut h = submitted();
        h.ops.push(op(0, OpKind::Cancel { job_id: "j1".into() }, 2.0, 3.0, ok));
        h.ops.push(read("j1", 4.0, 4.5, "queued", 0, 0));
        assert_eq!(check(&h).stale_reads, 1);
    }
}
