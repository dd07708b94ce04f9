//! The shipped example configurations are valid.

use crate::common::tls::TestCa;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The example file `f` with its TLS files (`/etc/convoy/tls/...`) moved to `tls_dir`, where the
/// test made a CA (`ca.crt`) and a server certificate (`server.crt`, `server.key`).
fn example_with_tls_in(f: &str, tls_dir: &Path) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/{f}")).unwrap_or_else(|e| panic!("{f}: {e}"));
    text.replace("/etc/convoy/tls/", &format!("{}/", tls_dir.display()))
}

/// An example with its placeholder secrets filled in, as its reader is told to.
fn filled(text: &str) -> String {
    text.replace("replace-with-", "filled-in-")
}

#[test]
fn example_configs_parse() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let tls = tmp.path();
    let ca = TestCa::new(tls, "example CA");
    std::fs::rename(&ca.path, tls.join("ca.crt")).expect("ca.crt");
    ca.issue(tls, "server", "convoy-1.example.org", 1);

    for f in ["config.example.toml", "packaging/server.example.toml"] {
        let text = example_with_tls_in(f, tls);
        if text.contains("replace-with-") {
            // As shipped, a server refuses to start with the example's secrets.
            let e = convoy::config::Config::parse(&text, f).expect_err("placeholders refused").to_string();
            assert!(e.contains("auth.tokens[0].token") && e.contains("placeholder"), "{f}: {e}");
        }
        convoy::config::Config::parse(&filled(&text), f).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let text = std::fs::read_to_string(format!("{ROOT}/packaging/agent.example.toml")).unwrap();
    let agent = convoy::agent::AgentConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("agent.example.toml: {e}"));
    agent.validate().unwrap_or_else(|e| panic!("agent.example.toml: {e}"));
    // config.example.toml configures an agent too, through its [agent] section.
    let combined = convoy::agent::AgentConfig::from_file(Path::new(&format!("{ROOT}/config.example.toml")))
        .unwrap_or_else(|e| panic!("config.example.toml as an agent config: {e}"));
    combined.validate().unwrap_or_else(|e| panic!("config.example.toml as an agent config: {e}"));
    assert_eq!(combined.servers, ["http://127.0.0.1:8080"]);
    for unit in ["convoy-server.service", "convoy-agent.service"] {
        let text = std::fs::read_to_string(format!("{ROOT}/packaging/systemd/{unit}")).unwrap();
        assert!(text.contains("ExecStart=/usr/bin/convoy "), "{unit}");
    }
    // Jobs outlive agent restarts only if systemd leaves the supervisors alone.
    let agent_unit = std::fs::read_to_string(format!("{ROOT}/packaging/systemd/convoy-agent.service")).unwrap();
    assert!(agent_unit.contains("KillMode=process"));
    // Jobs' cgroups live under the agent's: systemd must delegate it.
    assert!(agent_unit.contains("Delegate=yes"));
    // `systemctl reload` reloads the certificate.
    let server_unit = std::fs::read_to_string(format!("{ROOT}/packaging/systemd/convoy-server.service")).unwrap();
    assert!(server_unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
}

#[test]
fn the_three_server_example_is_one_cluster_over_tls() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let tls = tmp.path();
    let ca = TestCa::new(tls, "example CA");
    std::fs::rename(&ca.path, tls.join("ca.crt")).expect("ca.crt");
    ca.issue(tls, "server", "convoy-1.example.org", 1);

    let mut peer_lists = Vec::new();
    for n in 1..=3u64 {
        let f = format!("packaging/three-servers/convoy-{n}.toml");
        let shipped = example_with_tls_in(&f, tls);
        let e = convoy::config::Config::parse(&shipped, &f).expect_err("placeholders refused").to_string();
        assert!(e.contains("auth.cluster_secret") && e.contains("placeholder"), "{f}: {e}");
        let c = convoy::config::Config::parse(&filled(&shipped), &f).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(c.server.node_id, n, "{f}");
        assert_eq!(c.server.advertise.as_deref(), Some(format!("https://convoy-{n}.example.org:8080").as_str()));
        let tls_files = c.tls.as_ref().unwrap_or_else(|| panic!("{f}: [tls]"));
        assert_eq!(tls_files.ca.as_deref(), Some(tls.join("ca.crt").as_path()), "{f}: tls.ca");
        assert!(c.auth.enabled && c.auth.cluster_secret.is_some(), "{f}: auth and the cluster secret");
        peer_lists.push((c.cluster.peers, c.auth.cluster_secret, c.auth.tokens));
    }
    assert!(peer_lists.windows(2).all(|w| w[0] == w[1]), "the same peers, secret and tokens on all three");
    assert!(peer_lists[0].0.iter().all(|p| p.addr.starts_with("https://")));

    let f = "packaging/three-servers/agent.toml";
    let shipped = convoy::agent::AgentConfig::from_toml_str(&example_with_tls_in(f, tls)).unwrap();
    let e = shipped.validate().expect_err("the placeholder token refused").to_string();
    assert!(e.contains("agent.token") && e.contains("placeholder"), "{f}: {e}");
    let agent = convoy::agent::AgentConfig::from_toml_str(&filled(&example_with_tls_in(f, tls)))
        .unwrap_or_else(|e| panic!("{f}: {e}"));
    agent.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
    let addrs: Vec<&String> = peer_lists[0].0.iter().map(|p| &p.addr).collect();
    assert_eq!(agent.servers.iter().collect::<Vec<_>>(), addrs, "the agent lists the three servers");
    assert_eq!(agent.ca.as_deref(), Some(tls.join("ca.crt").as_path()));
    let tokens = &peer_lists[0].2;
    assert!(tokens.iter().any(|t| Some(&t.token) == agent.token.as_ref()), "the agent's token is an executor token");
}

/// The three-server example as shipped, on this machine: the hosts become `localhost` on three
/// ports, the data and certificate paths temporary ones, the placeholder secrets filled in; auth,
/// the cluster secret and the tokens are as the example sets them. The three form one cluster over TLS, and the example agent (its token, its
/// CA) runs a job submitted by the example's submitter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_server_example_forms_a_cluster_over_tls_that_runs_a_job() {
    use crate::common::procs::free_port;
    use crate::common::{Api, Server};
    use serde_json::json;
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path();
    let ca = TestCa::new(root, "example CA");
    let ca_path = root.join("ca.crt");
    std::fs::rename(&ca.path, &ca_path).expect("ca.crt");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let here = |text: &str| {
        let mut text = text.to_string();
        for (n, port) in ports.iter().enumerate() {
            text = text.replace(&format!("convoy-{}.example.org:8080", n + 1), &format!("localhost:{port}"));
        }
        filled(&text.replace("/etc/convoy/tls/ca.crt", &ca_path.display().to_string()))
    };
    let mut servers = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        let dir = root.join(format!("convoy-{}", n + 1));
        std::fs::create_dir_all(&dir).expect("server dir");
        ca.issue(&dir, "server", &format!("convoy-{}", n + 1), n as u64 + 10);
        let text =
            here(&std::fs::read_to_string(format!("{ROOT}/packaging/three-servers/convoy-{}.toml", n + 1)).unwrap())
                .replace("listen = \"0.0.0.0:8080\"", &format!("listen = \"127.0.0.1:{port}\""))
                .replace("data_dir = \"/var/lib/convoy\"", &format!("data_dir = \"{}\"", dir.join("data").display()))
                .replace("/etc/convoy/tls/", &format!("{}/", dir.display()));
        servers.push(Server::start_in(&dir, &text).trusting(&ca_path));
    }
    let admin = "filled-in-a-long-random-admin-token";
    let api =
        |n: usize| Api { url: format!("https://localhost:{}", ports[n]), client: crate::common::tls::client(&ca_path) };
    // One leader, named by all three, over HTTPS with the admin token.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders = Vec::new();
        for n in 0..3 {
            let (st, v) = api(n).call(reqwest::Method::GET, "/v1/cluster", Some(admin), None).await;
            leaders.push((st == 200).then(|| (v["leader"].as_u64(), v["members"].as_array().map(Vec::len))));
        }
        if leaders.iter().all(|l| l.is_some_and(|(leader, members)| leader.is_some() && members == Some(3)))
            && leaders.windows(2).all(|w| w[0] == w[1])
        {
            break;
        }
        assert!(Instant::now() < deadline, "the example servers formed no cluster: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (st, v) = api(1)
        .call(
            reqwest::Method::POST,
            "/v1/queues",
            Some(admin),
            Some(&json!({"name": "physics", "groups": ["physics"]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    // The example agent, its data in the test's directory.
    let agent_dir = root.join("agent");
    std::fs::create_dir_all(&agent_dir).expect("agent dir");
    let agent_toml = format!(
        "{}\ndata_dir = \"{}\"\nexecutor = \"example-agent\"\nmax_backoff = 1\n",
        here(&std::fs::read_to_string(format!("{ROOT}/packaging/three-servers/agent.toml")).unwrap()),
        agent_dir.join("data").display()
    );
    std::fs::write(agent_dir.join("agent.toml"), agent_toml).expect("agent config");
    let log = std::fs::File::create(agent_dir.join("agent.log")).expect("agent log");
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args(["agent", "--config"])
        .arg(agent_dir.join("agent.toml"))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the example agent starts");
    let alice = "filled-in-a-long-random-team-token";
    let body = json!({"queue": "physics", "job_set": "s", "jobs": [{"pod_spec": crate::common::pod("100m", "echo hello from the example")}]});
    let (st, v) = api(2).call(reqwest::Method::POST, "/v1/jobs", Some(alice), Some(&body)).await;
    assert_eq!(st, 200, "{v}");
    let id = v["job_ids"][0].as_str().expect("job id").to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, j) = api(0).call(reqwest::Method::GET, &format!("/v1/jobs/{id}"), Some(alice), None).await;
        if j["state"] == "succeeded" {
            break;
        }
        let agent_log = std::fs::read_to_string(agent_dir.join("agent.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "the job did not succeed: {j}\n{agent_log}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, out) = api(0).call(reqwest::Method::GET, &format!("/v1/jobs/{id}/logs"), Some(alice), None).await;
    assert_eq!(out, json!("hello from the example\n"));
    let _ = agent.kill();
    let _ = agent.wait();
    crate::common::procs::reap_runs(&agent_dir.join("data"));
    drop(servers);
}
