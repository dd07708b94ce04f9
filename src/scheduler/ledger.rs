//! What a cycle has changed that it may have to take back or re-examine: the undo log of the
//! trial being recorded (gang placement tries every domain and rolls back), the queues whose
//! allocation changed since the queue tree's last pick, the cached verdicts of classes and gang
//! shapes that fit nowhere, and whether waiting jobs must be offered again because a
//! displacement freed room. The changes themselves (statuses, nodes, allocations) live in the
//! cycle's jobs, queues and node db ([`super::context::PoolCycle`]); the ledger keeps the record.

use super::decisions::Reason;
use super::job::{GangShape, Undo};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// The cycle's record of its changes.
#[derive(Debug, Default)]
pub(super) struct Ledger {
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
}

impl Ledger {
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
