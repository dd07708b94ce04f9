//! Running a `convoy bench` verb from a test.

use serde_json::Value;

/// Runs `convoy bench <args>`, which must succeed; its last JSON line.
pub(crate) fn bench_json(args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("convoy bench {args:?} runs: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}{stdout}");
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON line: {stderr}"));
    serde_json::from_str(line).expect("JSON")
}
