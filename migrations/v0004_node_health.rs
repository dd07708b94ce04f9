//! Version 4: the `node_health` table, failures counted against each node and its quarantine
//! (`executor 0 node` → a node health record). It starts empty: nothing was counted before, and
//! every older row stays as it is.

use crate::store::StoreError;
use redb::TableDefinition;

/// Version 4's table, frozen.
const NODE_HEALTH: TableDefinition<&[u8], &[u8]> = TableDefinition::new("node_health");

/// Creates the table.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(NODE_HEALTH)?;
    Ok(())
}
