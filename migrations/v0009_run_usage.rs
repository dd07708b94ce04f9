//! Version 9: the `run_usage` table, what each ended run used (run id → an encoded run usage
//! record). It starts empty: runs that ended before were not measured, and every older row stays
//! as it is.

use crate::store::StoreError;
use redb::TableDefinition;

/// Version 9's table, frozen.
const RUN_USAGE: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("run_usage");

/// Creates the table.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(RUN_USAGE)?;
    Ok(())
}
