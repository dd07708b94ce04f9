//! Version 5: the `queue_usage` meta row, the queues' decayed usage (`queue_usage_halftime`),
//! which the leader records through the log and snapshots carry like every meta row. A version 4
//! database has no such row, and none is needed: without one, the first scheduling cycle starts
//! each queue's average at its current share. Nothing is converted; the step only raises the
//! version, so that a binary of version 4 refuses the database rather than lose the row.

use crate::store::StoreError;

/// Nothing to convert.
pub(crate) fn run(_tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}
