//! `convoy bench schedule`: the scheduler alone on a generated cluster. Its figures are of the
//! fastest run, and it lists every run's time beside it.

use crate::common::bench::bench_json;
use serde_json::Value;

/// Runs the bench with `args`; its JSON line.
fn bench(args: &[&str]) -> Value {
    let all: Vec<&str> = ["schedule", "--nodes", "20", "--queues", "3", "--jobs", "300"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    bench_json(&all)
}

#[test]
fn repeated_runs_are_each_listed_and_the_figure_is_the_fastest() {
    let out = bench(&["--repeat", "4"]);
    let runs: Vec<f64> = out["cycle_ms_runs"]
        .as_array()
        .expect("cycle_ms_runs is a list")
        .iter()
        .map(|v| v.as_f64().expect("a run's time is a number"))
        .collect();
    assert_eq!(runs.len(), 4, "{out}");
    assert!(runs.iter().all(|&ms| ms >= 0.0), "{out}");
    let fastest = runs.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(out["cycle_ms"].as_f64(), Some(fastest), "{out}");
    assert!(out["scheduled"].as_u64().is_some_and(|n| n > 0), "{out}");
    // Every run decides the same: one run's digest is the repeated runs' digest.
    let once = bench(&[]);
    assert_eq!(once["cycle_ms_runs"].as_array().map(Vec::len), Some(1), "{once}");
    assert_eq!(once["decisions_digest"], out["decisions_digest"], "{once} against {out}");
}
