//! Fault runs: what `convoy bench chaos` records while it kills, pauses, partitions and fills the
//! disks of real servers and agents under load ([`history`]), and the checker that judges it
//! ([`check`]). The processes, networks and clients that produce a history are the bench's
//! (`convoy bench chaos`, docs/reliability.md).

mod check;
pub mod history;

pub use check::{Figures, Verdict, check, figures};
pub use history::History;
