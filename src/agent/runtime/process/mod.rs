//! The process runtime (bare metal): this machine is one node; each run is the job's first
//! container command, run under a supervisor that outlives the agent: a thread of a supervisor
//! host for an unconfined job ([`host`]), the holder of its cgroup slot for a job confined in
//! cgroups, or a process forked by the agent's spawner for any other confined job and for every
//! job with `supervisors = "per-job"` ([`spawner`]).
//!
//! Every run has a directory (`<data_dir>/runs/<run_id>/`, see [`rundir`]) that appears
//! atomically with the lease in it. Its existence makes `start` idempotent; after a restart the
//! agent rebuilds its runs from these directories and reports what happened meanwhile.
//!
//! The room holds everything only this runtime uses: the host, the spawner and the supervisor
//! they run ([`host`], [`spawner`], [`supervise`]), the run directories ([`rundir`]), the
//! run-end notices (`ended`), confinement ([`confine`]) and the few system calls they share
//! (`os`), and starting a confined job (`spawn_confined`).

pub mod confine;
mod ended;
pub mod host;
mod launch;
mod os;
pub mod rundir;
mod spawn_confined;
pub mod spawner;
pub mod supervise;

use super::{
    EventSink, LOG_TAIL_MAX_BYTES, OUTPUT_CHUNK_BYTES, OUTPUT_TAIL_BYTES, Runtime, RuntimeError, Started, no_output,
    now_ms, output_chunk, run_event, state_after, tail_text,
};
use crate::agent::config::{AgentConfig, Supervisors, node_labels};
use crate::agent::tasks::OwnedTasks;
use crate::model::api::{
    HeldRun, LeaseOrder, NodeReport, OutputChunk, OutputStream, OutputWanted, RunEventKind, RunEventReport,
};
use crate::model::{JobId, NodeFault, ResourceName, Resources, RunId};
use confine::devices::Assignment;
use confine::user::UnixUser;
use confine::{Confiner, PlanError};
use ended::Notices;
use rundir::{ExitRecord, RunDir};
use spawner::{Serving, SpawnRequest, SpawnerClient};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a run's directory is checked for progress, at most: the first check comes after
/// [`WATCH_FIRST`], and the wait doubles from there. The supervisor's run-end notice
/// ([`ended`]) wakes the check at once; the checks find what a notice cannot tell
/// (the job started, the supervisor died) and ends whose notice was lost.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// The first wait between checks of a run's directory: short jobs are seen running and ending
/// at the first checks (`convoy bench processes`: 991–996 jobs/s with 5 ms, 968–972 with 25 ms).
const WATCH_FIRST: Duration = Duration::from_millis(5);
/// How often directories of reported runs are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(3600);
/// How often cgroup slots idle for [`confine::SLOT_IDLE`] are removed.
const SLOT_SWEEP_INTERVAL: Duration = Duration::from_secs(15);
/// Reason of a run whose supervisor could not be kept alive: the node's fault, the job returns
/// to the queue.
const REASON_SUPERVISOR_FAILED: &str = "supervisor failed";
/// Exit reason of a run whose supervisor vanished while the job ran.
const REASON_SUPERVISOR_LOST: &str = "supervisor lost";

/// Runs jobs as local processes.
pub(crate) struct ProcessRuntime {
    inner: Arc<Inner>,
    /// Watchers of runs and the sweeper; aborted when the runtime is dropped.
    tasks: OwnedTasks,
}

struct Inner {
    runs_dir: PathBuf,
    node: NodeReport,
    supervisor_exe: PathBuf,
    keep_finished: Duration,
    sink: EventSink,
    /// Runs not yet forgotten: started here or found at recovery.
    runs: Mutex<HashMap<RunId, JobId>>,
    /// The processes that fork supervisors, each started on first use and again if it dies.
    /// Each answers one request at a time (a fork, then the supervisor taking its lock): with
    /// two, one forks while the other's answer travels back and the next request is made.
    spawners: [tokio::sync::Mutex<Option<SpawnerClient>>; SPAWNERS],
    /// The supervisor hosts of unconfined jobs (none used with `supervisors = "per-job"`), two
    /// for the same reason.
    hosts: [tokio::sync::Mutex<Option<SpawnerClient>>; SPAWNERS],
    /// Where the next start looks for a free spawner or host first.
    next_spawner: std::sync::atomic::AtomicUsize,
    /// `[process] supervisors`.
    supervisors: Supervisors,
    /// Cgroups, devices and users of jobs.
    confiner: Confiner,
    /// Run-end notices from supervisors, and their socket (none if it could not be made: ends
    /// are then noticed by looking only).
    ended: Arc<Notices>,
    ended_socket: Option<PathBuf>,
}

/// The command line and environment of a job, taken from its pod spec.
#[derive(Debug, Clone, PartialEq)]
struct JobCommand {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    workdir: Option<PathBuf>,
}

impl ProcessRuntime {
    /// A runtime for this machine; creates `<data_dir>/runs`.
    pub(crate) fn new(config: &AgentConfig, sink: EventSink) -> Result<Self, RuntimeError> {
        // Absolute, so supervisors and jobs (which get it as CONVOY_RUN_DIR) see the same path
        // whatever their working directory.
        let data_dir = std::path::absolute(&config.data_dir)
            .map_err(|e| RuntimeError::io(format!("resolving {}", config.data_dir.display()), e))?;
        let runs_dir = data_dir.join("runs");
        std::fs::create_dir_all(&runs_dir)
            .map_err(|e| RuntimeError::io(format!("creating {}", runs_dir.display()), e))?;
        let supervisor_exe = match &config.process.supervisor {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(|e| RuntimeError::io("finding the convoy executable", e))?,
        };
        let p = &config.process;
        let slot_id = confine::slots::agent_slot_id(&data_dir).map_err(|e| {
            RuntimeError::io(format!("reading or making the cgroup slot id in {}", data_dir.display()), e)
        })?;
        let confiner =
            Confiner::new(&p.limits, p.gpus.clone(), p.run_as.clone(), p.allow_root, os::cpu_count() as usize, slot_id);
        let mut allocatable = Resources::new();
        allocatable.set(ResourceName::cpu(), os::cpu_count() as i64 * 1000);
        allocatable.set(ResourceName::gpu(), confiner.gpu_count() as i64 * 1000);
        let mem = os::mem_total_bytes().map_err(|e| RuntimeError::io("reading /proc/meminfo", e))?;
        allocatable.set(ResourceName::memory(), i64::try_from(mem).unwrap_or(i64::MAX));
        if let Some(over) = &config.process.allocatable {
            for (name, v) in over.iter() {
                allocatable.set(name.clone(), v);
            }
        }
        let mut labels = node_labels(&p.labels, &p.reserved_for);
        labels.insert(confine::CONFINEMENT_LABEL.to_string(), confiner.label().to_string());
        labels.insert(crate::model::node::RUNTIME_LABEL.to_string(), "process".to_string());
        let node = NodeReport {
            name: p.node.clone(),
            pool: p.pool.clone(),
            labels,
            taints: p.taints.clone(),
            allocatable,
            unallocatable: Resources::new(),
            unschedulable: false,
        };
        let ended = Arc::new(Notices::default());
        let socket_path = data_dir.join(ended::SOCKET);
        // A receiving task needs a runtime; without one (never the agent's case) ends are
        // noticed by looking.
        let ended_socket = match (tokio::runtime::Handle::try_current(), Notices::bind(&socket_path)) {
            (Ok(_), Ok(socket)) => Some((socket, socket_path)),
            (_, Err(e)) => {
                tracing::warn!(path = %socket_path.display(), error = %e, "no run-end socket; run ends are noticed by looking at run directories");
                None
            }
            (Err(_), Ok(_)) => None,
        };
        let tasks = OwnedTasks::default();
        let ended_socket = ended_socket.map(|(socket, path)| {
            tasks.spawn(ended.clone().serve(socket));
            path
        });
        let inner = Inner {
            ended,
            ended_socket,
            runs_dir,
            node,
            supervisor_exe,
            keep_finished: p.keep_finished,
            sink,
            runs: Mutex::new(HashMap::new()),
            spawners: std::array::from_fn(|_| tokio::sync::Mutex::new(None)),
            hosts: std::array::from_fn(|_| tokio::sync::Mutex::new(None)),
            next_spawner: std::sync::atomic::AtomicUsize::new(0),
            supervisors: p.supervisors,
            confiner,
        };
        Ok(Self { inner: Arc::new(inner), tasks })
    }

    fn spawn_task(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(fut);
    }
}

/// Stops waiting for a run's end notice when its watch ends, however it ends.
struct Forget<'a>(&'a Notices, RunId);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

/// Spawner processes per agent (see `Inner::spawners`).
const SPAWNERS: usize = 2;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn run_dir(&self, run_id: RunId) -> RunDir {
        RunDir::new(self.runs_dir.join(run_id.to_string()))
    }

    /// Starts a supervisor for the run in `dir` through the spawner; returns once it holds the
    /// run directory's lock.
    async fn start_supervisor(
        &self,
        dir: &RunDir,
        lease: &LeaseOrder,
        (cmd, asked): (&JobCommand, &Resources),
        assignment: &Assignment,
        user: Option<UnixUser>,
    ) -> std::io::Result<()> {
        let (confine, confine_env) = self.confiner.confinement(lease.run_id, asked, assignment, user);
        let mut env = cmd.env.clone();
        env.extend(confine_env);
        env.extend([
            ("CONVOY_RUN_ID".to_string(), lease.run_id.to_string()),
            ("CONVOY_JOB_ID".to_string(), lease.job_id.to_string()),
            ("CONVOY_QUEUE".to_string(), lease.queue.as_str().to_string()),
            ("CONVOY_JOB_SET".to_string(), lease.job_set.as_str().to_string()),
            ("CONVOY_RUN_DIR".to_string(), dir.path.to_string_lossy().into_owned()),
        ]);
        let req = SpawnRequest {
            run_dir: dir.path.clone(),
            grace_seconds: lease.termination_grace_period_seconds,
            deadline_seconds: (lease.active_deadline_seconds > 0).then_some(lease.active_deadline_seconds),
            workdir: cmd.workdir.clone(),
            command: cmd.argv.clone(),
            env,
            confine,
            ended_socket: self.ended_socket.clone(),
        };
        if self.supervisors == Supervisors::Shared && req.confine == confine::Confinement::default() {
            match self.ask(Serving::Host, None, &req).await {
                // Hosts hold a few descriptors per run: past what their limit allows, a run gets
                // a supervisor process, as confined ones do.
                Err(e) if e.to_string().starts_with(host::FULL) => {
                    tracing::debug!(error = %e, "a supervisor process for this run");
                }
                other => return other,
            }
        }
        self.ask(Serving::Spawner, assignment.slot, &req).await
    }

    /// Sends `req` to a spawner or host (`serving`), the one of `slot` if given, started if
    /// need be; once more to a fresh one if it died or is a host that is stopping.
    async fn ask(&self, serving: Serving, slot: Option<u32>, req: &SpawnRequest) -> std::io::Result<()> {
        let pool = match serving {
            Serving::Host => &self.hosts,
            Serving::Spawner => &self.spawners,
        };
        // A slot's runs are supervised by its holder, a child of one spawner: always that one.
        let mut spawner = match slot {
            Some(n) => pool[n as usize % SPAWNERS].lock().await,
            None => {
                let first = self.next_spawner.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match (0..SPAWNERS).find_map(|k| pool[(first + k) % SPAWNERS].try_lock().ok()) {
                    Some(guard) => guard,
                    None => pool[first % SPAWNERS].lock().await,
                }
            }
        };
        // One retry with a fresh spawner: the old one may have died between two jobs, or be a
        // host that was told to stop (it lives on until its runs ended).
        for attempt in 0..2 {
            if !spawner.as_mut().is_some_and(SpawnerClient::alive) {
                *spawner = Some(SpawnerClient::start(&self.supervisor_exe, serving)?);
            }
            let Some(client) = spawner.as_mut() else { continue };
            match client.spawn(req).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt == 0 && e.to_string().starts_with(host::STOPPING) => {
                    tracing::warn!(error = %e, "the supervisor host is stopping; starting another");
                    *spawner = None;
                }
                Err(e) if attempt == 0 && !client.alive() => {
                    tracing::warn!(error = %e, ?serving, "the supervisor spawner died; starting another");
                }
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("the supervisor spawner keeps dying"))
    }

    /// The final event for an exit record.
    fn final_event(&self, dir: &RunDir, run_id: RunId, job_id: JobId, rec: &ExitRecord) -> RunEventReport {
        let (kind, node_fault) = if rec.succeeded() {
            (RunEventKind::Succeeded, None)
        } else if rec.exit_code.is_none()
            && matches!(rec.reason.as_deref(), Some(REASON_SUPERVISOR_FAILED | confine::REASON_CONFINE_FAILED))
        {
            (RunEventKind::Returned, Some(NodeFault::NotStarted))
        } else if rec.exit_code.is_none() && rec.reason.as_deref() == Some(REASON_SUPERVISOR_LOST) {
            // The machine stopped the supervisor under the job (a reboot, the OOM killer): the
            // job did nothing wrong.
            (RunEventKind::Failed, Some(NodeFault::NodeLost))
        } else {
            (RunEventKind::Failed, None)
        };
        let mut ev = run_event(run_id, job_id, kind);
        ev.node_fault = node_fault;
        ev.time_ms = Some(rec.finished_at_ms);
        ev.usage = rec.usage;
        ev.exit_code = rec.exit_code;
        ev.reason = rec.reason.clone();
        ev.message = rec.message.clone();
        // As much as the server keeps (its lease says), so its copy is whole for what it holds.
        let limit =
            dir.read_lease().ok().and_then(|l| l.output_tail_bytes).map_or(LOG_TAIL_MAX_BYTES, |b| {
                usize::try_from(b).unwrap_or(LOG_TAIL_MAX_BYTES).min(LOG_TAIL_MAX_BYTES)
            });
        ev.log_tail = dir.log_tail(limit);
        ev
    }

    /// Follows a run until its exit record appears, reporting `running` and the final event. Also
    /// takes over when the supervisor vanished without an exit record.
    async fn watch(self: Arc<Self>, dir: RunDir, run_id: RunId, job_id: JobId, last: RunEventKind) {
        self.follow(&dir, run_id, job_id, last).await;
        // The job and everything it started are gone once its end is recorded (or its cgroup
        // slot says that something stayed).
        self.confiner.release(run_id, dir.has(confine::CGROUP_STUCK_FILE), dir.has(rundir::PID));
    }

    async fn follow(&self, dir: &RunDir, run_id: RunId, job_id: JobId, mut last: RunEventKind) {
        let dir = dir.clone();
        let mut respawned = false;
        let mut wait = WATCH_FIRST;
        let ended = self.ended.watch(run_id);
        let _forget = Forget(&self.ended, run_id);
        loop {
            match dir.read_exit() {
                Ok(Some(rec)) => {
                    if last == RunEventKind::Pending && dir.has(rundir::PID) {
                        // A job quicker than one check still ran: say so before its end.
                        self.sink.send(run_event(run_id, job_id, RunEventKind::Running));
                    }
                    tracing::info!(%run_id, %job_id, exit_code = ?rec.exit_code, reason = ?rec.reason, "run ended");
                    self.sink.send(self.final_event(&dir, run_id, job_id, &rec));
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(%run_id, %job_id, error = %e, "unreadable exit record");
                    let mut ev = run_event(run_id, job_id, RunEventKind::Failed);
                    ev.reason = Some("unreadable exit record".into());
                    ev.message = Some(e.to_string());
                    self.sink.send(ev);
                    return;
                }
            }
            if last == RunEventKind::Pending && dir.has(rundir::PID) {
                self.sink.send(run_event(run_id, job_id, RunEventKind::Running));
                last = RunEventKind::Running;
            }
            // A supervisor holds the lock from before the spawner answers until after it wrote the
            // exit record.
            if !dir.supervisor_alive() && matches!(dir.read_exit(), Ok(None)) {
                self.take_over(&dir, run_id, job_id, &mut respawned).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = ended.notified() => {}
            }
            wait = (wait * 2).min(WATCH_INTERVAL);
        }
    }

    /// The supervisor is gone and left no exit record: stop what is left of the job and record
    /// that, or start a supervisor if the job never started.
    async fn take_over(&self, dir: &RunDir, run_id: RunId, job_id: JobId, respawned: &mut bool) {
        let record = |reason: &str, message: String| ExitRecord {
            exit_code: None,
            signal: None,
            reason: Some(reason.into()),
            message: Some(message),
            finished_at_ms: now_ms(),
            usage: None,
        };
        let write = |rec: ExitRecord| {
            if let Err(e) = dir.write_exit_once(&rec) {
                tracing::error!(%run_id, %job_id, error = %e, "cannot write the exit record");
            }
        };
        if let Ok(Some(job)) = dir.read_stamp(rundir::PID) {
            if job.is_alive() {
                let _ = os::signal_group(job.pid, libc::SIGKILL);
            }
            if !self.confiner.clean_up(run_id, read_devices(dir).slot) {
                let _ = std::fs::write(dir.file(confine::CGROUP_STUCK_FILE), b"");
            }
            tracing::warn!(%run_id, %job_id, "the job's supervisor vanished; job stopped");
            write(record(
                REASON_SUPERVISOR_LOST,
                "the job's supervisor ended without recording the exit status; the job was stopped".into(),
            ));
            return;
        }
        if dir.has(rundir::KILL) {
            write(record(rundir::REASON_KILLED, "stopped before it started".into()));
            return;
        }
        if !*respawned {
            *respawned = true;
            let started = match dir.read_lease().and_then(|lease| {
                let job = job_of(&lease).map_err(std::io::Error::other)?;
                let user =
                    self.confiner.user_for(&lease.queue, lease.owner.as_deref()).map_err(std::io::Error::other)?;
                Ok((lease, job, user))
            }) {
                Ok((lease, (cmd, asked), user)) => {
                    self.start_supervisor(dir, &lease, (&cmd, &asked), &read_devices(dir), user).await
                }
                Err(e) => Err(e),
            };
            match started {
                Ok(()) => {
                    tracing::info!(%run_id, %job_id, "started a supervisor for a run that had none");
                    return;
                }
                Err(e) => tracing::error!(%run_id, %job_id, error = %e, "cannot start a supervisor"),
            }
        }
        let log = dir.supervisor_output();
        write(record(
            REASON_SUPERVISOR_FAILED,
            format!("the supervisor exited without starting the job: {}", tail_text(log.trim(), 2000)),
        ));
    }

    /// Deletes directories of reported runs older than `keep_finished`.
    fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.runs_dir) else { return };
        for entry in entries.flatten() {
            let reported = entry.path().join(rundir::REPORTED);
            let old = std::fs::metadata(&reported)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > self.keep_finished);
            if old && let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(dir = %entry.path().display(), error = %e, "cannot remove an old run directory");
            }
        }
    }
}

/// What a lease gives the process runtime to run, from one reading of its pod spec: the command,
/// and the resources the first container asks for.
fn job_of(lease: &LeaseOrder) -> Result<(JobCommand, Resources), RuntimeError> {
    let spec = lease.pod_spec_value().map_err(RuntimeError::InvalidJob)?;
    let cmd = JobCommand::from_spec(lease.run_id, &spec)?;
    let asked = confine::job_resources(&spec).map_err(RuntimeError::InvalidJob)?;
    Ok((cmd, asked))
}

impl JobCommand {
    /// `command` + `args`, plain `env` values and `workingDir` of the first container.
    #[cfg(test)]
    fn from_lease(lease: &LeaseOrder) -> Result<Self, RuntimeError> {
        Self::from_spec(lease.run_id, &lease.pod_spec_value().map_err(RuntimeError::InvalidJob)?)
    }

    /// The same from run `run_id`'s pod spec.
    fn from_spec(run_id: RunId, pod_spec: &serde_json::Value) -> Result<Self, RuntimeError> {
        let c = pod_spec
            .get("containers")
            .and_then(|c| c.get(0))
            .ok_or_else(|| RuntimeError::InvalidJob("the pod spec has no containers".into()))?;
        let strings = |key: &str| -> Result<Vec<String>, RuntimeError> {
            match c.get(key) {
                None | Some(serde_json::Value::Null) => Ok(Vec::new()),
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or_else(|| {
                            RuntimeError::InvalidJob(format!("containers[0].{key} must be a list of strings"))
                        })
                    })
                    .collect(),
                Some(_) => Err(RuntimeError::InvalidJob(format!("containers[0].{key} must be a list of strings"))),
            }
        };
        let mut argv = strings("command")?;
        if argv.is_empty() {
            return Err(RuntimeError::InvalidJob(
                "the process runtime runs containers[0].command, and the pod spec has none".into(),
            ));
        }
        argv.extend(strings("args")?);
        let mut env = Vec::new();
        if let Some(list) = c.get("env").and_then(|e| e.as_array()) {
            for e in list {
                let Some(name) = e.get("name").and_then(|n| n.as_str()) else {
                    return Err(RuntimeError::InvalidJob("containers[0].env has an entry without a name".into()));
                };
                match e.get("value") {
                    Some(serde_json::Value::String(v)) => env.push((name.to_string(), v.clone())),
                    None | Some(serde_json::Value::Null) if e.get("valueFrom").is_some() => {
                        tracing::warn!(run_id = %run_id, env = name, "valueFrom is not supported by the process runtime; variable left unset");
                    }
                    None | Some(serde_json::Value::Null) => env.push((name.to_string(), String::new())),
                    Some(_) => {
                        return Err(RuntimeError::InvalidJob(format!(
                            "containers[0].env {name}: value must be a string"
                        )));
                    }
                }
            }
        }
        let workdir = c.get("workingDir").and_then(|w| w.as_str()).filter(|w| !w.is_empty()).map(PathBuf::from);
        Ok(JobCommand { argv, env, workdir })
    }
}

impl Drop for ProcessRuntime {
    /// The agent stops: the cgroup slots no run holds go (the held ones stay with their runs,
    /// which go on under their supervisors).
    fn drop(&mut self) {
        self.inner.confiner.sweep_slots(Duration::ZERO);
    }
}

impl Runtime for ProcessRuntime {
    fn name(&self) -> &'static str {
        "process"
    }

    async fn recover(&self) -> Result<Vec<HeldRun>, RuntimeError> {
        let inner = &self.inner;
        let entries = std::fs::read_dir(&inner.runs_dir)
            .map_err(|e| RuntimeError::io(format!("listing {}", inner.runs_dir.display()), e))?;
        let mut held = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            if name.starts_with(".tmp-") {
                // Creation never completed, so nothing started: the lease will come again.
                let _ = std::fs::remove_dir_all(&path);
                continue;
            }
            let Ok(run_id) = name.parse::<RunId>() else {
                tracing::warn!(dir = %path.display(), "not a run directory; ignored");
                continue;
            };
            let dir = RunDir::new(path);
            if dir.has(rundir::REPORTED) {
                continue;
            }
            let lease = match dir.read_lease() {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(%run_id, error = %e, "run directory without a readable lease; ignored");
                    continue;
                }
            };
            let job_id = lease.job_id;
            lock(&inner.runs).insert(run_id, job_id);
            match dir.read_exit() {
                Ok(Some(rec)) => {
                    let ev = inner.final_event(&dir, run_id, job_id, &rec);
                    tracing::info!(%run_id, %job_id, kind = ?ev.kind, "found a run that ended while the agent was away");
                    if dir.has(rundir::PID) {
                        // It ran, maybe before the earlier agent could say so: say so before its
                        // end (the server ignores a repeated `running`).
                        inner.sink.send(run_event(run_id, job_id, RunEventKind::Running));
                    }
                    held.push(HeldRun { run_id, job_id, state: state_after(ev.kind) });
                    inner.sink.send(ev);
                    // Its slot is free again, unless something of it stayed there.
                    inner.confiner.hold(run_id, read_devices(&dir));
                    inner.confiner.release(run_id, dir.has(confine::CGROUP_STUCK_FILE), dir.has(rundir::PID));
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(%run_id, error = %e, "unreadable exit record; watching the run"),
            }
            let kind = if dir.has(rundir::PID) { RunEventKind::Running } else { RunEventKind::Pending };
            inner.confiner.hold(run_id, read_devices(&dir));
            tracing::info!(%run_id, %job_id, state = ?kind, "adopted a run from an earlier agent");
            inner.sink.send(run_event(run_id, job_id, kind));
            held.push(HeldRun { run_id, job_id, state: state_after(kind) });
            self.spawn_task(inner.clone().watch(dir, run_id, job_id, kind));
        }
        inner.sweep();
        let sweeper = inner.clone();
        self.spawn_task(async move {
            loop {
                tokio::time::sleep(SWEEP_INTERVAL).await;
                sweeper.sweep();
            }
        });
        let slots = inner.clone();
        self.spawn_task(async move {
            loop {
                tokio::time::sleep(SLOT_SWEEP_INTERVAL).await;
                slots.confiner.sweep_slots(confine::SLOT_IDLE);
            }
        });
        Ok(held)
    }

    async fn nodes(&self) -> Result<Vec<NodeReport>, RuntimeError> {
        Ok(vec![self.inner.node.clone()])
    }

    async fn start(&self, lease: LeaseOrder) -> Result<Started, RuntimeError> {
        let inner = &self.inner;
        let (run_id, job_id) = (lease.run_id, lease.job_id);
        let dir = inner.run_dir(run_id);
        if lock(&inner.runs).contains_key(&run_id) || dir.path.exists() {
            return Ok(Started::AlreadyKnown);
        }
        if lease.node != inner.node.name {
            return Err(RuntimeError::NodeUnavailable(format!(
                "this agent runs node {}, not {}",
                inner.node.name, lease.node
            )));
        }
        let (cmd, asked) = job_of(&lease)?;
        let user = inner.confiner.user_for(&lease.queue, lease.owner.as_deref()).map_err(plan_error)?;
        let assignment = inner.confiner.assign(run_id, &asked).map_err(plan_error)?;
        if let Err(e) = create_run_dir(&inner.runs_dir, &dir.path, &lease, &assignment) {
            inner.confiner.release(run_id, false, false);
            return Err(e);
        }
        lock(&inner.runs).insert(run_id, job_id);
        if let Err(e) = inner.start_supervisor(&dir, &lease, (&cmd, &asked), &assignment, user).await {
            // A supervisor that failed this way never forked the job.
            inner.confiner.release(run_id, false, false);
            lock(&inner.runs).remove(&run_id);
            let _ = std::fs::remove_dir_all(&dir.path);
            return Err(RuntimeError::io(format!("starting a supervisor with {}", inner.supervisor_exe.display()), e));
        }
        tracing::info!(%run_id, %job_id, command = ?cmd.argv, "started");
        inner.sink.send(run_event(run_id, job_id, RunEventKind::Pending));
        self.spawn_task(inner.clone().watch(dir, run_id, job_id, RunEventKind::Pending));
        Ok(Started::New)
    }

    async fn kill(&self, run_id: RunId, grace: Duration, reason: &str) -> Result<bool, RuntimeError> {
        let dir = self.inner.run_dir(run_id);
        if !dir.path.exists() {
            return Ok(false);
        }
        if dir.has(rundir::EXIT) {
            return Ok(true);
        }
        let order = rundir::KillRecord { grace_seconds: grace.as_secs_f64(), reason: reason.to_string() };
        let bytes = serde_json::to_vec(&order).map_err(|e| RuntimeError::Setup(e.to_string()))?;
        dir.write_atomic(rundir::KILL, &bytes)
            .map_err(|e| RuntimeError::io(format!("writing {}", dir.file(rundir::KILL).display()), e))?;
        // The supervisor also polls for the kill file; the signal only makes it react at once.
        if let Ok(Some(sup)) = dir.read_stamp(rundir::SUPERVISOR)
            && sup.is_alive()
        {
            sup.nudge().map_err(|e| RuntimeError::io("signalling the supervisor", e))?;
        }
        tracing::info!(%run_id, grace_seconds = grace.as_secs_f64(), reason, "stopping");
        Ok(true)
    }

    async fn output(&self, want: OutputWanted) -> OutputChunk {
        let dir = self.inner.run_dir(want.run_id);
        let held = lock(&self.inner.runs).contains_key(&want.run_id);
        let read = tokio::task::spawn_blocking(move || {
            if !dir.path.exists() {
                if !held {
                    // Over and swept (`keep_finished`), or never here: the server answers
                    // from the tail it kept.
                    return Ok(Some(no_output(&want, "the agent no longer keeps this run's output")));
                }
                return Ok(None);
            }
            // The exit record is written once the job has exited: read it first, and the
            // output read after it is whole.
            let done = dir.read_exit()?.is_some();
            let name = match want.stream {
                OutputStream::Stdout => rundir::STDOUT,
                OutputStream::Stderr => rundir::STDERR,
            };
            let (start, bytes) = dir.read_output(name, want.from, OUTPUT_TAIL_BYTES, OUTPUT_CHUNK_BYTES)?;
            // More than one chunk left: not the end yet, whatever the job did.
            let whole = bytes.len() < OUTPUT_CHUNK_BYTES;
            Ok::<_, std::io::Error>(Some(output_chunk(&want, start, &bytes, done && whole)))
        })
        .await;
        match read {
            Ok(Ok(Some(chunk))) => chunk,
            // Not started yet.
            Ok(Ok(None)) => output_chunk(&want, want.from.unwrap_or(0), &[], false),
            Ok(Err(e)) => no_output(&want, format!("reading the run's output: {e}")),
            Err(e) => no_output(&want, format!("reading the run's output: {e}")),
        }
    }

    async fn forget(&self, run_id: RunId) -> Result<(), RuntimeError> {
        lock(&self.inner.runs).remove(&run_id);
        let dir = self.inner.run_dir(run_id);
        if dir.path.exists() {
            dir.mark_reported().map_err(|e| RuntimeError::io(format!("marking {} reported", dir.path.display()), e))?;
        }
        Ok(())
    }
}

/// Creates the run directory with its lease, atomically (a temporary directory
/// renamed into place), so a half-made directory is never mistaken for a started run.
fn create_run_dir(
    runs_dir: &Path,
    final_path: &Path,
    lease: &LeaseOrder,
    assignment: &Assignment,
) -> Result<(), RuntimeError> {
    let tmp = runs_dir.join(format!(".tmp-{}", lease.run_id));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = fill_run_dir(&tmp, final_path, lease, assignment);
    if let Err(e) = &made {
        // Nothing half-made stays behind (the disk may be full).
        let _ = std::fs::remove_dir_all(&tmp);
        if let RuntimeError::Io { source, .. } = e
            && crate::disk_space::is_disk_full(source)
        {
            let source = std::io::Error::new(source.kind(), source.to_string());
            return Err(RuntimeError::DiskFull { dir: runs_dir.display().to_string(), source });
        }
    }
    made
}

/// Writes the lease, the devices and the exit record's room into `tmp`, then
/// renames it to `final_path`.
fn fill_run_dir(
    tmp: &Path,
    final_path: &Path,
    lease: &LeaseOrder,
    assignment: &Assignment,
) -> Result<(), RuntimeError> {
    let ctx = |what: &str| format!("{what} {}", tmp.display());
    std::fs::create_dir(tmp).map_err(|e| RuntimeError::io(ctx("creating"), e))?;
    let bytes = serde_json::to_vec_pretty(lease).map_err(|e| RuntimeError::Setup(e.to_string()))?;
    // Not forced to disk: the rename makes the directory appear whole, and a directory a machine
    // crash loses costs nothing (its job died with the machine; the server re-sends a lease the
    // agent does not report, and counts a started run it does not report as lost).
    std::fs::write(tmp.join(rundir::LEASE), &bytes).map_err(|e| RuntimeError::io(ctx("writing the lease into"), e))?;
    rundir::reserve_exit(tmp).map_err(|e| RuntimeError::io(ctx("setting aside room for the exit record in"), e))?;
    if !assignment.is_empty() {
        let bytes = serde_json::to_vec(assignment).map_err(|e| RuntimeError::Setup(e.to_string()))?;
        std::fs::write(tmp.join(confine::DEVICES_FILE), &bytes)
            .map_err(|e| RuntimeError::io(ctx("writing the devices into"), e))?;
    }
    std::fs::rename(tmp, final_path)
        .map_err(|e| RuntimeError::io(format!("renaming {} to {}", tmp.display(), final_path.display()), e))
}

/// The devices recorded for a run (none when it was given none).
fn read_devices(dir: &RunDir) -> Assignment {
    let path = dir.file(confine::DEVICES_FILE);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            tracing::warn!(file = %path.display(), error = %e, "unreadable devices record; the run holds none");
            Assignment::default()
        }),
        Err(_) => Assignment::default(),
    }
}

fn plan_error(e: PlanError) -> RuntimeError {
    match e {
        PlanError::Job(m) => RuntimeError::InvalidJob(m),
        PlanError::Busy(m) => RuntimeError::NodeUnavailable(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(spec: serde_json::Value) -> LeaseOrder {
        LeaseOrder::sample(spec)
    }

    #[test]
    fn command_from_pod_spec() {
        let l = lease(
            serde_json::json!({"containers": [{"name": "main", "image": "x", "command": ["sh", "-c"], "args": ["echo $A"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"secretKeyRef": {}}}], "workingDir": "/tmp"}]}),
        );
        let c = JobCommand::from_lease(&l).expect("valid");
        assert_eq!(c.argv, ["sh", "-c", "echo $A"]);
        assert_eq!(c.env, [("A".to_string(), "1".to_string())]);
        assert_eq!(c.workdir.as_deref(), Some(Path::new("/tmp")));
        let e = JobCommand::from_lease(&lease(serde_json::json!({"containers": [{"name": "main", "image": "x"}]})))
            .unwrap_err();
        assert!(matches!(e, RuntimeError::InvalidJob(_)), "{e}");
        let e = JobCommand::from_lease(&lease(serde_json::json!({"containers": [{"command": "sh"}]}))).unwrap_err();
        assert!(e.to_string().contains("list of strings"), "{e}");
    }
}
