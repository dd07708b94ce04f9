//! `convoy simulate` as users run it: the real binary on scenario files.

use std::process::Command;

fn simulate(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoy"));
    cmd.arg("simulate").args(args);
    match stdin {
        None => cmd.output().expect("convoy runs"),
        Some(text) => {
            use std::io::Write;
            let mut child = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("convoy runs");
            child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write scenario");
            child.wait_with_output().expect("convoy finishes")
        }
    }
}

fn scenario(name: &str) -> String {
    format!("{}/tests/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn prints_each_round_as_json() {
    let out = simulate(&[&scenario("fair_share_preemption.yaml")], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rounds = v["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 3);
    assert_eq!(rounds[0]["scheduled"]["A"], 40);
    assert_eq!(rounds[0]["nodes"]["node-1"]["A"], 32);
    assert_eq!(rounds[1]["running"]["A"], 32);
    assert_eq!(rounds[1]["running"]["B"], 32);
    assert_eq!(rounds[1]["preempted"]["A"], 8);
    assert_eq!(rounds[1]["queued"]["B"], 18);
    assert_eq!(rounds[1]["nodes"]["node-2"]["B"], 32);
    assert_eq!(rounds[1]["jobs"]["a-33"]["state"], "preempted");
    assert_eq!(rounds[1]["jobs"]["a-1"]["node"], "node-1");
    assert!(rounds[1]["jobs"]["b-50"]["reason"].as_str().is_some_and(|r| r.contains("no node")));
}

#[test]
fn json_scenarios_on_stdin() {
    let json = r#"{"nodes":[{"name":"n","allocatable":{"cpu":"4"}}],"queues":[{"name":"A"}],"rounds":[{"submit":[{"id":"a","queue":"A","count":5,"requests":{"cpu":"1"}}]}]}"#;
    let out = simulate(&["-", "--compact"], Some(json));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["rounds"][0]["running"]["A"], 4);
    assert_eq!(v["rounds"][0]["queued"]["A"], 1);
}

#[test]
fn malformed_scenarios_fail_naming_the_field() {
    for (text, field) in [
        ("nodes: [{name: n, allocatable: {cpu: four}}]", "nodes[0].allocatable"),
        ("queues: [{name: A, priority_factor: 0}]", "queues[0].priority_factor"),
        (
            "queues: [{name: A}]\nrounds: [{submit: [{id: a, queue: A, priority_class: gold}]}]",
            "rounds[0].submit[0].priority_class",
        ),
        ("rounds: [{submit: [{id: a, queue: Z}]}]", "rounds[0].submit[0].queue"),
        ("config: {max_queue_lookback: -1}", "config.max_queue_lookback"),
        ("config: {pools: {gpu: {policy: fifo}}}", "config.pools.gpu.policy"),
        ("config: {pools: {gpu: {policy: fair_share, preemption: true}}}", "config.pools.gpu.preemption"),
        ("config: {pools: {gpu: {policy: priority, preempt: true}}}", "config.pools.gpu.preempt"),
    ] {
        let out = simulate(&["-"], Some(text));
        assert!(!out.status.success(), "{text} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(field), "error for {text:?} should name {field}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = simulate(&["/nonexistent/scenario.yaml"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/scenario.yaml"));
}

#[test]
fn every_example_scenario_runs() {
    for entry in std::fs::read_dir(scenario("")).expect("scenario dir") {
        let path = entry.expect("entry").path();
        let out = simulate(&[path.to_str().expect("utf-8 path"), "--compact"], None);
        assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn quarantined_nodes_are_flagged_in_the_output() {
    let out = simulate(&[&scenario("node_quarantine.yaml"), "--compact"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rounds = v["rounds"].as_array().expect("rounds");
    assert_eq!(rounds[1]["nodes"]["node-1"], serde_json::json!({"A": 1}));
    assert_eq!(rounds[2]["nodes"]["node-1"], serde_json::json!({"quarantined": true}));
    assert_eq!(rounds[3]["nodes"]["node-2"], serde_json::json!({"A": 1}));
    assert_eq!(rounds[6]["nodes"]["node-1"], serde_json::json!({"A": 1}));
    assert_eq!(rounds[2]["jobs"]["b"]["state"], "failed");
}

#[test]
fn pool_policies_decide_as_determined_does() {
    let out = simulate(&[&scenario("pool_priority.yaml"), "--compact"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rounds = v["rounds"].as_array().expect("rounds");
    // The training job preempts four trials; the notebook waits behind the pending trials.
    assert_eq!(rounds[1]["preempted"]["research"], 4);
    assert_eq!(rounds[1]["jobs"]["train"]["state"], "running");
    assert!(
        rounds[2]["jobs"]["nb"]["reason"].as_str().is_some_and(|r| r.starts_with("behind higher-priority pending job"))
    );
    // The 4-GPU job of priority 2 does not start behind the pending 8-GPU gang.
    assert_eq!(rounds[7]["jobs"]["mid"]["state"], "queued");
    assert_eq!(rounds[9]["jobs"]["mid"]["state"], "running");
    let out = simulate(&[&scenario("pool_proportional.yaml"), "--compact"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["rounds"][0]["running"], serde_json::json!({"A": 2, "B": 6, "C": 4, "D": 4}));
}
