//! Test harness: starts real `convoy` processes on 127.0.0.1 and talks HTTP to them.
#![allow(dead_code)]

pub mod procs;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running `convoy server`.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub client: reqwest::Client,
}

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The default test configuration: fast scheduling, auth off, loopback, port 0. `server_extra`
/// holds more `[server]` keys (a leading `[server]` line is allowed).
pub fn config(dir: &Path, server_extra: &str) -> String {
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
    pub fn start(extra_toml: &str) -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::start_in(&dir, &config(&dir, extra_toml));
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server with the given config text in `dir` (kept after the server stops).
    pub fn start_in(dir: &Path, config_text: &str) -> Server {
        install_crypto();
        let cfg = dir.join("convoy.toml");
        std::fs::write(&cfg, config_text).expect("write config");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoy"));
        cmd.arg("server").arg("--config").arg(&cfg).env("NO_COLOR", "1");
        let (child, url) = procs::spawn_listening(cmd, &dir.join("server.log"));
        let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
        Server { child, url, dir: dir.to_path_buf(), _tmp: None, client }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(&self) {
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

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.client.post(format!("{}{path}", self.url)).json(body).send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.client.put(format!("{}{path}", self.url)).json(body).send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(format!("{}{path}", self.url)).send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = self.client.delete(format!("{}{path}", self.url)).send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn create_queue(&self, name: &str) {
        let (s, v) = self.post("/v1/queues", &json!({"name": name})).await;
        assert_eq!(s, 201, "{v}");
    }

    /// Submits jobs and returns their ids.
    pub async fn submit(&self, queue: &str, job_set: &str, jobs: Vec<Value>) -> Vec<String> {
        let (s, v) = self.post("/v1/jobs", &json!({"queue": queue, "job_set": job_set, "jobs": jobs})).await;
        assert_eq!(s, 200, "{v}");
        v["job_ids"].as_array().expect("job_ids").iter().map(|x| x.as_str().expect("id").to_string()).collect()
    }

    pub async fn job(&self, id: &str) -> Value {
        let (s, v) = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// Polls until `f(job)` holds, or panics after `secs`.
    pub async fn wait_job(&self, id: &str, secs: u64, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let j = self.job(id).await;
            if f(&j) {
                return j;
            }
            assert!(Instant::now() < deadline, "job {id} did not reach the expected state: {j}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then wait for exit.
    pub fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id() as i32;
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pod spec running `sh -c <script>` with small requests.
pub fn pod(cpu: &str, script: &str) -> Value {
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
pub fn job(cpu: &str) -> Value {
    json!({"pod_spec": pod(cpu, "true")})
}

/// A node report.
pub fn node(name: &str, cpu: &str) -> Value {
    json!({"name": name, "allocatable": {"cpu": cpu, "memory": "64Gi"}})
}
