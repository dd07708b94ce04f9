//! The Kubernetes runtime: each lease becomes a pod bound to the leased node (plus the job's
//! services and ingresses, owned by the pod) in the job's namespace (the agent's configured one
//! for jobs that name none); a watch on Convoy's pods turns their status into run events; a kill
//! deletes the pod with the grace period (and with grace 0 if it is still there well after).
//! After a restart the agent adopts the pods it finds with its labels.
//!
//! Pods are named after their job (`armada-<job id>-0`, see `manifest::pod_name`), so the pod
//! of an earlier run of the same job may still hold the name when a new run starts: `start`
//! deletes such a stale pod (known by its run-id label) and creates the new one. Every delete of
//! a run's pod carries the pod's uid as a precondition, so that the end of an old run can never
//! take the new run's pod, which has the same name.
//!
//! Jobs choose their namespace, so the agent follows its pods with one watch over all namespaces,
//! selected by its labels (one connection whatever the number of namespaces, and namespaces need
//! not be known in advance).
//!
//! API calls used (see `packaging/kubernetes/agent-rbac.yaml`): nodes list; pods list and watch
//! (all namespaces: the inventory, and Convoy's pods by label); in the jobs' namespaces, pods
//! create/get/delete, pods/log get, services and ingresses create/get/delete (a stale one of an
//! earlier run of the job is replaced).

pub(crate) mod manifest;
mod status;

use super::{
    EventSink, LOG_TAIL_MAX_BYTES, OUTPUT_CHUNK_BYTES, OUTPUT_TAIL_BYTES, Runtime, RuntimeError, Started, is_final,
    no_output, output_chunk, run_event, state_after, tail_text,
};
use crate::agent::config::KubernetesConfig;
use crate::agent::tasks::OwnedTasks;
use crate::model::api::{HeldRun, LeaseOrder, NodeReport, OutputChunk, OutputStream, OutputWanted, RunEventKind};
use crate::model::{JobId, NodeFault, Resources, RunId, RunPod, RunState};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use manifest::{LABEL_JOB_ID, LABEL_RUN_ID, namespace_of, pod_name};
use status::{Observation, classify};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Builds a Kubernetes client from the config: the given kubeconfig (and context), else the
/// in-cluster configuration or the default kubeconfig.
pub(crate) async fn connect(cfg: &KubernetesConfig) -> Result<Client, RuntimeError> {
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
    /// Pods of every namespace: the watch and the adoption after a restart.
    all_pods: Api<Pod>,
    /// The configured namespace, for jobs that name none.
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
    /// The pod's namespace.
    namespace: String,
    /// The pod's uid, once known: deletes are for that pod only.
    uid: Option<String>,
    /// The last kind reported.
    last: Option<RunEventKind>,
    /// Set once a kill was ordered (the reason).
    killed: Option<String>,
    finished: bool,
}

/// Most of a pod's log read to find its last lines (the kubelet has no "last bytes" read).
const MAX_TAIL_READ: u64 = 16 * 1024 * 1024;

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
            all_pods: Api::all(client.clone()),
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

/// The pod a run became, as run events report it (a pod without name, namespace or uid is not
/// reported).
fn run_pod(pod: &Pod) -> Option<RunPod> {
    let m = &pod.metadata;
    Some(RunPod { name: m.name.clone()?, namespace: m.namespace.clone()?, uid: m.uid.clone()? })
}

/// Where a pod is: its namespace, or `default` for a pod object without one.
fn namespace_or<'a>(pod: &'a Pod, default: &'a str) -> &'a str {
    pod.metadata.namespace.as_deref().unwrap_or(default)
}

impl Inner {
    /// Pods of one namespace.
    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

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
        if matches!(obs.kind, RunEventKind::Pending | RunEventKind::Running) {
            ev.pod = run_pod(pod);
        }
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
        match self.pods(namespace_or(pod, &self.namespace)).logs(name, &lp).await {
            Ok(text) if !text.is_empty() => Some(tail_text(&text, LOG_TAIL_MAX_BYTES)),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(pod = name, error = %e, "no log tail");
                None
            }
        }
    }

    /// Follows this executor's pods in every namespace until the runtime is dropped.
    async fn watch(self: Arc<Self>) {
        let cfg = watcher::Config::default().labels(&manifest::selector(&self.executor));
        let mut stream = watcher(self.all_pods.clone(), cfg).default_backoff().boxed();
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
        let missing: Vec<(RunId, String, String)> = lock(&self.runs)
            .iter()
            .filter(|(id, t)| !t.finished && !listed.contains(id))
            .map(|(id, t)| (*id, t.pod.clone(), t.namespace.clone()))
            .collect();
        for (run_id, name, namespace) in missing {
            // The name may be held by the pod of a later run of the same job by now.
            let ours = |pod: &Pod| run_id_of(pod).is_some_and(|(id, _)| id == run_id);
            match self.pods(&namespace).get_opt(&name).await {
                Ok(Some(pod)) if ours(&pod) => self.observe(&pod).await,
                Ok(_) => {
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
        let namespace = namespace_of(lease, &self.namespace);
        let owner = manifest::owner_reference(name, uid);
        let services: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        for mut s in manifest::build_services(lease, &self.executor, namespace)? {
            s.metadata.owner_references = Some(vec![owner.clone()]);
            create_for_run(&services, &s, lease.run_id, "service").await?;
        }
        let ingresses: Api<Ingress> = Api::namespaced(self.client.clone(), namespace);
        for mut g in manifest::build_ingresses(lease, &self.executor, namespace, &self.cfg.ingress)? {
            g.metadata.owner_references = Some(vec![owner.clone()]);
            create_for_run(&ingresses, &g, lease.run_id, "ingress").await?;
        }
        Ok(())
    }

    /// Deletes a pod; with `uid`, only if the name still holds that pod (the name of a job's pod
    /// passes from run to run). False if there was no such pod.
    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        grace_seconds: u32,
    ) -> Result<bool, RuntimeError> {
        let preconditions = uid.map(|uid| Preconditions { uid: Some(uid.to_string()), resource_version: None });
        let dp = DeleteParams { grace_period_seconds: Some(grace_seconds), preconditions, ..Default::default() };
        match self.pods(namespace).delete(name, &dp).await {
            Ok(_) => Ok(true),
            // 409: the name holds another pod now (the uid precondition failed).
            Err(e) if matches!(api_code(&e), Some(404 | 409)) => Ok(false),
            Err(e) => Err(kube_err(format!("deleting pod {namespace}/{name}"))(e)),
        }
    }

    /// Makes room for a run's pod: the pod of an earlier run of the same job (same job-id
    /// label, another run-id label) still holds the name. It is deleted at once (its run is over
    /// for the server: a job has one live run) and its disappearance awaited. Anything else
    /// holding the name is not Convoy's to delete, and refuses the run.
    async fn remove_stale_pod(&self, namespace: &str, existing: &Pod, lease: &LeaseOrder) -> Result<(), RuntimeError> {
        let name = pod_name(lease.job_id);
        let stale = match run_id_of(existing) {
            Some((run, Some(job))) => job == lease.job_id && run != lease.run_id,
            _ => false,
        };
        if !stale {
            return Err(RuntimeError::Setup(format!("pod {namespace}/{name} exists and belongs to something else")));
        }
        let old_run = run_id_of(existing).map(|(run, _)| run.to_string()).unwrap_or_default();
        tracing::info!(executor = %self.executor, run_id = %lease.run_id, %old_run, pod = %name, "deleting the pod of an earlier run of the job");
        self.delete_pod(namespace, &name, existing.metadata.uid.as_deref(), 0).await?;
        let deadline = Instant::now() + STALE_POD_WAIT;
        loop {
            match self.pods(namespace).get_opt(&name).await {
                Ok(None) => return Ok(()),
                Ok(Some(p)) if p.metadata.uid != existing.metadata.uid => return Ok(()),
                Ok(Some(_)) if Instant::now() >= deadline => {
                    return Err(RuntimeError::NodeUnavailable(format!(
                        "pod {namespace}/{name} of the job's earlier run {old_run} is still being deleted"
                    )));
                }
                Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(e) => return Err(kube_err(format!("reading pod {namespace}/{name}"))(e)),
            }
        }
    }

    /// The pods of a run, found by its run-id label in every namespace.
    async fn pods_of_run(&self, run_id: RunId) -> Result<Vec<Pod>, RuntimeError> {
        let lp = ListParams::default().labels(&format!("{LABEL_RUN_ID}={run_id}"));
        let list = self.all_pods.list(&lp).await.map_err(kube_err(format!("listing the pods of run {run_id}")))?;
        Ok(list.items)
    }
}

/// Longest `start` waits for the stale pod of an earlier run of the job to go (it is deleted
/// with no grace period, so the API server removes it at once unless a finalizer holds it).
const STALE_POD_WAIT: Duration = Duration::from_secs(30);

/// Creates a service or ingress of a run. Its name may be taken by the same object of the
/// same run (a repeated start: kept) or of an earlier run of the job (its pod's deletion takes
/// it, but the garbage collector may not have yet: replaced now, so the collector cannot take
/// the new one later). An object without Convoy's run-id label is not Convoy's: the run fails.
async fn create_for_run<K>(api: &Api<K>, obj: &K, run_id: RunId, what: &str) -> Result<(), RuntimeError>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let deadline = Instant::now() + STALE_POD_WAIT;
    loop {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return Ok(()),
            Err(e) if api_code(&e) == Some(409) => {}
            Err(e) => return Err(kube_err(format!("creating {what} {name}"))(e)),
        }
        let Some(existing) = api.get_opt(&name).await.map_err(kube_err(format!("reading {what} {name}")))? else {
            continue;
        };
        let owner_run = existing.meta().labels.as_ref().and_then(|l| l.get(LABEL_RUN_ID)).cloned();
        match owner_run {
            Some(r) if r == run_id.to_string() => {
                tracing::debug!(%run_id, what, name, "exists already");
                return Ok(());
            }
            Some(_) if Instant::now() < deadline => {
                let uid = existing.meta().uid.clone();
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid, resource_version: None }),
                    ..Default::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => tracing::info!(%run_id, what, name, "replaced the one of an earlier run of the job"),
                    Err(e) if matches!(api_code(&e), Some(404 | 409)) => {}
                    Err(e) => return Err(kube_err(format!("deleting {what} {name}"))(e)),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some(other) => {
                return Err(RuntimeError::Setup(format!(
                    "{what} {name} of the job's earlier run {other} is still there"
                )));
            }
            None => return Err(RuntimeError::Setup(format!("{what} {name} exists and belongs to something else"))),
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

    async fn output(&self, want: OutputWanted) -> OutputChunk {
        if want.stream == OutputStream::Stderr {
            return no_output(&want, "a pod has one log (standard output and error together): follow stdout");
        }
        let inner = &self.inner;
        let tracked = lock(&inner.runs).get(&want.run_id).map(|t| (t.pod.clone(), t.namespace.clone(), t.finished));
        // Not created yet: nothing to send so far.
        let Some((pod, namespace, done)) = tracked else {
            return output_chunk(&want, want.from.unwrap_or(0), &[], false);
        };
        // The kubelet reads logs from their start: ask for as much as reaches the chunk wanted
        // (the last lines: the first MAX_TAIL_READ bytes at most).
        let limit = want.from.map_or(MAX_TAIL_READ, |f| f.saturating_add(OUTPUT_CHUNK_BYTES as u64));
        let lp = LogParams { limit_bytes: Some(i64::try_from(limit).unwrap_or(i64::MAX)), ..Default::default() };
        match inner.pods(&namespace).logs(&pod, &lp).await {
            Ok(text) => {
                let bytes = text.as_bytes();
                let len = bytes.len() as u64;
                let start = want.from.unwrap_or_else(|| len.saturating_sub(OUTPUT_TAIL_BYTES)).min(len);
                let rest = &bytes[start as usize..];
                let whole = (rest.len() as u64) < OUTPUT_CHUNK_BYTES as u64 && len < limit;
                output_chunk(&want, start, &rest[..rest.len().min(OUTPUT_CHUNK_BYTES)], done && whole)
            }
            Err(e) => no_output(&want, format!("reading pod {namespace}/{pod}'s log: {e}")),
        }
    }

    async fn recover(&self) -> Result<Vec<HeldRun>, RuntimeError> {
        let inner = &self.inner;
        let lp = ListParams::default().labels(&manifest::selector(&inner.executor));
        let pods = inner.all_pods.list(&lp).await.map_err(kube_err("listing Convoy's pods in every namespace"))?;
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
                    namespace: namespace_or(pod, &inner.namespace).to_string(),
                    uid: pod.metadata.uid.clone(),
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
                let mut ev = run_event(run_id, job_id, RunEventKind::Pending);
                ev.pod = run_pod(pod);
                inner.sink.send(ev);
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
        let namespace = namespace_of(&lease, &inner.namespace).to_string();
        let pod = manifest::build_pod(&lease, &inner.executor, &namespace)?;
        // Validate the owned objects before anything is created.
        manifest::build_services(&lease, &inner.executor, &namespace)?;
        manifest::build_ingresses(&lease, &inner.executor, &namespace, &inner.cfg.ingress)?;
        let name = pod_name(job_id);
        {
            let mut runs = lock(&inner.runs);
            if runs.contains_key(&run_id) {
                return Ok(Started::AlreadyKnown);
            }
            // Tracked before the create so the watch never sees an unknown pod of ours.
            runs.insert(
                run_id,
                Tracked {
                    job_id,
                    pod: name.clone(),
                    namespace: namespace.clone(),
                    uid: None,
                    last: None,
                    killed: None,
                    finished: false,
                },
            );
        }
        let untrack = || {
            lock(&inner.runs).remove(&run_id);
        };
        let pods = inner.pods(&namespace);
        let mut cleared = false;
        let created = loop {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(p) => break p,
                Err(e) if api_code(&e) == Some(409) => {
                    let existing = match pods.get_opt(&name).await {
                        // Gone in between: try again.
                        Ok(None) => continue,
                        Ok(Some(p)) => p,
                        Err(e) => {
                            untrack();
                            return Err(kube_err(format!("reading pod {namespace}/{name}"))(e));
                        }
                    };
                    if run_id_of(&existing).is_some_and(|(id, _)| id == run_id) {
                        tracing::info!(executor = %inner.executor, %run_id, %job_id, pod = %name, "pod exists already; adopted");
                        break existing;
                    }
                    // The pod of an earlier run of the job: once only, then whatever holds the
                    // name is something else.
                    let removed = if cleared {
                        Err(RuntimeError::Setup(format!("pod {namespace}/{name} was taken again while being replaced")))
                    } else {
                        inner.remove_stale_pod(&namespace, &existing, &lease).await
                    };
                    if let Err(e) = removed {
                        untrack();
                        return Err(e);
                    }
                    cleared = true;
                }
                Err(e) if matches!(api_code(&e), Some(400 | 422)) => {
                    untrack();
                    return Err(RuntimeError::InvalidJob(format!("the API server refused the pod: {e}")));
                }
                Err(e) => {
                    untrack();
                    return Err(kube_err(format!("creating pod {namespace}/{name}"))(e));
                }
            }
        };
        if let Some(t) = lock(&inner.runs).get_mut(&run_id) {
            t.uid = created.metadata.uid.clone();
        }
        if let Err(e) = inner.create_owned(&lease, &created).await {
            // No half-made runs: the pod goes, the run is reported by the caller.
            untrack();
            let _ = inner.delete_pod(&namespace, &name, created.metadata.uid.as_deref(), 0).await;
            return Err(e);
        }
        tracing::info!(executor = %inner.executor, %run_id, %job_id, pod = %name, %namespace, node = %lease.node, "pod created");
        inner.observe(&created).await;
        let reported = lock(&inner.runs).get(&run_id).is_some_and(|t| t.last.is_some());
        if !reported {
            let mut ev = run_event(run_id, job_id, RunEventKind::Pending);
            ev.pod = run_pod(&created);
            inner.sink.send(ev);
            if let Some(t) = lock(&inner.runs).get_mut(&run_id) {
                t.last = Some(RunEventKind::Pending);
            }
        }
        Ok(Started::New)
    }

    async fn kill(&self, run_id: RunId, grace: Duration, reason: &str) -> Result<bool, RuntimeError> {
        let inner = &self.inner;
        let tracked = {
            let mut runs = lock(&inner.runs);
            match runs.get_mut(&run_id) {
                Some(t) if t.finished => return Ok(true),
                Some(t) => {
                    t.killed = Some(reason.to_string());
                    Some((t.pod.clone(), t.namespace.clone(), t.uid.clone()))
                }
                None => None,
            }
        };
        let grace_s = u32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0)).unwrap_or(u32::MAX).max(1);
        let targets = match tracked {
            Some(t) => vec![t],
            // A run this agent does not follow: its pods, wherever they are, by its label.
            None => inner
                .pods_of_run(run_id)
                .await?
                .iter()
                .filter_map(|p| {
                    Some((
                        p.metadata.name.clone()?,
                        namespace_or(p, &inner.namespace).to_string(),
                        p.metadata.uid.clone(),
                    ))
                })
                .collect(),
        };
        let mut existed = false;
        for (name, namespace, uid) in &targets {
            existed |= inner.delete_pod(namespace, name, uid.as_deref(), grace_s).await?;
            tracing::info!(executor = %inner.executor, %run_id, pod = %name, %namespace, grace_seconds = grace_s, reason, existed, "pod deleted");
        }
        let Some((name, namespace, uid)) = targets.into_iter().next().filter(|_| existed) else {
            // Gone already: report the end now if the watch has not.
            let mut gone = Pod::default();
            gone.metadata.labels = Some([(LABEL_RUN_ID.to_string(), run_id.to_string())].into());
            inner.observe_deleted(&gone).await;
            return Ok(lock(&inner.runs).contains_key(&run_id));
        };
        // A node that does not answer leaves the pod terminating forever: force it out later.
        let force_after = Duration::from_secs(u64::from(grace_s)) + inner.cfg.force_delete_after;
        let inner2 = inner.clone();
        self.spawn_task(async move {
            tokio::time::sleep(force_after).await;
            match inner2.pods(&namespace).get_opt(&name).await {
                Ok(Some(p)) if uid.is_none() || p.metadata.uid == uid => {
                    tracing::warn!(executor = %inner2.executor, %run_id, pod = %name, "pod still there after its grace period; forcing deletion");
                    if let Err(e) = inner2.delete_pod(&namespace, &name, p.metadata.uid.as_deref(), 0).await {
                        tracing::error!(%run_id, error = %e, "forced deletion failed");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(%run_id, error = %e, "cannot check a deleted pod"),
            }
        });
        Ok(true)
    }

    async fn forget(&self, run_id: RunId) -> Result<(), RuntimeError> {
        let inner = &self.inner;
        let Some(t) = lock(&inner.runs).remove(&run_id) else { return Ok(()) };
        if inner.cfg.delete_finished_pods && t.killed.is_none() {
            inner.delete_pod(&t.namespace, &t.pod, t.uid.as_deref(), 0).await?;
        }
        Ok(())
    }
}
