//! Node reservations in the jobs' events: the leader's cycle proposes how its reservations
//! changed since its previous cycle ([`Command::RecordReservations`]), and each change becomes an
//! event of the jobs concerned that are still queued (`reserved node n1 in pool default
//! (expected start …)`). Reservations themselves are not state: every cycle computes them anew.
//!
//! [`Command::RecordReservations`]: super::Command::RecordReservations

use super::machine::{Applied, State};
use crate::model::{EventKind, JobState};
use crate::record::ReservationRecord;

/// Whether a change is a new (or moved) reservation or the end of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReservationChange {
    /// The cycle reserved the nodes.
    Reserved,
    /// The previous cycle's reservation ended without the jobs starting.
    Released,
}

/// "node n1" or "nodes n1, n2".
fn nodes_text(r: &ReservationRecord) -> String {
    let names: Vec<&str> = r.nodes.iter().map(|n| n.node.as_str()).collect();
    format!("node{} {}", if names.len() == 1 { "" } else { "s" }, names.join(", "))
}

/// The event's message.
fn message(r: &ReservationRecord, change: ReservationChange) -> String {
    match change {
        ReservationChange::Reserved => {
            let start = match r.expected_start_ms {
                Some(t) => crate::model::human::rfc3339_seconds(t),
                None => "unknown".to_string(),
            };
            format!("reserved {} in pool {} (expected start {start})", nodes_text(r), r.pool)
        }
        ReservationChange::Released => {
            format!("reservation of {} in pool {} ended before the job started", nodes_text(r), r.pool)
        }
    }
}

impl State {
    /// Records each change as an event of its jobs that are still queued (a job leased, ended or
    /// gone since the cycle read the state gets none).
    pub(super) fn record_reservations(
        &mut self,
        at_ms: i64,
        released: Vec<ReservationRecord>,
        reserved: Vec<ReservationRecord>,
        out: &mut Applied,
    ) {
        let changes = (released.into_iter().map(|r| (r, ReservationChange::Released)))
            .chain(reserved.into_iter().map(|r| (r, ReservationChange::Reserved)));
        for (r, change) in changes {
            let text = message(&r, change);
            for id in &r.jobs {
                let Some(job) = self.jobs.get(id) else { continue };
                if job.record.state != JobState::Queued {
                    continue;
                }
                let record = job.record.clone();
                self.event(out, &record, at_ms, EventKind::Queued, None, Some(text.clone()));
            }
        }
    }
}
