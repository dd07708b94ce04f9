//! The server as a process: crash safety (kill -9 while a client submits), restart, bad
//! configuration, graceful shutdown.

use crate::common::{Server, config, job, node};
use serde_json::json;
use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[tokio::test]
async fn kill9_loses_no_acknowledged_job() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let cfg = config(&dir, "");
    let mut s = Server::start_in(&dir, &cfg);
    s.ready().await;
    s.create_queue("A").await;
    // Some jobs get leases and runs before the crash.
    s.poll("e1", &[node("n1", "8")], &[], 0.0).await;

    let acked: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (client, url, acked, stop) = (s.client.clone(), s.url.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let body = json!({"queue": "A", "job_set": format!("w{w}"), "jobs": [job("1"), job("1")]});
                    match client.post(format!("{url}/v1/jobs")).json(&body).send().await {
                        Ok(r) if r.status().is_success() => {
                            if let Ok(v) = r.json::<serde_json::Value>().await {
                                let ids = v["job_ids"].as_array().cloned().unwrap_or_default();
                                acked.lock().unwrap().extend(ids.iter().filter_map(|x| x.as_str().map(str::to_string)));
                            }
                        }
                        _ => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                    if i > 100_000 {
                        break;
                    }
                }
            })
        })
        .collect();
    // Crash the server once writes were acknowledged and the scheduler leased some jobs, while
    // the writers go on.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let first = acked.lock().unwrap().first().cloned();
        let leased = match &first {
            Some(id) if acked.lock().unwrap().len() >= 50 => {
                s.job(id).await["runs"].as_array().is_some_and(|r| !r.is_empty())
            }
            _ => false,
        };
        if leased {
            break;
        }
        assert!(Instant::now() < deadline, "no 50 jobs acknowledged and leased: {}", acked.lock().unwrap().len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();
    drop(s);

    // Restart on the same data: every acknowledged job is there.
    let s = Server::start_in(&dir, &cfg);
    s.ready().await;
    let mut seen = HashSet::new();
    for j in s.all_jobs("queue=A").await {
        // At most one run that is not over, ever.
        let active = j["runs"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter(|r| ["leased", "pending", "running"].contains(&r["state"].as_str().unwrap_or("")))
                    .count()
            })
            .unwrap_or(0);
        assert!(active <= 1, "job with {active} active runs: {j}");
        seen.insert(j["id"].as_str().unwrap_or("").to_string());
    }
    let missing: Vec<_> = acked.iter().filter(|id| !seen.contains(*id)).collect();
    assert!(missing.is_empty(), "{} acknowledged jobs lost, e.g. {:?}", missing.len(), missing.first());
    drop(tmp);
}

#[tokio::test]
async fn state_survives_a_clean_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let cfg = config(&dir, "");
    let mut s = Server::start_in(&dir, &cfg);
    s.ready().await;
    s.create_queue("A").await;
    let ids = s.submit("A", "s", vec![job("1"), job("2")]).await;
    assert_eq!(s.terminate(), Some(0), "SIGTERM exits cleanly:\n{}", s.log());
    drop(s);
    let s = Server::start_in(&dir, &cfg);
    s.ready().await;
    assert_eq!(s.job(&ids[1]).await["state"], "queued");
    let (_, v) = s.get("/v1/queues/A").await;
    assert_eq!(v["name"], "A");
    // The event stream continues its numbering.
    let ids2 = s.submit("A", "s", vec![job("1")]).await;
    let (_, body) = s.text("/v1/queues/A/job-sets/s/events?follow=false&from=5").await;
    assert!(body.contains("id: 5") && body.contains(&ids2[0]), "{body}");
    drop(tmp);
}

#[test]
fn bad_configuration_exits_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (text, key) in [
        ("[server]\nexecutor_timeout = \"whenever\"\n", "server.executor_timeout"),
        ("[scheduler]\nmax_queue_lookback = -3\n", "scheduler.max_queue_lookback"),
        ("[server]\nlisten = \"nowhere\"\n", "server.listen"),
        ("[auth]\nenabled = true\n", "auth.tokens"),
    ] {
        let path = tmp.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_convoy")).args(["server", "--config"]).arg(&path).output().unwrap();
        assert!(!out.status.success(), "{text} should be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "error for {text:?} should name {key}: {err}");
    }
    let out =
        Command::new(env!("CARGO_BIN_EXE_convoy")).args(["server", "--config", "/no/such/file.toml"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file.toml"));
}

#[tokio::test]
async fn a_second_server_on_the_same_data_directory_exits_naming_it_and_the_first_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let s = Server::start_in(&dir, &config(&dir, ""));
    s.ready().await;
    // The same data directory, another port.
    let second = dir.join("second.toml");
    std::fs::write(&second, config(&dir, "")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_convoy")).args(["server", "--config"]).arg(&second).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let db = dir.join("data").join("convoy.redb");
    assert!(
        err.contains(&format!(
            "the database {} is open in another process: is another convoy server (or convoy up) running on this data \
             directory?",
            db.display()
        )),
        "{err}"
    );
    let (st, v) = s.get("/readyz").await;
    assert_eq!(st, 200, "the first server goes on: {v}");
}

#[test]
fn the_long_version_lists_what_the_binary_stores_and_speaks() {
    let run = |flag: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_convoy")).arg(flag).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        run("--version"),
        format!(
            "convoy {}\nstate schema {}, log format {}, snapshot file format {}, peer protocol {}\n",
            env!("CARGO_PKG_VERSION"),
            convoy::record::STATE_SCHEMA_VERSION,
            convoy::record::LOG_FORMAT_VERSION,
            convoy::record::SNAPSHOT_FORMAT_VERSION,
            convoy::raft::PROTOCOL_VERSION,
        )
    );
    assert_eq!(run("-V"), format!("convoy {}\n", env!("CARGO_PKG_VERSION")));
    // docs/operations.md shows the same lines.
    let docs = include_str!("../../docs/operations.md");
    assert!(docs.contains(&format!(
        "state schema {}, log format {}",
        convoy::record::STATE_SCHEMA_VERSION,
        convoy::record::LOG_FORMAT_VERSION
    )));
}

#[tokio::test]
async fn sighup_without_tls_is_logged_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut s = Server::start_in(&dir, &config(&dir, ""));
    s.ready().await;
    for n in 1..=2 {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
        crate::common::wait::until(Duration::from_secs(20), "the SIGHUP logged", || {
            s.log().matches("SIGHUP received: nothing to reload without [tls]").count() == n
        })
        .await;
    }
    assert!(s.child.try_wait().unwrap().is_none(), "the server is still running:\n{}", s.log());
    let (st, v) = s.get("/readyz").await;
    assert_eq!(st, 200, "{v}");
}
