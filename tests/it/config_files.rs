//! One configuration file for both commands: `convoy server` and `convoy agent` accept a file
//! with `[server]`, `[scheduler]`, `[auth]` and `[agent]`, and both refuse an unknown key or a bad
//! duration naming it.

use crate::common::Api;
use crate::common::procs::{config_on_port, free_port, spawn_listening};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `convoy <command> --config <file>`, expected to refuse the file at once; its stderr.
fn refused(command: &str, file: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_convoy"))
        .args([command, "--config"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .expect("convoy runs");
    assert!(!out.status.success(), "convoy {command} accepted {}", std::fs::read_to_string(file).unwrap_or_default());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_combined_file_configures_the_server_and_the_agent() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let port = free_port();
    let text = format!(
        "{}\n[agent]\nexecutor = \"both\"\nservers = [\"http://127.0.0.1:{port}\"]\ndata_dir = \"{}\"\npoll_wait = \"2s\"\nmax_backoff = \"1s\"\nruntime = \"fake\"\n[[agent.fake.node_groups]]\ncount = 2\nallocatable = {{ cpu = \"4\", memory = \"8Gi\" }}\n[agent.kubernetes]\ninventory_refresh_seconds = 5\n",
        config_on_port(dir, port, ""),
        dir.join("agent").display()
    );
    let file = dir.join("convoy.toml");
    std::fs::write(&file, &text).expect("config file");

    let mut server = Command::new(env!("CARGO_BIN_EXE_convoy"));
    server.arg("server").arg("--config").arg(&file);
    let (mut server, url) = spawn_listening(server, &dir.join("server.log"));
    let mut agent = Command::new(env!("CARGO_BIN_EXE_convoy"))
        .arg("agent")
        .arg("--config")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(dir.join("agent.log")).expect("agent log")))
        .spawn()
        .expect("convoy agent starts");

    let api = Api::new(url);
    api.create_queue("A").await;
    let job = json!({
        "pod_spec": {"containers": [{"name": "fake", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
        "annotations": {"convoy.io/fake-runtime": "0"}
    });
    let id = &api.submit("A", "s", vec![job]).await[0];
    let j = api
        .wait_job(id, Duration::from_secs(30), "succeeded", |j| j["state"] == "succeeded" || j["state"] == "failed")
        .await;
    assert_eq!(
        j["state"],
        "succeeded",
        "{j:#}\n{}",
        std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
    );
    assert_eq!(j["runs"][0]["executor"], "both");
    let (_, metrics) = api.text("/metrics").await;
    assert!(metrics.contains("convoy_nodes 2"), "{metrics}");
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn unknown_keys_and_bad_durations_are_refused_by_both_commands_naming_the_key() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let file = tmp.path().join("bad.toml");
    let server_part = "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\nenabled = false\n";
    for (agent_part, key) in [
        ("[agent]\nservers = [\"http://127.0.0.1:1\"]\nbogus = 1\n", "agent.bogus"),
        ("[agent]\n[agent.process]\nnode_name = \"x\"\n", "agent.process.node_name"),
        ("[agent]\npoll_wait = \"soon\"\n", "agent.poll_wait"),
        (
            "[agent]\n[agent.kubernetes]\nforce_delete_after = \"after a while\"\n",
            "agent.kubernetes.force_delete_after",
        ),
        ("[agent]\n[agent.process]\nkeep_finished = \"1d\"\nkeep_finished_hours = 24\n", "agent.process"),
        ("[agent]\n[extra]\nx = 1\n", "extra"),
    ] {
        std::fs::write(&file, format!("{server_part}{agent_part}")).expect("config file");
        for command in ["server", "agent"] {
            let err = refused(command, &file);
            assert!(err.contains(&format!("bad.toml: {key}:")), "convoy {command} on {agent_part:?}: {err}");
        }
    }
    // The agent's own rules: a file of the server's only is no agent config.
    std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:0\"\n").expect("config file");
    let err = refused("agent", &file);
    assert!(err.contains("bad.toml: agent.server: unknown field"), "{err}");
    // The server's keys are the server's business.
    std::fs::write(&file, "[server]\nmax_lease_wait = \"soon\"\n[agent]\n").expect("config file");
    let err = refused("server", &file);
    assert!(err.contains("bad.toml: server.max_lease_wait: duration \"soon\" is invalid"), "{err}");
}
