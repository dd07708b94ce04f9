//! `convoy bench processes`: real jobs on the process runtime. A server and a process agent
//! (both real processes, this binary) on this machine; `--jobs` jobs running `--command` are
//! submitted at once, then the agent starts and the benchmark waits until every job ended.
//! Prints jobs/s started and finished, and the CPU the agent, the server and the whole machine
//! (supervisors and jobs included) spent per job: CPU time is the steadier figure on a shared
//! machine.

use super::harness::{BenchServer, config, live_jobs, process_cpu};
use super::submit::tempfile_dir;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Arguments of `convoy bench processes`.
#[derive(clap::Args, Debug)]
pub(crate) struct ProcessesArgs {
    /// Jobs to run.
    #[arg(long, default_value_t = 10_000)]
    jobs: u64,
    /// The command each job runs, split at spaces (no shell: add `sh -c` for one); `true`
    /// measures the runtime's own cost.
    #[arg(long, default_value = "true")]
    command: String,
    /// Most jobs running at once: the node's CPU divided by each job's request.
    #[arg(long, default_value_t = 1000)]
    concurrency: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_seconds: u64,
    /// Where the agent keeps its run directories (a fresh directory is made inside). Default:
    /// beside the server's, under the temporary directory. Each job creates a few files there,
    /// so the file system shows in the figure: the output names it.
    #[arg(long)]
    agent_dir: Option<std::path::PathBuf>,
    /// Confine each job in a cgroup with its limits (`[process.limits] enabled`); without it
    /// jobs run unconfined, so one run of each measures what confinement costs.
    #[arg(long)]
    limits: bool,
    /// How the agent supervises unconfined jobs (`[process] supervisors`): `shared`, a thread
    /// each in a supervisor host (the default), or `per-job`, a process each; one run of each
    /// measures what a supervisor process per job costs.
    #[arg(long, default_value = "shared", value_parser = ["shared", "per-job"])]
    supervisors: String,
}

/// The type of the file system holding `path` or, while it does not exist yet, its nearest
/// existing ancestor (the longest mount point above it in `/proc/mounts`), if that can be told.
fn filesystem_of(path: &std::path::Path) -> Option<String> {
    let path = path.ancestors().find_map(|p| std::fs::canonicalize(p).ok())?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(dir).then(|| (dir.len(), fstype.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fstype)| fstype)
}

/// CPU time the whole machine spent busy so far (every CPU, all but idle and iowait), from
/// `/proc/stat`. Supervisors belong to init, not to the agent, so their cost and the jobs' own
/// shows only here; other work on a shared machine shows too.
fn machine_busy() -> Duration {
    let ticks = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        let f: Vec<u64> = s.lines().next()?.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal ...
        (f.len() >= 8).then(|| f[0] + f[1] + f[2] + f[5] + f[6] + f[7])
    });
    Duration::from_millis(ticks.unwrap_or(0) * 10)
}

pub(super) fn run(args: ProcessesArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs >= 1 && args.concurrency >= 1, "--jobs and --concurrency must be at least 1");
    anyhow::ensure!(!args.command.trim().is_empty(), "--command must name a program");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let tmp = tempfile_dir()?;
        let server = BenchServer::start(&tmp, &config(&tmp, "max_jobs_per_request = 10000"))?;
        let http = reqwest::Client::new();
        server.ready(&http).await?;
        let url = server.url.clone();
        let r = http.post(format!("{url}/v1/queues")).json(&json!({"name": "bench"})).send().await?;
        anyhow::ensure!(r.status().is_success(), "creating queue bench: {}", r.status());

        // Each job asks for 1 millicpu of a node with `concurrency` millicpus, and memory enough
        // to start a program under a limit; its CPU limit, a core, keeps a quota of 1m (which
        // would throttle even `true`) out of what `--limits` measures.
        let job = json!({"pod_spec": {"containers": [{"name": "bench", "command": args.command.split_whitespace().collect::<Vec<_>>(),
            "resources": {"requests": {"cpu": "1m", "memory": "64Mi"}, "limits": {"cpu": "1"}}}]}});
        let mut submitted = 0;
        while submitted < args.jobs {
            let n = 1000.min(args.jobs - submitted);
            let body = json!({"queue": "bench", "job_set": "bench", "jobs": vec![job.clone(); n as usize]});
            let r = http.post(format!("{url}/v1/jobs")).json(&body).send().await?;
            anyhow::ensure!(r.status().is_success(), "submitting: {} {}", r.status(), r.text().await.unwrap_or_default());
            submitted += n;
        }
        let agent_dir = match &args.agent_dir {
            Some(base) => {
                let dir = base.join(format!("convoy-bench-agent-{}-{}", std::process::id(), super::nanos()));
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                dir
            }
            None => tmp.join("agent"),
        };
        let agent_fs = filesystem_of(&agent_dir);
        let agent_cfg = tmp.join("agent.toml");
        std::fs::write(
            &agent_cfg,
            format!(
                "executor = \"bench\"\nservers = [\"{url}\"]\ndata_dir = \"{}\"\nruntime = \"process\"\n\
                 [process]\nnode = \"bench-node\"\nsupervisors = \"{}\"\n\
                 allocatable = {{ cpu = \"{}m\", memory = \"1Pi\" }}\n[process.limits]\nenabled = {}\n",
                agent_dir.display(),
                args.supervisors,
                args.concurrency,
                args.limits,
            ),
        )?;
        let server_cpu_before = server.cpu_time();
        let machine_before = machine_busy();
        let start = Instant::now();
        let mut agent = Command::new(std::env::current_exe()?)
            .args(["agent", "--config"])
            .arg(&agent_cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(tmp.join("agent.log"))?))
            .spawn()
            .context("starting the process agent")?;
        // Killed at the end, the agent cannot remove its cgroup slots: this does (also when the
        // run fails), or every run would leave hundreds behind.
        let slots = SlotCleanup(agent_dir.clone());
        let pid = agent.id();
        let mut agent_cpu;
        let mut machine;
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Ok(Some(status)) = agent.try_wait() {
                bail!("the agent exited ({status}); see {}", tmp.join("agent.log").display());
            }
            agent_cpu = process_cpu(pid);
            machine = machine_busy().saturating_sub(machine_before);
            let left = live_jobs(&http, &url, "bench\"").await?;
            if left == 0 {
                break;
            }
            if start.elapsed() > Duration::from_secs(args.timeout_seconds) {
                bail!("{left} of {} jobs had not ended within {} s", args.jobs, args.timeout_seconds);
            }
        }
        let took = start.elapsed();
        let server_cpu = server.cpu_time().saturating_sub(server_cpu_before);
        let _ = agent.kill();
        let _ = agent.wait();
        drop(slots);
        let v: Value =
            http.get(format!("{url}/v1/jobs?queue=bench&state=failed&limit=1000")).send().await?.json().await?;
        let failed = v["jobs"].as_array().map_or(0, Vec::len);
        let supervisor_processes = supervisor_processes(&agent_dir.join("runs"));
        let per_job = |d: Duration| (d.as_secs_f64() * 1000.0 / args.jobs as f64 * 100.0).round() / 100.0;
        let out: Value = json!({
            "jobs": args.jobs,
            "command": args.command,
            "concurrency": args.concurrency,
            "limits": args.limits,
            "supervisors": args.supervisors,
            "supervisor_processes": supervisor_processes,
            "seconds": (took.as_secs_f64() * 100.0).round() / 100.0,
            "jobs_per_sec": (args.jobs as f64 / took.as_secs_f64()).round(),
            "failed": failed,
            "agent_cpu_ms_per_job": per_job(agent_cpu),
            "server_cpu_ms_per_job": per_job(server_cpu),
            "machine_cpu_ms_per_job": per_job(machine),
            "agent_dir_filesystem": agent_fs,
        });
        println!("{out}");
        drop(server);
        let _ = std::fs::remove_dir_all(&tmp);
        let _ = std::fs::remove_dir_all(&agent_dir);
        anyhow::ensure!(failed == 0, "{failed} jobs failed");
        Ok(())
    })
}

/// How many processes supervised the runs in `runs` (counted after the runs, from each run
/// directory's `supervisor` stamps): one per job with `per-job` supervisors, a few hosts with
/// `shared` ones.
fn supervisor_processes(runs: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(runs) else { return 0 };
    use convoy::agent::runtime::process::rundir::{RunDir, SUPERVISOR};
    // A pid and its start time name one process.
    let stamps: std::collections::HashSet<(i32, u64)> = entries
        .flatten()
        .filter_map(|e| RunDir::new(e.path()).read_stamp(SUPERVISOR).ok().flatten())
        .map(|s| (s.pid, s.start_time))
        .collect();
    stamps.len()
}

/// Removes the cgroup slots of the benchmark's agent when dropped.
struct SlotCleanup(std::path::PathBuf);

impl Drop for SlotCleanup {
    fn drop(&mut self) {
        use convoy::agent::runtime::process::confine::{LimitsConfig, cgroup, slots};
        let Ok(id) = std::fs::read_to_string(self.0.join(slots::SLOT_ID_FILE)) else { return };
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let limits = LimitsConfig::default();
        cgroup::remove_agent_slots(&limits.cgroup_root, &own, &limits.cgroup_name, id.trim());
    }
}
