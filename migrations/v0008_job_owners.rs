//! Version 8: the `job_owners` table, the principal that submitted each job (job id → name). It
//! starts empty: jobs submitted before were not recorded with their owner, and every older row
//! stays as it is.

use crate::store::StoreError;
use redb::TableDefinition;

/// Version 8's table, frozen.
const JOB_OWNERS: TableDefinition<&[u8; 16], &str> = TableDefinition::new("job_owners");

/// Creates the table.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(JOB_OWNERS)?;
    Ok(())
}
