//! `convoy submit` through a proxy that loses answers: a write whose answer is lost (or a 503
//! after it committed) is sent again with the same client ids, and no job is stored twice.

use crate::cli_client::convoy;
use crate::common::Server;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with one request (after these, it passes requests through).
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Forwards it, then closes the connection without an answer.
    ForwardThenDrop,
    /// Forwards it, then answers 503 like a server whose write was not confirmed in time.
    ForwardThen503,
    /// Answers 503 without forwarding (no leader).
    Unavailable,
}

/// An HTTP/1.1 proxy in front of a server, one connection at a time, recording every body.
struct FlakyProxy {
    url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FlakyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FlakyProxy {
    async fn start(upstream: &str, faults: Vec<Fault>) -> FlakyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (upstream, seen) = (upstream.to_string(), bodies.clone());
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut faults = faults.into_iter();
            while let Ok((mut sock, _)) = listener.accept().await {
                let Some((path, body)) = read_request(&mut sock).await else { continue };
                seen.lock().unwrap().push(body.clone());
                let fault = faults.next();
                if let Some(Fault::Unavailable) = fault {
                    answer(&mut sock, 503, &problem_503("no leader")).await;
                    continue;
                }
                let r = client
                    .post(format!("{upstream}{path}"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("the server answers the proxy");
                let (status, text) = (r.status().as_u16(), r.text().await.expect("body"));
                match fault {
                    Some(Fault::ForwardThenDrop) => drop(sock),
                    Some(Fault::ForwardThen503) => {
                        answer(&mut sock, 503, &problem_503("the write was not confirmed in time")).await;
                    }
                    _ => answer(&mut sock, status, &text).await,
                }
            }
        });
        FlakyProxy { url, bodies, task }
    }

    fn bodies(&self) -> Vec<Vec<u8>> {
        self.bodies.lock().unwrap().clone()
    }
}

fn problem_503(detail: &str) -> String {
    serde_json::json!({"type": "about:blank", "title": "Service Unavailable", "status": 503, "detail": detail})
        .to_string()
}

/// Reads one request: its path and body (by its content-length).
async fn read_request(sock: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1)?.to_string();
    let length: usize = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((path, buf[head_end..head_end + length].to_vec()))
}

async fn answer(sock: &mut TcpStream, status: u16, body: &str) {
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body.as_bytes()).await;
    let _ = sock.shutdown().await;
}

const JOBS: &str = "queue: A\njob_set: s\njobs:\n  - pod_spec: {containers: [{name: main, resources: {requests: {cpu: \"1\", memory: 64Mi}}}]}\n    client_id: mine\n  - pod_spec: {containers: [{name: main, resources: {requests: {cpu: \"1\", memory: 64Mi}}}]}\n";

fn printed_ids(out: &std::process::Output) -> Vec<String> {
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    crate::common::api::ids(&v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_sent_again_after_a_lost_answer_stores_each_job_once() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let file = s.dir.join("jobs.yaml");
    std::fs::write(&file, JOBS).expect("jobs file");
    let file = file.display().to_string();
    // The first two attempts reach the server and commit; their answers are lost.
    let proxy = FlakyProxy::start(&s.url, vec![Fault::ForwardThenDrop, Fault::ForwardThen503]).await;

    let out = convoy(&proxy.url, &["submit", &file, "-o", "json"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("sending it again").count(), 2, "{stderr}");
    let bodies = proxy.bodies();
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|b| *b == bodies[0]), "every attempt sends the same body");

    // Three deliveries, two jobs: the ones printed, with the file's client id and a made one.
    let ids = printed_ids(&out);
    let (_, listed) = s.get("/v1/jobs?queue=A").await;
    let stored: BTreeSet<String> =
        listed["jobs"].as_array().expect("jobs").iter().map(|j| j["id"].as_str().expect("id").to_string()).collect();
    assert_eq!(stored, ids.iter().cloned().collect::<BTreeSet<_>>());
    assert_eq!(ids.len(), 2);
    assert_eq!(s.job(&ids[0]).await["client_id"], "mine");
    let made = s.job(&ids[1]).await["client_id"].as_str().expect("a client id").to_string();
    assert!(made.starts_with("cli-") && made.ends_with("-1"), "{made}");

    // The same body sent once more answers the same ids; another run of submit is new jobs
    // (the file's own client id still names the first job).
    let (st, again) = s
        .client
        .post(format!("{}/v1/jobs", s.url))
        .header("content-type", "application/json")
        .body(bodies[0].clone())
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .expect("request");
    assert_eq!(st, 200);
    assert_eq!(crate::common::api::ids(&again.json::<Value>().await.expect("JSON")), ids);
    let out = convoy(&s.url, &["submit", &file, "-o", "json"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let second = printed_ids(&out);
    assert_eq!(second[0], ids[0]);
    assert_ne!(second[1], ids[1]);
    assert_eq!(s.count_jobs("queue=A").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_gives_up_after_five_attempts_and_never_repeats_a_refusal() {
    let s = Server::start("");
    s.ready().await;
    s.create_queue("A").await;
    let file = s.dir.join("jobs.yaml");
    std::fs::write(&file, JOBS).expect("jobs file");
    let file = file.display().to_string();
    let proxy = FlakyProxy::start(&s.url, vec![Fault::Unavailable; 5]).await;

    let out = convoy(&proxy.url, &["submit", &file, "-o", "json"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no confirmation after 5 attempts"), "{stderr}");
    assert!(stderr.contains("convoy jobs --queue A --job-set s") && stderr.contains("503"), "{stderr}");
    assert_eq!(proxy.bodies().len(), 5);
    assert_eq!(s.count_jobs("queue=A").await, 0);

    // A refusal is final: sent once.
    let bad = s.dir.join("bad.yaml");
    std::fs::write(&bad, "queue: A\njob_set: s\njobs:\n  - pod_spec: {containers: [{name: main}]}\n").expect("file");
    let out = convoy(&proxy.url, &["submit", &bad.display().to_string()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("400") && stderr.contains("jobs[0].pod_spec.containers[0].resources"), "{stderr}");
    assert_eq!(proxy.bodies().len(), 6);
}
