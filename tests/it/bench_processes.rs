//! `convoy bench processes`: real jobs through a server and a process agent, supervised by
//! threads of a supervisor host (the default) or by a process each.

use serde_json::Value;
use std::process::Command;

/// Runs a short bench with `--supervisors supervisors`; its JSON line.
fn bench(supervisors: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["bench", "processes", "--jobs", "60", "--concurrency", "20", "--timeout-seconds", "120"])
        .args(["--supervisors", supervisors])
        .output()
        .expect("convoy bench processes runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON line: {stderr}"));
    serde_json::from_str(line).expect("JSON")
}

#[test]
fn jobs_run_under_a_few_hosts_or_a_supervisor_process_each() {
    let shared = bench("shared");
    assert_eq!((shared["jobs"].as_u64(), shared["failed"].as_u64()), (Some(60), Some(0)), "{shared}");
    assert_eq!(shared["supervisors"], "shared", "{shared}");
    // The agent keeps two pipelines, each a host: 60 jobs, at most two processes.
    let hosts = shared["supervisor_processes"].as_u64().expect("a count");
    assert!((1..=2).contains(&hosts), "{shared}");

    let per_job = bench("per-job");
    assert_eq!((per_job["jobs"].as_u64(), per_job["failed"].as_u64()), (Some(60), Some(0)), "{per_job}");
    assert_eq!(per_job["supervisors"], "per-job", "{per_job}");
    assert_eq!(per_job["supervisor_processes"], 60, "{per_job}");
}
