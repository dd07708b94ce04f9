//! `convoy bench groups`: one group per pool, simulated with the scheduler, against one group
//! holding every pool.

use serde_json::Value;
use std::process::Command;

/// Runs the bench on a small generated cluster with `args`: its exit status and its JSON line.
fn bench(args: &[&str]) -> (bool, String, Option<Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["bench", "groups", "--nodes", "100", "--queues", "6", "--jobs", "3000"])
        .args(args)
        .output()
        .expect("convoy bench groups runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("JSON"));
    (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string(), line)
}

fn figures(args: &[&str]) -> Value {
    let (ok, stderr, line) = bench(args);
    assert!(ok, "{stderr}");
    line.unwrap_or_else(|| panic!("no JSON line; stderr: {stderr}"))
}

#[test]
fn pools_owned_whole_by_groups_are_placed_as_by_one_group_and_routed_jobs_are_not() {
    let pinned = figures(&["--groups", "2", "--route", "pinned", "--preload", "0.4"]);
    assert_eq!(pinned["placements_differing_from_one_group"], 0, "{pinned}");
    assert_eq!(pinned["queue_cpu_share_moved_pp_max"].as_f64(), Some(0.0), "{pinned}");
    let each = pinned["groups_each"].as_array().expect("groups_each is a list");
    assert_eq!(each.len(), 2, "{pinned}");
    assert!(each.iter().all(|g| g["nodes"] == 50), "{pinned}");
    let sum: u64 = each.iter().map(|g| g["scheduled"].as_u64().expect("scheduled")).sum();
    assert_eq!(Some(sum), pinned["groups_scheduled"].as_u64(), "{pinned}");
    assert_eq!(pinned["groups_scheduled"], pinned["pools_in_one_group"]["scheduled"], "{pinned}");
    assert!(pinned["running_before"].as_u64().is_some_and(|n| n > 0), "{pinned}");

    // A queue's jobs that may run anywhere, all sent to one group, no longer fill both pools.
    let by_queue = figures(&["--groups", "2", "--route", "queue"]);
    assert!(by_queue["placements_differing_from_one_group"].as_u64().is_some_and(|n| n > 0), "{by_queue}");
    assert!(by_queue["queue_cpu_share_moved_pp_max"].as_f64().is_some_and(|pp| pp > 0.0), "{by_queue}");
    assert!(by_queue["one_pool"]["cycle_ms"].as_f64().is_some(), "{by_queue}");
}

#[test]
fn the_one_pool_way_is_the_cycle_bench_schedule_runs() {
    let groups = figures(&["--groups", "2", "--preload", "0.3"]);
    let out = Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["bench", "schedule", "--nodes", "100", "--queues", "6", "--jobs", "3000", "--preload", "0.3"])
        .output()
        .expect("convoy bench schedule runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).expect("a JSON line");
    let schedule: Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(groups["one_pool"]["decisions_digest"], schedule["decisions_digest"], "{groups} against {schedule}");
    assert_eq!(groups["one_pool"]["scheduled"], schedule["scheduled"], "{groups}");
}

#[test]
fn more_groups_than_nodes_is_refused_by_name() {
    let (ok, stderr, line) = bench(&["--groups", "101"]);
    assert!(!ok && line.is_none(), "{stderr}");
    assert!(stderr.contains("--groups"), "{stderr}");
    let (ok, stderr, _) = bench(&["--groups", "0"]);
    assert!(!ok && stderr.contains("--groups"), "{stderr}");
}
