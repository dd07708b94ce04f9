//! Version 6: the `queue_tree` meta row, the parent, priority offset and priority policies of
//! every queue that has any (queue hierarchy, YuniKorn's priority fences and offsets). A version 5
//! database has no such row, and none is needed: without one, every queue is a top-level queue
//! with default settings, as every queue then was. The `queues` rows are unchanged. Nothing is
//! converted; the step only raises the version, so that a binary of version 5 refuses the
//! database rather than flatten the tree.

use crate::store::StoreError;

/// Nothing to convert.
pub(crate) fn run(_tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}
