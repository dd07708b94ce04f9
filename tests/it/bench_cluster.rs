//! `convoy bench cluster`: three servers on loopback, the throughput clients spread over them or
//! all sent to the leader, and the latency of single requests by where they were sent.

use crate::common::bench::bench_json;
use crate::common::trio::Trio;
use serde_json::Value;

/// Runs a short bench (no failovers) with the clients sent to `send_to`; its JSON line.
fn bench(send_to: &str) -> Value {
    bench_json(&[
        "cluster",
        "--batched-jobs",
        "300",
        "--batch-clients",
        "3",
        "--single-requests",
        "90",
        "--single-clients",
        "6",
        "--failovers",
        "0",
        "--send-to",
        send_to,
    ])
}

fn ms(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is a number: {v}"))
}

#[test]
fn single_requests_are_timed_apart_by_whether_a_follower_relayed_them() {
    let spread = bench("all");
    assert_eq!(spread["send_to"], "all", "{spread}");
    // Said either way (a starved machine may replace the leader under load).
    assert!(spread["leader_changed_during_throughput"].is_boolean(), "{spread}");
    assert_eq!(spread["single_requests"], 90, "{spread}");
    assert_eq!(spread["batched_jobs"], 300, "{spread}");
    assert_eq!((spread["lost"].as_u64(), spread["duplicated"].as_u64()), (Some(0), Some(0)), "{spread}");
    // Six clients over three servers: two at the leader, four at followers.
    for key in ["single_ms_at_leader_p50", "single_ms_relayed_p50"] {
        assert!(ms(&spread, key) > 0.0, "{key}: {spread}");
    }
    assert!(ms(&spread, "single_ms_relayed_p99") >= ms(&spread, "single_ms_relayed_p50"), "{spread}");

    let leader = bench("leader");
    assert_eq!(leader["send_to"], "leader", "{leader}");
    assert_eq!(leader["single_requests"], 90, "{leader}");
    assert!(ms(&leader, "single_ms_at_leader_p50") > 0.0, "{leader}");
    // Nothing was relayed, so there is no relayed latency to report.
    assert_eq!(ms(&leader, "single_ms_relayed_p50"), 0.0, "{leader}");
    assert_eq!(ms(&leader, "single_ms_relayed_p99"), 0.0, "{leader}");
}

const ADMIN: &str = "bench-admin-token";
const ALICE: &str = "bench-alice-token";

/// `bench cluster --servers <urls> <more>` with `token`: its output.
fn bench_against(urls: &[String], token: Option<&str>, more: &[&str]) -> std::process::Output {
    let servers = urls.join(",");
    let mut args = vec!["cluster", "--servers", &servers, "--failovers", "0", "--batch-clients", "2"];
    if let Some(t) = token {
        args.extend(["--token", t]);
    }
    args.extend(more);
    bench_output(&args)
}

/// The JSON line of a run that must succeed.
fn json_of(out: &std::process::Output) -> Value {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}{stdout}");
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON line: {stderr}"));
    serde_json::from_str(line).expect("JSON")
}

/// `--servers`: a running cluster with auth on is measured through a token, its jobs never run
/// and none is left live afterwards; a submitter's token does for a queue the submitter may use.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_cluster_is_measured_through_a_token_and_keeps_none_of_the_jobs() {
    let mut trio = Trio::prepare(3, false, "", "").await;
    let auth = format!(
        "[auth]\nenabled = true\ncluster_secret = \"bench-cluster-secret\"\ntokens = [\n\
         {{ token = \"{ADMIN}\", principal = \"root\", roles = [\"admin\"] }},\n\
         {{ token = \"{ALICE}\", principal = \"alice\", roles = [\"submitter\"] }},\n]\n"
    );
    for m in &mut trio.members {
        assert!(m.config.contains("[auth]\nenabled = false\n"), "{}", m.config);
        m.config = m.config.replace("[auth]\nenabled = false\n", &auth);
    }
    trio.start_all();
    let urls: Vec<String> = trio.members.iter().map(|m| format!("http://127.0.0.1:{}", m.port)).collect();
    let run = |token: Option<&'static str>, more: &'static [&'static str]| {
        let urls = urls.clone();
        tokio::task::spawn_blocking(move || bench_against(&urls, token, more))
    };
    let measured = |token, more| {
        let run = run(token, more);
        async move { json_of(&run.await.expect("bench")) }
    };
    let refused = |token, more| {
        let run = run(token, more);
        async move {
            let out = run.await.expect("bench");
            assert!(!out.status.success(), "refused");
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };

    // Without a token the cluster refuses: the bench says so at once instead of measuring refusals.
    let err = refused(None, &["--batched-jobs", "200"]).await;
    assert!(err.contains("401") && err.contains("--token"), "{err}");
    // A submitter cannot make the queue.
    let err = refused(Some(ALICE), &["--batched-jobs", "200", "--queue", "load"]).await;
    assert!(err.contains("admin"), "{err}");

    let out = measured(
        Some(ADMIN),
        &["--batched-jobs", "200", "--single-requests", "30", "--single-clients", "3", "--queue", "load"],
    )
    .await;
    assert_eq!(out["servers"], 3, "{out}");
    assert_eq!(out["queue"], "load", "{out}");
    assert_eq!((out["batched_jobs"].as_u64(), out["single_requests"].as_u64()), (Some(200), Some(30)), "{out}");
    // Three single clients over three servers: one at the leader, two relayed.
    for key in ["single_ms_at_leader_p50", "single_ms_relayed_p50"] {
        assert!(ms(&out, key) > 0.0, "{key}: {out}");
    }
    assert_eq!(out["cancelled"], 230, "{out}");

    // What every server answers after the leader confirmed it: all 230 cancelled, none ran.
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let r = http.get(path).bearer_auth(ADMIN).send().await.expect("GET");
            r.json::<Value>().await.expect("JSON")
        }
    };
    for url in &urls {
        let listed = get(format!("{url}/v1/jobs?queue=load&limit=1000&consistent=true")).await;
        let jobs = listed["jobs"].as_array().unwrap_or_else(|| panic!("jobs: {listed}"));
        assert_eq!(jobs.len(), 230, "{listed}");
        assert!(jobs.iter().all(|j| j["state"] == "cancelled"), "{listed}");
    }
    let some = get(format!("{}/v1/jobs?queue=load&limit=1", urls[0])).await;
    let id = some["jobs"][0]["id"].as_str().unwrap_or_else(|| panic!("an id: {some}")).to_string();
    let job = get(format!("{}/v1/jobs/{id}", urls[0])).await;
    assert!(job.to_string().contains("convoy-bench-never"), "asks for a label no node has: {job}");

    // A queue alice owns: her token does.
    let r = http
        .post(format!("{}/v1/queues", urls[0]))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"name": "alices", "owners": ["alice"]}))
        .send()
        .await
        .expect("POST");
    assert!(r.status().is_success(), "{}", r.status());
    let out = measured(
        Some(ALICE),
        &["--batched-jobs", "100", "--single-requests", "6", "--single-clients", "2", "--queue", "alices"],
    )
    .await;
    assert_eq!(out["cancelled"], 106, "{out}");
}

/// What `--servers` is given is checked before anything is sent: it never kills servers it did
/// not start, takes only http(s) addresses, and `--queue` is for `--servers` alone.
#[test]
fn what_servers_is_given_is_checked_before_anything_is_sent() {
    let err_of = |args: &[&str]| {
        let out = bench_output(args);
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = err_of(&["cluster", "--servers", "http://127.0.0.1:9", "--failovers", "3"]);
    assert!(err.contains("--failovers 0"), "{err}");
    let err = err_of(&["cluster", "--servers", "127.0.0.1:9", "--failovers", "0"]);
    assert!(err.contains("--servers") && err.contains("http://"), "{err}");
    let err = err_of(&["cluster", "--queue", "q"]);
    assert!(err.contains("--servers"), "{err}");
}

fn bench_output(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .env_remove("CONVOY_TOKEN")
        .arg("bench")
        .args(args)
        .output()
        .expect("convoy runs")
}
