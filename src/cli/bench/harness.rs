//! Starting a real `convoy server` (this binary) for benchmarks.

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process on 127.0.0.1.
pub(super) struct BenchServer {
    pub child: Child,
    pub url: String,
    pub started: Instant,
}

impl BenchServer {
    /// Starts `convoy server` with `config` (TOML) in `dir`; returns once it prints its address.
    pub(super) fn start(dir: &Path, config: &str) -> anyhow::Result<BenchServer> {
        let cfg = dir.join("convoy.toml");
        std::fs::write(&cfg, config)?;
        let exe = std::env::current_exe().context("locating the convoy binary")?;
        let started = Instant::now();
        let mut child = Command::new(exe)
            .arg("server")
            .arg("--config")
            .arg(&cfg)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(dir.join("server.log"))?))
            .spawn()
            .context("starting convoy server")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(u) = line.strip_prefix("convoy server listening on ") {
                        break u.trim().to_string();
                    }
                }
                _ => bail!("the server exited before listening; see {}", dir.join("server.log").display()),
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(BenchServer { child, url, started })
    }

    /// Waits for `/readyz`; returns the time since start.
    pub(super) async fn ready(&self, client: &reqwest::Client) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", self.url)).send().await
                && r.status().is_success()
            {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                bail!("server not ready after 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// CPU time (user + system) the server process has used so far. A steadier measure of cost
    /// than throughput on a shared machine: it does not count time spent waiting for a core.
    pub(super) fn cpu_time(&self) -> Duration {
        process_cpu(self.child.id())
    }

    /// Resident set size of the server process, in MiB.
    pub(super) fn rss_mb(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            })
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) process `pid` has used so far, from `/proc/<pid>/stat` (zero when it
/// cannot be read).
pub(super) fn process_cpu(pid: u32) -> Duration {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| {
        // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        let rest = s.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    });
    // Linux reports these in USER_HZ, 100 per second on every architecture it runs on.
    Duration::from_millis(ticks.unwrap_or(0) * 10)
}

/// Live (not finished) jobs of the queues whose name starts with `queue_prefix`, from the
/// `convoy_jobs` gauge of `/metrics` (it counts live jobs only).
pub(super) async fn live_jobs(http: &reqwest::Client, url: &str, queue_prefix: &str) -> anyhow::Result<u64> {
    let text = http.get(format!("{url}/metrics")).send().await?.text().await?;
    let prefix = format!("convoy_jobs{{queue=\"{queue_prefix}");
    Ok(text
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum())
}

/// The sum of every series of metric `name` (for example a histogram's `_sum` or `_count`) in a
/// scrape of the server's `/metrics` (zero when absent).
pub(super) fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(' ') || r.starts_with('{')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The server's store settings a benchmark may vary.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct StoreArgs {
    /// The server's `db_cache_mb` (redb's page cache), to weigh its memory against its speed.
    #[arg(long, default_value_t = convoy::config::ServerConfig::default().db_cache_mb)]
    pub(crate) db_cache_mb: usize,
}

impl StoreArgs {
    /// The `[server]` lines that set these.
    pub(super) fn server_lines(&self) -> String {
        format!("db_cache_mb = {}", self.db_cache_mb)
    }
}

/// The benchmark server configuration.
pub(super) fn config(dir: &Path, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n{extra}\n[auth]\nenabled = false\n",
        dir.join("data").display()
    )
}

/// `x` rounded to tenths, as the benches print their times.
pub(super) fn tenths(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// p-th percentile (0..=100) of sorted samples, in ms.
pub(super) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}
