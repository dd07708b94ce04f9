//! Schema migrations, applied in order at start-up by `store::migrate`. Each takes the database
//! from version `N - 1` to `N` inside one write transaction; add a file and a line to `ALL` for
//! every change of the stored format.
//!
//! A migration never uses today's row types or table definitions: it keeps its own frozen copies
//! of what it reads and writes, so that later format changes cannot change what it does.

pub(crate) mod v0001_initial;
pub(crate) mod v0002_event_chunks;
pub(crate) mod v0003_finished_index;
pub(crate) mod v0004_node_health;
pub(crate) mod v0005_queue_usage;
pub(crate) mod v0006_queue_tree;
pub(crate) mod v0007_run_index;
pub(crate) mod v0008_job_owners;
pub(crate) mod v0009_run_usage;
pub(crate) mod v0010_replay_inputs;
pub(crate) mod v0011_job_policies;
pub(crate) mod v0012_queue_policies;
pub(crate) mod v0013_queue_retry;

/// A migration step.
pub(crate) struct Migration {
    /// The version the database has after this step.
    pub version: u32,
    /// What the step changes, for the log.
    pub name: &'static str,
    /// Applies the step inside the migration runner's write transaction.
    pub run: fn(&redb::WriteTransaction) -> Result<(), crate::store::StoreError>,
}

/// Every migration, in order.
pub(crate) const ALL: &[Migration] = &[
    Migration { version: 1, name: "initial schema", run: v0001_initial::run },
    Migration { version: 2, name: "events in chunks", run: v0002_event_chunks::run },
    Migration { version: 3, name: "finished jobs indexed by finish time", run: v0003_finished_index::run },
    Migration { version: 4, name: "failures and quarantine of nodes", run: v0004_node_health::run },
    Migration { version: 5, name: "queue usage meta row", run: v0005_queue_usage::run },
    Migration { version: 6, name: "queue tree meta row", run: v0006_queue_tree::run },
    Migration { version: 7, name: "namespaces of jobs, pods of runs, runs indexed", run: v0007_run_index::run },
    Migration { version: 8, name: "owners of jobs", run: v0008_job_owners::run },
    Migration { version: 9, name: "what runs used", run: v0009_run_usage::run },
    Migration {
        version: 10,
        name: "scheduler configuration and cycle number meta rows",
        run: v0010_replay_inputs::run,
    },
    Migration { version: 11, name: "dependencies and retry policies of jobs", run: v0011_job_policies::run },
    Migration {
        version: 12,
        name: "queue guarantees and preemption policies meta row",
        run: v0012_queue_policies::run,
    },
    Migration { version: 13, name: "retry policies of queues in the queue policies row", run: v0013_queue_retry::run },
];
