//! Version 12: the `queue_policies` meta row (the guarantee and preemption policy of every queue
//! that has either). A version 11 database has no such queue, so it needs no row: nothing is
//! converted; the step only raises the version, so that a binary of version 11 refuses the
//! database rather than drop the queues' guarantees and fences.

use crate::store::StoreError;

/// Nothing to convert.
pub(crate) fn run(_tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}
