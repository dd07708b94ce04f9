//! The worked examples (tests/scenarios/*.yaml), run through the simulator with exact outcomes.

use crate::simulate::{Output, RoundOutput, run_text};
use std::collections::BTreeMap;

fn run(name: &str) -> Output {
    let path = format!("{}/tests/scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    run_text(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn counts(m: &BTreeMap<crate::model::QueueName, usize>) -> BTreeMap<String, usize> {
    m.iter().filter(|(_, v)| **v > 0).map(|(k, v)| (k.to_string(), *v)).collect()
}

fn map(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn state<'a>(r: &'a RoundOutput, job: &str) -> &'a str {
    r.jobs.get(job).unwrap_or_else(|| panic!("no job {job}")).state
}

fn node<'a>(r: &'a RoundOutput, job: &str) -> Option<&'a str> {
    r.jobs.get(job).and_then(|j| j.node.as_deref())
}

fn reason<'a>(r: &'a RoundOutput, job: &str) -> &'a str {
    r.jobs.get(job).and_then(|j| j.reason.as_deref()).unwrap_or("")
}

fn on_node(r: &RoundOutput, node: &str) -> BTreeMap<String, usize> {
    counts(&r.nodes[node])
}

#[test]
fn fair_share_preemption_worked_example() {
    let out = run("fair_share_preemption.yaml");
    let r0 = &out.rounds[0];
    assert_eq!(counts(&r0.scheduled), map(&[("A", 40)]));
    assert_eq!(on_node(r0, "node-1"), map(&[("A", 32)]));
    assert_eq!(on_node(r0, "node-2"), map(&[("A", 8)]));
    for i in 1..=32 {
        assert_eq!(node(r0, &format!("a-{i}")), Some("node-1"));
    }

    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.running), map(&[("A", 32), ("B", 32)]));
    assert_eq!(counts(&r1.preempted), map(&[("A", 8)]));
    assert_eq!(counts(&r1.scheduled), map(&[("B", 32)]));
    assert_eq!(counts(&r1.queued), map(&[("B", 18)]));
    assert_eq!(on_node(r1, "node-1"), map(&[("A", 32)]));
    assert_eq!(on_node(r1, "node-2"), map(&[("B", 32)]));
    // The preempted jobs are exactly the ones A had on node-2.
    for i in 33..=40 {
        let j = format!("a-{i}");
        assert_eq!(state(r1, &j), "preempted", "{j}");
        assert!(reason(r1, &j).contains("fair share"), "{}", reason(r1, &j));
    }
    assert!(reason(r1, "b-50").contains("no node with 1 cpu"), "{}", reason(r1, "b-50"));

    // Stable: a further cycle changes nothing.
    let r2 = &out.rounds[2];
    assert!(counts(&r2.scheduled).is_empty() && counts(&r2.preempted).is_empty());
    assert_eq!(counts(&r2.running), map(&[("A", 32), ("B", 32)]));
}

#[test]
fn newcomer_takes_the_places_of_the_jobs_that_would_return_last() {
    let out = run("newcomer_fair_share.yaml");
    let r0 = &out.rounds[0];
    assert_eq!(on_node(r0, "node-1"), map(&[("A", 16)]));
    assert_eq!(on_node(r0, "node-2"), map(&[("B", 16)]));
    assert_eq!(on_node(r0, "node-3"), map(&[("C", 16)]));
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.running), map(&[("A", 12), ("B", 12), ("C", 12), ("D", 12)]));
    assert_eq!(counts(&r1.preempted), map(&[("A", 4), ("B", 4), ("C", 4)]));
    assert_eq!(counts(&r1.queued), map(&[("D", 36)]));
    assert_eq!(on_node(r1, "node-1"), map(&[("A", 12), ("D", 4)]));
    assert_eq!(on_node(r1, "node-2"), map(&[("B", 12), ("D", 4)]));
    assert_eq!(on_node(r1, "node-3"), map(&[("C", 12), ("D", 4)]));
    // Each queue loses the jobs that would have returned last: its four newest.
    for q in ["a", "b", "c"] {
        for i in 1..=16 {
            let j = format!("{q}-{i}");
            let want = if i > 12 { "preempted" } else { "running" };
            assert_eq!(state(r1, &j), want, "{j}");
        }
        assert!(reason(r1, &format!("{q}-16")).contains("of queue D"), "{}", reason(r1, &format!("{q}-16")));
    }
    // A, B and C were above their fair share; D, with nothing running, was protected.
    let report = &r1.decisions.as_ref().expect("decisions").pools[0];
    let protected: Vec<(String, bool)> = report.queues.iter().map(|q| (q.queue.to_string(), q.protected)).collect();
    let want = [("A", false), ("B", false), ("C", false), ("D", true)];
    assert_eq!(protected, want.map(|(q, p)| (q.to_string(), p)));
    assert_eq!(report.evicted, 48);
    let r2 = &out.rounds[2];
    assert!(counts(&r2.scheduled).is_empty() && counts(&r2.preempted).is_empty());
    assert_eq!(counts(&r2.running), map(&[("A", 12), ("B", 12), ("C", 12), ("D", 12)]));
}

/// The same example with every layout of A, B and C over the three nodes: the first queue
/// submitted takes node-1, the next node-2, the last node-3.
#[test]
fn newcomer_fair_share_whatever_the_layout() {
    let perms = [["A", "B", "C"], ["A", "C", "B"], ["B", "A", "C"], ["B", "C", "A"], ["C", "A", "B"], ["C", "B", "A"]];
    for perm in perms {
        let mut text =
            String::from("nodes:\n  - {name: node, count: 3, allocatable: {cpu: \"16\", memory: \"64Gi\"}}\nqueues:\n");
        for q in ["A", "B", "C", "D"] {
            text.push_str(&format!("  - {{name: {q}}}\n"));
        }
        text.push_str("rounds:\n");
        let job = |q: &str, count: u32| {
            format!(
                "  - submit:\n      - {{id: {}, queue: {q}, count: {count}, priority_class: preemptible, requests: {{cpu: \"1\", memory: 1Gi}}}}\n",
                q.to_lowercase()
            )
        };
        for q in perm {
            text.push_str(&job(q, 16));
        }
        text.push_str(&job("D", 48));
        text.push_str("  - submit: []\n");
        let out = run_text(&text).unwrap_or_else(|e| panic!("{perm:?}: {e}"));
        let layout = &out.rounds[2];
        for (i, q) in perm.iter().enumerate() {
            assert_eq!(on_node(layout, &format!("node-{}", i + 1)), map(&[(q, 16)]), "{perm:?}");
        }
        let r = &out.rounds[3];
        assert_eq!(counts(&r.running), map(&[("A", 12), ("B", 12), ("C", 12), ("D", 12)]), "{perm:?}");
        assert_eq!(counts(&r.preempted), map(&[("A", 4), ("B", 4), ("C", 4)]), "{perm:?}");
        for (i, q) in perm.iter().enumerate() {
            assert_eq!(on_node(r, &format!("node-{}", i + 1)), map(&[(q, 12), ("D", 4)]), "{perm:?}");
        }
        let stable = &out.rounds[4];
        assert!(counts(&stable.scheduled).is_empty() && counts(&stable.preempted).is_empty(), "{perm:?}");
    }
}

#[test]
fn heavy_queue_asking_little_is_protected_by_its_fair_share() {
    let out = run("protected_fair_share.yaml");
    let r1 = &out.rounds[1];
    assert_eq!((state(r1, "h-1"), state(r1, "h-2")), ("running", "running"));
    assert!(counts(&r1.scheduled).is_empty() && counts(&r1.preempted).is_empty());
    assert_eq!(counts(&r1.queued), map(&[("N", 20)]));
    assert!(reason(r1, "n-1").contains("no node with 100m cpu free"), "{}", reason(r1, "n-1"));
    let report = &r1.decisions.as_ref().expect("decisions").pools[0];
    assert_eq!(report.evicted, 0);
    let shares: Vec<(String, f64, f64, f64, bool)> = report
        .queues
        .iter()
        .map(|q| (q.queue.to_string(), q.fair_share, q.adjusted_fair_share, q.actual_share, q.protected))
        .collect();
    assert_eq!(shares.len(), 2);
    let (h, n) = (&shares[0], &shares[1]);
    assert_eq!((h.0.as_str(), n.0.as_str()), ("H", "N"));
    assert!((h.1 - 0.8).abs() < 1e-9 && (h.2 - 0.25).abs() < 1e-9 && (h.3 - 0.25).abs() < 1e-9, "{h:?}");
    assert!(h.4 && n.4, "{shares:?}");
}

#[test]
fn allocatable_depends_on_priority() {
    let out = run("per_priority_allocatable.yaml");
    let r0 = &out.rounds[0];
    assert_eq!((state(r0, "d10"), state(r0, "p20")), ("running", "running"));
    let r1 = &out.rounds[1];
    assert_eq!((state(r1, "d23"), state(r1, "p3")), ("queued", "queued"));
    assert!(counts(&r1.preempted).is_empty());
    assert!(reason(r1, "d23").contains("no node with 23 cpu free"), "{}", reason(r1, "d23"));
    assert!(reason(r1, "p3").contains("no node with 3 cpu free"), "{}", reason(r1, "p3"));
    let r2 = &out.rounds[2];
    assert_eq!(state(r2, "p2"), "running");
    assert!(counts(&r2.preempted).is_empty());
    let r3 = &out.rounds[3];
    assert_eq!(state(r3, "d22"), "running");
    assert_eq!((state(r3, "p20"), state(r3, "p2"), state(r3, "d10")), ("preempted", "preempted", "running"));
    assert!(reason(r3, "p20").contains("more urgent job"), "{}", reason(r3, "p20"));
}

#[test]
fn drf_paper_example() {
    let out = run("drf_paper.yaml");
    assert_eq!(counts(&out.rounds[0].running), map(&[("A", 3), ("B", 2)]));
}

#[test]
fn weights_split_two_to_one() {
    let out = run("queue_weights.yaml");
    assert_eq!(counts(&out.rounds[0].running), map(&[("A", 20), ("B", 10)]));
}

#[test]
fn gangs_all_or_nothing_and_minimum_cardinality() {
    let out = run("gangs.yaml");
    let r0 = &out.rounds[0];
    for g in ["g1-1", "g1-2", "g1-3"] {
        assert_eq!(state(r0, g), "queued");
        assert!(reason(r0, g).contains("gang g1: 2 of 3 members fit"), "{}", reason(r0, g));
    }
    assert_eq!(state(r0, "s"), "running");
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("A", 2)]));
    assert_eq!(counts(&r1.failed), map(&[("A", 1)]));
    assert_eq!((state(r1, "g2-1"), state(r1, "g2-2"), state(r1, "g2-3")), ("running", "running", "failed"));
    assert_ne!(node(r1, "g2-1"), node(r1, "g2-2"));
    // g1 still cannot fit and is still all queued.
    assert_eq!((state(r1, "g1-1"), state(r1, "g1-3")), ("queued", "queued"));
}

#[test]
fn gang_node_uniformity() {
    let out = run("gang_uniformity.yaml");
    let r0 = &out.rounds[0];
    let nodes: Vec<_> = ["u1-1", "u1-2"].iter().map(|j| node(r0, j)).collect();
    assert!(nodes.iter().all(|n| n.is_some_and(|n| n.starts_with("small"))), "{nodes:?}");
    let r1 = &out.rounds[1];
    for j in ["u2-1", "u2-2", "u2-3", "u2-4"] {
        assert!(node(r1, j).is_some_and(|n| n.starts_with("big")), "{j}: {:?}", node(r1, j));
    }
    let r2 = &out.rounds[2];
    assert_eq!((state(r2, "u3-1"), state(r2, "u3-2")), ("queued", "queued"));
    assert!(reason(r2, "u3-1").contains("gang u3: 0 of 2 members fit"), "{}", reason(r2, "u3-1"));
}

#[test]
fn armada_gang_annotations_form_gangs() {
    let out = run("armada_gang_annotations.yaml");
    let r0 = &out.rounds[0];
    assert_eq!(counts(&r0.scheduled), map(&[("A", 2)]));
    assert_eq!(counts(&r0.failed), map(&[("A", 1)]));
    assert_eq!((node(r0, "a-1"), node(r0, "a-2")), (Some("node-1"), Some("node-2")));
    assert_eq!(state(r0, "a-3"), "failed");
    assert_eq!(reason(r0, "a-3"), "gang a: 2 of 3 members fit (minimum 2)");
    assert!(on_node(r0, "node-3").is_empty());
    let r1 = &out.rounds[1];
    assert!(counts(&r1.scheduled).is_empty());
    for j in ["b-1", "b-2"] {
        assert_eq!(state(r1, j), "queued");
        assert_eq!(reason(r1, j), "gang b: 1 of 2 members fit; no node with 6 cpu free in pool default");
    }
}

fn quarantined(r: &RoundOutput, node: &str) -> bool {
    r.nodes[node].quarantined
}

#[test]
fn node_quarantine_after_node_faults_within_the_window() {
    let out = run("node_quarantine.yaml");
    let r = &out.rounds;
    assert_eq!((node(&r[0], "a-1"), node(&r[0], "a-2")), (Some("node-1"), Some("node-2")));
    assert_eq!((state(&r[1], "a-1"), node(&r[1], "b")), ("failed", Some("node-1")));
    assert!(!quarantined(&r[1], "node-1"), "one failure is not enough");
    // The second failure of node-1 within 60 s: quarantined for 120 s (until t=180).
    for (i, round) in r.iter().enumerate().take(6).skip(2) {
        assert!(quarantined(round, "node-1"), "round {i}");
        assert!(!quarantined(round, "node-2"), "round {i}");
        assert_eq!(state(round, "c"), "queued", "round {i}");
        assert_eq!(
            reason(round, "c"),
            "no node in pool default matches the job's constraints: 1 node do not match node selector \
             kubernetes.io/hostname=node-1; 1 node quarantined (too many failures of the node)"
        );
    }
    // a-2's own failure did not count against node-2; d and e ran there.
    assert_eq!(state(&r[2], "a-2"), "failed");
    assert_eq!(node(&r[3], "d"), Some("node-2"));
    assert_eq!(node(&r[4], "e"), Some("node-2"));
    // t=180: over; c runs on node-1. e's failure is one window after d's: no quarantine.
    assert!(!quarantined(&r[6], "node-1") && !quarantined(&r[6], "node-2"));
    assert_eq!((state(&r[6], "c"), node(&r[6], "c")), ("running", Some("node-1")));
    assert_eq!(state(&r[6], "e"), "failed");
    assert_eq!(counts(&r[6].scheduled), map(&[("A", 1)]));

    // With quarantine off (max_failures 0), node faults count for nothing: c runs at once.
    let path = format!("{}/tests/scenarios/node_quarantine.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap().replace("max_failures: 2", "max_failures: 0");
    let off = run_text(&text).unwrap();
    assert_eq!((state(&off.rounds[2], "c"), node(&off.rounds[2], "c")), ("running", Some("node-1")));
    assert!(off.rounds.iter().all(|r| r.nodes.values().all(|n| !n.quarantined)));
}

#[test]
fn urgency_preemption_picks_lowest_and_never_equal_or_higher() {
    let out = run("urgency_preemption.yaml");
    let r1 = &out.rounds[1];
    assert_eq!((state(r1, "h"), state(r1, "l"), state(r1, "m")), ("running", "preempted", "running"));
    let r2 = &out.rounds[2];
    assert_eq!(state(r2, "m2"), "queued");
    assert!(counts(&r2.preempted).is_empty());
    let r3 = &out.rounds[3];
    assert_eq!(state(r3, "h2"), "queued");
    assert!(counts(&r3.preempted).is_empty());
    assert_eq!((state(r3, "h"), state(r3, "m")), ("running", "running"));
    assert!(reason(r3, "h2").contains("no node with 64 cpu"), "{}", reason(r3, "h2"));
}

#[test]
fn urgency_preemption_takes_from_the_queue_furthest_above_its_share() {
    let out = run("urgency_victim_queue.yaml");
    let r = &out.rounds[2];
    assert_eq!(state(r, "c"), "running");
    assert_eq!(node(r, "c"), Some("n2"));
    assert_eq!(counts(&r.preempted), map(&[("A", 2)]));
    assert_eq!((state(r, "a-3"), state(r, "a-4")), ("preempted", "preempted"), "the newest go first");
    assert_eq!(on_node(r, "n1"), map(&[("B", 4)]));
    assert_eq!(on_node(r, "n2"), map(&[("A", 2), ("C", 1)]));
}

#[test]
fn urgency_never_takes_a_non_preemptible_jobs_room() {
    // Armada's NonPreemptibleOverPack: non-preemptible jobs hold their room at every priority.
    let out = run("non_preemptible_over_pack.yaml");
    for (round, job) in [(1, "u"), (2, "p")] {
        let r = &out.rounds[round];
        assert_eq!(state(r, job), "queued", "round {round}");
        assert!(reason(r, job).contains("no node with"), "round {round}: {}", reason(r, job));
        assert!(r.preempted.is_empty(), "round {round}: {:?}", r.preempted);
        assert_eq!(on_node(r, "node"), map(&[("A", 5)]), "round {round}");
    }
}

#[test]
fn queue_resource_limit() {
    let out = run("queue_limit.yaml");
    let r0 = &out.rounds[0];
    assert_eq!(counts(&r0.running), map(&[("B", 8)]));
    assert!(reason(r0, "b-9").contains("queue B at its cpu limit"), "{}", reason(r0, "b-9"));
}

#[test]
fn global_rate_limit() {
    let out = run("rate_limit.yaml");
    let per_round: Vec<usize> = out.rounds.iter().map(|r| r.scheduled.values().sum()).collect();
    assert_eq!(per_round, vec![5, 5, 2]);
    assert!(reason(&out.rounds[0], "a-6").contains("rate limited"), "{}", reason(&out.rounds[0], "a-6"));
}

#[test]
fn a_gang_short_of_tokens_is_skipped_and_scheduling_goes_on() {
    // Armada's rule: only fewer than one token left ends a queue's turn or the round.
    let out = run("gang_rate_limit.yaml");
    let r0 = &out.rounds[0];
    assert_eq!(counts(&r0.scheduled), map(&[("A", 1), ("B", 3)]));
    assert_eq!(
        reason(r0, "big-1"),
        "a gang of 6 needs more than the global scheduling burst of 4: it cannot be scheduled at this rate limit"
    );
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("B", 4)]));
    assert_eq!((state(r1, "h-1"), state(r1, "c")), ("running", "running"));
    assert_eq!((state(r1, "g-1"), reason(r1, "g-1")), ("queued", "rate limited (global scheduling rate)"));
    assert_eq!(state(r1, "big-1"), "queued");
}

#[test]
fn a_gang_takes_its_turn_at_its_last_member() {
    // Armada's non-consecutive gang: a job submitted between a gang's members goes first.
    let r = &run("non_consecutive_gang.yaml").rounds[0];
    assert_eq!(state(r, "x"), "running");
    assert_eq!((state(r, "g1"), state(r, "g2")), ("queued", "queued"));
    assert!(reason(r, "g1").starts_with("gang g: 1 of 2 members fit"), "{}", reason(r, "g1"));
}

#[test]
fn lookback_limit() {
    let out = run("lookback.yaml");
    let r0 = &out.rounds[0];
    assert!(reason(r0, "a-4").contains("no node with 100 cpu"), "{}", reason(r0, "a-4"));
    assert!(reason(r0, "a-5").contains("lookback limit reached"), "{}", reason(r0, "a-5"));
    assert_eq!(state(r0, "b"), "running");
}

#[test]
fn jobs_like_one_that_failed_fail_with_it_and_the_next_kind_is_still_tried() {
    // Queue A's jobs in order: three too large, two small, two too large again, one small of
    // another priority class. Each run of alike jobs fails on its class's verdict without a turn
    // each (`advance_past`); a job of another size or class is still tried, and B's turns go on.
    let text = r#"
config:
  max_queue_lookback: 7
nodes:
  - {name: node, allocatable: {cpu: "4", memory: "64Gi"}}
queues:
  - {name: A}
  - {name: B}
rounds:
  - submit:
      - {id: big, queue: A, count: 3, requests: {cpu: "8"}}
      - {id: small, queue: A, count: 2, requests: {cpu: "1"}}
      - {id: big-again, queue: A, count: 2, requests: {cpu: "8"}}
      - {id: other, queue: A, priority_class: preemptible, requests: {cpu: "1"}}
      - {id: b, queue: B, count: 3, requests: {cpu: "1"}}
"#;
    let out = run_text(text).expect("scenario");
    let r = &out.rounds[0];
    for j in ["big-1", "big-2", "big-3", "big-again-1", "big-again-2"] {
        assert_eq!(state(r, j), "queued", "{j}");
        assert!(reason(r, j).starts_with("no node with 8 cpu free"), "{j}: {}", reason(r, j));
    }
    // B's jobs cost less after them than A's large ones (1/4 of the node against 2), so B
    // starts three first; A's first small job takes the last cpu and the second finds none.
    assert_eq!(state(r, "small-1"), "running");
    assert!(reason(r, "small-2").starts_with("no node with 1 cpu free"), "{}", reason(r, "small-2"));
    // Seven jobs of A were tried, alike or not: the eighth waits for the lookback limit.
    assert!(reason(r, "other").contains("lookback limit reached"), "{}", reason(r, "other"));
    assert_eq!(counts(&r.running), map(&[("A", 1), ("B", 3)]));
}

#[test]
fn contract_example_runs() {
    let out = run("contract_example.yaml");
    assert_eq!(out.rounds.len(), 3);
    // The gang of four fits on the tainted nodes it tolerates.
    assert_eq!(counts(&out.rounds[0].scheduled).get("B"), Some(&4));
}

#[test]
fn earmarked_nodes_take_guests_and_give_them_up() {
    let out = run("earmarked_nodes.yaml");
    let shares = |r: &RoundOutput, q: &str| {
        let d = r.decisions.as_ref().expect("decisions");
        let s = d.pools[0].queues.iter().find(|s| s.queue.as_str() == q).expect("queue in report").clone();
        (s.home_allocated.get("cpu") / 1000, s.guest_allocated.get("cpu") / 1000)
    };
    // Round 1: B's preemptible jobs run on idle `gpu` as guests; C's non-preemptible job may not.
    let r1 = &out.rounds[1];
    assert_eq!(on_node(r1, "gpu"), map(&[("B", 4)]));
    assert!((1..=4).all(|i| node(r1, &format!("g-{i}")) == Some("gpu")));
    assert_eq!(state(r1, "c"), "queued");
    assert_eq!(
        reason(r1, "c"),
        "the nodes that would take the job in pool default are reserved for queue A; only jobs of a preemptible \
         priority class may use them as guests"
    );
    assert_eq!(shares(r1, "B"), (0, 4));
    // Round 2: A's 6 jobs arrive; 4 take the free room and 2 guests are preempted in the same cycle.
    let r2 = &out.rounds[2];
    assert_eq!(counts(&r2.scheduled), map(&[("A", 6)]));
    assert_eq!(counts(&r2.preempted), map(&[("B", 2)]));
    assert_eq!(on_node(r2, "gpu"), map(&[("A", 6), ("B", 2)]));
    assert_eq!((state(r2, "g-3"), state(r2, "g-4")), ("preempted", "preempted"), "the newest guests go first");
    for g in ["g-3", "g-4"] {
        assert!(
            reason(r2, g).starts_with("preempted as a guest: node gpu is reserved for queue A"),
            "{}",
            reason(r2, g)
        );
    }
    for p in &r2.decisions.as_ref().unwrap().preemptions {
        assert!(matches!(p.reason, crate::scheduler::PreemptionReason::Reserved { .. }), "{:?}", p.reason);
    }
    assert_eq!((shares(r2, "A"), shares(r2, "B")), ((6, 0), (0, 2)));
    // Round 3: D's urgent preemptible job, a guest on `gpu`, displaces nobody there.
    let r3 = &out.rounds[3];
    assert!(counts(&r3.preempted).is_empty() && counts(&r3.scheduled).is_empty());
    assert_eq!(state(r3, "d"), "queued");
    assert_eq!(on_node(r3, "gpu"), map(&[("A", 6), ("B", 2)]));
    // Round 4: A's finished jobs leave room, which `d` uses as a guest; `c` still may not.
    let r4 = &out.rounds[4];
    assert_eq!((state(r4, "d"), node(r4, "d")), ("running", Some("gpu")));
    assert_eq!(on_node(r4, "gpu"), map(&[("A", 2), ("B", 2), ("D", 1)]));
    assert!(reason(r4, "c").contains("reserved for queue A"), "{}", reason(r4, "c"));
    assert_eq!(shares(r4, "D"), (0, 2));
}

#[test]
fn decayed_usage_orders_a_recently_heavy_queue_last() {
    let out = run("usage_decay.yaml");
    assert_eq!(counts(&out.rounds[0].scheduled), map(&[("A", 8)]));
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("A", 2), ("B", 6)]));
    let d = r1.decisions.as_ref().expect("decisions");
    let usage = |q: &str| d.pools[0].queues.iter().find(|s| s.queue.as_str() == q).map(|s| s.usage);
    assert_eq!((usage("A"), usage("B")), (Some(0.5), Some(0.0)), "A used all of the pool an hour (one half-time) ago");
    // The record after the round: what each holds now, and the averages the cycle used.
    let rec = &d.usage.as_ref().expect("recorded").pools[&crate::model::PoolName::default_pool()];
    let q = |n: &str| crate::model::QueueName::new(n).unwrap();
    assert_eq!((rec[&q("A")].usage, rec[&q("A")].current), (0.5, 0.25));
    assert_eq!((rec[&q("B")].usage, rec[&q("B")].current), (0.0, 0.75));

    // Without a half-time the two queues, both idle at the start of round 1, split evenly.
    let path = format!("{}/tests/scenarios/usage_decay.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("queue_usage_halftime_seconds: 3600", "queue_usage_halftime_seconds: 0");
    let plain = run_text(&text).unwrap();
    assert_eq!(counts(&plain.rounds[1].scheduled), map(&[("A", 4), ("B", 4)]));
    assert_eq!(plain.rounds[1].decisions.as_ref().unwrap().usage, None);
}

#[test]
fn a_cordoned_queue_takes_jobs_and_schedules_none_until_uncordoned() {
    let out = run("queue_cordon.yaml");
    assert_eq!(counts(&out.rounds[0].running), map(&[("A", 4)]));
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("B", 3)]));
    assert_eq!(counts(&r1.running), map(&[("A", 4), ("B", 3)]));
    assert_eq!(counts(&r1.queued), map(&[("A", 6)]));
    assert!(counts(&r1.preempted).is_empty());
    for i in 1..=6 {
        let j = format!("a2-{i}");
        assert_eq!(state(r1, &j), "queued");
        assert_eq!(reason(r1, &j), "queue A is cordoned: its queued jobs wait until it is uncordoned");
    }
    let r2 = &out.rounds[2];
    assert_eq!(counts(&r2.scheduled), map(&[("A", 3)]));
    assert_eq!(counts(&r2.running), map(&[("A", 7), ("B", 3)]));
    assert_eq!(counts(&r2.queued), map(&[("A", 3)]));
    assert_eq!((state(r2, "a2-1"), state(r2, "a2-3"), state(r2, "a2-4")), ("running", "running", "queued"));
}

#[test]
fn min_runtime_spares_young_jobs_from_fair_share_eviction() {
    let out = run("min_runtime.yaml");
    assert_eq!(counts(&out.rounds[0].running), map(&[("A", 8)]));
    // t=10 s to t=50 s: A is above its share, but its jobs have run less than 60 s.
    for (r, left) in (1..=5).zip([50, 40, 30, 20, 10]) {
        let round = &out.rounds[r];
        assert!(counts(&round.preempted).is_empty() && counts(&round.scheduled).is_empty(), "round {r}");
        assert_eq!(counts(&round.queued), map(&[("B", 8)]));
        assert_eq!(
            reason(round, "b-1"),
            format!(
                "no node with 1 cpu free in pool default; fair-share eviction spared 8 running jobs that ran less \
                 than min_runtime_before_preemption (the first may be evicted in {left}s)"
            )
        );
    }
    // t=60 s: they have run their minimum, and half of them make room for B.
    let r6 = &out.rounds[6];
    assert_eq!(counts(&r6.preempted), map(&[("A", 4)]));
    assert_eq!(counts(&r6.running), map(&[("A", 4), ("B", 4)]));
    for i in 5..=8 {
        assert_eq!(state(r6, &format!("a-{i}")), "preempted");
    }
    assert_eq!(reason(r6, "b-5"), "no node with 1 cpu free in pool default");
}

#[test]
fn floating_licences_are_counted_per_pool() {
    let out = run("floating_resources.yaml");
    let why = "pool default has 0 of 3 licence/matlab left (floating resource); the job needs 1";
    let r0 = &out.rounds[0];
    assert_eq!(counts(&r0.running), map(&[("A", 3)]));
    for j in ["m-1", "m-2", "m-3"] {
        assert_eq!(state(r0, j), "running");
    }
    for j in ["m-4", "m-5"] {
        assert_eq!((state(r0, j), reason(r0, j)), ("queued", why));
    }
    // m-1 finished: m-4 takes its licence, m-5 still waits.
    let r1 = &out.rounds[1];
    assert_eq!(state(r1, "m-1"), "succeeded");
    assert_eq!(state(r1, "m-4"), "running");
    assert_eq!((state(r1, "m-5"), reason(r1, "m-5")), ("queued", why));
    assert_eq!(counts(&r1.running), map(&[("A", 3)]));
    let r2 = &out.rounds[2];
    assert!(counts(&r2.scheduled).is_empty());
    assert_eq!(reason(r2, "m-5"), why);
}

#[test]
fn dependents_wait_for_their_jobs_and_retried_jobs_run_again_in_the_same_round() {
    let out = run("dependencies_retries.yaml");
    fn jobs(r: &RoundOutput) -> Vec<(&str, String)> {
        ["a", "b", "c", "d", "e"].iter().map(|j| (state(r, j), reason_or_none(r, j))).collect()
    }
    let waiting = |x: &str, to: &str| format!("waiting for {x} {to}");
    let d_failed = "dependency c ended succeeded; it had to fail".to_string();
    assert_eq!(
        jobs(&out.rounds[0]),
        vec![
            ("running", String::new()),
            ("queued", waiting("a", "to succeed")),
            ("running", String::new()),
            ("queued", waiting("c", "to fail")),
            ("queued", waiting("b", "to end")),
        ]
    );
    // a's exit code 75 is retried and it runs again in the same round; c succeeded, so d fails.
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("A", 1)]));
    assert_eq!((state(r1, "a"), state(r1, "d"), reason_or_none(r1, "d")), ("running", "failed", d_failed.clone()));
    assert_eq!(state(&out.rounds[2], "a"), "running", "retry 3 of 3");
    let r3 = &out.rounds[3];
    assert_eq!((state(r3, "a"), state(r3, "b"), state(r3, "e")), ("succeeded", "running", "queued"));
    let r4 = &out.rounds[4];
    assert_eq!((state(r4, "b"), reason_or_none(r4, "b")), ("failed", "failed (exit code 1)".to_string()));
    assert_eq!(state(r4, "e"), "running", "e waited for b to end in any way");
}

#[test]
fn a_retried_job_fails_once_its_attempts_are_spent() {
    let text = "nodes: [{name: n, allocatable: {cpu: '1'}}]\nqueues: [{name: A}]\nrounds:\n\
                - submit: [{id: a, queue: A, requests: {cpu: '1'}, retry: {max_attempts: 2, on_exit_codes: [75]}},\n\
                           {id: b, queue: A, requests: {cpu: '1'}, depends_on: [{id: a}]}]\n\
                - fail: [{id: a, exit_code: 75}]\n\
                - fail: [{id: a, exit_code: 75}]\n";
    let out = run_text(text).unwrap();
    assert_eq!(state(&out.rounds[1], "a"), "running");
    let r2 = &out.rounds[2];
    assert_eq!((state(r2, "a"), reason_or_none(r2, "a")), ("failed", "failed (exit code 75)".to_string()));
    assert_eq!(
        (state(r2, "b"), reason_or_none(r2, "b")),
        ("failed", "dependency a ended failed; it had to succeed".to_string())
    );
    let e = crate::simulate::Scenario::parse(
        "queues: [{name: A}]\nrounds: [{submit: [{id: b, queue: A, depends_on: [{id: a}]}, {id: a, queue: A}]}]",
    )
    .unwrap_err();
    assert_eq!(e.field, "rounds[0].submit[0].depends_on[0].id");
}

#[test]
fn a_retry_waits_out_its_back_off_and_an_oom_kill_is_retried_only_when_asked() {
    let text = "round_interval_seconds: 10\nnodes: [{name: n, allocatable: {cpu: '2'}}]\nqueues: [{name: A}]\nrounds:\n\
                - submit: [{id: a, queue: A, requests: {cpu: '1'}, retry: {max_attempts: 3, on_exit_codes: [75], backoff_seconds: 20}},\n\
                           {id: m, queue: A, requests: {cpu: '1'}, retry: {max_attempts: 2, on_oom: true}}]\n\
                - fail: [{id: a, exit_code: 75}, {id: m, oom: true}]\n\
                - {}\n\
                - {}\n";
    let out = run_text(text).unwrap();
    let r1 = &out.rounds[1];
    assert_eq!(state(r1, "m"), "running", "an OOM kill its policy names is retried at once");
    assert_eq!(state(r1, "a"), "queued");
    assert!(reason_or_none(r1, "a").starts_with("retry back-off until"), "{}", reason_or_none(r1, "a"));
    assert_eq!(state(&out.rounds[2], "a"), "queued", "10 s of its 20 s back-off");
    assert_eq!(state(&out.rounds[3], "a"), "running");
    let e = crate::simulate::Scenario::parse(
        "queues: [{name: A}]\nrounds: [{submit: [{id: a, queue: A, retry: {max_attempts: 1, on_exit_codes: [0]}}]}]",
    )
    .unwrap_err();
    assert_eq!(e.field, "rounds[0].submit[0].retry.on_exit_codes[0]");
}

#[test]
fn queue_retry_policies_retry_jobs_without_their_own() {
    let out = run("queue_retry.yaml");
    fn jobs(r: &RoundOutput) -> Vec<(&str, String)> {
        ["a", "o", "b"].iter().map(|j| (state(r, j), reason_or_none(r, j))).collect()
    }
    let failed = || "failed (exit code 75)".to_string();
    assert_eq!(counts(&out.rounds[0].scheduled), map(&[("A", 2), ("biology", 1)]));
    // a is retried by A's policy and b by science's (biology has none), each running again in
    // the same round; o's own policy (76 only) wins over A's: failed.
    assert_eq!(counts(&out.rounds[1].scheduled), map(&[("A", 1), ("biology", 1)]));
    assert_eq!(
        jobs(&out.rounds[1]),
        vec![("running", String::new()), ("failed", failed()), ("running", String::new())]
    );
    // b's two attempts (science's policy) are spent; a has its third (A's policy).
    assert_eq!(counts(&out.rounds[2].scheduled), map(&[("A", 1)]));
    assert_eq!(jobs(&out.rounds[2]), vec![("running", String::new()), ("failed", failed()), ("failed", failed())]);
    assert_eq!(jobs(&out.rounds[3]), vec![("failed", failed()), ("failed", failed()), ("failed", failed())]);
}

#[test]
fn a_queue_retry_policy_backs_off_and_a_bad_one_is_refused_naming_it() {
    let text = "round_interval_seconds: 10\nnodes: [{name: n, allocatable: {cpu: '2'}}]\n\
                queues: [{name: A, retry: {max_attempts: 2, on_exit_codes: [75], backoff_seconds: 20}}]\nrounds:\n\
                - submit: [{id: a, queue: A, requests: {cpu: '1'}}]\n\
                - fail: [{id: a, exit_code: 75}]\n\
                - {}\n\
                - {}\n";
    let out = run_text(text).unwrap();
    let r1 = &out.rounds[1];
    assert_eq!(state(r1, "a"), "queued");
    assert!(reason_or_none(r1, "a").starts_with("retry back-off until"), "{}", reason_or_none(r1, "a"));
    assert_eq!(state(&out.rounds[2], "a"), "queued", "10 s of its 20 s back-off");
    assert_eq!(state(&out.rounds[3], "a"), "running");
    let e = crate::simulate::Scenario::parse("queues: [{name: A, retry: {max_attempts: 0}}]\nrounds: []").unwrap_err();
    assert_eq!((e.field.as_str(), e.message.as_str()), ("queues[0].retry.max_attempts", "must be 1 to 100"));
}

fn reason_or_none(r: &crate::simulate::RoundOutput, job: &str) -> String {
    r.jobs[job].reason.clone().unwrap_or_default()
}

#[test]
fn preemption_fence_pools_worked_example() {
    let out = run("preemption_fence_pools.yaml");
    let r0 = &out.rounds[0];
    assert_eq!(on_node(r0, "home"), map(&[("t1-batch", 2), ("tenant2", 2)]));
    assert_eq!(on_node(r0, "open"), map(&[("tenant2", 4)]));
    assert_eq!(on_node(r0, "gpu-node"), map(&[("t1-batch", 2), ("tenant2", 2)]));
    let r1 = &out.rounds[1];
    // Earmarked pool: the guests give way, t1-batch by urgency inside the fence.
    assert_eq!(on_node(r1, "home"), map(&[("t1-prod", 1)]));
    assert_eq!(on_node(r1, "open"), map(&[("tenant2", 4)]));
    for g in ["o-5", "o-6"] {
        assert!(reason(r1, g).starts_with("preempted as a guest: node home is reserved for queue t1-prod"), "{g}");
    }
    for b in ["b-1", "b-2"] {
        assert!(reason(r1, b).starts_with("preempted by more urgent job"), "{b}");
    }
    // `priority` pool: only t1-batch's trials are preempted; the third job waits at the fence.
    assert_eq!(on_node(r1, "gpu-node"), map(&[("t1-prod", 2), ("tenant2", 2)]));
    assert_eq!((state(r1, "bt-1"), state(r1, "bt-2")), ("preempted", "preempted"));
    assert_eq!(state(r1, "p-3"), "queued");
    assert_eq!(
        reason(r1, "p-3"),
        "no room in pool gpu without preempting jobs outside queue tenant1, whose preemption fence stops its jobs \
         from displacing them (preemption_policy = fence)"
    );
    assert_eq!(counts(&r1.preempted), map(&[("t1-batch", 4), ("tenant2", 2)]));
}

#[test]
fn guaranteed_per_resource_worked_example() {
    let out = run("guaranteed_per_resource.yaml");
    assert_eq!(counts(&out.rounds[0].running), map(&[("B", 3), ("C", 3), ("D", 2)]));
    let r1 = &out.rounds[1];
    assert_eq!(counts(&r1.scheduled), map(&[("A", 2)]));
    assert_eq!(counts(&r1.preempted), map(&[("B", 1), ("C", 1)]));
    assert_eq!(counts(&r1.running), map(&[("A", 2), ("B", 2), ("C", 2), ("D", 2)]));
    assert_eq!((state(r1, "a-3"), reason(r1, "a-3")), ("queued", "no node with 1 cpu free in pool default"));
    let d = r1.decisions.as_ref().expect("decisions");
    let a = d.pools[0].queues.iter().find(|q| q.queue.as_str() == "A").expect("A's report");
    assert_eq!(a.guaranteed_share, Some(0.5));
    let r2 = &out.rounds[2];
    assert!(counts(&r2.scheduled).is_empty() && counts(&r2.preempted).is_empty());
}
