//! Dependencies and retry policies are stored beside the jobs and load back: a waiting job
//! still waits (out of its queue) after a restart, and is released when its job ends.

use super::*;
use crate::record::{DependencyConditionRecord, PolicyJob, RetryRecord, SubmitDependencyRecord, SubmitPoliciesRecord};
use crate::state::{NamespacedJob, Response};

#[test]
fn policies_load_back_and_a_waiting_job_still_waits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db.redb")).unwrap();
    let mut state = sample(&store);
    let policies = SubmitPoliciesRecord {
        depends_on: vec![SubmitDependencyRecord {
            job_id: JobId::from_u128(1),
            on: DependencyConditionRecord::Succeeded,
            ended: None,
        }],
        retry: Some(RetryRecord {
            max_attempts: 2,
            on_exit_codes: vec![75],
            on_oom: false,
            on_node_failure: false,
            backoff_ms: 0,
        }),
    };
    let waiting = PolicyJob { job: NamespacedJob::from(job(9, None)), policies };
    apply_all(
        &store,
        &mut state,
        vec![Command::Submit {
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new("s").unwrap(),
            at_ms: 5,
            owner: None,
            jobs: vec![waiting],
        }],
    );
    let mut loaded = store.load_state(settings()).unwrap();
    let nine = JobId::from_u128(9);
    let record = &loaded.job(nine).expect("live").record;
    assert_eq!(record.waiting_on().map(|d| d.job_id), Some(JobId::from_u128(1)));
    assert_eq!(record.policies.as_ref().and_then(|p| p.retry.as_ref()).map(|r| r.max_attempts), Some(2));
    let queued = |s: &State| -> Vec<JobId> {
        s.scheduling_snapshot(0, Default::default()).queues.iter().flat_map(|q| q.queued.iter().map(|j| j.id)).collect()
    };
    assert_eq!(queued(&loaded), vec![JobId::from_u128(1)], "9 still waits after the restart");
    assert_eq!(store.policies(&[nine]).unwrap()[0].as_ref().map(|p| p.depends_on.len()), Some(1));
    // Job 1 is cancelled: 9 waited for it to succeed, so it is cancelled with it.
    let a = loaded.apply(
        Command::Cancel {
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new("s").unwrap(),
            job_ids: Some(vec![JobId::from_u128(1)]),
            states: None,
            reason: "x".into(),
            at_ms: 6,
        },
        ApplyContext { term: 1 },
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(1)])));
    assert!(loaded.job(nine).is_none());
}
