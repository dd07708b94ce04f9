//! redb tables and key encodings. Every key is big-endian so redb's byte order is the natural
//! order: ids sort by time (ULIDs), events by sequence number within their job set.

use crate::model::{ExecutorName, JobId, JobSetName, NodeName, QueueName};
use redb::TableDefinition;

/// `schema_version` (u32 BE), `submit_seq` (u64 BE), `purges` (u64 BE), `max_job_id` (u128 BE),
/// `queue_usage` (bincode `QueueUsageRecord`), `queue_tree` (bincode `QueueTreesRecord`),
/// `queue_policies` (bincode `QueuePoliciesWithRetryByQueueRecord`),
/// `scheduler_config` (bincode `SchedulerConfigRecord`), `schedule_cycles` (u64 BE).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Queues by name (bincode `QueueRecord`).
pub(crate) const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("queues");
/// Job records (bincode `JobRecord`, without the pod spec).
pub(crate) const JOBS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("jobs");
/// Pod specs, services and ingresses (bincode `PayloadRecord`).
pub(crate) const PAYLOADS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("payloads");
/// Ids of jobs that are not over (loaded into memory at start-up).
pub(crate) const LIVE_JOBS: TableDefinition<&[u8; 16], ()> = TableDefinition::new("live_jobs");
/// Job-set membership: `queue 0 job_set 0 job_id`.
pub(crate) const JOB_SETS: TableDefinition<&[u8], ()> = TableDefinition::new("job_sets");
/// Events in chunks: `queue 0 job_set 0 first_seq(u64 BE)` → bincode `Vec<EventRecord>` with the
/// consecutive sequence numbers from `first_seq`. One chunk holds a job set's events from one
/// write transaction (at most [`EVENT_CHUNK_MAX`]), so a batch of submissions costs a few rows,
/// not two per job. Chunks of a job set never overlap: a chunk covers the sequence numbers from
/// its key to the next chunk's. Purging a job takes its events out of their chunks (an emptied
/// chunk goes) without changing keys, so a chunk may have gaps and start after its key.
pub(crate) const EVENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("event_chunks");

/// Most events in one chunk: reading one job's events decodes at most this many.
pub(crate) const EVENT_CHUNK_MAX: usize = 256;
/// Last event sequence number per job set: `queue 0 job_set` → u64.
pub(crate) const EVENT_SEQS: TableDefinition<&[u8], u64> = TableDefinition::new("event_seqs");
/// Idempotency keys: `queue 0 client_id` → job id.
pub(crate) const CLIENT_IDS: TableDefinition<&[u8], &[u8; 16]> = TableDefinition::new("client_ids");
/// Executors and their nodes (bincode `ExecutorRecord`).
pub(crate) const EXECUTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("executors");
/// Jobs that left memory (terminal, no run left to stop), by when they did: [`finished_key`].
/// Retention reads it from the oldest on (schema 3).
pub(crate) const FINISHED: TableDefinition<&[u8; 24], ()> = TableDefinition::new("finished");
/// Failures counted against nodes and their quarantines: [`node_key`] → bincode
/// `NodeHealthRecord` (schema 4).
pub(crate) const NODE_HEALTH: TableDefinition<&[u8], &[u8]> = TableDefinition::new("node_health");
/// The job of every stored run: [`run_key`] → [`job_key`], written when the run is leased and
/// deleted with the job (schema 7).
pub(crate) const RUN_JOBS: TableDefinition<&[u8; 16], &[u8; 16]> = TableDefinition::new("run_jobs");
/// Who submitted each job: [`job_key`] → the principal's name, written at submission and
/// deleted with the job (schema 8; jobs submitted before have none).
pub(crate) const JOB_OWNERS: TableDefinition<&[u8; 16], &str> = TableDefinition::new("job_owners");
/// Each job's dependencies and retry policy with their progress: [`job_key`] → an encoded
/// [`crate::record::JobPoliciesRecord`], written for jobs that have any and deleted with the job
/// (schema 11; jobs submitted before have none).
pub(crate) const JOB_POLICIES: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("job_policies");
/// What each ended run used: [`run_key`] → an encoded [`crate::record::RunUsageRecord`],
/// written with the run's final event and deleted with the job (schema 9; runs that ended
/// before have none).
pub(crate) const RUN_USAGE: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("run_usage");

/// Meta key of the schema version.
pub(crate) const SCHEMA_VERSION: &str = "schema_version";
/// Meta key of the next submit sequence number.
pub(crate) const SUBMIT_SEQ: &str = "submit_seq";
/// Meta key of the number of purges applied.
pub(crate) const PURGES: &str = "purges";
/// Meta key of the largest job id ever submitted (written by purges, which may delete that job).
pub(crate) const MAX_JOB_ID: &str = "max_job_id";
/// Meta key of the queues' usage (bincode `QueueUsageRecord`; schema 5).
pub(crate) const QUEUE_USAGE: &str = "queue_usage";
/// Meta key of the queue tree (bincode `QueueTreesRecord`; schema 6).
pub(crate) const QUEUE_TREE: &str = "queue_tree";
/// Meta key of the queues' guarantees, preemption policies and retry policies (bincode
/// `QueuePoliciesWithRetryByQueueRecord`; schema 12 without retry policies, 13 with).
pub(crate) const QUEUE_POLICIES: &str = "queue_policies";
/// Meta key of the scheduler configuration the leader last recorded (bincode
/// `SchedulerConfigRecord`; schema 10).
pub(crate) const SCHEDULER_CONFIG: &str = "scheduler_config";
/// Meta key of the number of the last scheduling cycle recorded with its inputs (u64 BE; schema
/// 10).
pub(crate) const SCHEDULE_CYCLES: &str = "schedule_cycles";
/// Meta key of the last applied Raft log id (`Option<LogIdRecord>`), written with every apply.
pub const RAFT_APPLIED: &str = "raft_applied";
/// Meta key of the last applied Raft membership (`StoredMembershipRecord`).
pub(crate) const RAFT_MEMBERSHIP: &str = "raft_membership";

/// True for the `meta` keys that belong to this node's database rather than to the replicated
/// state: they never go into a snapshot or the state digest, and an import keeps them.
pub(crate) fn is_node_local(meta_key: &str) -> bool {
    meta_key == SCHEMA_VERSION
}

/// Big-endian job id key.
pub(crate) fn job_key(id: JobId) -> [u8; 16] {
    id.as_u128().to_be_bytes()
}

/// Key of a run: its 128-bit id, big-endian.
pub(crate) fn run_key(id: crate::model::RunId) -> [u8; 16] {
    id.as_u128().to_be_bytes()
}

/// Job id from its key.
pub(crate) fn job_from_key(k: &[u8; 16]) -> JobId {
    JobId::from_u128(u128::from_be_bytes(*k))
}

/// `finish time 8 bytes, job id 16 bytes`, both big-endian, the time's sign bit flipped so that
/// negative times sort first: the `finished` index in time order, ties by id.
pub(crate) fn finished_key(at_ms: i64, id: JobId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&((at_ms as u64) ^ (1 << 63)).to_be_bytes());
    k[8..].copy_from_slice(&job_key(id));
    k
}

/// Finish time and job id from a [`finished_key`].
pub(crate) fn finished_from_key(k: &[u8; 24]) -> (i64, JobId) {
    let mut t = [0u8; 8];
    t.copy_from_slice(&k[..8]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&k[8..]);
    ((u64::from_be_bytes(t) ^ (1 << 63)) as i64, job_from_key(&id))
}

/// `queue 0 job_set` — the prefix of a job set's keys.
pub(crate) fn set_prefix(queue: &QueueName, job_set: &JobSetName) -> Vec<u8> {
    let mut k = Vec::with_capacity(queue.as_str().len() + job_set.as_str().len() + 2);
    k.extend_from_slice(queue.as_str().as_bytes());
    k.push(0);
    k.extend_from_slice(job_set.as_str().as_bytes());
    k
}

/// `queue 0 job_set 0 job_id`.
pub(crate) fn job_set_key(queue: &QueueName, job_set: &JobSetName, id: JobId) -> Vec<u8> {
    let mut k = set_prefix(queue, job_set);
    k.push(0);
    k.extend_from_slice(&job_key(id));
    k
}

/// `queue 0 job_set 0 seq`, from the job set's [`set_prefix`].
pub(crate) fn event_key(prefix: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 9);
    k.extend_from_slice(prefix);
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// `queue 0 client_id`.
pub(crate) fn client_id_key(queue: &QueueName, client_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(queue.as_str().len() + client_id.len() + 1);
    k.extend_from_slice(queue.as_str().as_bytes());
    k.push(0);
    k.extend_from_slice(client_id.as_bytes());
    k
}

/// `executor 0 node`.
pub(crate) fn node_key(executor: &ExecutorName, node: &NodeName) -> Vec<u8> {
    let mut k = Vec::with_capacity(executor.as_str().len() + node.as_str().len() + 1);
    k.extend_from_slice(executor.as_str().as_bytes());
    k.push(0);
    k.extend_from_slice(node.as_str().as_bytes());
    k
}

/// Splits `a 0 b` at the first zero byte.
pub(crate) fn split_pair(k: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = k.iter().position(|b| *b == 0)?;
    Some((&k[..i], &k[i + 1..]))
}

/// Smallest key greater than every key starting with `prefix 0`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.push(1);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_naturally() {
        let (q, s) = (QueueName::new("a").unwrap(), JobSetName::new("s").unwrap());
        assert!(event_key(&set_prefix(&q, &s), 2) < event_key(&set_prefix(&q, &s), 10));
        assert!(event_key(&set_prefix(&q, &s), u64::MAX) < prefix_end(&set_prefix(&q, &s)));
        let s2 = JobSetName::new("s2").unwrap();
        // The job set "s" and "s2" never interleave.
        assert!(prefix_end(&set_prefix(&q, &s)) <= event_key(&set_prefix(&q, &s2), 0));
        assert!(job_key(JobId::from_u128(1)) < job_key(JobId::from_u128(256)));
        assert_eq!(job_from_key(&job_key(JobId::from_u128(77))), JobId::from_u128(77));
        let (early, late) = (finished_key(-5, JobId::from_u128(9)), finished_key(3, JobId::from_u128(1)));
        assert!(early < late && finished_key(3, JobId::from_u128(1)) < finished_key(3, JobId::from_u128(2)));
        assert_eq!(finished_from_key(&early), (-5, JobId::from_u128(9)));
        assert_eq!(finished_from_key(&finished_key(i64::MAX, JobId::from_u128(7))), (i64::MAX, JobId::from_u128(7)));
        let key = client_id_key(&q, "x\0y");
        let (a, b) = split_pair(&key).unwrap();
        assert_eq!((a, b), (&b"a"[..], &b"x\0y"[..]));
    }
}
