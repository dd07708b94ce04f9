//! What a cycle has changed, and what it may have to take back or re-examine: each job's fate
//! (status, node, who displaced it, why it waits), the undo log of the trial being recorded
//! (gang placement tries every domain and rolls back), the queues whose allocation changed since
//! the queue tree's last pick, the cached verdicts of classes and gang shapes that fit nowhere,
//! whether waiting jobs must be offered again because a displacement freed room, whether the
//! global rate limit stopped new starts, and the round's tallies. The allocations themselves live in the cycle's queues and node db
//! ([`super::context::PoolCycle`]), which record their undo here.

use super::decisions::Reason;
use super::job::{Fate, GangShape, Status, Undo};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// The cycle's record of its changes.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Each job's fate, by the job's index in the cycle.
    fates: Vec<Fate>,
    /// Changes of the trials being recorded, the latest last.
    undo: Vec<Undo>,
    /// True while some trial is being recorded.
    recording: bool,
    /// While the tree fills: the queues whose allocation changed since the last pick.
    alloc_log: Option<Vec<u32>>,
    /// (class, priority level + 256 × earmark profile) → why nothing fits; valid until a
    /// displacement frees more than it takes.
    unschedulable: HashMap<(u32, u32), Arc<Reason>>,
    /// Same for gangs of identical members.
    gang_unschedulable: HashMap<GangShape, Arc<Reason>>,
    /// Since the last fill pass, a displacement freed more room than the displacing job took, or
    /// withdrew a guest's new placement for a job at home (which need not be more urgent, so it
    /// may come after jobs the guest could have displaced nobody for elsewhere): waiting jobs are
    /// offered again ([`super::earmark`]).
    reoffer: bool,
    /// Gang members failed in this cycle.
    failed: Vec<u32>,
    /// Jobs evicted for fair share in this cycle (for the report).
    evicted_count: usize,
    /// Placements attempted in this cycle (for the report).
    jobs_tried: usize,
    /// Why no more jobs start in this cycle, once the global rate limit ran dry.
    rate_stop: Option<Arc<Reason>>,
}

impl Ledger {
    /// Room for `n` more jobs' fates.
    pub(super) fn reserve(&mut self, n: usize) {
        self.fates.reserve(n);
    }

    /// Starts the fate of the next job to join the cycle (its index is the count so far).
    pub(super) fn add_job(&mut self, fate: Fate) {
        self.fates.push(fate);
    }

    /// What has happened to job `j` so far.
    #[inline]
    pub(super) fn fate(&self, j: u32) -> &Fate {
        &self.fates[j as usize]
    }

    /// Job `j`'s status.
    #[inline]
    pub(super) fn status(&self, j: u32) -> Status {
        self.fates[j as usize].status
    }

    /// The node job `j` holds resources on, if any.
    #[inline]
    pub(super) fn held_node(&self, j: u32) -> Option<u32> {
        self.fates[j as usize].held_node()
    }

    /// True if job `j` holds a place at the end of the cycle.
    #[inline]
    pub(super) fn scheduled(&self, j: u32) -> bool {
        self.fates[j as usize].scheduled()
    }

    /// Every job's fate, by index.
    pub(super) fn fates(&self) -> &[Fate] {
        &self.fates
    }

    /// Changes job `j`'s fate; while a trial is recorded, the old fate goes on the undo log
    /// first, so that no change escapes a rollback.
    pub(super) fn change(&mut self, j: u32, f: impl FnOnce(&mut Fate)) {
        if self.recording {
            self.undo.push(Undo::Fate { job: j, fate: self.fates[j as usize].clone() });
        }
        f(&mut self.fates[j as usize]);
    }

    /// Puts back a fate taken off the undo log.
    pub(super) fn restore(&mut self, j: u32, fate: Fate) {
        self.fates[j as usize] = fate;
    }

    /// Notes that gang member `j` failed for good in this cycle.
    pub(super) fn note_failed(&mut self, j: u32) {
        self.failed.push(j);
    }

    /// The gang members failed in this cycle.
    pub(super) fn failed(&self) -> &[u32] {
        &self.failed
    }

    /// Counts running jobs evicted for fair share.
    pub(super) fn count_evicted(&mut self, n: usize) {
        self.evicted_count += n;
    }

    /// Running jobs evicted for fair share in this cycle.
    pub(super) fn evicted_count(&self) -> usize {
        self.evicted_count
    }

    /// Counts placement attempts.
    pub(super) fn count_tried(&mut self, n: usize) {
        self.jobs_tried += n;
    }

    /// Placements attempted in this cycle.
    pub(super) fn jobs_tried(&self) -> usize {
        self.jobs_tried
    }

    /// True while a trial is being recorded.
    #[inline]
    pub(super) fn recording(&self) -> bool {
        self.recording
    }

    /// Records a change while a trial is being recorded (`undo` is only built then).
    #[inline]
    pub(super) fn record(&mut self, undo: impl FnOnce() -> Undo) {
        if self.recording {
            self.undo.push(undo());
        }
    }

    /// Starts recording changes; returns the mark to commit or roll back to.
    pub(super) fn begin(&mut self) -> usize {
        self.recording = true;
        self.undo.len()
    }

    /// Keeps the changes since `mark`: forgets their undo records.
    pub(super) fn commit(&mut self, mark: usize) {
        self.undo.truncate(mark);
        self.recording = mark > 0;
    }

    /// The latest change recorded after `mark`, taken off the log (for a rollback).
    pub(super) fn pop_since(&mut self, mark: usize) -> Option<Undo> {
        if self.undo.len() > mark { self.undo.pop() } else { None }
    }

    /// Ends a rollback to `mark`: recording goes on only inside an outer trial.
    pub(super) fn rolled_back(&mut self, mark: usize) {
        self.recording = mark > 0;
    }

    /// Starts logging the queues whose allocation changes.
    pub(super) fn start_alloc_log(&mut self) {
        self.alloc_log = Some(Vec::new());
    }

    /// Stops logging allocation changes.
    pub(super) fn stop_alloc_log(&mut self) {
        self.alloc_log = None;
    }

    /// Notes that queue `q`'s allocation changed (while the log is on).
    #[inline]
    pub(super) fn note_alloc(&mut self, q: u32) {
        if let Some(log) = self.alloc_log.as_mut() {
            log.push(q);
        }
    }

    /// The queues whose allocation changed since the last call, emptying the log.
    pub(super) fn drain_alloc_log(&mut self) -> impl Iterator<Item = u32> + '_ {
        self.alloc_log.iter_mut().flat_map(|log| log.drain(..))
    }

    /// Why no more jobs start in this cycle, if the global rate limit ran dry.
    pub(super) fn rate_stop(&self) -> Option<&Arc<Reason>> {
        self.rate_stop.as_ref()
    }

    /// No more jobs start in this cycle, for `reason` (the global rate limit ran dry).
    pub(super) fn stop_for_rate(&mut self, reason: Arc<Reason>) {
        self.rate_stop = Some(reason);
    }

    /// Why nothing fits jobs of this (class, level and profile), if known.
    #[inline]
    pub(super) fn verdict(&self, key: &(u32, u32)) -> Option<&Arc<Reason>> {
        self.unschedulable.get(key)
    }

    /// Remembers why nothing fits jobs of this (class, level and profile).
    pub(super) fn set_verdict(&mut self, key: (u32, u32), reason: Arc<Reason>) {
        self.unschedulable.insert(key, reason);
    }

    /// Why nothing fits gangs of this shape, if known.
    pub(super) fn gang_verdict(&self, shape: &GangShape) -> Option<&Arc<Reason>> {
        self.gang_unschedulable.get(shape)
    }

    /// Remembers why nothing fits gangs of this shape.
    pub(super) fn set_gang_verdict(&mut self, shape: GangShape, reason: Arc<Reason>) {
        self.gang_unschedulable.insert(shape, reason);
    }

    /// Room was freed: every cached verdict may be wrong now.
    pub(super) fn forget_verdicts(&mut self) {
        self.unschedulable.clear();
        self.gang_unschedulable.clear();
    }

    /// Waiting jobs are to be offered again after this fill pass.
    pub(super) fn mark_reoffer(&mut self) {
        self.reoffer = true;
    }

    /// Whether waiting jobs are to be offered again, clearing the flag.
    pub(super) fn take_reoffer(&mut self) -> bool {
        std::mem::take(&mut self.reoffer)
    }
}
