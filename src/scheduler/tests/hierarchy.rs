//! The queue tree: YuniKorn's examples of priority fences, offsets and `sort_priority`, and
//! hierarchical fair shares, with exact outcomes; properties: a flat set of queues decides the
//! same through the tree's path, and hierarchical shares add up and respect demand.
//!
//! The ordering examples let one job through per cycle (a global rate of 1 job/s, burst 1), so
//! the job scheduled is the one picked first.

use super::properties::{Harness, World, round_seed, world};
use crate::model::{Queue, QueueName};
use crate::scheduler::cycle::schedule_through_tree;
use crate::scheduler::hierarchy::{FULL_PICKS, Hierarchy};
use crate::scheduler::{Decisions, schedule};
use crate::simulate::{Output, RoundOutput, run_text};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Config with an `urgent` class (35000) and one job per cycle; then nodes, queues and rounds.
fn scenario(queues: &str, rounds: &str) -> Output {
    let text = format!(
        "config:
  priority_classes:
    - {{name: default, priority: 30000, preemptible: false}}
    - {{name: preemptible, priority: 20000, preemptible: true}}
    - {{name: urgent, priority: 35000, preemptible: false}}
  maximum_scheduling_rate: 1
  maximum_scheduling_burst: 1
nodes: [{{name: n, allocatable: {{cpu: '8', memory: '64Gi'}}}}]
queues:
{queues}
rounds:
{rounds}"
    );
    run_text(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn scheduled(r: &RoundOutput) -> Vec<String> {
    r.jobs.iter().filter(|(_, j)| j.state == "running").map(|(n, _)| n.clone()).collect()
}

fn priorities(r: &RoundOutput) -> BTreeMap<String, i32> {
    r.queue_priority.iter().map(|(q, p)| (q.to_string(), *p)).collect()
}

fn prio(p: &[(&str, i32)]) -> BTreeMap<String, i32> {
    p.iter().map(|(q, v)| (q.to_string(), *v)).collect()
}

const ONE_EACH: &str = "  - submit:
      - {id: t, queue: a-team, priority_class: urgent, requests: {cpu: '1'}}
      - {id: s, queue: system, priority_class: urgent, requests: {cpu: '1'}}
  - submit: []";

#[test]
fn a_system_queue_outside_any_fence_goes_before_everything() {
    let out = scenario(
        "  - {name: a-tenant, priority_policy: fence}
  - {name: a-team, parent: a-tenant}
  - {name: system}",
        ONE_EACH,
    );
    assert_eq!(scheduled(&out.rounds[0]), vec!["s"]);
    assert_eq!(priorities(&out.rounds[0]), prio(&[("a-team", 35000), ("a-tenant", 30000), ("system", 35000)]));
    assert_eq!(scheduled(&out.rounds[1]), vec!["s", "t"]);
    // Without the fence the tenant shows its urgent job: equal priorities, equal cost, and the
    // name decides.
    let out = scenario(
        "  - {name: a-tenant}
  - {name: a-team, parent: a-tenant}
  - {name: system}",
        ONE_EACH,
    );
    assert_eq!(scheduled(&out.rounds[0]), vec!["t"]);
    assert_eq!(priorities(&out.rounds[0])["a-tenant"], 35000);
}

const TENANTS: &str = "  - submit: [{id: warm, queue: t1-x, requests: {cpu: '1'}}]
  - submit:
      - {id: u, queue: t1-x, priority_class: urgent, requests: {cpu: '1'}}
      - {id: d, queue: t2-x, requests: {cpu: '1'}}";

#[test]
fn fenced_tenants_cannot_jump_one_another_with_urgent_jobs() {
    let out = scenario(
        "  - {name: t1, priority_policy: fence}
  - {name: t1-x, parent: t1}
  - {name: t2, priority_policy: fence}
  - {name: t2-x, parent: t2}",
        TENANTS,
    );
    assert_eq!(scheduled(&out.rounds[0]), vec!["warm"]);
    // Both tenants show the default priority; t2 is further below its share.
    assert_eq!(scheduled(&out.rounds[1]), vec!["d", "warm"]);
    assert_eq!(priorities(&out.rounds[1]), prio(&[("t1", 30000), ("t1-x", 35000), ("t2", 30000), ("t2-x", 30000)]));
    // Unfenced, t1's urgent job goes first.
    let out = scenario(
        "  - {name: t1}
  - {name: t1-x, parent: t1}
  - {name: t2}
  - {name: t2-x, parent: t2}",
        TENANTS,
    );
    assert_eq!(scheduled(&out.rounds[1]), vec!["u", "warm"]);
}

#[test]
fn inside_a_tenant_an_unfenced_childs_urgent_job_goes_before_a_fenced_siblings() {
    let out = scenario(
        "  - {name: tenant, priority_policy: fence}
  - {name: a-fenced, parent: tenant, priority_policy: fence}
  - {name: b-open, parent: tenant}",
        "  - submit:
      - {id: ua, queue: a-fenced, priority_class: urgent, requests: {cpu: '1'}}
      - {id: ub, queue: b-open, priority_class: urgent, requests: {cpu: '1'}}
  - submit: []",
    );
    assert_eq!(scheduled(&out.rounds[0]), vec!["ub"]);
    assert_eq!(priorities(&out.rounds[0]), prio(&[("a-fenced", 30000), ("b-open", 35000), ("tenant", 30000)]));
    assert_eq!(scheduled(&out.rounds[1]), vec!["ua", "ub"]);
}

#[test]
fn sort_priority_disabled_lets_fair_share_alone_decide_in_the_subtree() {
    let rounds = "  - submit: [{id: warm, queue: a, requests: {cpu: '1'}}]
  - submit:
      - {id: ua, queue: a, priority_class: urgent, requests: {cpu: '1'}}
      - {id: db, queue: b, requests: {cpu: '1'}}";
    let out = scenario(
        "  - {name: p, sort_priority: disabled}
  - {name: mid, parent: p}
  - {name: a, parent: mid}
  - {name: b, parent: mid}",
        rounds,
    );
    // Inherited from p: b, below its share, goes before a's urgent job.
    assert_eq!(scheduled(&out.rounds[1]), vec!["db", "warm"]);
    let out = scenario(
        "  - {name: p}
  - {name: mid, parent: p}
  - {name: a, parent: mid}
  - {name: b, parent: mid}",
        rounds,
    );
    assert_eq!(scheduled(&out.rounds[1]), vec!["ua", "warm"]);
}

#[test]
fn offsets_raise_and_lower_queues() {
    let out = scenario(
        "  - {name: a-low, priority_offset: -1}
  - {name: b}
  - {name: c-boosted, priority_offset: 10001}",
        "  - submit:
      - {id: l, queue: a-low, requests: {cpu: '1'}}
      - {id: m, queue: b, requests: {cpu: '1'}}
      - {id: h, queue: c-boosted, priority_class: preemptible, requests: {cpu: '1'}}
  - submit: []
  - submit: []",
    );
    assert_eq!(priorities(&out.rounds[0]), prio(&[("a-low", 29999), ("b", 30000), ("c-boosted", 30001)]));
    assert_eq!(scheduled(&out.rounds[0]), vec!["h"]);
    assert_eq!(scheduled(&out.rounds[1]), vec!["h", "m"]);
    assert_eq!(scheduled(&out.rounds[2]), vec!["h", "l", "m"]);
}

#[test]
fn fences_nest_and_offsets_add_up_the_tree() {
    let out = scenario(
        "  - {name: t1, priority_policy: fence}
  - {name: t1a, parent: t1, priority_policy: fence, priority_offset: 100}
  - {name: s, priority_offset: 1}
  - {name: top, priority_offset: 5}
  - {name: top-child, parent: top, priority_offset: 7}",
        "  - submit:
      - {id: u, queue: t1a, priority_class: urgent, requests: {cpu: '1'}}
      - {id: d, queue: s, requests: {cpu: '1'}}
      - {id: p, queue: top-child, priority_class: preemptible, requests: {cpu: '1'}}
  - submit: []
  - submit: []",
    );
    assert_eq!(
        priorities(&out.rounds[0]),
        prio(&[("s", 30001), ("t1", 30000), ("t1a", 30100), ("top", 20012), ("top-child", 20007)])
    );
    assert_eq!(scheduled(&out.rounds[0]), vec!["d"]);
    assert_eq!(scheduled(&out.rounds[1]), vec!["d", "u"]);
    assert_eq!(scheduled(&out.rounds[2]), vec!["d", "p", "u"]);
}

#[test]
fn offsets_saturate_at_the_bounds_of_an_i32() {
    let out = scenario(
        "  - {name: max, priority_offset: 2147483647}
  - {name: min, priority_offset: -2147483648}",
        "  - submit:
      - {id: a, queue: max, priority_class: urgent, requests: {cpu: '1'}}
      - {id: b, queue: min, priority_class: preemptible, requests: {cpu: '1'}}",
    );
    assert_eq!(priorities(&out.rounds[0]), prio(&[("max", i32::MAX), ("min", 20000 + i32::MIN)]));
    assert_eq!(scheduled(&out.rounds[0]), vec!["a"]);
}

fn shares(d: &Decisions) -> BTreeMap<String, (f64, f64, bool)> {
    d.pools[0]
        .queues
        .iter()
        .map(|q| (q.queue.to_string(), (q.fair_share, q.adjusted_fair_share, q.is_parent)))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn hierarchical_shares_divide_each_level_and_caps_redistribute_within_the_parent_first() {
    let text = "nodes: [{name: n, allocatable: {cpu: '10', memory: '100Gi'}}]
queues:
  - {name: A}
  - {name: A1, parent: A}
  - {name: A2, parent: A}
  - {name: B}
rounds:
  - submit:
      - {id: a1, queue: A1, count: 1, requests: {cpu: '1'}}
      - {id: a2, queue: A2, count: 20, requests: {cpu: '1'}}
      - {id: b, queue: B, count: 20, requests: {cpu: '1'}}";
    let out = run_text(text).unwrap();
    let r = &out.rounds[0];
    let s = shares(r.decisions.as_ref().unwrap());
    let expect = [("A", 0.5, 0.5, true), ("A1", 0.25, 0.1, false), ("A2", 0.25, 0.4, false), ("B", 0.5, 0.5, false)];
    for (q, fair, adjusted, parent) in expect {
        let (f, a, p) = s[q];
        assert!(close(f, fair) && close(a, adjusted) && p == parent, "{q}: {:?}", s[q]);
    }
    let counts: BTreeMap<String, usize> = r.running.iter().map(|(q, n)| (q.to_string(), *n)).collect();
    assert_eq!(counts, [("A1", 1), ("A2", 4), ("B", 5)].into_iter().map(|(q, n)| (q.to_string(), n)).collect());
    let parent = &r.decisions.as_ref().unwrap().pools[0].queues.iter().find(|q| q.queue.as_str() == "A1").unwrap();
    assert_eq!(parent.parent.as_ref().map(|p| p.as_str()), Some("A"));
}

#[test]
fn scenario_rules_of_the_tree_name_the_field() {
    let e = crate::simulate::Scenario::parse("queues: [{name: a, parent: nope}]").unwrap_err();
    assert_eq!(e.field, "queues[0].parent");
    let e = crate::simulate::Scenario::parse("queues: [{name: a, parent: b}, {name: b, parent: a}]").unwrap_err();
    assert_eq!(e.field, "queues[0].parent");
    let e = crate::simulate::Scenario::parse(
        "queues: [{name: a}, {name: b, parent: a}]\nrounds: [{submit: [{id: x, queue: a}]}]",
    )
    .unwrap_err();
    assert_eq!(e.field, "rounds[0].submit[0].queue");
    assert!(e.message.contains("leaf queues only"), "{e}");
    let e = crate::simulate::Scenario::parse("queues: [{name: a, weight: 2, priority_factor: 1}]").unwrap_err();
    assert!(e.to_string().contains("weight"), "{e}");
    let s = crate::simulate::Scenario::parse("queues: [{name: a, weight: 4}]").unwrap();
    assert!(close(s.queues[0].priority_factor, 0.25));
    let e = crate::simulate::Scenario::parse("queues: [{name: a, weight: 0}]").unwrap_err();
    assert!(e.to_string().contains("weight: must be"), "{e}");
}

/// Decisions as JSON without the tree's priority report (which only the tree's path writes).
fn comparable(d: &Decisions) -> String {
    let mut d = d.clone();
    for p in &mut d.pools {
        p.queue_priority.clear();
    }
    serde_json::to_string(&d).expect("decisions serialize")
}

fn flat_through_tree(w: &World) -> Result<(), TestCaseError> {
    let mut h = Harness::new(w);
    h.submit(&w.before);
    for (round, jobs) in [&w.after[..], &[]].into_iter().enumerate() {
        let s = h.snapshot();
        let now = round as i64 * 1000;
        let flat = schedule(&s, &h.cfg, round_seed(w.seed, round as u64), now);
        let tree = schedule_through_tree(&s, &h.cfg, round_seed(w.seed, round as u64), now);
        prop_assert_eq!(comparable(&flat), comparable(&tree), "round {}", round);
        h.apply(&flat);
        h.submit(jobs);
    }
    Ok(())
}

/// Hangs the world's queues under two parents, alternately.
fn under_two_parents(s: &mut crate::scheduler::Snapshot) {
    let parents = [QueueName::new("pa").expect("valid"), QueueName::new("pb").expect("valid")];
    for (i, qs) in s.queues.iter_mut().enumerate() {
        qs.queue.parent = Some(parents[i % 2].clone());
    }
    for p in parents {
        s.queues.push(crate::scheduler::QueueSnapshot {
            queue: Queue::new(p, 1.0),
            queued: vec![],
            queued_demand: None,
        });
    }
}

/// Through a real tree, picks that recompute only what changed decide as picks that recompute
/// everything: displacements, evictions and rollbacks change other queues' allocations too.
fn incremental_picks_as_full_ones(w: &World) -> Result<(), TestCaseError> {
    let mut h = Harness::new(w);
    h.submit(&w.before);
    for (round, jobs) in [&w.after[..], &[]].into_iter().enumerate() {
        let mut s = h.snapshot();
        under_two_parents(&mut s);
        let (seed, now) = (round_seed(w.seed, round as u64), round as i64 * 1000);
        let incremental = schedule(&s, &h.cfg, seed, now);
        FULL_PICKS.with(|f| f.set(true));
        let full = schedule(&s, &h.cfg, seed, now);
        FULL_PICKS.with(|f| f.set(false));
        prop_assert_eq!(comparable(&incremental), comparable(&full), "round {}", round);
        h.apply(&incremental);
        h.submit(jobs);
    }
    Ok(())
}

/// Random forests: `parents[i] < i`, so there is no cycle.
fn forest() -> impl Strategy<Value = (Vec<Option<usize>>, Vec<f64>, Vec<f64>, Vec<bool>)> {
    (1usize..12).prop_flat_map(|n| {
        (
            (0..n)
                .map(|i| if i == 0 { Just(None).boxed() } else { prop::option::of(0..i).boxed() })
                .collect::<Vec<_>>(),
            prop::collection::vec(prop::sample::select(vec![0.5, 1.0, 2.0, 3.0]), n),
            prop::collection::vec(0.0f64..0.6, n),
            prop::collection::vec(any::<bool>(), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_flat_set_of_queues_decides_the_same_through_the_tree(w in world()) {
        flat_through_tree(&w)?;
    }

    #[test]
    fn incremental_tree_picks_decide_as_full_recomputation(w in world()) {
        incremental_picks_as_full_ones(&w)?;
    }

    #[test]
    fn hierarchical_shares_sum_to_one_over_active_leaves_and_respect_demand(
        (parents, weights, demand, active) in forest()
    ) {
        let n = parents.len();
        let tree = Hierarchy::of_parents(&parents);
        let is_leaf: Vec<bool> = (0..n).map(|i| !parents.contains(&Some(i))).collect();
        // Only leaves hold jobs: parents have no demand of their own.
        let own_active: Vec<bool> = (0..n).map(|i| is_leaf[i] && active[i]).collect();
        let own_demand: Vec<f64> = (0..n).map(|i| if own_active[i] { demand[i] } else { 0.0 }).collect();
        let super::super::hierarchy::TreeShares { plain, adjusted, .. } = tree.shares(&weights, &own_demand, &own_active);
        let leaves: Vec<usize> = (0..n).filter(|&i| own_active[i]).collect();
        if !leaves.is_empty() {
            let sum: f64 = leaves.iter().map(|&i| plain[i]).sum();
            prop_assert!((sum - 1.0).abs() < 1e-9, "plain shares sum to {sum}");
            let total_demand: f64 = leaves.iter().map(|&i| own_demand[i]).sum();
            let sum_adjusted: f64 = leaves.iter().map(|&i| adjusted[i]).sum();
            prop_assert!((sum_adjusted - total_demand.min(1.0)).abs() < 1e-9, "adjusted {sum_adjusted} vs demand {total_demand}");
        }
        for i in 0..n {
            prop_assert!(adjusted[i] <= own_demand[i] + 1e-9 || !is_leaf[i], "leaf {i} above its demand");
            prop_assert!(own_active[i] || is_leaf[i] || plain[i] >= 0.0);
            if is_leaf[i] && !own_active[i] {
                prop_assert!(plain[i] == 0.0 && adjusted[i] == 0.0);
            }
        }
    }
}

#[test]
fn queue_tree_scenario() {
    let path = format!("{}/tests/scenarios/queue_tree.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = run_text(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let order: Vec<Vec<String>> = out.rounds.iter().map(scheduled).collect();
    assert_eq!(
        order,
        vec![
            vec!["sys".to_string()],
            vec!["sys".into(), "tb".into()],
            vec!["open-urgent".into(), "sys".into(), "tb".into()],
            vec!["fenced-urgent".into(), "open-urgent".into(), "sys".into(), "tb".into()],
        ]
    );
    assert_eq!(
        priorities(&out.rounds[0]),
        prio(&[
            ("a-fenced", 30000),
            ("b-open", 35000),
            ("system", 35000),
            ("tb-jobs", 30000),
            ("tenant-a", 30000),
            ("tenant-b", 30000)
        ])
    );
}
