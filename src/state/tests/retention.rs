//! Retention in the state machine: when jobs count as finished, and what a purge deletes, keeps
//! and refuses.

use super::*;

fn cancel(s: &mut State, job_set: &str, ids: &[u128], at_ms: i64) -> Applied {
    s.apply(
        Command::Cancel {
            queue: q("A"),
            job_set: set(job_set),
            job_ids: Some(ids.iter().map(|i| JobId::from_u128(*i)).collect()),
            states: None,
            reason: "user".into(),
            at_ms,
        },
        ApplyContext::default(),
    )
}

/// The (job, finish time) pairs a command indexed.
fn indexed(a: &Applied) -> Vec<(u128, i64)> {
    a.changes
        .iter()
        .filter_map(|c| match c {
            Change::IndexFinished { job, at_ms } => Some((job.as_u128(), *at_ms)),
            _ => None,
        })
        .collect()
}

fn target(id: u128, finished_ms: i64, job_set: &str, client_id: Option<&str>) -> PurgeTarget {
    PurgeTarget {
        job_id: JobId::from_u128(id),
        finished_ms,
        queue: q("A"),
        job_set: set(job_set),
        client_id: client_id.map(str::to_string),
    }
}

fn purge(s: &mut State, before_ms: i64, jobs: Vec<PurgeTarget>) -> Applied {
    let purges = s.purges;
    s.apply(Command::PurgeFinished { purges, before_ms, jobs }, ApplyContext::default())
}

fn purged(a: &Applied) -> Vec<u128> {
    match &a.response {
        Some(Response::JobIds(ids)) => ids.iter().map(|i| i.as_u128()).collect(),
        other => panic!("not purged: {other:?}"),
    }
}

fn submit_to(s: &mut State, job_set: &str, jobs: Vec<NewJob>) -> Applied {
    s.apply(
        Command::from(CommandRecord::Submit { queue: q("A"), job_set: set(job_set), at_ms: 10, jobs }),
        ApplyContext::default(),
    )
}

#[test]
fn a_job_is_indexed_once_when_it_leaves_memory_at_the_time_of_that_command() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1"), new_job(2, None, "1"), new_job(3, None, "1")]);
    // Queued and cancelled: over at once.
    assert_eq!(indexed(&cancel(&mut s, "s", &[1], 40)), vec![(1, 40)]);
    // Running and cancelled: over when the executor reports the run stopped, not at the cancel.
    lease(&mut s, 2, 200, 1, 1);
    assert_eq!(indexed(&cancel(&mut s, "s", &[2], 41)), vec![]);
    assert_eq!(indexed(&report(&mut s, 200, 2, RunEventKind::Failed, Some(143))), vec![(2, 30)]);
    // Run to success.
    lease(&mut s, 3, 300, 1, 1);
    report(&mut s, 300, 3, RunEventKind::Running, None);
    assert_eq!(indexed(&report(&mut s, 300, 3, RunEventKind::Succeeded, Some(0))), vec![(3, 30)]);
    // Failed by the scheduler (a gang remainder), and after its last allowed lost run.
    submit(&mut s, vec![new_job(4, None, "1"), new_job(5, None, "1")]);
    let failed = s.apply(
        Command::Schedule {
            term: 0,
            at_ms: 50,
            leases: vec![],
            preemptions: vec![],
            failures: vec![JobVerdict { job_id: JobId::from_u128(4), reason: "gang".into() }],
            inputs: None,
        },
        ApplyContext::default(),
    );
    assert_eq!(indexed(&failed), vec![(4, 50)]);
    lease(&mut s, 5, 500, 1, 1);
    assert_eq!(indexed(&report(&mut s, 500, 5, RunEventKind::Returned, None)), vec![]);
    lease(&mut s, 5, 501, 1, 1);
    assert_eq!(indexed(&report(&mut s, 501, 5, RunEventKind::Returned, None)), vec![(5, 30)]);
    assert!(s.jobs.is_empty());
}

#[test]
fn a_purge_deletes_the_named_finished_jobs_before_the_cutoff_and_nothing_live() {
    let mut s = state();
    submit(&mut s, (1..=5).map(|i| new_job(i, None, "1")).collect());
    cancel(&mut s, "s", &[1, 2, 3], 40);
    lease(&mut s, 4, 400, 1, 1);
    let a = purge(
        &mut s,
        41,
        vec![
            target(1, 40, "s", None),
            // Live (running): never deleted, whatever a plan says.
            target(4, 40, "s", None),
            // Not before the cutoff.
            target(3, 41, "s", None),
            // Named twice.
            target(1, 40, "s", None),
            target(2, 40, "s", None),
        ],
    );
    assert_eq!(purged(&a), vec![1, 2]);
    let deleted: Vec<u128> = a
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::PurgeJob { job, finished_ms: 40, .. } => Some(job.as_u128()),
            Change::PurgeJob { .. } => panic!("wrong finish time: {c:?}"),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, vec![1, 2]);
    // Jobs 3, 4 and 5 are still stored: the job set stays, with its event counter.
    assert_eq!(s.set_jobs[&(q("A"), set("s"))], 3);
    assert!(s.event_seqs.contains_key(&(q("A"), set("s"))));
    assert!(!a.changes.iter().any(|c| matches!(c, Change::ForgetJobSet { .. })));
    assert_eq!(job_state(&s, 4), Some(JobState::Leased));
    assert_eq!(job_state(&s, 5), Some(JobState::Queued));
    // Counts cover live jobs only, so a purge leaves them as they were.
    let counts = &s.queues[&q("A")].counts;
    assert_eq!((counts.get(&JobState::Leased), counts.get(&JobState::Queued)), (Some(&1), Some(&1)));
    assert_eq!(s.purges, 1);
    assert!(a.changes.contains(&Change::PutPurges(1)));
    assert!(a.changes.contains(&Change::PutMaxJobId(JobId::from_u128(5))));
}

#[test]
fn a_purge_planned_before_another_applied_is_refused_whole() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, None, "1")]);
    cancel(&mut s, "s", &[1], 40);
    purge(&mut s, 100, vec![]);
    // Planned when no purge had been applied: it might name jobs that are gone.
    let a = s.apply(
        Command::PurgeFinished { purges: 0, before_ms: 100, jobs: vec![target(1, 40, "s", None)] },
        ApplyContext::default(),
    );
    assert!(matches!(a.response, Some(Response::Rejected(Rejection { kind: RejectKind::Conflict, .. }))));
    assert!(a.changes.is_empty());
    assert_eq!(s.purges, 1);
    assert_eq!(purged(&purge(&mut s, 100, vec![target(1, 40, "s", None)])), vec![1]);
}

#[test]
fn a_purged_job_frees_its_client_id_and_a_resubmission_makes_a_new_job() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, Some("c1"), "1"), new_job(2, Some("c2"), "1")]);
    cancel(&mut s, "s", &[1, 2], 40);
    // Within retention the client id still answers the finished job.
    let again = submit(&mut s, vec![new_job(9, Some("c1"), "1")]);
    assert_eq!(again.response, Some(Response::JobIds(vec![JobId::from_u128(1)])));
    let a = purge(&mut s, 50, vec![target(1, 40, "s", Some("c1"))]);
    assert!(a.changes.contains(&Change::DeleteClientId { queue: q("A"), client_id: "c1".into() }));
    assert!(!s.client_ids.contains_key(&(q("A"), "c1".to_string())));
    assert_eq!(s.client_ids.get(&(q("A"), "c2".to_string())), Some(&JobId::from_u128(2)));
    let new = submit(&mut s, vec![new_job(10, Some("c1"), "1")]);
    assert_eq!(new.response, Some(Response::JobIds(vec![JobId::from_u128(10)])));
    assert_eq!(job_state(&s, 10), Some(JobState::Queued));
}

#[test]
fn a_client_id_that_names_another_job_by_now_is_kept() {
    let mut s = state();
    submit(&mut s, vec![new_job(1, Some("c1"), "1")]);
    // The queue is deleted (its client ids go) and made again; a new job takes `c1`.
    s.apply(Command::DeleteQueue { name: q("A"), force: true, at_ms: 40 }, ApplyContext::default());
    s.apply(Command::create_queue(Queue::new(q("A"), 1.0)), ApplyContext::default());
    submit(&mut s, vec![new_job(2, Some("c1"), "1")]);
    let a = purge(&mut s, 50, vec![target(1, 40, "s", Some("c1"))]);
    assert_eq!(purged(&a), vec![1]);
    assert!(!a.changes.iter().any(|c| matches!(c, Change::DeleteClientId { .. })));
    assert_eq!(s.client_ids.get(&(q("A"), "c1".to_string())), Some(&JobId::from_u128(2)));
}

#[test]
fn the_last_job_of_a_job_set_takes_the_job_set_with_it() {
    let mut s = state();
    submit_to(&mut s, "one", vec![new_job(1, None, "1"), new_job(2, None, "1")]);
    submit_to(&mut s, "other", vec![new_job(3, None, "1")]);
    cancel(&mut s, "one", &[1, 2], 40);
    let first = purge(&mut s, 50, vec![target(1, 40, "one", None)]);
    assert!(!first.changes.iter().any(|c| matches!(c, Change::ForgetJobSet { .. })));
    let last = purge(&mut s, 50, vec![target(2, 40, "one", None)]);
    assert!(last.changes.contains(&Change::ForgetJobSet { queue: q("A"), job_set: set("one") }));
    assert!(!s.event_seqs.contains_key(&(q("A"), set("one"))) && !s.set_jobs.contains_key(&(q("A"), set("one"))));
    assert_eq!(s.set_jobs[&(q("A"), set("other"))], 1);
    // A new job under the old name starts a new stream.
    let again = submit_to(&mut s, "one", vec![new_job(4, None, "1")]);
    let seqs: Vec<u64> = again
        .changes
        .iter()
        .filter_map(|c| if let Change::AppendEvent { event, .. } = c { Some(event.seq) } else { None })
        .collect();
    assert_eq!(seqs, vec![1, 2]);
}

#[test]
fn purging_is_deterministic() {
    let run = || {
        let mut s = state();
        submit(&mut s, (1..=4).map(|i| new_job(i, Some(&format!("c{i}")), "1")).collect());
        cancel(&mut s, "s", &[4, 2, 3, 1], 40);
        let targets = (1..=4).map(|i| target(i, 40, "s", Some(&format!("c{i}")))).collect();
        format!("{:?}", purge(&mut s, 41, targets).changes)
    };
    assert_eq!(run(), run());
}

#[test]
fn a_purge_weighs_as_many_jobs_as_it_names() {
    let cmd =
        Command::PurgeFinished { purges: 0, before_ms: 0, jobs: (1..=7).map(|i| target(i, 0, "s", None)).collect() };
    assert_eq!(cmd.apply_weight(), 7);
}
