//! The fake runtime: nodes declared in the config, jobs that only pretend to run. A job "runs" for
//! the seconds in annotation `convoy.io/fake-runtime` (default 0) and ends with the exit code in
//! `convoy.io/fake-exit-code` (default 0). Built for load tests of thousands of nodes and
//! hundreds of thousands of jobs: one timer heap and one task for all runs. With `journal`,
//! runs are recorded in a file ([`journal`]) and survive an agent restart.

pub mod journal;

use super::{EventSink, Runtime, RuntimeError, Started, no_output, now_ms, run_event};
use crate::agent::config::{FakeConfig, node_labels};
use crate::model::api::{HeldRun, LeaseOrder, NodeReport, OutputChunk, OutputWanted, RunEventKind};
use crate::model::{JobId, NodeName, Resources, RunId, RunState};
use journal::{Entry, Journal};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Annotation: how long the job runs, in seconds (fractions allowed).
pub(crate) const ANNOTATION_RUNTIME: &str = "convoy.io/fake-runtime";
/// Annotation: the job's exit code.
pub(crate) const ANNOTATION_EXIT_CODE: &str = "convoy.io/fake-exit-code";

/// Simulated nodes and runs.
pub(crate) struct FakeRuntime {
    nodes: Vec<NodeReport>,
    node_names: HashSet<NodeName>,
    state: Arc<Mutex<FakeState>>,
    journal: Option<Arc<Journal>>,
    wake: Arc<Notify>,
    sink: EventSink,
    timer: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct FakeState {
    runs: HashMap<RunId, FakeRun>,
    /// When runs end, earliest first.
    timers: BinaryHeap<Reverse<(Instant, RunId)>>,
}

struct FakeRun {
    job_id: JobId,
    exit_code: i32,
    finished: bool,
}

fn lock(m: &Mutex<FakeState>) -> std::sync::MutexGuard<'_, FakeState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeRuntime {
    /// The nodes of `config`, its journal in `data_dir` if it keeps one; starts the timer task
    /// (needs a Tokio runtime).
    pub(crate) fn new(config: &FakeConfig, data_dir: &std::path::Path, sink: EventSink) -> Result<Self, RuntimeError> {
        let mut nodes = Vec::new();
        for g in &config.node_groups {
            for i in 0..g.count {
                let name = NodeName::new(&format!("{}-{i}", g.name_prefix))
                    .map_err(|e| RuntimeError::Setup(format!("fake node name: {e}")))?;
                nodes.push(NodeReport {
                    name,
                    pool: g.pool.clone(),
                    labels: node_labels(&g.labels, &g.reserved_for),
                    taints: g.taints.clone(),
                    allocatable: g.allocatable.clone(),
                    unallocatable: Resources::new(),
                    unschedulable: false,
                });
            }
        }
        let node_names: HashSet<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
        if node_names.len() != nodes.len() {
            return Err(RuntimeError::Setup("two fake node groups produce the same node name".into()));
        }
        let journal = match config.journal {
            true => Some(Arc::new(
                Journal::open(data_dir).map_err(|e| RuntimeError::io("opening the fake runtime's journal", e))?,
            )),
            false => None,
        };
        let state = Arc::new(Mutex::new(FakeState::default()));
        let wake = Arc::new(Notify::new());
        let timer = tokio::spawn(tracing::Instrument::in_current_span(run_timers(
            state.clone(),
            wake.clone(),
            sink.clone(),
            journal.clone(),
        )));
        Ok(Self { nodes, node_names, state, journal, wake, sink, timer })
    }

    fn record(&self, entry: &Entry) {
        if let Some(j) = &self.journal {
            j.append(entry);
        }
    }

    /// Puts a run in the timer heap to end at `at`.
    fn arm(&self, st: &mut FakeState, at: Instant, run_id: RunId) {
        let earliest = st.timers.peek().is_none_or(|Reverse((t, _))| at < *t);
        st.timers.push(Reverse((at, run_id)));
        if earliest {
            self.wake.notify_one();
        }
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// Ends runs when their time is up.
async fn run_timers(state: Arc<Mutex<FakeState>>, wake: Arc<Notify>, sink: EventSink, journal: Option<Arc<Journal>>) {
    loop {
        let next = {
            let now = Instant::now();
            let mut st = lock(&state);
            while let Some(Reverse((at, run_id))) = st.timers.peek().copied() {
                if at > now {
                    break;
                }
                st.timers.pop();
                if let Some(run) = st.runs.get_mut(&run_id).filter(|r| !r.finished) {
                    run.finished = true;
                    if let Some(j) = &journal {
                        let at_ms = now_ms();
                        j.append(&Entry::End { run_id, at_ms, exit_code: run.exit_code, killed: false });
                    }
                    sink.send(final_event(run_id, run.job_id, run.exit_code));
                }
            }
            st.timers.peek().map(|Reverse((at, _))| *at)
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

fn final_event(run_id: RunId, job_id: JobId, exit_code: i32) -> crate::model::api::RunEventReport {
    let kind = if exit_code == 0 { RunEventKind::Succeeded } else { RunEventKind::Failed };
    let mut ev = run_event(run_id, job_id, kind);
    ev.exit_code = Some(exit_code);
    ev
}

/// Run time and exit code from the annotations.
fn parse_annotations(lease: &LeaseOrder) -> Result<(Duration, i32), RuntimeError> {
    let runtime = match lease.annotations.get(ANNOTATION_RUNTIME) {
        None => Duration::ZERO,
        Some(s) => s.trim().parse::<f64>().ok().and_then(|v| Duration::try_from_secs_f64(v).ok()).ok_or_else(|| {
            RuntimeError::InvalidJob(format!("annotation {ANNOTATION_RUNTIME}: {s:?} is not a number of seconds"))
        })?,
    };
    let exit_code = match lease.annotations.get(ANNOTATION_EXIT_CODE) {
        None => 0,
        Some(s) => s.trim().parse::<i32>().map_err(|_| {
            RuntimeError::InvalidJob(format!("annotation {ANNOTATION_EXIT_CODE}: {s:?} is not an integer"))
        })?,
    };
    Ok((runtime, exit_code))
}

impl Runtime for FakeRuntime {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn output(&self, want: OutputWanted) -> OutputChunk {
        no_output(&want, "fake runs start no process and have no output")
    }

    async fn recover(&self) -> Result<Vec<HeldRun>, RuntimeError> {
        // Without a journal, fake runs live in memory only: an agent restart loses them, as a
        // node loss would.
        let Some(journal) = &self.journal else { return Ok(Vec::new()) };
        let runs = journal.read().map_err(|e| RuntimeError::io("reading the fake runtime's journal", e))?;
        let now_ms = now_ms();
        let mut held = Vec::new();
        let mut st = lock(&self.state);
        for (run_id, r) in runs.into_iter().filter(|(_, r)| !r.forgotten) {
            let exit_code = r.ended.map_or(r.exit_code, |(_, code, _)| code);
            st.runs.insert(run_id, FakeRun { job_id: r.job_id, exit_code, finished: true });
            let state = match r.ended {
                // Ended, perhaps while the agent was away: its end is reported again.
                Some((_, code, killed)) => {
                    let mut ev = final_event(run_id, r.job_id, code);
                    if killed {
                        ev.reason = Some("killed".into());
                    }
                    self.sink.send(ev);
                    if code == 0 && !killed { RunState::Succeeded } else { RunState::Failed }
                }
                None if r.ends_at_ms <= now_ms => {
                    self.record(&Entry::End { run_id, at_ms: r.ends_at_ms, exit_code, killed: false });
                    self.sink.send(final_event(run_id, r.job_id, exit_code));
                    if exit_code == 0 { RunState::Succeeded } else { RunState::Failed }
                }
                None => {
                    if let Some(run) = st.runs.get_mut(&run_id) {
                        run.finished = false;
                    }
                    let left = Duration::from_millis((r.ends_at_ms - now_ms) as u64);
                    self.arm(&mut st, Instant::now() + left, run_id);
                    RunState::Running
                }
            };
            held.push(HeldRun { run_id, job_id: r.job_id, state });
        }
        Ok(held)
    }

    async fn nodes(&self) -> Result<Vec<NodeReport>, RuntimeError> {
        Ok(self.nodes.clone())
    }

    async fn start(&self, lease: LeaseOrder) -> Result<Started, RuntimeError> {
        let (run_id, job_id) = (lease.run_id, lease.job_id);
        if lock(&self.state).runs.contains_key(&run_id) {
            return Ok(Started::AlreadyKnown);
        }
        if !self.node_names.contains(&lease.node) {
            return Err(RuntimeError::NodeUnavailable(format!("no fake node {}", lease.node)));
        }
        let (runtime, exit_code) = parse_annotations(&lease)?;
        let at_ms = now_ms();
        let ends_at_ms = at_ms.saturating_add(runtime.as_millis() as i64);
        self.record(&Entry::Start { run_id, job_id, at_ms, ends_at_ms, exit_code });
        self.sink.send(run_event(run_id, job_id, RunEventKind::Pending));
        self.sink.send(run_event(run_id, job_id, RunEventKind::Running));
        let mut st = lock(&self.state);
        if runtime.is_zero() {
            st.runs.insert(run_id, FakeRun { job_id, exit_code, finished: true });
            self.record(&Entry::End { run_id, at_ms, exit_code, killed: false });
            self.sink.send(final_event(run_id, job_id, exit_code));
        } else {
            st.runs.insert(run_id, FakeRun { job_id, exit_code, finished: false });
            self.arm(&mut st, Instant::now() + runtime, run_id);
        }
        Ok(Started::New)
    }

    async fn kill(&self, run_id: RunId, _grace: Duration, reason: &str) -> Result<bool, RuntimeError> {
        let mut st = lock(&self.state);
        let Some(run) = st.runs.get_mut(&run_id) else { return Ok(false) };
        if !run.finished {
            run.finished = true;
            let exit_code = 128 + libc::SIGTERM;
            if let Some(j) = &self.journal {
                j.append(&Entry::End { run_id, at_ms: now_ms(), exit_code, killed: true });
            }
            let mut ev = run_event(run_id, run.job_id, RunEventKind::Failed);
            ev.exit_code = Some(exit_code);
            ev.reason = Some("killed".into());
            ev.message = Some(reason.to_string());
            self.sink.send(ev);
        }
        Ok(true)
    }

    async fn forget(&self, run_id: RunId) -> Result<(), RuntimeError> {
        if lock(&self.state).runs.remove(&run_id).is_some() {
            self.record(&Entry::Forget { run_id });
        }
        Ok(())
    }
}
