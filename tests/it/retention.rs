//! Retention on real servers with `job_retention = "2s"`: finished jobs disappear from every read
//! (404 naming the retention, listings, event streams), live jobs stay whole, a client id is free
//! again once its job is gone, and it all holds across a restart; in a cluster of three, every
//! member deletes the same jobs, and a new leader takes the deleting over.

use crate::common::trio::Trio;
use crate::common::{Server, config, node, pod};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn ev(lease: &Value, kind: &str) -> Value {
    json!({"run_id": lease["run_id"], "job_id": lease["job_id"], "kind": kind})
}

fn with_client_id(client_id: &str) -> Value {
    json!({"client_id": client_id, "pod_spec": pod("1", "true")})
}

/// The kinds of a job set's stored events, as the stream serves them without following.
async fn stream_kinds(s: &Server, job_set: &str) -> Vec<(u64, String)> {
    let (st, body) = s.text(&format!("/v1/queues/A/job-sets/{job_set}/events?follow=false")).await;
    assert_eq!(st, 200, "{body}");
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let id = block.lines().find_map(|l| l.strip_prefix("id:")).and_then(|v| v.trim().parse::<u64>().ok());
        let kind = block.lines().find_map(|l| l.strip_prefix("event:")).map(|v| v.trim().to_string());
        if let (Some(id), Some(kind)) = (id, kind) {
            out.push((id, kind));
        }
    }
    out
}

#[tokio::test]
async fn finished_jobs_go_after_the_retention_and_live_ones_stay() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let text = config(dir, "job_retention = \"2s\"");
    let mut s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("A").await;
    // In job set `solo`: one job, cancelled while queued (no node is known yet).
    let solo = s.submit("A", "solo", vec![with_client_id("solo")]).await.remove(0);
    let (st, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "solo"})).await;
    assert_eq!(st, 200, "{v}");
    let nodes = vec![node("n1", "8")];
    s.poll("e1", &nodes, &[], 0.0).await;
    // In job set `s`: one job to run to success, one to run and be cancelled, one to stay running.
    let ids = s.submit("A", "s", vec![with_client_id("ok"), with_client_id("stop"), with_client_id("live")]).await;
    let (ok, stop, live) = (&ids[0], &ids[1], &ids[2]);
    let mut leases: Vec<Value> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while leases.len() < 3 {
        assert!(Instant::now() < deadline, "leases: {leases:?}");
        let held: Vec<Value> =
            leases.iter().map(|l| json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "running"})).collect();
        let v = s.poll("e1", &nodes, &held, 2.0).await;
        leases.extend(v["leases"].as_array().cloned().unwrap_or_default());
    }
    let lease_of = |id: &str| leases.iter().find(|l| l["job_id"] == id).cloned().expect("leased");
    let (l_ok, l_stop, l_live) = (lease_of(ok), lease_of(stop), lease_of(live));
    let mut done = ev(&l_ok, "succeeded");
    done["exit_code"] = json!(0);
    done["log_tail"] = json!("done\n");
    let reports = vec![ev(&l_ok, "running"), done, ev(&l_stop, "running"), ev(&l_live, "running")];
    assert_eq!(s.report("e1", reports).await, 4);
    let (st, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s", "job_ids": [stop]})).await;
    assert_eq!(st, 200, "{v}");
    let mut killed = ev(&l_stop, "failed");
    killed["exit_code"] = json!(143);
    assert_eq!(s.report("e1", vec![killed]).await, 1);
    assert_eq!(s.job(stop).await["state"], "cancelled");
    // Within the retention a client id still answers its finished job.
    assert_eq!(s.submit("A", "s", vec![with_client_id("ok")]).await, vec![ok.clone()]);
    let live_before = s.job(live).await;

    // The finished jobs go; 404 says why a job may be missing.
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in [ok, stop, &solo] {
        loop {
            let (st, v) = s.get(&format!("/v1/jobs/{id}")).await;
            if st == 404 {
                let detail = v["detail"].as_str().unwrap_or_default();
                assert!(detail.contains(&format!("job {id} does not exist")), "{v}");
                assert!(detail.contains("server.job_retention = 2s"), "{v}");
                break;
            }
            assert!(Instant::now() < deadline, "job {id} still there: {v}\n{}", s.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (st, _) = s.text(&format!("/v1/jobs/{ok}/logs")).await;
    assert_eq!(st, 404);
    // The running job stays, with its run and its events, while jobs that finish later go: one
    // cancelled now (it can run nowhere) is purged by a later round, and the running one is as
    // it was.
    let mut late = with_client_id("late");
    late["pod_spec"]["nodeSelector"] = json!({"nowhere": "true"});
    let late = s.submit("A", "late", vec![late]).await.remove(0);
    let (st, v) = s.post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "late"})).await;
    assert_eq!(st, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.get(&format!("/v1/jobs/{late}")).await.0 != 404 {
        assert!(Instant::now() < deadline, "the late job was not purged:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let live_after = s.job(live).await;
    assert_eq!(live_after, live_before);
    let (st, v) = s.get("/v1/jobs?queue=A").await;
    assert_eq!(st, 200, "{v}");
    let listed: Vec<&str> = v["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(listed, vec![live.as_str()]);
    let (st, report) = s.get("/v1/queues/A/report").await;
    assert_eq!(st, 200, "{report}");
    let counted: Vec<(&String, &Value)> =
        report["jobs"].as_object().unwrap().iter().filter(|(_, n)| n.as_u64() != Some(0)).collect();
    assert_eq!(counted, vec![(&"running".to_string(), &json!(1))], "{report}");
    // The stream of `s` keeps only the live job's events, numbered as they were.
    let kept: Vec<u64> = live_after["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(stream_kinds(&s, "s").await.iter().map(|e| e.0).collect::<Vec<_>>(), kept);
    // `solo` is forgotten: a new job there starts a new stream.
    assert!(stream_kinds(&s, "solo").await.is_empty());
    let again = s.submit("A", "solo", vec![with_client_id("solo")]).await.remove(0);
    assert_ne!(again, solo, "the client id is free again");
    let kinds = stream_kinds(&s, "solo").await;
    assert_eq!(kinds.first(), Some(&(1, "submitted".to_string())), "{kinds:?}");

    // A resubmission with a purged job's client id creates a new job.
    let new = s.submit("A", "s", vec![with_client_id("ok")]).await.remove(0);
    assert_ne!(&new, ok);
    assert_eq!(s.job(&new).await["client_id"], "ok");

    // After a restart: the purged stay gone, the rest is there.
    assert_eq!(s.terminate(), Some(0), "clean stop:\n{}", s.log());
    let s = Server::start_in(dir, &text);
    s.ready().await;
    let (st, _) = s.get(&format!("/v1/jobs/{ok}")).await;
    assert_eq!(st, 404);
    assert_eq!(s.job(live).await["state"], "running");
    assert_eq!(s.submit("A", "s", vec![with_client_id("ok")]).await, vec![new]);
}

/// Waits until member `member` answers 404 for job `id` (read locally there).
async fn wait_gone(trio: &Trio, member: u64, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (st, v) = trio.api(member).get(&format!("/v1/jobs/{id}")).await;
        if st == 404 {
            return;
        }
        // The trio prints every member's log when a test fails.
        assert!(Instant::now() < deadline, "job {id} still on node {member}: {st} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_cluster_deletes_the_same_jobs_and_a_new_leader_goes_on() {
    let mut trio = Trio::start_configured(3, false, "job_retention = \"2s\"", "").await;
    let leader = trio.leader().await;
    let follower = [1, 2, 3].into_iter().find(|i| *i != leader).expect("a follower");
    trio.api(follower).create_queue("A").await;
    // No executor: the jobs stay queued until cancelled.
    let ids = trio.api(follower).submit("A", "s", vec![with_client_id("x"), with_client_id("y")]).await;
    let (st, v) =
        trio.api(follower).post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s", "job_ids": [ids[0]]})).await;
    assert_eq!(st, 200, "{v}");
    for id in [1, 2, 3] {
        wait_gone(&trio, id, &ids[0]).await;
        assert_eq!(trio.api(id).job(&ids[1]).await["state"], "queued", "node {id}");
    }
    // The client id is free on every member: resubmitted through another one, it names a new job.
    let other = [1, 2, 3].into_iter().find(|i| *i != follower).expect("another member");
    let again = trio.api(other).submit("A", "s", vec![with_client_id("x")]).await.remove(0);
    assert_ne!(again, ids[0]);

    // The leader goes; the next one deletes what finishes from then on.
    trio.member(leader).kill9();
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != leader).collect();
    let next = trio.leader_among(&survivors, Duration::from_secs(30)).await;
    let (st, v) = trio.api(next).post("/v1/jobs/cancel", &json!({"queue": "A", "job_set": "s"})).await;
    assert_eq!(st, 200, "{v}");
    for id in &survivors {
        for job in [&ids[1], &again] {
            wait_gone(&trio, *id, job).await;
        }
    }
    // The old leader, back, catches up with the deletions.
    trio.member(leader).start();
    trio.api(leader).ready().await;
    for job in [&ids[0], &ids[1], &again] {
        wait_gone(&trio, leader, job).await;
    }
}
