//! A fake Kubernetes API server speaking exactly the calls the agent uses: list nodes, list pods
//! (all namespaces and per namespace, by label), watch pods (events pushed by the test),
//! create/get/delete pods (deletes honour a uid precondition), pod logs, create/get/delete
//! services and ingresses. Every request is recorded for assertions. Objects are kept by name,
//! whatever their namespace (tests use distinct names).

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// One recorded request.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub method: Method,
    pub path: String,
    pub query: HashMap<String, String>,
    pub body: Option<Value>,
}

#[derive(Default)]
pub(super) struct KubeState {
    pub calls: Vec<Call>,
    /// Pods by name (the agent's namespace).
    pub pods: BTreeMap<String, Value>,
    /// Pods of other namespaces/owners, shown only by the all-namespaces list.
    pub foreign_pods: Vec<Value>,
    pub nodes: Vec<Value>,
    /// Names of pods created so far: a name created again gets a new uid.
    pub created: std::collections::BTreeSet<String>,
    /// Services and ingresses by `<resource>/<name>`.
    pub others: BTreeMap<String, Value>,
    pub log: String,
    rv: u64,
}

pub(super) struct KubeApi {
    pub state: Arc<Mutex<KubeState>>,
    watch: broadcast::Sender<String>,
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Ctx {
    state: Arc<Mutex<KubeState>>,
    watch: broadcast::Sender<String>,
}

impl KubeApi {
    pub(super) async fn start() -> Self {
        let state = Arc::new(Mutex::new(KubeState { log: "line 1\nline 2\n".into(), rv: 100, ..Default::default() }));
        let (watch, _) = broadcast::channel(256);
        let ctx = Ctx { state: state.clone(), watch: watch.clone() };
        let app = axum::Router::new()
            .route("/api/v1/nodes", axum::routing::get(list_nodes))
            .route("/api/v1/pods", axum::routing::get(list_or_watch_pods))
            .route("/api/v1/namespaces/{ns}/pods", axum::routing::get(list_or_watch_pods).post(create_pod))
            .route("/api/v1/namespaces/{ns}/pods/{name}", axum::routing::get(get_pod).delete(delete_pod))
            .route("/api/v1/namespaces/{ns}/pods/{name}/log", axum::routing::get(pod_log))
            .route("/api/v1/namespaces/{ns}/services", axum::routing::post(create_other))
            .route("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses", axum::routing::post(create_other))
            .route("/api/v1/namespaces/{ns}/services/{name}", axum::routing::get(get_other).delete(delete_other))
            .route(
                "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses/{name}",
                axum::routing::get(get_other).delete(delete_other),
            )
            .fallback(unknown)
            .with_state(ctx);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { state, watch, url, task }
    }

    /// A kube client for this server.
    pub(super) fn client(&self) -> kube::Client {
        convoy::agent::install_crypto_provider();
        let config = kube::Config::new(self.url.parse().expect("uri"));
        kube::Client::try_from(config).expect("client")
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, KubeState> {
        self.state.lock().expect("lock")
    }

    /// Calls matching a method and path suffix.
    pub(super) fn calls(&self, method: Method, path_suffix: &str) -> Vec<Call> {
        self.state().calls.iter().filter(|c| c.method == method && c.path.ends_with(path_suffix)).cloned().collect()
    }

    /// True once some client watches pods.
    pub(super) fn watching(&self) -> bool {
        self.watch.receiver_count() > 0
    }

    /// Stores a pod and sends a watch event (`ADDED`, `MODIFIED` or `DELETED`) for it.
    pub(super) fn push(&self, kind: &str, mut pod: Value) {
        let name = pod["metadata"]["name"].as_str().expect("pod name").to_string();
        {
            let mut s = self.state();
            s.rv += 1;
            pod["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            if kind == "DELETED" {
                s.pods.remove(&name);
            } else {
                s.pods.insert(name, pod.clone());
            }
        }
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        let line = json!({"type": kind, "object": pod}).to_string() + "\n";
        let _ = self.watch.send(line);
    }

    /// The stored pod with its status replaced.
    pub(super) fn with_status(&self, name: &str, status: Value) -> Value {
        let mut pod = self.state().pods.get(name).cloned().expect("pod exists");
        pod["status"] = status;
        pod
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(ctx: &Ctx, method: Method, uri: &Uri, query: &HashMap<String, String>, body: Option<Value>) -> u64 {
    let mut s = ctx.state.lock().expect("lock");
    s.calls.push(Call { method, path: uri.path().to_string(), query: query.clone(), body });
    s.rv += 1;
    s.rv
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()});
    (code, [("content-type", "application/json")], body.to_string()).into_response()
}

fn list(kind: &str, rv: u64, items: Vec<Value>) -> Response {
    axum::Json(
        json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    )
    .into_response()
}

fn matches_selector(pod: &Value, selector: Option<&String>) -> bool {
    let Some(sel) = selector else { return true };
    let labels = &pod["metadata"]["labels"];
    sel.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => labels[k].as_str() == Some(v),
        None => !labels[term].is_null(),
    })
}

async fn list_nodes(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let rv = record(&ctx, method, &uri, &q, None);
    let nodes = ctx.state.lock().expect("lock").nodes.clone();
    list("NodeList", rv, nodes)
}

async fn list_or_watch_pods(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let rv = record(&ctx, method, &uri, &q, None);
    if q.get("watch").map(String::as_str) == Some("true") || q.get("watch").map(String::as_str) == Some("1") {
        let rx = ctx.watch.subscribe();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(line) => return Some((Ok::<Bytes, std::convert::Infallible>(Bytes::from(line)), rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .expect("response");
    }
    let s = ctx.state.lock().expect("lock");
    // Other owners' pods show only in the all-namespaces list.
    let all = uri.path() == "/api/v1/pods";
    let items = s
        .pods
        .values()
        .chain(s.foreign_pods.iter().filter(|_| all))
        .filter(|p| matches_selector(p, q.get("labelSelector")))
        .cloned()
        .collect();
    list("PodList", rv, items)
}

async fn create_pod(
    State(ctx): State<Ctx>,
    Path(ns): Path<String>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let mut pod: Value = serde_json::from_slice(&body).expect("pod JSON");
    let rv = record(&ctx, method, &uri, &q, Some(pod.clone()));
    let name = pod["metadata"]["name"].as_str().expect("name").to_string();
    let mut s = ctx.state.lock().expect("lock");
    if s.pods.contains_key(&name) {
        return status(StatusCode::CONFLICT, "AlreadyExists", &format!("pods \"{name}\" already exists"));
    }
    let uid = if s.created.insert(name.clone()) { format!("uid-{name}") } else { format!("uid-{name}-{rv}") };
    pod["metadata"]["uid"] = json!(uid);
    pod["metadata"]["namespace"] = json!(ns);
    pod["metadata"]["resourceVersion"] = json!(rv.to_string());
    pod["status"] = json!({"phase": "Pending"});
    s.pods.insert(name, pod.clone());
    (StatusCode::CREATED, axum::Json(pod)).into_response()
}

async fn get_pod(
    State(ctx): State<Ctx>,
    Path((_ns, name)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    record(&ctx, method, &uri, &q, None);
    match ctx.state.lock().expect("lock").pods.get(&name) {
        Some(p) => axum::Json(p.clone()).into_response(),
        None => status(StatusCode::NOT_FOUND, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn delete_pod(
    State(ctx): State<Ctx>,
    Path((_ns, name)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let opts: Option<Value> = serde_json::from_slice(&body).ok();
    record(&ctx, method, &uri, &q, opts.clone());
    let mut s = ctx.state.lock().expect("lock");
    let grace = opts.as_ref().and_then(|o| o["gracePeriodSeconds"].as_u64());
    let Some(pod) = s.pods.get_mut(&name) else {
        return status(StatusCode::NOT_FOUND, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Some(uid) = opts.as_ref().and_then(|o| o["preconditions"]["uid"].as_str())
        && pod["metadata"]["uid"].as_str() != Some(uid)
    {
        return status(StatusCode::CONFLICT, "Conflict", "Precondition failed: UID in precondition does not match");
    }
    if grace == Some(0) {
        let pod = s.pods.remove(&name).expect("present");
        return axum::Json(pod).into_response();
    }
    // Graceful: the pod stays, terminating, until the test sends its DELETED event.
    pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    axum::Json(pod.clone()).into_response()
}

async fn pod_log(
    State(ctx): State<Ctx>,
    Path((_ns, name)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    record(&ctx, method, &uri, &q, None);
    let s = ctx.state.lock().expect("lock");
    if !s.pods.contains_key(&name) {
        return status(StatusCode::NOT_FOUND, "NotFound", "no pod");
    }
    s.log.clone().into_response()
}

async fn create_other(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let mut obj: Value = serde_json::from_slice(&body).expect("object JSON");
    record(&ctx, method, &uri, &q, Some(obj.clone()));
    let resource = uri.path().rsplit('/').next().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"].as_str().expect("name").to_string();
    let key = format!("{resource}/{name}");
    let mut s = ctx.state.lock().expect("lock");
    if s.others.contains_key(&key) {
        return status(StatusCode::CONFLICT, "AlreadyExists", &format!("{key} already exists"));
    }
    obj["metadata"]["uid"] = json!(format!("uid-{key}"));
    s.others.insert(key, obj.clone());
    (StatusCode::CREATED, axum::Json(obj)).into_response()
}

/// `<resource>/<name>` of a service or ingress path.
fn other_key(uri: &Uri) -> String {
    let parts: Vec<&str> = uri.path().rsplit('/').take(2).collect();
    format!("{}/{}", parts[1], parts[0])
}

async fn get_other(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    record(&ctx, method, &uri, &q, None);
    let key = other_key(&uri);
    match ctx.state.lock().expect("lock").others.get(&key) {
        Some(o) => axum::Json(o.clone()).into_response(),
        None => status(StatusCode::NOT_FOUND, "NotFound", &format!("{key} not found")),
    }
}

async fn delete_other(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let opts: Option<Value> = serde_json::from_slice(&body).ok();
    record(&ctx, method, &uri, &q, opts.clone());
    let key = other_key(&uri);
    let mut s = ctx.state.lock().expect("lock");
    let Some(o) = s.others.get(&key) else {
        return status(StatusCode::NOT_FOUND, "NotFound", &format!("{key} not found"));
    };
    if let Some(uid) = opts.as_ref().and_then(|o| o["preconditions"]["uid"].as_str())
        && o["metadata"]["uid"].as_str() != Some(uid)
    {
        return status(StatusCode::CONFLICT, "Conflict", "Precondition failed");
    }
    let o = s.others.remove(&key).expect("present");
    axum::Json(o).into_response()
}

async fn unknown(State(ctx): State<Ctx>, method: Method, uri: Uri) -> Response {
    record(&ctx, method, &uri, &HashMap::new(), None);
    status(StatusCode::NOT_FOUND, "NotFound", &format!("the fake API does not serve {}", uri.path()))
}

/// The RBAC rule a call needs: (API group, resource, verb, cluster-wide).
pub(super) fn rbac_need(call: &Call) -> (String, String, String, bool) {
    let parts: Vec<&str> = call.path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => panic!("unexpected path {}", call.path),
    };
    let (cluster_wide, rest) = match rest {
        ["namespaces", _ns, rest @ ..] => (false, rest),
        rest => (true, rest),
    };
    let (resource, verb) = match (rest, &call.method) {
        ([r], &Method::GET) if call.query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            (r.to_string(), "watch")
        }
        ([r], &Method::GET) => (r.to_string(), "list"),
        ([r], &Method::POST) => (r.to_string(), "create"),
        ([r, _name], &Method::GET) => (r.to_string(), "get"),
        ([r, _name], &Method::DELETE) => (r.to_string(), "delete"),
        ([r, _name, sub], &Method::GET) => (format!("{r}/{sub}"), "get"),
        _ => panic!("unexpected call {} {}", call.method, call.path),
    };
    (group.to_string(), resource, verb.to_string(), cluster_wide)
}

/// Checks every recorded call against `packaging/kubernetes/agent-rbac.yaml`: cluster-wide calls
/// need a ClusterRole bound by a ClusterRoleBinding, namespaced ones that or a Role or ClusterRole
/// bound by a RoleBinding (which namespaces are bound is the deployment's choice).
pub(super) fn assert_rbac_allows(calls: &[Call]) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/kubernetes/agent-rbac.yaml"))
        .expect("RBAC manifest");
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML document"))
        .collect();
    let rules_of = |kind: &str, name: &str, namespace: Option<&str>| -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for v in &docs {
            let same = v["kind"] == kind
                && v["metadata"]["name"] == name
                && (kind == "ClusterRole" || v["metadata"]["namespace"].as_str() == namespace);
            if !same {
                continue;
            }
            for rule in v["rules"].as_array().expect("rules") {
                for g in rule["apiGroups"].as_array().expect("groups") {
                    for r in rule["resources"].as_array().expect("resources") {
                        for verb in rule["verbs"].as_array().expect("verbs") {
                            out.push((
                                g.as_str().expect("str").to_string(),
                                r.as_str().expect("str").to_string(),
                                verb.as_str().expect("str").to_string(),
                            ));
                        }
                    }
                }
            }
        }
        out
    };
    let mut cluster = Vec::new();
    let mut namespaced = Vec::new();
    for v in &docs {
        let role =
            (v["roleRef"]["kind"].as_str().unwrap_or_default(), v["roleRef"]["name"].as_str().unwrap_or_default());
        match v["kind"].as_str() {
            Some("ClusterRoleBinding") => cluster.extend(rules_of(role.0, role.1, None)),
            Some("RoleBinding") => {
                let ns = v["metadata"]["namespace"].as_str().expect("namespace");
                namespaced.extend(rules_of(role.0, role.1, Some(ns)));
            }
            _ => {}
        }
    }
    for call in calls {
        let (g, r, v, cluster_wide) = rbac_need(call);
        let key = (g, r, v);
        let ok = cluster.contains(&key) || (!cluster_wide && namespaced.contains(&key));
        assert!(
            ok,
            "{} {} needs {key:?} (cluster-wide: {cluster_wide}), which agent-rbac.yaml does not grant",
            call.method, call.path
        );
    }
}
