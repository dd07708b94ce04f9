//! Version 10: the `scheduler_config` meta row (the scheduler configuration the last recorded
//! cycles ran with) and the `schedule_cycles` meta row (the last recorded cycle's number), which
//! the leader records through the log and snapshots carry like every meta row, so that a replay
//! starting from a snapshot knows both. A version 9 database has neither, and needs neither: its
//! log's cycles carry no inputs, and the first leader of the new binary records its
//! configuration before its first cycle. Nothing is converted; the step only raises the version,
//! so that a binary of version 9 refuses the database rather than drop the rows.

use crate::store::StoreError;

/// Nothing to convert.
pub(crate) fn run(_tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}
