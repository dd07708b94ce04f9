//! The queue tree's rules in the state machine: parents exist, no cycles, jobs only in leaves,
//! parents with children are not deleted; and the `queue_tree` record follows every change.

use super::*;
use crate::model::{PriorityPolicy, SortPriority};
use crate::record::CommandRecord;
use crate::record::{QueueTreeRecord, QueueTreesRecord};

fn child(name: &str, parent: &str) -> Queue {
    Queue { parent: Some(q(parent)), ..Queue::new(q(name), 1.0) }
}

fn rejection(a: &Applied) -> (RejectKind, Option<String>, String) {
    match &a.response {
        Some(Response::Rejected(r)) => (r.kind, r.field.clone(), r.message.clone()),
        other => panic!("not rejected: {other:?}"),
    }
}

fn trees(a: &Applied) -> Vec<QueueTreesRecord> {
    a.changes
        .iter()
        .filter_map(|c| match c {
            Change::PutQueueTrees(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_parent_must_exist_and_the_tree_has_no_cycle() {
    let mut s = state();
    let a = s.apply(Command::create_queue(child("x", "missing")), ApplyContext::default());
    let (kind, field, msg) = rejection(&a);
    assert_eq!((kind, field.as_deref()), (RejectKind::Invalid, Some("parent")));
    assert!(msg.contains("parent queue missing does not exist"), "{msg}");
    assert!(a.changes.is_empty());

    let mut t = Queue::new(q("t"), 1.0);
    t.priority_policy = PriorityPolicy::Fence;
    t.priority_offset = 7;
    let a = s.apply(Command::create_queue(t.clone()), ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));
    let expected = |entries: Vec<(&str, QueueTreeRecord)>| QueueTreesRecord {
        queues: entries.into_iter().map(|(n, r)| (q(n), r)).collect(),
    };
    let t_record = QueueTreeRecord::of(&t);
    assert_eq!(trees(&a), vec![expected(vec![("t", t_record.clone())])]);
    let a = s.apply(Command::create_queue(child("t1", "t")), ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));
    let t1_record = QueueTreeRecord::of(&child("t1", "t"));
    assert_eq!(trees(&a), vec![expected(vec![("t", t_record.clone()), ("t1", t1_record.clone())])]);
    let a = s.apply(Command::create_queue(child("t11", "t1")), ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));

    // t under its grandchild: a cycle.
    let mut t_under = t.clone();
    t_under.parent = Some(q("t11"));
    let a = s.apply(Command::update_queue(t_under), ApplyContext::default());
    let (kind, field, msg) = rejection(&a);
    assert_eq!((kind, field.as_deref()), (RejectKind::Invalid, Some("parent")));
    assert!(msg.contains("its own ancestor"), "{msg}");
    assert_eq!(s.queues[&q("t")].queue.parent, None);

    // Settings that leave the tree as it is write no tree record; sort_priority does.
    let mut t2 = t.clone();
    t2.owners = vec!["alice".into()];
    let a = s.apply(Command::update_queue(t2.clone()), ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));
    assert!(trees(&a).is_empty());
    t2.sort_priority = SortPriority::Disabled;
    let a = s.apply(Command::update_queue(t2.clone()), ApplyContext::default());
    assert_eq!(trees(&a).len(), 1);
    assert_eq!(s.queues[&q("t")].queue.sort_priority, SortPriority::Disabled);
}

#[test]
fn jobs_go_to_leaves_and_a_queue_with_jobs_does_not_become_a_parent() {
    let mut s = state();
    // A has a live job.
    assert_eq!(submit(&mut s, vec![new_job(1, None, "1")]).response, Some(Response::JobIds(vec![JobId::from_u128(1)])));
    let a = s.apply(Command::create_queue(child("under-a", "A")), ApplyContext::default());
    let (kind, field, msg) = rejection(&a);
    assert_eq!((kind, field.as_deref()), (RejectKind::Conflict, Some("parent")));
    assert!(msg.contains("cannot become a parent"), "{msg}");

    s.apply(Command::create_queue(Queue::new(q("P"), 1.0)), ApplyContext::default());
    assert_eq!(
        s.apply(Command::create_queue(child("leaf", "P")), ApplyContext::default()).response,
        Some(Response::Ok)
    );
    let a = s.apply(
        Command::from(CommandRecord::Submit {
            queue: q("P"),
            job_set: set("s"),
            at_ms: 10,
            jobs: vec![new_job(2, None, "1")],
        }),
        ApplyContext::default(),
    );
    let (kind, field, msg) = rejection(&a);
    assert_eq!((kind, field.as_deref()), (RejectKind::Conflict, Some("queue")));
    assert!(msg.contains("leaf queues only"), "{msg}");
    let a = s.apply(
        Command::from(CommandRecord::Submit {
            queue: q("leaf"),
            job_set: set("s"),
            at_ms: 10,
            jobs: vec![new_job(3, None, "1")],
        }),
        ApplyContext::default(),
    );
    assert_eq!(a.response, Some(Response::JobIds(vec![JobId::from_u128(3)])));
}

#[test]
fn a_parent_with_children_is_not_deleted() {
    let mut s = state();
    s.apply(Command::create_queue(Queue::new(q("P"), 1.0)), ApplyContext::default());
    s.apply(Command::create_queue(child("c1", "P")), ApplyContext::default());
    s.apply(Command::create_queue(child("c2", "P")), ApplyContext::default());
    let a = s.apply(Command::DeleteQueue { name: q("P"), force: true, at_ms: 5 }, ApplyContext::default());
    let (kind, _, msg) = rejection(&a);
    assert_eq!(kind, RejectKind::Conflict);
    assert!(msg.contains("parent of c1 and c2"), "{msg}");
    for c in ["c1", "c2"] {
        let a = s.apply(Command::DeleteQueue { name: q(c), force: false, at_ms: 5 }, ApplyContext::default());
        assert_eq!(a.response, Some(Response::Ok));
    }
    // The last child gone, the record holds no queue.
    assert!(s.queue_trees().queues.is_empty());
    let a = s.apply(Command::DeleteQueue { name: q("P"), force: false, at_ms: 5 }, ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));
}

#[test]
fn older_queue_commands_make_top_level_queues() {
    let mut s = state();
    let mut t = child("old", "A");
    t.priority_offset = 3;
    // An entry of an older log carries no tree: the queue is a top-level one.
    let a = s.apply(Command::from(CommandRecord::CreateQueue { queue: t.into() }), ApplyContext::default());
    assert_eq!(a.response, Some(Response::Ok));
    assert!(s.queues[&q("old")].queue.is_flat());
    assert!(trees(&a).is_empty());
}
