//! HTTPS: servers with `[tls]` (certificates made in the test by a test CA), the clients that
//! trust that CA (reqwest, the CLI with `--ca`, an agent with `ca`, the servers' peer client in a
//! three-server cluster), certificate reload on SIGHUP, and start-up refusals.

use crate::common::procs::{Agent, free_port, reap_runs};
use crate::common::tls::{ServerCert, TestCa, builder, client, error_chain, peer_certificate};
use crate::common::trio::status;
use crate::common::wait::until;
use crate::common::{Server, config, install_crypto, job, pod};
use serde_json::json;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for anything in these tests.
const WAIT: Duration = Duration::from_secs(30);

/// A server with `[tls]` serving `cert` (auth off, loopback, port 0), talked to through the CA.
fn tls_server(dir: &Path, ca: &TestCa, cert: &ServerCert) -> Server {
    Server::start_in(dir, &format!("{}{}", config(dir, ""), cert.section(&ca.path))).trusting(&ca.path)
}

/// Runs `convoy --server URL <args>` without CONVOY_CA or CONVOY_TOKEN from the environment,
/// plus the `env` given.
async fn convoy(server: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_convoy"));
    cmd.arg("--server").arg(server).args(args).env_remove("CONVOY_CA").env_remove("CONVOY_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).output().await.expect("convoy runs")
}

fn sighup(server: &Server) {
    // SAFETY: signalling the server process this test started.
    unsafe {
        libc::kill(server.child.id() as i32, libc::SIGHUP);
    }
}

#[tokio::test]
async fn https_serves_clients_that_trust_the_ca_only() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let cert = ca.issue(dir, "server", "convoy-test-server", 1);
    let s = tls_server(dir, &ca, &cert);
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);
    s.ready().await;

    // A client with the CA submits a job and reads it, over HTTP/2 (ALPN) ...
    s.create_queue("A").await;
    let id = s.submit("A", "tls", vec![job("1")]).await.remove(0);
    let r = s.client.get(format!("{}/v1/jobs/{id}", s.url)).send().await.expect("a trusted request");
    assert_eq!((r.status().as_u16(), r.version()), (200, reqwest::Version::HTTP_2));
    assert_eq!(peer_certificate(&r), cert.der);
    let j: serde_json::Value = r.json().await.expect("the job");
    assert_eq!((&j["id"], &j["queue"]), (&json!(id), &json!("A")));
    // ... or HTTP/1.1 when that is all it offers.
    let h1 = builder(&ca.path).http1_only().build().expect("client");
    let r = h1.get(format!("{}/v1/jobs/{id}", s.url)).send().await.expect("an HTTP/1.1 request");
    assert_eq!((r.status().as_u16(), r.version()), (200, reqwest::Version::HTTP_11));

    // A client that does not trust the CA fails the handshake.
    install_crypto();
    let untrusting = reqwest::Client::builder().build().expect("client");
    let e = untrusting.get(format!("{}/healthz", s.url)).send().await.expect_err("an untrusted certificate");
    let chain = error_chain(&e);
    assert!(e.is_connect() && chain.contains("certificate"), "{chain}");

    // Plain HTTP to the TLS port gets a 400 saying to use https://, and nothing of the API.
    let plain = s.url.replacen("https://", "http://", 1);
    let r = reqwest::Client::new().get(format!("{plain}/v1/jobs/{id}")).send().await.expect("an answer");
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.expect("body");
    assert!(text.contains("use https://") && !text.contains(&id), "{text}");
}

#[tokio::test]
async fn the_cli_verifies_the_server_with_ca() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let s = tls_server(dir, &ca, &ca.issue(dir, "server", "convoy-test-server", 1));
    s.ready().await;
    let ca_arg = ca.path.to_str().expect("UTF-8 path");

    let out = convoy(&s.url, &["--ca", ca_arg, "queue", "create", "team-a"], &[]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // CONVOY_CA does the same as --ca.
    let out = convoy(&s.url, &["queue", "get", "team-a"], &[("CONVOY_CA", &ca.path)]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("team-a"));

    // Without the CA: refused at once, saying what to pass.
    let started = Instant::now();
    let out = convoy(&s.url, &["queue", "list"], &[]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("certificate that is not trusted") && err.contains("--ca FILE or CONVOY_CA"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "no retries of a refused certificate");
    // A CA that did not sign the server's certificate: named in the error.
    let other = tempfile::tempdir().expect("temp dir");
    let other_ca = TestCa::new(other.path(), "another CA");
    let out = convoy(&s.url, &["--ca", other_ca.path.to_str().expect("UTF-8"), "queue", "list"], &[]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("not signed by the CA in {}", other_ca.path.display())));
    // A CA file that is no certificate: named with the flag.
    let key = dir.join("server.key");
    let out = convoy(&s.url, &["--ca", key.to_str().expect("UTF-8"), "queue", "list"], &[]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--ca (CONVOY_CA)") && err.contains("no certificate"), "{err}");
}

#[tokio::test]
async fn sighup_reloads_the_certificate_for_new_connections() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let first = ca.issue(dir, "server", "convoy-first", 1);
    let s = tls_server(dir, &ca, &first);
    s.ready().await;
    let healthz = format!("{}/healthz", s.url);
    // A connection opened before the reload (the pooled HTTP/2 connection of `s.client`).
    let r = s.client.get(&healthz).send().await.expect("request");
    assert_eq!(peer_certificate(&r), first.der);

    // New certificate and key in the same files, then SIGHUP: new connections get it.
    let second = ca.issue(dir, "server", "convoy-second", 2);
    assert_ne!(first.der, second.der);
    sighup(&s);
    let deadline = Instant::now() + WAIT;
    loop {
        // A fresh client: a new connection each time.
        let r = client(&ca.path).get(&healthz).send().await.expect("a new connection");
        if peer_certificate(&r) == second.der {
            break;
        }
        assert!(Instant::now() < deadline, "still the first certificate after SIGHUP:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The listener and the connection opened before still serve.
    let r = s.client.get(&healthz).send().await.expect("the old connection");
    assert_eq!((r.status().as_u16(), peer_certificate(&r)), (200, first.der.clone()));

    // A certificate file that does not load: the error names it, the second pair stays.
    std::fs::write(&second.cert, "not a certificate\n").expect("write");
    sighup(&s);
    let log_line = format!("{}: not a PEM file", second.cert.display());
    until(WAIT, "the reload error in the log", || s.log().contains(&log_line)).await;
    assert!(s.log().contains("TLS reload failed"), "{}", s.log());
    let r = client(&ca.path).get(&healthz).send().await.expect("a new connection");
    assert_eq!((r.status().as_u16(), peer_certificate(&r)), (200, second.der));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_form_a_cluster_over_tls() {
    const SECRET: &str = "tls-test-cluster-secret-0123456789";
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path();
    let ca = TestCa::new(root, "convoy cluster CA");
    let ports = [free_port(), free_port(), free_port()];
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{{ id = {}, addr = \"https://127.0.0.1:{p}\" }}", i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let mut servers = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let dir = root.join(format!("convoy-{}", i + 1));
        std::fs::create_dir_all(&dir).expect("server dir");
        let cert = ca.issue(&dir, "server", &format!("convoy-{}", i + 1), i as u64 + 10);
        let text = format!(
            "{}\n[cluster]\npeers = [ {peers} ]\n{}",
            config(&dir, &format!("node_id = {}\nadvertise = \"https://127.0.0.1:{port}\"", i + 1))
                .replacen("127.0.0.1:0", &format!("127.0.0.1:{port}"), 1)
                .replace(
                    "[auth]\nenabled = false\n",
                    &format!("[auth]\nenabled = false\ncluster_secret = \"{SECRET}\"\n")
                ),
            cert.section(&ca.path),
        );
        servers.push(Server::start_in(&dir, &text).trusting(&ca.path));
    }
    let logs = || servers.iter().map(|s| s.log()).collect::<Vec<_>>().join("\n=====\n");

    // The cluster forms over HTTPS: all three name the same leader, which serves.
    let deadline = Instant::now() + WAIT;
    let leader = loop {
        let mut views = Vec::new();
        for s in &servers {
            views.push(status(s).await);
        }
        let leaders: Vec<Option<u64>> = views.iter().map(|v| v.as_ref().and_then(|v| v["leader"].as_u64())).collect();
        if let Some(Some(l)) = leaders.first().copied()
            && leaders.iter().all(|x| *x == Some(l))
            && views[(l - 1) as usize].as_ref().is_some_and(|v| v["serving"] == true)
        {
            break (l - 1) as usize;
        }
        assert!(Instant::now() < deadline, "no cluster formed: {views:?}\n{}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let st = status(&servers[leader]).await.expect("the leader's status");
    assert_eq!(st["members"].as_array().map(Vec::len), Some(3), "{st}");
    assert!(
        st["members"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|m| m["addr"].as_str().is_some_and(|a| a.starts_with("https://"))),
        "{st}"
    );

    // A write on the leader is read on a follower; a write through a follower is relayed to the
    // leader (over HTTPS, trusting [tls].ca) and read on the other follower.
    servers[leader].create_queue("replicated").await;
    let (follower, other) = (&servers[(leader + 1) % 3], &servers[(leader + 2) % 3]);
    let deadline = Instant::now() + WAIT;
    while follower.get("/v1/queues/replicated").await.0 != 200 {
        assert!(Instant::now() < deadline, "the queue did not reach the follower:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (st, v) = follower.post("/v1/queues", &json!({"name": "relayed"})).await;
    assert_eq!(st, 201, "{v}\n{}", logs());
    let deadline = Instant::now() + WAIT;
    while other.get("/v1/queues/relayed").await.0 != 200 {
        assert!(Instant::now() < deadline, "the relayed write did not reach the other follower:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A gRPC write through a follower is relayed to the leader over HTTP/2 on TLS too.
    #[cfg(feature = "grpc")]
    {
        use convoy::grpc::pb;
        use tonic::transport::{Certificate, Channel, ClientTlsConfig};
        let pem = std::fs::read_to_string(&ca.path).expect("CA file");
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)).domain_name("localhost");
        let ch = Channel::from_shared(follower.url.clone())
            .expect("url")
            .tls_config(tls)
            .expect("tls")
            .connect()
            .await
            .expect("h2 over TLS");
        pb::queue_service_client::QueueServiceClient::new(ch)
            .create_queue(pb::Queue { name: "relayed-grpc".into(), ..Default::default() })
            .await
            .unwrap_or_else(|e| panic!("a gRPC write through a follower: {e:?}\n{}", logs()));
        assert_eq!(follower.get("/v1/queues/relayed-grpc").await.0, 200, "the follower applied its relayed write");
    }
    // `convoy cluster` with the CA, from a follower.
    let out = convoy(&follower.url, &["cluster"], &[("CONVOY_CA", &ca.path)]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("leader node {}", leader + 1)), "{text}");

    // Peer RPC over TLS still needs the cluster secret.
    let r = follower.client.get(format!("{}/raft/status", follower.url)).send().await.expect("request");
    assert_eq!(r.status().as_u16(), 401);
    let r = follower
        .client
        .get(format!("{}/raft/status", follower.url))
        .header("x-convoy-cluster-secret", SECRET)
        // A request without it would be taken for a peer of protocol 1 and refused (400).
        .header(convoy::raft::PROTOCOL_HEADER, convoy::raft::PROTOCOL_VERSION)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_ca_runs_a_job_on_an_https_server() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let s = tls_server(dir, &ca, &ca.issue(dir, "server", "convoy-test-server", 1));
    s.ready().await;
    s.create_queue("A").await;
    let agent_toml = format!(
        "ca = \"{}\"\nmax_backoff = 1\n[process]\nnode = \"tls-node\"\nallocatable = {{ cpu = \"4\", memory = \"8Gi\" }}\n",
        ca.path.display()
    );
    let agent_dir = dir.join("agent");
    let agent = Agent::start(&s.url, "tls-executor", &agent_dir, &agent_toml, &dir.join("agent.log"));
    let id = s.submit("A", "tls", vec![json!({"pod_spec": pod("100m", "echo hello over https")})]).await.remove(0);
    let j = s
        .wait_job(&id, WAIT, "over", |j| matches!(j["state"].as_str(), Some("succeeded" | "failed" | "cancelled")))
        .await;
    let agent_log = agent.log();
    drop(agent);
    reap_runs(&agent_dir);
    assert_eq!(j["state"], "succeeded", "{j:#}\nagent log:\n{agent_log}");
    assert_eq!(j["runs"][0]["executor"], "tls-executor");
    assert!(s.logs(&id).await.contains("hello over https"));
}

#[tokio::test]
async fn an_agent_without_the_ca_says_the_certificate_is_not_trusted() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let s = tls_server(dir, &ca, &ca.issue(dir, "server", "convoy-test-server", 1));
    s.ready().await;
    let agent_dir = dir.join("agent");
    let toml = "max_backoff = 1\n[process]\nnode = \"n\"\nallocatable = { cpu = \"1\", memory = \"1Gi\" }\n";
    let agent = Agent::start(&s.url, "untrusting", &agent_dir, toml, &dir.join("agent.log"));
    until(WAIT, "the agent's certificate error", || agent.log().contains("set `ca` in the agent config")).await;
    drop(agent);
    reap_runs(&agent_dir);
}

#[tokio::test]
async fn servers_that_cannot_serve_tls_safely_do_not_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let ca = TestCa::new(dir, "convoy test CA");
    let cert = ca.issue(dir, "server", "convoy-test-server", 1);
    let other = ca.issue(dir, "other", "convoy-other", 2);
    let refused = |text: String| {
        let file = dir.join("refused.toml");
        std::fs::write(&file, text).expect("config");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["server", "--config"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .expect("convoy runs");
        assert!(!out.status.success(), "started with {}", std::fs::read_to_string(&file).unwrap_or_default());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let base = config(dir, "");
    // A key of another certificate.
    let err = refused(format!("{base}{}", cert.section(&ca.path).replace("server.key", "other.key")));
    assert!(err.contains(&format!("tls.key: {}: the key does not match", other.key.display())), "{err}");
    // A missing certificate file.
    let err = refused(format!("{base}{}", cert.section(&ca.path).replace("server.crt", "missing.crt")));
    assert!(err.contains(&format!("tls.cert: {}: cannot read the file", dir.join("missing.crt").display())), "{err}");
    // Plain HTTP on all interfaces.
    let err = refused(base.replacen("127.0.0.1:0", "0.0.0.0:0", 1));
    assert!(err.contains("server.listen: 0.0.0.0:0 is not a loopback address"), "{err}");
    assert!(err.contains("[tls]") && err.contains("server.plain_http = true"), "{err}");
}
