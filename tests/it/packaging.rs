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
}
