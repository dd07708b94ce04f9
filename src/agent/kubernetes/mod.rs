//! The Kubernetes runtime: each lease becomes a pod bound to the leased node (plus the job's
//! services and ingresses, owned by the pod); a watch on Convoy's pods turns their status into run
//! events; a kill deletes the pod with the grace period (and with grace 0 if it is still there
//! well after). After a restart the agent adopts the pods it finds with its labels.
//!
//! API calls used (see `packaging/kubernetes/agent-rbac.yaml`): nodes list; pods list (all
//! namespaces, for the inventory), list/watch/create/get/delete in the namespace; pods/log get;
//! services and ingresses create.

pub mod manifest;
pub mod status;

use super::config::KubernetesConfig;
use super::runtime::{
    EventSink, LOG_TAIL_MAX_BYTES, Runtime, RuntimeError, Started, is_final, run_event, state_after, tail_text,
};
use crate::agent::tasks::OwnedTasks;
use crate::model::api::{HeldRun, LeaseOrder, NodeReport, RunEventKind};
use crate::model::{JobId, NodeFault, Resources, RunId, RunState};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use manifest::{LABEL_JOB_ID, LABEL_RUN_ID, pod_name};
use status::{Observation, classify};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Builds a Kubernetes client from the config: the given kubeconfig (and context), else the
/// in-cluster configuration or the default kubeconfig.
pub async fn connect(cfg: &KubernetesConfig) -> Result<Client, RuntimeError> {
    use kube::config::{Config, KubeConfigOptions, Kubeconfig};
    let opts = KubeConfigOptions { context: cfg.context.clone(), ..Default::default() };
    let config = match &cfg.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| RuntimeError::Setup(format!("reading kubeconfig {}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| RuntimeError::Setup(format!("kubeconfig {}: {e}", path.display())))?
        }
        None if cfg.context.is_some() => {
            Config::from_kubeconfig(&opts).await.map_err(|e| RuntimeError::Setup(format!("kubeconfig: {e}")))?
        }
        None => Config::infer().await.map_err(|e| {
            RuntimeError::Setup(format!("no Kubernetes configuration found (in-cluster or kubeconfig): {e}"))
        })?,
    };
    Client::try_from(config).map_err(|e| RuntimeError::Setup(format!("building the Kubernetes client: {e}")))
}

fn kube_err(context: impl Into<String>) -> impl FnOnce(kube::Error) -> RuntimeError {
    let context = context.into();
    move |e| RuntimeError::Kube { context, source: Box::new(e) }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Runs jobs as pods.
pub struct KubernetesRuntime {
    inner: Arc<Inner>,
    tasks: OwnedTasks,
}

struct Inner {
    client: Client,
    pods: Api<Pod>,
    namespace: String,
    executor: String,
    cfg: KubernetesConfig,
    sink: EventSink,
    runs: Mutex<HashMap<RunId, Tracked>>,
    inventory: tokio::sync::Mutex<Option<(Instant, Vec<NodeReport>)>>,
}

/// A run whose pod this agent follows.
#[derive(Debug)]
struct Tracked {
    job_id: JobId,
    pod: String,
    /// The last kind reported.
    last: Option<RunEventKind>,
    /// Set once a kill was ordered (the reason).
    killed: Option<String>,
    finished: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn run_id_of(pod: &Pod) -> Option<(RunId, Option<JobId>)> {
    let labels = pod.metadata.labels.as_ref()?;
    let run_id = labels.get(LABEL_RUN_ID)?.parse().ok()?;
    Some((run_id, labels.get(LABEL_JOB_ID).and_then(|j| j.parse().ok())))
}

impl KubernetesRuntime {
    /// A runtime on `client` for `executor`.
    pub fn new(client: Client, executor: &str, cfg: &KubernetesConfig, sink: EventSink) -> Self {
        let inner = Inner {
            pods: Api::namespaced(client.clone(), &cfg.namespace),
            client,
            namespace: cfg.namespace.clone(),
            executor: executor.to_string(),
            cfg: cfg.clone(),
            sink,
            runs: Mutex::new(HashMap::new()),
            inventory: tokio::sync::Mutex::new(None),
        };
        Self { inner: Arc::new(inner), tasks: OwnedTasks::default() }
    }

    fn spawn_task(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(fut);
    }
}

impl Inner {
    /// Reports what a pod's status says, if it is news for a run this agent follows.
    async fn observe(&self, pod: &Pod) {
        let Some((run_id, _)) = run_id_of(pod) else { return };
        let Some(mut obs) = classify(pod) else { return };
        let job_id = {
            let mut runs = lock(&self.runs);
            let Some(t) = runs.get_mut(&run_id) else { return };
            if t.finished || t.last == Some(obs.kind) {
                return;
            }
            if is_final(obs.kind) {
                t.finished = true;
                if let Some(reason) = &t.killed {
                    obs = killed_observation(obs.exit_code, reason);
                }
            } else if t.killed.is_some() {
                // A pod being killed reports its end, not intermediate states.
                return;
            }
            t.last = Some(obs.kind);
            t.job_id
        };
        self.report(pod, run_id, job_id, obs).await;
    }

    /// A pod disappeared: report the run's end unless that happened already.
    async fn observe_deleted(&self, pod: &Pod) {
        let Some((run_id, _)) = run_id_of(pod) else { return };
        let final_status = classify(pod).filter(|o| is_final(o.kind));
        let (job_id, obs) = {
            let mut runs = lock(&self.runs);
            let Some(t) = runs.get_mut(&run_id) else { return };
            if t.finished {
                return;
            }
            t.finished = true;
            let obs = match (&t.killed, final_status) {
                (Some(reason), o) => killed_observation(o.and_then(|o| o.exit_code), reason),
                (None, Some(o)) => o,
                (None, None) if t.last == Some(RunEventKind::Running) => Observation {
                    kind: RunEventKind::Failed,
                    exit_code: None,
                    reason: Some("pod deleted".into()),
                    message: Some(format!("pod {} was deleted while running", t.pod)),
                    // Whoever deleted it, nothing says it was the node.
                    node_fault: None,
                },
                (None, None) => Observation {
                    kind: RunEventKind::Returned,
                    exit_code: None,
                    reason: Some("pod deleted".into()),
                    message: Some(format!("pod {} was deleted before it ran", t.pod)),
                    node_fault: Some(NodeFault::NotStarted),
                },
            };
            t.last = Some(obs.kind);
            (t.job_id, obs)
        };
        self.report(pod, run_id, job_id, obs).await;
    }

    async fn report(&self, pod: &Pod, run_id: RunId, job_id: JobId, obs: Observation) {
        let mut ev = run_event(run_id, job_id, obs.kind);
        ev.exit_code = obs.exit_code;
        ev.reason = obs.reason;
        ev.message = obs.message;
        ev.node_fault = obs.node_fault;
        if is_final(obs.kind) && obs.kind != RunEventKind::Returned {
            ev.log_tail = self.log_tail(pod).await;
        }
        tracing::info!(executor = %self.executor, %run_id, %job_id, kind = ?ev.kind, exit_code = ?ev.exit_code, reason = ?ev.reason, "pod status");
        self.sink.send(ev);
    }

    /// The last lines of the first container's log, if the pod still has one.
    async fn log_tail(&self, pod: &Pod) -> Option<String> {
        if self.cfg.log_tail_lines == 0 {
            return None;
        }
        let name = pod.metadata.name.as_deref()?;
        let container = pod.spec.as_ref().and_then(|s| s.containers.first()).map(|c| c.name.clone());
        let lp = LogParams {
            container,
            tail_lines: Some(i64::from(self.cfg.log_tail_lines)),
            limit_bytes: Some(LOG_TAIL_MAX_BYTES as i64),
            ..Default::default()
        };
        match self.pods.logs(name, &lp).await {
            Ok(text) if !text.is_empty() => Some(tail_text(&text, LOG_TAIL_MAX_BYTES)),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(pod = name, error = %e, "no log tail");
                None
            }
        }
    }

    /// Follows Convoy's pods in the namespace until the runtime is dropped.
    async fn watch(self: Arc<Self>) {
        let cfg = watcher::Config::default().labels(&manifest::selector(&self.executor));
        let mut stream = watcher(self.pods.clone(), cfg).default_backoff().boxed();
        let mut listed: Option<HashSet<RunId>> = None;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(pod)) => self.observe(&pod).await,
                Ok(watcher::Event::Delete(pod)) => self.observe_deleted(&pod).await,
                Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
                Ok(watcher::Event::InitApply(pod)) => {
                    if let (Some(set), Some((id, _))) = (listed.as_mut(), run_id_of(&pod)) {
                        set.insert(id);
                    }
                    self.observe(&pod).await;
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(set) = listed.take() {
                        self.check_missing(&set).await;
                    }
                }
                Err(e) => tracing::warn!(executor = %self.executor, error = %e, "pod watch failed; retrying"),
            }
        }
    }

    /// After a relist: runs whose pod was not listed may have been deleted while the watch was
    /// down. Confirm with a direct read before reporting them over.
    async fn check_missing(&self, listed: &HashSet<RunId>) {
        let missing: Vec<(RunId, String)> = lock(&self.runs)
            .iter()
            .filter(|(id, t)| !t.finished && !listed.contains(id))
            .map(|(id, t)| (*id, t.pod.clone()))
            .collect();
        for (run_id, name) in missing {
            match self.pods.get_opt(&name).await {
                Ok(Some(pod)) => self.observe(&pod).await,
                Ok(None) => {
                    let mut gone = Pod::default();
                    gone.metadata.name = Some(name);
                    gone.metadata.labels = Some([(LABEL_RUN_ID.to_string(), run_id.to_string())].into());
                    self.observe_deleted(&gone).await;
                }
                Err(e) => tracing::warn!(%run_id, error = %e, "cannot check a pod"),
            }
        }
    }

    async fn inventory(&self) -> Result<Vec<NodeReport>, RuntimeError> {
        let mut cache = self.inventory.lock().await;
        if let Some((at, nodes)) = cache.as_ref()
            && at.elapsed() < self.cfg.inventory_refresh
        {
            return Ok(nodes.clone());
        }
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing nodes"))?;
        let active = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
        let pods = Api::<Pod>::all(self.client.clone()).list(&active).await.map_err(kube_err("listing pods"))?;
        let mut used: HashMap<String, Resources> = HashMap::new();
        for p in &pods.items {
            let ours = p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(LABEL_RUN_ID));
            let (Some(spec), false) = (p.spec.as_ref(), ours) else { continue };
            let Some(node) = spec.node_name.as_ref() else { continue };
            used.entry(node.clone()).or_default().add(&manifest::pod_requests(spec));
        }
        let reports: Vec<NodeReport> = nodes
            .items
            .iter()
            .filter_map(|n| {
                let other = n.metadata.name.as_ref().and_then(|name| used.remove(name)).unwrap_or_default();
                manifest::node_report(n, &self.cfg.pool_label, other)
            })
            .collect();
        *cache = Some((Instant::now(), reports.clone()));
        Ok(reports)
    }

    /// Creates the job's services and ingresses, owned by the pod.
    async fn create_owned(&self, lease: &LeaseOrder, pod: &Pod) -> Result<(), RuntimeError> {
        let (Some(name), Some(uid)) = (pod.metadata.name.as_deref(), pod.metadata.uid.as_deref()) else {
            return Err(RuntimeError::Setup("the created pod has no name or uid".into()));
        };
        let owner = manifest::owner_reference(name, uid);
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        for mut s in manifest::build_services(lease, &self.executor, &self.namespace)? {
            s.metadata.owner_references = Some(vec![owner.clone()]);
            let sname = s.metadata.name.clone().unwrap_or_default();
            match services.create(&PostParams::default(), &s).await {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some(409) => tracing::debug!(service = %sname, "service exists already"),
                Err(e) => return Err(kube_err(format!("creating service {sname}"))(e)),
            }
        }
        let ingresses: Api<Ingress> = Api::namespaced(self.client.clone(), &self.namespace);
        for mut g in manifest::build_ingresses(lease, &self.executor, &self.namespace, &self.cfg.ingress)? {
            g.metadata.owner_references = Some(vec![owner.clone()]);
            let gname = g.metadata.name.clone().unwrap_or_default();
            match ingresses.create(&PostParams::default(), &g).await {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some(409) => tracing::debug!(ingress = %gname, "ingress exists already"),
                Err(e) => return Err(kube_err(format!("creating ingress {gname}"))(e)),
            }
        }
        Ok(())
    }

    async fn delete_pod(&self, name: &str, grace_seconds: u32) -> Result<bool, RuntimeError> {
        let dp = DeleteParams { grace_period_seconds: Some(grace_seconds), ..Default::default() };
        match self.pods.delete(name, &dp).await {
            Ok(_) => Ok(true),
            Err(e) if api_code(&e) == Some(404) => Ok(false),
            Err(e) => Err(kube_err(format!("deleting pod {name}"))(e)),
        }
    }
}

fn killed_observation(exit_code: Option<i32>, reason: &str) -> Observation {
    Observation {
        kind: RunEventKind::Failed,
        exit_code,
        reason: Some("killed".into()),
        message: Some(reason.to_string()),
        node_fault: None,
    }
}

impl Runtime for KubernetesRuntime {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    async fn recover(&self) -> Result<Vec<HeldRun>, RuntimeError> {
        let inner = &self.inner;
        let lp = ListParams::default().labels(&manifest::selector(&inner.executor));
        let pods = inner
            .pods
            .list(&lp)
            .await
            .map_err(kube_err(format!("listing Convoy's pods in namespace {}", inner.namespace)))?;
        let mut held = Vec::new();
        for pod in &pods.items {
            let (Some((run_id, Some(job_id))), Some(name)) = (run_id_of(pod), pod.metadata.name.clone()) else {
                continue;
            };
            let deleting = pod.metadata.deletion_timestamp.is_some();
            lock(&inner.runs).insert(
                run_id,
                Tracked {
                    job_id,
                    pod: name,
                    last: None,
                    killed: deleting.then(|| "deleted before the agent restarted".to_string()),
                    finished: false,
                },
            );
            let obs = classify(pod).map(|o| o.kind);
            let state = match obs {
                Some(k) if deleting && !is_final(k) => RunState::Running,
                Some(k) => state_after(k),
                None => RunState::Pending,
            };
            tracing::info!(executor = %inner.executor, %run_id, %job_id, ?state, "adopted a pod");
            held.push(HeldRun { run_id, job_id, state });
            if deleting && obs.is_some_and(|k| !is_final(k)) {
                // Its end comes through the watch.
                continue;
            }
            inner.observe(pod).await;
            if obs.is_none() {
                inner.sink.send(run_event(run_id, job_id, RunEventKind::Pending));
                if let Some(t) = lock(&inner.runs).get_mut(&run_id) {
                    t.last = Some(RunEventKind::Pending);
                }
            }
        }
        self.spawn_task(inner.clone().watch());
        Ok(held)
    }

    async fn nodes(&self) -> Result<Vec<NodeReport>, RuntimeError> {
        self.inner.inventory().await
    }

    async fn start(&self, lease: LeaseOrder) -> Result<Started, RuntimeError> {
        let inner = &self.inner;
        let (run_id, job_id) = (lease.run_id, lease.job_id);
        let pod = manifest::build_pod(&lease, &inner.executor, &inner.namespace)?;
        // Validate the owned objects before anything is created.
        manifest::build_services(&lease, &inner.executor, &inner.namespace)?;
        manifest::build_ingresses(&lease, &inner.executor, &inner.namespace, &inner.cfg.ingress)?;
        let name = pod_name(run_id);
        {
            let mut runs = lock(&inner.runs);
            if runs.contains_key(&run_id) {
                return Ok(Started::AlreadyKnown);
            }
            // Tracked before the create so the watch never sees an unknown pod of ours.
            runs.insert(run_id, Tracked { job_id, pod: name.clone(), last: None, killed: None, finished: false });
        }
        let untrack = || {
            lock(&inner.runs).remove(&run_id);
        };
        let created = match inner.pods.create(&PostParams::default(), &pod).await {
            Ok(p) => p,
            Err(e) if api_code(&e) == Some(409) => match inner.pods.get(&name).await {
                Ok(existing) if run_id_of(&existing).is_some_and(|(id, _)| id == run_id) => {
                    tracing::info!(executor = %inner.executor, %run_id, %job_id, pod = %name, "pod exists already; adopted");
                    existing
                }
                Ok(_) => {
                    untrack();
                    return Err(RuntimeError::Setup(format!("pod {name} exists and belongs to something else")));
                }
                Err(e) => {
                    untrack();
                    return Err(kube_err(format!("reading pod {name}"))(e));
                }
            },
            Err(e) if matches!(api_code(&e), Some(400 | 422)) => {
                untrack();
                return Err(RuntimeError::InvalidJob(format!("the API server refused the pod: {e}")));
            }
            Err(e) => {
                untrack();
                return Err(kube_err(format!("creating pod {name}"))(e));
            }
        };
        if let Err(e) = inner.create_owned(&lease, &created).await {
            // No half-made runs: the pod goes, the run is reported by the caller.
            untrack();
            let _ = inner.delete_pod(&name, 0).await;
            return Err(e);
        }
        tracing::info!(executor = %inner.executor, %run_id, %job_id, pod = %name, node = %lease.node, "pod created");
        inner.observe(&created).await;
        let reported = lock(&inner.runs).get(&run_id).is_some_and(|t| t.last.is_some());
        if !reported {
            inner.sink.send(run_event(run_id, job_id, RunEventKind::Pending));
            if let Some(t) = lock(&inner.runs).get_mut(&run_id) {
                t.last = Some(RunEventKind::Pending);
            }
        }
        Ok(Started::New)
    }

    async fn kill(&self, run_id: RunId, grace: Duration, reason: &str) -> Result<bool, RuntimeError> {
        let inner = &self.inner;
        let name = {
            let mut runs = lock(&inner.runs);
            match runs.get_mut(&run_id) {
                Some(t) if t.finished => return Ok(true),
                Some(t) => {
                    t.killed = Some(reason.to_string());
                    t.pod.clone()
                }
                None => pod_name(run_id),
            }
        };
        let grace_s = u32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0)).unwrap_or(u32::MAX).max(1);
        let existed = inner.delete_pod(&name, grace_s).await?;
        tracing::info!(executor = %inner.executor, %run_id, pod = %name, grace_seconds = grace_s, reason, existed, "pod deleted");
        if !existed {
            // Gone already: report the end now if the watch has not.
            let mut gone = Pod::default();
            gone.metadata.name = Some(name);
            gone.metadata.labels = Some([(LABEL_RUN_ID.to_string(), run_id.to_string())].into());
            inner.observe_deleted(&gone).await;
            return Ok(lock(&inner.runs).contains_key(&run_id));
        }
        // A node that does not answer leaves the pod terminating forever: force it out later.
        let force_after = Duration::from_secs(u64::from(grace_s)) + inner.cfg.force_delete_after;
        let inner2 = inner.clone();
        self.spawn_task(async move {
            tokio::time::sleep(force_after).await;
            match inner2.pods.get_opt(&name).await {
                Ok(Some(_)) => {
                    tracing::warn!(executor = %inner2.executor, %run_id, pod = %name, "pod still there after its grace period; forcing deletion");
                    if let Err(e) = inner2.delete_pod(&name, 0).await {
                        tracing::error!(%run_id, error = %e, "forced deletion failed");
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(%run_id, error = %e, "cannot check a deleted pod"),
            }
        });
        Ok(true)
    }

    async fn forget(&self, run_id: RunId) -> Result<(), RuntimeError> {
        let inner = &self.inner;
        let Some(t) = lock(&inner.runs).remove(&run_id) else { return Ok(()) };
        if inner.cfg.delete_finished_pods && t.killed.is_none() {
            inner.delete_pod(&t.pod, 0).await?;
        }
        Ok(())
    }
}
