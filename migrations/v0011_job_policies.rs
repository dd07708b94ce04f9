//! Version 11: the `job_policies` table, each job's dependencies and retry policy (job id → an
//! encoded record). It starts empty: jobs submitted before had neither, and every older row stays
//! as it is.

use crate::store::StoreError;
use redb::TableDefinition;

/// Version 11's table, frozen.
const JOB_POLICIES: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("job_policies");

/// Creates the table.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(JOB_POLICIES)?;
    Ok(())
}
