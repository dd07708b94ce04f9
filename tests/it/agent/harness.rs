//! Builders shared by the agent tests.

use convoy::agent::{AgentConfig, RuntimeKind};
use convoy::model::api::LeaseOrder;
use convoy::model::{JobId, JobSetName, NodeName, PriorityClassName, QueueName, RunId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static SEQ: AtomicU64 = AtomicU64::new(1);

/// A fresh (run id, job id) pair.
pub(super) fn ids() -> (RunId, JobId) {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
    let n = SEQ.fetch_add(1, Ordering::Relaxed) as u128;
    let salt = u128::from(std::process::id()) << 64;
    (RunId::from_parts(ms, salt | (n << 1)), JobId::from_parts(ms, salt | (n << 1) | 1))
}

/// A lease of `pod_spec` on `node`.
pub(super) fn lease(node: &str, pod_spec: serde_json::Value) -> LeaseOrder {
    let (run_id, job_id) = ids();
    LeaseOrder {
        run_id,
        job_id,
        queue: QueueName::new("team-a").expect("queue"),
        job_set: JobSetName::new("set-1").expect("job set"),
        node: NodeName::new(node).expect("node"),
        priority_class: PriorityClassName::new("default").expect("class"),
        pod_spec: convoy::model::api::raw_json(&pod_spec),
        services: vec![],
        ingresses: vec![],
        annotations: Default::default(),
        labels: Default::default(),
        termination_grace_period_seconds: 1.0,
        active_deadline_seconds: 0,
        namespace: None,
        owner: None,
        output_tail_bytes: None,
    }
}

/// A lease running `sh -c script` on `node`.
pub(super) fn shell_lease(node: &str, script: &str) -> LeaseOrder {
    lease(node, serde_json::json!({"containers": [{"name": "main", "image": "none", "command": ["sh", "-c", script]}]}))
}

/// An agent config for tests: quick polls and retries.
pub(super) fn config(servers: Vec<String>, runtime: RuntimeKind, data_dir: &std::path::Path) -> AgentConfig {
    let mut c = AgentConfig::new(servers);
    c.executor = convoy::model::ExecutorName::new("test-executor").expect("executor");
    c.runtime = runtime;
    c.data_dir = data_dir.to_path_buf();
    c.poll_wait = Duration::from_secs(1);
    c.max_backoff = Duration::from_secs(1);
    c.process.node = NodeName::new("node-1").expect("node");
    c.process.supervisor = Some(env!("CARGO_BIN_EXE_convoy").into());
    c
}

/// An agent running in this process until the handle is stopped.
pub(super) struct InProcessAgent {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), convoy::agent::AgentError>>>,
}

impl InProcessAgent {
    pub(super) fn start(config: AgentConfig) -> Self {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(convoy::agent::run(config, async move {
            let _ = rx.await;
        }));
        Self { stop: Some(tx), task: Some(task) }
    }

    /// Graceful stop; returns what `run` returned.
    pub(super) async fn stop(mut self) -> Result<(), convoy::agent::AgentError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let task = self.task.take().expect("task");
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("agent stops within 10 s").expect("agent task")
    }
}

impl Drop for InProcessAgent {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Logs of the library to the test output (`RUST_LOG=debug cargo nextest run …`).
pub(super) fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_test_writer()
        .try_init();
}
