//! `convoy bench processes`: real jobs through a server and a process agent, supervised by
//! threads of a supervisor host (the default) or by a process each.

use crate::common::bench::bench_json;
use serde_json::Value;

/// Runs a short bench with `--supervisors supervisors`; its JSON line.
fn bench(supervisors: &str) -> Value {
    bench_json(&[
        "processes",
        "--jobs",
        "60",
        "--concurrency",
        "20",
        "--timeout-seconds",
        "120",
        "--supervisors",
        supervisors,
    ])
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
