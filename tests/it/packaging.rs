//! The shipped example configurations are valid.

#[test]
fn example_configs_parse() {
    let root = env!("CARGO_MANIFEST_DIR");
    for f in ["config.example.toml", "packaging/server.example.toml"] {
        let text = std::fs::read_to_string(format!("{root}/{f}")).unwrap();
        convoy::config::Config::parse(&text, f).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let text = std::fs::read_to_string(format!("{root}/packaging/agent.example.toml")).unwrap();
    let agent = convoy::agent::AgentConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("agent.example.toml: {e}"));
    agent.validate().unwrap_or_else(|e| panic!("agent.example.toml: {e}"));
    // config.example.toml configures an agent too, through its [agent] section.
    let combined = convoy::agent::AgentConfig::from_file(std::path::Path::new(&format!("{root}/config.example.toml")))
        .unwrap_or_else(|e| panic!("config.example.toml as an agent config: {e}"));
    combined.validate().unwrap_or_else(|e| panic!("config.example.toml as an agent config: {e}"));
    assert_eq!(combined.servers, ["http://127.0.0.1:8080"]);
    for unit in ["convoy-server.service", "convoy-agent.service"] {
        let text = std::fs::read_to_string(format!("{root}/packaging/systemd/{unit}")).unwrap();
        assert!(text.contains("ExecStart=/usr/bin/convoy "), "{unit}");
    }
    // Jobs outlive agent restarts only if systemd leaves the supervisors alone.
    let agent_unit = std::fs::read_to_string(format!("{root}/packaging/systemd/convoy-agent.service")).unwrap();
    assert!(agent_unit.contains("KillMode=process"));
}
