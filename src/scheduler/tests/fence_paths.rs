//! Preemption fences on every path where a job may displace another by urgency (issue 31,
//! section 4): pools with earmarked nodes, the `priority` pool policy (single jobs and gangs),
//! and the paths that are not by urgency and stay as they are (guests at home, `proportional`
//! targets). Each case gives its outcome with the fence and without it.

use super::queue_policies::{counts, map, reason, run};

/// The scenario without its fences.
fn unfenced(text: &str) -> String {
    text.replace(", preemption_policy: fence", "")
}

const FENCE_WAIT: &str = "without preempting jobs outside queue tenant1, whose preemption fence stops its jobs \
                          from displacing them (preemption_policy = fence)";

/// Eviction off: every displacement below is by urgency (or a guest giving way at home).
const CLASSES: &str = "config:
  node_eviction_probability: 0
  priority_classes:
    - {name: urgent, priority: 30000, preemptible: false}
    - {name: low, priority: 20000, preemptible: true}
  default_priority_class: low
";

#[test]
fn a_fenced_urgent_job_in_an_earmarked_pool_displaces_no_outside_job() {
    // `open` holds 2 jobs inside tenant1's fence and 6 of tenant2; `kept` is earmarked for
    // keeper (full). t1-prod's 3 urgent jobs may go to `open` only.
    let text = CLASSES.to_string()
        + r#"nodes:
  - {name: open, allocatable: {cpu: "8", memory: "64Gi"}}
  - {name: kept, allocatable: {cpu: "4", memory: "64Gi"}, reserved_for: [keeper]}
queues:
  - {name: keeper}
  - {name: tenant1, preemption_policy: fence}
  - {name: t1-batch, parent: tenant1}
  - {name: t1-prod, parent: tenant1}
  - {name: tenant2}
rounds:
  - submit:
      - {id: k, queue: keeper, count: 4, priority_class: urgent, requests: {cpu: "1", memory: "1Gi"}}
      - {id: b, queue: t1-batch, count: 2, requests: {cpu: "1", memory: "1Gi"}}
      - {id: o, queue: tenant2, count: 6, requests: {cpu: "1", memory: "1Gi"}}
  - submit:
      - {id: u, queue: t1-prod, count: 3, priority_class: urgent, requests: {cpu: "1", memory: "1Gi"}}
"#;
    let out = run(&text);
    assert_eq!(counts(&out.rounds[0].running), map(&[("keeper", 4), ("t1-batch", 2), ("tenant2", 6)]));
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("t1-prod", 2)]));
    assert_eq!(counts(&r1.preempted), map(&[("t1-batch", 2)]));
    assert_eq!(counts(&r1.running), map(&[("keeper", 4), ("t1-prod", 2), ("tenant2", 6)]));
    assert_eq!(reason(r1, "u-3"), format!("no room in pool default {FENCE_WAIT}"));

    // Without the fence the third urgent job, and then all three, take tenant2's places.
    let open = run(&unfenced(&text));
    assert_eq!(counts(&open.rounds[1].preempted), map(&[("tenant2", 3)]));
    assert_eq!(counts(&open.rounds[1].running), map(&[("keeper", 4), ("t1-batch", 2), ("t1-prod", 3), ("tenant2", 3)]));
}

#[test]
fn guests_still_give_way_to_a_fenced_job_at_home() {
    // `home` is earmarked for tenant1's children: t1-batch's 2 jobs and 2 guests of tenant2 are
    // on it; tenant2's other 4 jobs fill `open`. t1-prod's urgent 4-cpu job takes `home`: the
    // guests go as guests, t1-batch's jobs by urgency inside the fence, and tenant2 keeps `open`.
    let text = CLASSES.to_string()
        + r#"nodes:
  - {name: home, allocatable: {cpu: "4", memory: "64Gi"}, reserved_for: [t1-batch, t1-prod]}
  - {name: open, allocatable: {cpu: "4", memory: "64Gi"}}
queues:
  - {name: tenant1, preemption_policy: fence}
  - {name: t1-batch, parent: tenant1}
  - {name: t1-prod, parent: tenant1}
  - {name: tenant2}
rounds:
  - submit:
      - {id: b, queue: t1-batch, count: 2, requests: {cpu: "1", memory: "1Gi"}}
      - {id: o, queue: tenant2, count: 6, requests: {cpu: "1", memory: "1Gi"}}
  - submit:
      - {id: u, queue: t1-prod, priority_class: urgent, requests: {cpu: "4", memory: "1Gi"}}
"#;
    let out = run(&text);
    let r0 = &out.rounds[0];
    assert_eq!(counts(&r0.nodes["home"]), map(&[("t1-batch", 2), ("tenant2", 2)]));
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("t1-prod", 1)]));
    assert_eq!(counts(&r1.preempted), map(&[("t1-batch", 2), ("tenant2", 2)]));
    assert_eq!(counts(&r1.nodes["home"]), map(&[("t1-prod", 1)]));
    assert_eq!(counts(&r1.nodes["open"]), map(&[("tenant2", 4)]));
    assert!(reason(r1, "o-5").starts_with("preempted as a guest: node home is reserved for queue t1-prod"));

    // Without the fence the urgent job takes `open`, the least harmful node, from tenant2.
    let open = run(&unfenced(&text));
    assert_eq!(counts(&open.rounds[1].preempted), map(&[("tenant2", 4)]));
    assert_eq!(counts(&open.rounds[1].nodes["open"]), map(&[("t1-prod", 1)]));
}

/// A `priority` pool with preemption: one node of 4 GPUs.
const PRIORITY_POOL: &str = r#"config:
  pools:
    gpu: {policy: priority, preemption: true}
nodes:
  - {name: node, pool: gpu, allocatable: {cpu: "16", memory: "64Gi", nvidia.com/gpu: "4"}}
queues:
  - {name: tenant1, preemption_policy: fence}
  - {name: t1-batch, parent: tenant1}
  - {name: t1-prod, parent: tenant1}
  - {name: tenant2}
"#;

#[test]
fn a_fenced_job_in_a_priority_pool_preempts_only_inside_its_fence() {
    let text = PRIORITY_POOL.to_string()
        + r#"rounds:
  - submit:
      - {id: b, queue: t1-batch, count: 2, priority: 5, priority_class: preemptible,
         requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"}}
      - {id: o, queue: tenant2, count: 2, priority: 5, priority_class: preemptible,
         requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"}}
  - submit:
      - {id: u, queue: t1-prod, count: 3, priority: 1, requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"}}
"#;
    let out = run(&text);
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("t1-prod", 2)]));
    assert_eq!(counts(&r1.preempted), map(&[("t1-batch", 2)]));
    assert_eq!(counts(&r1.running), map(&[("t1-prod", 2), ("tenant2", 2)]));
    assert_eq!(reason(r1, "u-3"), format!("no room in pool gpu {FENCE_WAIT}"));

    // Without the fence the newest trials go first, tenant2's included.
    let open = run(&unfenced(&text));
    assert_eq!(counts(&open.rounds[1].preempted), map(&[("t1-batch", 1), ("tenant2", 2)]));
    assert_eq!(counts(&open.rounds[1].running), map(&[("t1-batch", 1), ("t1-prod", 3)]));
}

#[test]
fn a_fenced_gang_in_a_priority_pool_waits_at_the_fence() {
    let text = PRIORITY_POOL.to_string()
        + r#"rounds:
  - submit:
      - {id: o, queue: tenant2, count: 4, priority: 5, priority_class: preemptible,
         requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"}}
  - submit:
      - {id: g, queue: t1-prod, count: 2, priority: 1, requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"},
         annotations: {convoy.io/gang-id: g, convoy.io/gang-cardinality: "2"}}
"#;
    let out = run(&text);
    let r1 = &out.rounds[1];
    assert!(counts(&r1.scheduled).is_empty() && counts(&r1.preempted).is_empty());
    assert_eq!(counts(&r1.running), map(&[("tenant2", 4)]));
    let want = format!("gang g: 0 of 2 members fit; no room in pool gpu {FENCE_WAIT}");
    assert_eq!((reason(r1, "g-1"), reason(r1, "g-2")), (want.as_str(), want.as_str()));

    let open = run(&unfenced(&text));
    assert_eq!(counts(&open.rounds[1].scheduled), map(&[("t1-prod", 2)]));
    assert_eq!(counts(&open.rounds[1].preempted), map(&[("tenant2", 2)]));
}

#[test]
fn proportional_targets_are_not_urgency_and_ignore_fences() {
    // `proportional` preempts queues above their targets (its fair share), never by urgency:
    // a fence changes nothing.
    let text = r#"config:
  pools:
    gpu: {policy: proportional}
nodes:
  - {name: node, pool: gpu, allocatable: {cpu: "16", memory: "64Gi", nvidia.com/gpu: "4"}}
queues:
  - {name: tenant1, preemption_policy: fence}
  - {name: t1, parent: tenant1}
  - {name: tenant2}
rounds:
  - submit:
      - {id: o, queue: tenant2, count: 4, priority_class: preemptible,
         requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"}}
  - submit:
      - {id: a, queue: t1, count: 4, priority_class: preemptible,
         requests: {cpu: "1", memory: "1Gi", nvidia.com/gpu: "1"}}
"#;
    let out = run(text);
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.preempted), map(&[("tenant2", 2)]));
    assert_eq!(counts(&r1.running), map(&[("t1", 2), ("tenant2", 2)]));
    let open = run(&unfenced(text));
    for (a, b) in out.rounds.iter().zip(&open.rounds) {
        assert_eq!((&a.scheduled, &a.preempted, &a.running), (&b.scheduled, &b.preempted, &b.running));
    }
}
