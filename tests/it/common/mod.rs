//! Test harness: starts real `convoy` processes on 127.0.0.1 and talks HTTP to them.
#![allow(dead_code)]

pub(crate) mod api;
pub(crate) mod bench;
pub(crate) mod procs;
pub(crate) mod root;
pub(crate) mod tls;
pub(crate) mod trio;
pub(crate) mod up;
pub(crate) mod wait;

pub(crate) use api::Api;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running `convoy server`; its API helpers through `Deref` (`s.post(..)`, `s.url`).
pub(crate) struct Server {
    pub child: Child,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    api: Api,
}

impl std::ops::Deref for Server {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

pub(crate) fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The default test configuration: fast scheduling, auth off, loopback, port 0. `server_extra`
/// holds more `[server]` keys (a leading `[server]` line is allowed).
pub(crate) fn config(dir: &Path, server_extra: &str) -> String {
    let extra = server_extra.trim_start().strip_prefix("[server]").unwrap_or(server_extra);
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
data_dir = "{}"
{extra}

[scheduler]
schedule_interval_min = "20ms"
schedule_interval_max = "200ms"

[auth]
enabled = false
"#,
        dir.join("data").display(),
    )
}

impl Server {
    /// Starts a server in a fresh temporary directory.
    pub(crate) fn start(extra_toml: &str) -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::start_in(&dir, &config(&dir, extra_toml));
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server with the given config text in `dir` (kept after the server stops).
    pub(crate) fn start_in(dir: &Path, config_text: &str) -> Server {
        install_crypto();
        let cfg = dir.join("convoy.toml");
        std::fs::write(&cfg, config_text).expect("write config");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoy"));
        cmd.arg("server").arg("--config").arg(&cfg).env("NO_COLOR", "1");
        let (child, url) = procs::spawn_listening(cmd, &dir.join("server.log"));
        Server { child, dir: dir.to_path_buf(), _tmp: None, api: Api::new(url) }
    }

    /// The same server, talked to by a client that trusts only the CA in `ca` (an HTTPS server).
    pub(crate) fn trusting(mut self, ca: &Path) -> Server {
        self.api = Api { url: self.api.url.clone(), client: tls::client(ca) };
        self
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Waits until `/readyz` answers 200.
    pub(crate) async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = self.client.get(format!("{}/readyz", self.url)).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(Instant::now() < deadline, "server not ready in time:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then wait (up to 20 s) for exit; the exit code.
    pub(crate) fn terminate(&mut self) -> Option<i32> {
        procs::signal_and_wait(&mut self.child, libc::SIGTERM, 20)
    }

    /// kill -9.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A `convoy agent` (executor `fake`) on the fake runtime, polling this server, with `count`
    /// nodes `fake-1`.. offering `cpu` and `memory` each; its log is `agent.log` in the
    /// server's directory.
    pub(crate) fn fake_agent(&self, count: u32, cpu: &str, memory: &str) -> Child {
        let cfg = self.dir.join("agent.toml");
        std::fs::write(
            &cfg,
            format!(
                "executor = \"fake\"\nservers = [\"{}\"]\ndata_dir = \"{}\"\nruntime = \"fake\"\n[[fake.node_groups]]\ncount = {count}\nname_prefix = \"fake\"\nallocatable = {{ cpu = \"{cpu}\", memory = \"{memory}\" }}\n",
                self.url,
                self.dir.join("agent").display()
            ),
        )
        .expect("agent config");
        Command::new(env!("CARGO_BIN_EXE_convoy"))
            .args(["agent", "--config"])
            .arg(&cfg)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::from(std::fs::File::create(self.dir.join("agent.log")).expect("agent log")))
            .spawn()
            .expect("convoy agent starts")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pod spec running `sh -c <script>` with small requests.
pub(crate) fn pod(cpu: &str, script: &str) -> Value {
    json!({
        "containers": [{
            "name": "main",
            "image": "busybox",
            "command": ["sh", "-c", script],
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}
        }]
    })
}

/// A job item.
pub(crate) fn job(cpu: &str) -> Value {
    json!({"pod_spec": pod(cpu, "true")})
}

/// A node report.
pub(crate) fn node(name: &str, cpu: &str) -> Value {
    json!({"name": name, "allocatable": {"cpu": cpu, "memory": "64Gi"}})
}
