//! The jobs a queue-wide cancel or preempt reaches.

use super::*;

fn ids(v: &[u128]) -> Vec<JobId> {
    v.iter().map(|&i| JobId::from_u128(i)).collect()
}

/// Queue A: jobs 1-2 in set s (1 leased, 2 queued, class preemptible), 3 in set t (queued,
/// default), 4 in set s (succeeded), and queue B's job 5 in set s.
fn world() -> State {
    let mut s = state();
    s.apply(Command::create_queue(Queue::new(q("B"), 1.0)), ApplyContext::default());
    let preemptible = |mut j: NewJob| {
        j.priority_class = PriorityClassName::new("preemptible").unwrap();
        j
    };
    submit(&mut s, vec![preemptible(new_job(1, None, "1")), preemptible(new_job(2, None, "1")), new_job(4, None, "1")]);
    s.apply(
        Command::from(CommandRecord::Submit {
            queue: q("A"),
            job_set: set("t"),
            at_ms: 10,
            jobs: vec![new_job(3, None, "1")],
        }),
        ApplyContext::default(),
    );
    s.apply(
        Command::from(CommandRecord::Submit {
            queue: q("B"),
            job_set: set("s"),
            at_ms: 10,
            jobs: vec![new_job(5, None, "1")],
        }),
        ApplyContext::default(),
    );
    lease(&mut s, 1, 101, 3, 3);
    lease(&mut s, 4, 104, 3, 3);
    report(&mut s, 104, 4, RunEventKind::Running, None);
    report(&mut s, 104, 4, RunEventKind::Succeeded, Some(0));
    s
}

fn reach(s: &State, f: QueueJobFilter) -> Vec<(String, Vec<JobId>)> {
    s.queue_jobs(&q("A"), &f).into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn every_live_job_of_the_queue_by_job_set() {
    let s = world();
    assert_eq!(job_state(&s, 4), None, "job 4 is over and left memory");
    assert_eq!(reach(&s, QueueJobFilter::default()), vec![("s".into(), ids(&[1, 2])), ("t".into(), ids(&[3]))]);
}

#[test]
fn filters_by_state_priority_class_and_pool() {
    let s = world();
    let states = |st: &[JobState]| QueueJobFilter { states: st.to_vec(), ..Default::default() };
    assert_eq!(reach(&s, states(&[JobState::Queued])), vec![("s".into(), ids(&[2])), ("t".into(), ids(&[3]))]);
    assert_eq!(reach(&s, states(&[JobState::Leased, JobState::Running])), vec![("s".into(), ids(&[1]))]);
    let classes =
        QueueJobFilter { priority_classes: vec![PriorityClassName::new("preemptible").unwrap()], ..Default::default() };
    assert_eq!(reach(&s, classes.clone()), vec![("s".into(), ids(&[1, 2]))]);
    let both = QueueJobFilter { states: vec![JobState::Queued], ..classes };
    assert_eq!(reach(&s, both), vec![("s".into(), ids(&[2]))]);
    // Job 1 runs in the default pool; queued jobs without pools may run in any.
    let pool = |p: &str| QueueJobFilter { pools: vec![PoolName::new(p).unwrap()], ..Default::default() };
    assert_eq!(reach(&s, pool("default")), vec![("s".into(), ids(&[1, 2])), ("t".into(), ids(&[3]))]);
    assert_eq!(reach(&s, pool("gpu")), vec![("s".into(), ids(&[2])), ("t".into(), ids(&[3]))]);
    assert_eq!(s.queue_jobs(&q("Z"), &QueueJobFilter::default()).len(), 0);
}
