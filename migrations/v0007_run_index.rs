//! Version 7: jobs carry their Kubernetes namespace and runs the pod they became (each a field at
//! the end of its record), and the `run_jobs` table indexes every run by id (run id → job id),
//! for reads by run id (Armada's `GetJobRunDetails`, `GET /v1/runs/{run_id}`).
//!
//! This step rewrites every `jobs` row of a version 6 database in the new format (no namespace:
//! the job runs in its agent's namespace, as every job then did; no pods: none were reported) and
//! indexes each of its runs. [`convert_job`] does the same for the rows of an inline snapshot of
//! an older release (`store::snapshot_stream::convert_legacy`).

use crate::model::{JobId, RunId};
use crate::record::codec::{decode, encode};
use crate::store::StoreError;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// The tables this step reads and writes, frozen as of version 7.
const JOBS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("jobs");
/// Version 7's index: run id (BE) → job id (BE).
const RUN_JOBS: TableDefinition<&[u8; 16], &[u8; 16]> = TableDefinition::new("run_jobs");

/// Rows converted per pass (a pass reads them, then writes them back).
const BATCH: usize = 1024;

/// The job record of versions 2 to 6, frozen; with `V` = [`Version7`] it is version 7's. Names
/// are their text and enums their variant's position (the codec writes both the same way).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Job<R> {
    id: JobId,
    queue: String,
    job_set: String,
    priority: u32,
    priority_class: String,
    submit_seq: u64,
    submitted_at_ms: i64,
    client_id: Option<String>,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    requirements: Requirements,
    gang: Option<Gang>,
    termination_grace_period_ms: u64,
    active_deadline_seconds: u64,
    state: u32,
    state_reason: Option<String>,
    runs: Vec<R>,
    event_seqs: Vec<u64>,
}

/// Version 7's job record: version 6's and its namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct JobV7 {
    job: Job<RunV7>,
    namespace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Requirements {
    requests: BTreeMap<String, i64>,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    node_affinity: Option<NodeAffinity>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Toleration {
    key: String,
    operator: u32,
    value: String,
    effect: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NodeAffinity {
    required_terms: Option<Vec<NodeSelectorTerm>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NodeSelectorTerm {
    match_expressions: Vec<SelectorRequirement>,
    match_fields: Vec<SelectorRequirement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SelectorRequirement {
    key: String,
    operator: u32,
    values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Gang {
    id: String,
    cardinality: u32,
    min_cardinality: u32,
    node_uniformity_label: Option<String>,
}

/// The run record of versions 2 to 6, frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Run {
    run_id: RunId,
    executor: String,
    node: String,
    pool: String,
    state: u32,
    leased_at_ms: i64,
    pending_at_ms: Option<i64>,
    running_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
    exit_code: Option<i32>,
    reason: Option<String>,
    message: Option<String>,
    kill: Option<Kill>,
    log_tail: Option<String>,
}

/// Version 7's run record: version 6's and its pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunV7 {
    run: Run,
    pod: Option<Pod>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kill {
    at_ms: i64,
    grace_period_ms: u64,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pod {
    name: String,
    namespace: String,
    uid: String,
}

/// A version 6 job record in version 7's format, and the keys (run id, BE) of its runs.
pub(crate) fn convert_job(bytes: &[u8]) -> Result<(Vec<u8>, Vec<[u8; 16]>), StoreError> {
    let old: Job<Run> = decode(bytes).map_err(|source| StoreError::Corrupt { what: "version 6 job".into(), source })?;
    let runs: Vec<[u8; 16]> = old.runs.iter().map(|r| r.run_id.as_u128().to_be_bytes()).collect();
    let Job {
        id,
        queue,
        job_set,
        priority,
        priority_class,
        submit_seq,
        submitted_at_ms,
        client_id,
        annotations,
        labels,
        requirements,
        gang,
        termination_grace_period_ms,
        active_deadline_seconds,
        state,
        state_reason,
        runs: old_runs,
        event_seqs,
    } = old;
    let job = Job {
        id,
        queue,
        job_set,
        priority,
        priority_class,
        submit_seq,
        submitted_at_ms,
        client_id,
        annotations,
        labels,
        requirements,
        gang,
        termination_grace_period_ms,
        active_deadline_seconds,
        state,
        state_reason,
        runs: old_runs.into_iter().map(|run| RunV7 { run, pod: None }).collect(),
        event_seqs,
    };
    let new = encode(&JobV7 { job, namespace: None })
        .map_err(|source| StoreError::Encode { what: "version 7 job", source })?;
    Ok((new, runs))
}

/// A version 7 job record as versions 2 to 6 wrote it (namespace and pods dropped): tests make
/// older databases with it.
#[cfg(test)]
pub(crate) fn to_version_6(bytes: &[u8]) -> Vec<u8> {
    let new: JobV7 = decode(bytes).expect("a version 7 job");
    let Job {
        id,
        queue,
        job_set,
        priority,
        priority_class,
        submit_seq,
        submitted_at_ms,
        client_id,
        annotations,
        labels,
        requirements,
        gang,
        termination_grace_period_ms,
        active_deadline_seconds,
        state,
        state_reason,
        runs,
        event_seqs,
    } = new.job;
    let old = Job {
        id,
        queue,
        job_set,
        priority,
        priority_class,
        submit_seq,
        submitted_at_ms,
        client_id,
        annotations,
        labels,
        requirements,
        gang,
        termination_grace_period_ms,
        active_deadline_seconds,
        state,
        state_reason,
        runs: runs.into_iter().map(|r| r.run).collect(),
        event_seqs,
    };
    encode(&old).expect("encodes")
}

/// Rewrites every job in version 7's format and indexes its runs.
pub(crate) fn run(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let mut jobs = tx.open_table(JOBS)?;
    let mut index = tx.open_table(RUN_JOBS)?;
    let (mut converted, mut indexed) = (0u64, 0u64);
    let mut after: Option<[u8; 16]> = None;
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        let rows = match &after {
            Some(k) => jobs.range::<&[u8; 16]>((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded))?,
            None => jobs.range::<&[u8; 16]>(..)?,
        };
        for row in rows.take(BATCH) {
            let (k, v) = row?;
            batch.push((*k.value(), convert_job(v.value())?));
        }
        let Some((last, _)) = batch.last() else { break };
        after = Some(*last);
        for (key, (bytes, runs)) in batch {
            jobs.insert(&key, bytes.as_slice())?;
            for run in runs {
                index.insert(&run, &key)?;
                indexed += 1;
            }
            converted += 1;
        }
    }
    tracing::info!(jobs = converted, runs = indexed, "jobs rewritten with namespaces and pods, runs indexed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::JobRecord;
    use redb::{ReadableDatabase, ReadableTableMetadata};

    fn fixture(name: &str) -> Vec<u8> {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats");
        std::fs::read(dir.join(name)).unwrap()
    }

    #[test]
    fn a_version_6_job_becomes_todays_record_without_namespace_or_pods() {
        // Job rows kept schema 2's format up to version 6.
        let old = fixture("state-v2/job.bin");
        let (bytes, runs) = convert_job(&old).unwrap();
        let job: JobRecord = decode(&bytes).unwrap();
        assert_eq!(job.namespace, None);
        assert_eq!(job.runs.len(), 2);
        assert!(job.runs.iter().all(|r| r.pod.is_none()));
        assert_eq!(runs, job.runs.iter().map(|r| r.run_id.as_u128().to_be_bytes()).collect::<Vec<_>>());
        // Everything else is what the old record said.
        let frozen: Job<Run> = decode(&old).unwrap();
        assert_eq!((job.id, job.queue.as_str(), job.event_seqs.clone()), (frozen.id, "physics", frozen.event_seqs));
        assert_eq!(job.runs[1].run_id, frozen.runs[1].run_id);
        assert_eq!(job.runs[0].log_tail, frozen.runs[0].log_tail);
    }

    #[test]
    fn the_step_rewrites_every_job_in_batches_and_indexes_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("db.redb")).unwrap();
        let old = fixture("state-v2/job.bin");
        let frozen: Job<Run> = decode(&old).unwrap();
        let n = BATCH as u128 * 2 + 3;
        let tx = db.begin_write().unwrap();
        {
            let mut jobs = tx.open_table(JOBS).unwrap();
            for i in 0..n {
                // Each job its own id and run ids, so the index must hold 2 per job.
                let mut j = frozen.clone();
                j.id = JobId::from_u128(i + 1);
                for (r, run) in j.runs.iter_mut().enumerate() {
                    run.run_id = RunId::from_u128((i + 1) * 10 + r as u128);
                }
                jobs.insert(&(i + 1).to_be_bytes(), encode(&j).unwrap().as_slice()).unwrap();
            }
        }
        run(&tx).unwrap();
        tx.commit().unwrap();
        let tx = db.begin_read().unwrap();
        let jobs = tx.open_table(JOBS).unwrap();
        let index = tx.open_table(RUN_JOBS).unwrap();
        assert_eq!(jobs.len().unwrap(), n as u64);
        assert_eq!(index.len().unwrap(), 2 * n as u64);
        for i in [0, BATCH as u128, n - 1] {
            let record: JobRecord = decode(jobs.get(&(i + 1).to_be_bytes()).unwrap().unwrap().value()).unwrap();
            assert_eq!(record.id, JobId::from_u128(i + 1));
            for r in &record.runs {
                let job = *index.get(&r.run_id.as_u128().to_be_bytes()).unwrap().unwrap().value();
                assert_eq!(job, (i + 1).to_be_bytes());
            }
        }
    }
}
