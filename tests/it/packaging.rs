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

#[test]
fn example_configs_parse() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let tls = tmp.path();
    let ca = TestCa::new(tls, "example CA");
    std::fs::rename(&ca.path, tls.join("ca.crt")).expect("ca.crt");
    ca.issue(tls, "server", "convoy-1.example.org", 1);

    for f in ["config.example.toml", "packaging/server.example.toml"] {
        let text = example_with_tls_in(f, tls);
        convoy::config::Config::parse(&text, f).unwrap_or_else(|e| panic!("{f}: {e}"));
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
        let c = convoy::config::Config::parse(&example_with_tls_in(&f, tls), &f).unwrap_or_else(|e| panic!("{f}: {e}"));
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
    let agent =
        convoy::agent::AgentConfig::from_toml_str(&example_with_tls_in(f, tls)).unwrap_or_else(|e| panic!("{f}: {e}"));
    agent.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
    let addrs: Vec<&String> = peer_lists[0].0.iter().map(|p| &p.addr).collect();
    assert_eq!(agent.servers.iter().collect::<Vec<_>>(), addrs, "the agent lists the three servers");
    assert_eq!(agent.ca.as_deref(), Some(tls.join("ca.crt").as_path()));
    let tokens = &peer_lists[0].2;
    assert!(tokens.iter().any(|t| Some(&t.token) == agent.token.as_ref()), "the agent's token is an executor token");
}
