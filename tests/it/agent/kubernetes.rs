//! The Kubernetes runtime against the fake API server: the exact objects created, deletes, watch
//! events turned into run events, inventory and reconciliation after a restart.

use super::control_plane::ControlPlane;
use super::harness::{InProcessAgent, config, lease};
use super::kube_api::KubeApi;
use crate::common::wait::wait_for;
use axum::http::Method;
use convoy::agent::config::KubernetesConfig;
use convoy::agent::runtime::kubernetes::KubernetesRuntime;
use convoy::agent::{EventReceiver, EventSink, Runtime, RuntimeKind, Started};
use convoy::model::api::{LeaseOrder, RunEventKind, RunEventReport, raw_json};
use convoy::model::{JobId, Namespace, RunId, RunPod, RunState};
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn pod_spec() -> Value {
    json!({"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "echo hi"],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "500m", "memory": "1Gi"}}}]})
}

fn kube_lease() -> LeaseOrder {
    let mut l = lease("worker-1", pod_spec());
    l.termination_grace_period_seconds = 2.5;
    l.active_deadline_seconds = 3600;
    l.labels.insert("app".into(), "trainer".into());
    l.annotations.insert("team".into(), "ml".into());
    l
}

/// The pod of a job's runs: Armada's name for it.
fn pod_name(job_id: JobId) -> String {
    format!("armada-{}-0", job_id.to_string().to_lowercase())
}

struct Harness {
    api: KubeApi,
    rt: KubernetesRuntime,
    rx: EventReceiver,
}

async fn harness(cfg: KubernetesConfig) -> Harness {
    let api = KubeApi::start().await;
    let (sink, rx) = EventSink::channel();
    let rt = KubernetesRuntime::new(api.client(), "test-executor", &cfg, sink);
    Harness { api, rt, rx }
}

impl Harness {
    /// Recovers (nothing or the stored pods) and waits for the watch to be open.
    async fn recover(&self) -> Vec<convoy::model::api::HeldRun> {
        let held = self.rt.recover().await.expect("recover");
        wait_for(T, "pod watch", || self.api.watching().then_some(())).await;
        held
    }

    async fn next_event(&mut self) -> RunEventReport {
        tokio::time::timeout(T, self.rx.recv()).await.expect("an event within the timeout").expect("channel open")
    }

    async fn no_event(&mut self) {
        if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(300), self.rx.recv()).await {
            panic!("unexpected event {ev:?}");
        }
    }
}

fn container_status(state: Value) -> Value {
    json!([{"name": "main", "image": "busybox:1.36", "imageID": "", "ready": false, "restartCount": 0, "state": state}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_becomes_the_exact_pod_with_owned_service_and_ingress() {
    let mut h = harness(KubernetesConfig { namespace: "batch".into(), ..Default::default() }).await;
    h.recover().await;
    let mut l = kube_lease();
    l.services = vec![raw_json(&json!({"spec": {"ports": [{"port": 8080}]}}))];
    l.ingresses =
        vec![raw_json(&json!({"metadata": {"name": "web"}, "spec": {"rules": [{"host": "job.example.com"}]}}))];
    let (run_id, job_id) = (l.run_id, l.job_id);
    assert_eq!(h.rt.start(l.clone()).await.expect("start"), Started::New);

    let posts = h.api.calls(Method::POST, "/api/v1/namespaces/batch/pods");
    assert_eq!(posts.len(), 1);
    let pod = posts[0].body.clone().expect("pod body");
    let name = pod_name(job_id);
    assert_eq!(pod["metadata"]["name"], json!(name));
    assert_eq!(pod["metadata"]["namespace"], json!("batch"));
    assert_eq!(
        pod["metadata"]["labels"],
        json!({"app": "trainer", "convoy.io/executor": "test-executor", "convoy.io/job-id": job_id.to_string(), "convoy.io/job-set": "set-1",
               "convoy.io/queue": "team-a", "convoy.io/run-id": run_id.to_string()})
    );
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"team": "ml", "convoy.io/queue": "team-a", "convoy.io/job-set": "set-1"})
    );
    let spec = &pod["spec"];
    assert_eq!(spec["nodeName"], json!("worker-1"));
    assert_eq!(spec["restartPolicy"], json!("Never"));
    assert_eq!(spec["terminationGracePeriodSeconds"], json!(3), "2.5 s rounds up");
    assert_eq!(spec["activeDeadlineSeconds"], json!(3600));
    assert_eq!(spec["containers"][0]["image"], json!("busybox:1.36"));
    assert_eq!(spec["containers"][0]["resources"]["requests"]["memory"], json!("1Gi"));

    let owner = json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": format!("uid-{name}"), "controller": true, "blockOwnerDeletion": true}]);
    let svc = h.api.calls(Method::POST, "/api/v1/namespaces/batch/services");
    assert_eq!(svc.len(), 1);
    let svc = svc[0].body.clone().expect("service body");
    assert_eq!(svc["metadata"]["name"], json!(format!("{name}-svc-0")));
    assert_eq!(svc["metadata"]["ownerReferences"], owner);
    assert_eq!(svc["spec"]["selector"], json!({"convoy.io/run-id": run_id.to_string()}));
    assert_eq!(svc["metadata"]["labels"]["convoy.io/job-id"], json!(job_id.to_string()));
    let ing = h.api.calls(Method::POST, "/apis/networking.k8s.io/v1/namespaces/batch/ingresses");
    assert_eq!(ing.len(), 1);
    let ing = ing[0].body.clone().expect("ingress body");
    assert_eq!(ing["metadata"]["name"], json!("web"));
    assert_eq!(ing["metadata"]["ownerReferences"], owner);

    let ev = h.next_event().await;
    assert_eq!((ev.run_id, ev.kind), (run_id, RunEventKind::Pending));
    assert_eq!(
        ev.pod,
        Some(RunPod { name: name.clone(), namespace: "batch".into(), uid: format!("uid-{name}") }),
        "the pending event names the pod"
    );
    // The same lease again creates nothing.
    assert_eq!(h.rt.start(l).await.expect("start"), Started::AlreadyKnown);
    assert_eq!(h.api.calls(Method::POST, "/pods").len(), 1);
    h.no_event().await;

    super::kube_api::assert_rbac_allows(&h.api.state().calls);
    // An invalid pod spec fails the run without any API call.
    let mut bad = kube_lease();
    bad.pod_spec = raw_json(&json!({"containers": [{"name": 5}]}));
    let err = h.rt.start(bad).await.expect_err("invalid");
    assert!(matches!(err, convoy::agent::RuntimeError::InvalidJob(_)), "{err}");
    assert_eq!(h.api.calls(Method::POST, "/pods").len(), 1);
}

/// The objects an Armada ingress config becomes (docs/armada-grpc.md) reach the API with the pod's
/// name, the namespace and the agent's `[kubernetes.ingress]` suffixes and annotations filled in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armada_ingress_placeholders_are_filled_in_by_the_agent() {
    let ingress = convoy::agent::config::IngressDefaults {
        host_suffix: Some("jobs.example.com".into()),
        cert_name_suffix: Some("wildcard".into()),
        annotations: [("kubernetes.io/ingress.class".to_string(), "nginx".to_string())].into(),
    };
    let h = harness(KubernetesConfig { namespace: "batch".into(), ingress, ..Default::default() }).await;
    h.recover().await;
    let mut l = kube_lease();
    let host = "main-8080-{pod}.{namespace}{host_suffix}";
    l.services = vec![raw_json(&json!({"metadata": {"name": "{pod}-service-0"},
        "spec": {"type": "ClusterIP", "clusterIP": "None", "ports": [{"name": "main-8080", "port": 8080}]}}))];
    l.ingresses = vec![raw_json(&json!({"metadata": {"name": "{pod}-ingress-1", "annotations": {"a": "b"}},
        "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "{pod}-service-0", "port": {"number": 8080}}}}]}}],
                 "tls": [{"hosts": [host], "secretName": "{namespace}{cert_suffix}"}]}}))];
    let (run_id, job_id) = (l.run_id, l.job_id);
    assert_eq!(h.rt.start(l).await.expect("start"), Started::New);
    let name = pod_name(job_id);
    let owner = json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": format!("uid-{name}"), "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"convoy.io/executor": "test-executor", "convoy.io/job-id": job_id.to_string(),
        "convoy.io/job-set": "set-1", "convoy.io/queue": "team-a", "convoy.io/run-id": run_id.to_string()});
    let svc = h.api.calls(Method::POST, "/api/v1/namespaces/batch/services");
    assert_eq!(
        svc.iter().map(|c| c.body.clone().expect("service body")).collect::<Vec<_>>(),
        vec![json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{name}-service-0"), "namespace": "batch", "labels": labels, "ownerReferences": owner},
            "spec": {"type": "ClusterIP", "clusterIP": "None", "ports": [{"name": "main-8080", "port": 8080}],
                     "selector": {"convoy.io/run-id": run_id.to_string()}}})]
    );
    let host = format!("main-8080-{name}.batch.jobs.example.com");
    let ing = h.api.calls(Method::POST, "/apis/networking.k8s.io/v1/namespaces/batch/ingresses");
    assert_eq!(
        ing.iter().map(|c| c.body.clone().expect("ingress body")).collect::<Vec<_>>(),
        vec![json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": format!("{name}-ingress-1"), "namespace": "batch", "labels": labels, "ownerReferences": owner,
                         "annotations": {"a": "b", "kubernetes.io/ingress.class": "nginx"}},
            "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": format!("{name}-service-0"), "port": {"number": 8080}}}}]}}],
                     "tls": [{"hosts": [host], "secretName": "batch-wildcard"}]}})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_become_run_events() {
    let mut h = harness(KubernetesConfig::default()).await;
    h.recover().await;
    let leases: Vec<LeaseOrder> = (0..5).map(|_| kube_lease()).collect();
    for l in &leases {
        h.rt.start(l.clone()).await.expect("start");
        assert_eq!(h.next_event().await.kind, RunEventKind::Pending);
    }
    let [ok, exit3, pull, unsched, oom] = [0, 1, 2, 3, 4].map(|i| pod_name(leases[i].job_id));

    h.api.push("MODIFIED", h.api.with_status(&ok, json!({"phase": "Running"})));
    let ev = h.next_event().await;
    assert_eq!((ev.run_id, ev.kind), (leases[0].run_id, RunEventKind::Running));
    // The same status again is no news.
    h.api.push("MODIFIED", h.api.with_status(&ok, json!({"phase": "Running"})));
    h.no_event().await;
    h.api.push(
        "MODIFIED",
        h.api.with_status(
            &ok,
            json!({"phase": "Succeeded", "containerStatuses": container_status(json!({"terminated": {"exitCode": 0}}))}),
        ),
    );
    let ev = h.next_event().await;
    assert_eq!((ev.kind, ev.exit_code), (RunEventKind::Succeeded, Some(0)));
    assert_eq!(ev.log_tail.as_deref(), Some("line 1\nline 2\n"));
    let logs = h.api.calls(Method::GET, &format!("/pods/{ok}/log"));
    assert_eq!(logs[0].query.get("tailLines").map(String::as_str), Some("100"));
    assert_eq!(logs[0].query.get("container").map(String::as_str), Some("main"));

    h.api.push(
        "MODIFIED",
        h.api.with_status(
            &exit3,
            json!({"phase": "Failed", "containerStatuses": container_status(json!({"terminated": {"exitCode": 3, "message": "bad input"}}))}),
        ),
    );
    let ev = h.next_event().await;
    assert_eq!(
        (ev.run_id, ev.kind, ev.exit_code, ev.message.as_deref()),
        (leases[1].run_id, RunEventKind::Failed, Some(3), Some("bad input"))
    );

    h.api.push(
        "MODIFIED",
        h.api.with_status(
            &pull,
            json!({"phase": "Pending", "containerStatuses": container_status(json!({"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}))}),
        ),
    );
    let ev = h.next_event().await;
    assert_eq!(
        (ev.run_id, ev.kind, ev.reason.as_deref()),
        (leases[2].run_id, RunEventKind::Failed, Some("image pull error"))
    );
    assert!(ev.message.is_some_and(|m| m.contains("manifest unknown")));

    h.api.push("MODIFIED", h.api.with_status(&unsched, json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes available"}]})));
    let ev = h.next_event().await;
    assert_eq!(
        (ev.run_id, ev.kind, ev.reason.as_deref()),
        (leases[3].run_id, RunEventKind::Returned, Some("unschedulable"))
    );

    h.api.push(
        "MODIFIED",
        h.api.with_status(
            &oom,
            json!({"phase": "Failed", "reason": "OutOfmemory", "message": "Node didn't have enough resource: memory"}),
        ),
    );
    let ev = h.next_event().await;
    assert_eq!(
        (ev.run_id, ev.kind),
        (leases[4].run_id, RunEventKind::Returned),
        "refused by the kubelet: back to the queue"
    );

    // Forgetting a reported run deletes its pod.
    h.rt.forget(leases[0].run_id).await.expect("forget");
    let deletes = h.api.calls(Method::DELETE, &format!("/pods/{ok}"));
    assert_eq!(deletes.len(), 1);
    // Events after that are ignored.
    h.api.push("DELETED", h.api.with_status(&exit3, json!({"phase": "Failed"})));
    h.no_event().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_deletes_with_the_grace_period_then_forces() {
    let mut h = harness(KubernetesConfig { force_delete_after: Duration::ZERO, ..Default::default() }).await;
    h.recover().await;
    let l = kube_lease();
    let name = pod_name(l.job_id);
    h.rt.start(l.clone()).await.expect("start");
    assert_eq!(h.next_event().await.kind, RunEventKind::Pending);
    h.api.push("MODIFIED", h.api.with_status(&name, json!({"phase": "Running"})));
    assert_eq!(h.next_event().await.kind, RunEventKind::Running);

    // What the pod looks like when it is gone (the forced delete removes it from the fake).
    let gone = h.api.with_status(
        &name,
        json!({"phase": "Failed", "containerStatuses": container_status(json!({"terminated": {"exitCode": 143}}))}),
    );
    assert!(h.rt.kill(l.run_id, Duration::from_secs(1), "cancelled").await.expect("kill"));
    let deletes = h.api.calls(Method::DELETE, &format!("/api/v1/namespaces/default/pods/{name}"));
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].body.as_ref().map(|b| b["gracePeriodSeconds"].clone()), Some(json!(1)));
    // Only that pod: the name passes to the job's next run.
    assert_eq!(deletes[0].body.as_ref().map(|b| b["preconditions"]["uid"].clone()), Some(json!(format!("uid-{name}"))));
    // The pod is still terminating after the grace period: deleted again with grace 0.
    let forced = wait_for(T, "forced delete", || {
        let d = h.api.calls(Method::DELETE, &format!("/pods/{name}"));
        (d.len() >= 2).then(|| d[1].clone())
    })
    .await;
    assert_eq!(forced.body.map(|b| b["gracePeriodSeconds"].clone()), Some(json!(0)));
    // Its end is a failure by kill, even though the container exited with 143.
    h.api.push("DELETED", gone);
    let ev = h.next_event().await;
    assert_eq!(
        (ev.kind, ev.reason.as_deref(), ev.message.as_deref(), ev.exit_code),
        (RunEventKind::Failed, Some("killed"), Some("cancelled"), Some(143))
    );
    // A kill for a run whose pod is gone reports nothing new.
    assert!(h.rt.kill(l.run_id, Duration::from_secs(1), "again").await.expect("kill"));
    h.no_event().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_adopts_existing_pods_without_duplicates() {
    let h0 = harness(KubernetesConfig::default()).await;
    // Pods an earlier agent created: one running, one that succeeded meanwhile, and one of another executor.
    let running = kube_lease();
    let done = kube_lease();
    let other = kube_lease();
    let pod = |l: &LeaseOrder, executor: &str, status: Value| {
        json!({"metadata": {"name": pod_name(l.job_id), "namespace": "default", "uid": format!("uid-{}", pod_name(l.job_id)),
                "labels": {"convoy.io/run-id": l.run_id.to_string(), "convoy.io/job-id": l.job_id.to_string(), "convoy.io/executor": executor}},
               "spec": pod_spec(), "status": status})
    };
    {
        let mut s = h0.api.state();
        s.pods.insert(pod_name(running.job_id), pod(&running, "test-executor", json!({"phase": "Running"})));
        s.pods.insert(pod_name(done.job_id), pod(&done, "test-executor", json!({"phase": "Succeeded"})));
        s.pods.insert(pod_name(other.job_id), pod(&other, "someone-else", json!({"phase": "Running"})));
    }
    let mut h = h0;
    let held: std::collections::HashMap<RunId, RunState> =
        h.recover().await.into_iter().map(|r| (r.run_id, r.state)).collect();
    assert_eq!(held, [(running.run_id, RunState::Running), (done.run_id, RunState::Succeeded)].into());
    // Listed in every namespace: jobs choose theirs.
    let list = h.api.calls(Method::GET, "/api/v1/pods");
    assert_eq!(
        list[0].query.get("labelSelector").map(String::as_str),
        Some("convoy.io/executor=test-executor,convoy.io/run-id")
    );
    let got: std::collections::HashMap<RunId, RunEventKind> =
        [h.next_event().await, h.next_event().await].into_iter().map(|e| (e.run_id, e.kind)).collect();
    assert_eq!(got, [(running.run_id, RunEventKind::Running), (done.run_id, RunEventKind::Succeeded)].into());
    // The relist of the watch brings nothing new.
    h.no_event().await;
    // The server leases the adopted runs again: nothing is created.
    assert_eq!(h.rt.start(running.clone()).await.expect("start"), Started::AlreadyKnown);
    assert_eq!(h.rt.start(done.clone()).await.expect("start"), Started::AlreadyKnown);
    assert!(h.api.calls(Method::POST, "/pods").is_empty());
    // A pod that exists without being tracked (created just before a crash) is adopted on create.
    let late = kube_lease();
    h.api.state().pods.insert(pod_name(late.job_id), pod(&late, "test-executor", json!({"phase": "Running"})));
    assert_eq!(h.rt.start(late.clone()).await.expect("start"), Started::New);
    assert_eq!(h.api.calls(Method::POST, "/pods").len(), 1, "one create attempt, answered 409");
    assert_eq!(h.api.calls(Method::GET, &format!("/pods/{}", pod_name(late.job_id))).len(), 1);
    let ev = h.next_event().await;
    assert_eq!((ev.run_id, ev.kind), (late.run_id, RunEventKind::Running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_in_their_namespace_and_a_new_run_replaces_the_pod_of_an_earlier_one() {
    let mut h = harness(KubernetesConfig::default()).await;
    h.recover().await;
    // The watch follows the agent's pods in every namespace.
    let watches = h.api.calls(Method::GET, "/api/v1/pods");
    assert!(watches.iter().any(|c| c.query.get("watch").is_some_and(|w| w == "true" || w == "1")), "{watches:?}");

    let mut first = kube_lease();
    first.namespace = Some(Namespace::new("ml").expect("namespace"));
    first.services = vec![raw_json(&json!({"spec": {"ports": [{"port": 8080}]}}))];
    let name = pod_name(first.job_id);
    assert_eq!(h.rt.start(first.clone()).await.expect("start"), Started::New);
    assert_eq!(h.api.calls(Method::POST, "/api/v1/namespaces/ml/pods").len(), 1);
    assert_eq!(h.api.calls(Method::POST, "/api/v1/namespaces/ml/services").len(), 1);
    assert!(h.api.calls(Method::POST, "/api/v1/namespaces/default/pods").is_empty());
    let ev = h.next_event().await;
    assert_eq!(ev.pod, Some(RunPod { name: name.clone(), namespace: "ml".into(), uid: format!("uid-{name}") }));
    h.api.push("MODIFIED", h.api.with_status(&name, json!({"phase": "Running"})));
    let ev = h.next_event().await;
    assert_eq!((ev.run_id, ev.kind), (first.run_id, RunEventKind::Running));
    assert_eq!(ev.pod.map(|p| (p.name, p.namespace)), Some((name.clone(), "ml".to_string())));

    // The job's next run (the server lost the first) comes while the first run's pod is there.
    let mut second = first.clone();
    second.run_id = super::harness::ids().0;
    assert_eq!(h.rt.start(second.clone()).await.expect("start"), Started::New);
    let deletes = h.api.calls(Method::DELETE, &format!("/api/v1/namespaces/ml/pods/{name}"));
    assert_eq!(deletes.len(), 1, "the stale pod is deleted once");
    let body = deletes[0].body.clone().expect("delete options");
    assert_eq!(
        (&body["gracePeriodSeconds"], &body["preconditions"]["uid"]),
        (&json!(0), &json!(format!("uid-{name}")))
    );
    let pod = h.api.state().pods.get(&name).cloned().expect("the new pod");
    assert_eq!(pod["metadata"]["labels"]["convoy.io/run-id"], json!(second.run_id.to_string()));
    assert_ne!(pod["metadata"]["uid"], json!(format!("uid-{name}")));
    // The first run's service (its owner gone, the collector not yet there) is replaced too.
    let svc = h.api.state().others.get(&format!("services/{name}-svc-0")).cloned().expect("service");
    assert_eq!(svc["metadata"]["labels"]["convoy.io/run-id"], json!(second.run_id.to_string()));
    assert_eq!(svc["metadata"]["ownerReferences"][0]["uid"], pod["metadata"]["uid"]);
    let ev = h.next_event().await;
    assert_eq!((ev.run_id, ev.kind), (second.run_id, RunEventKind::Pending));
    assert_eq!(ev.pod.map(|p| p.uid), pod["metadata"]["uid"].as_str().map(str::to_string));

    // The end of the first run never takes the second run's pod, which has its name.
    h.rt.forget(first.run_id).await.expect("forget");
    assert!(h.api.state().pods.contains_key(&name), "the new run's pod stays");
    assert_eq!(h.api.calls(Method::DELETE, &format!("/pods/{name}")).len(), 2, "one refused delete");

    // A pod holding the name that is not an earlier run's of the job refuses the run.
    let third = kube_lease();
    let foreign = pod_name(third.job_id);
    h.api
        .state()
        .pods
        .insert(foreign.clone(), json!({"metadata": {"name": foreign, "namespace": "default", "uid": "x"}}));
    let err = h.rt.start(third).await.expect_err("name taken");
    assert!(err.to_string().contains("belongs to something else"), "{err}");
    assert!(h.api.state().pods.contains_key(&foreign));
    super::kube_api::assert_rbac_allows(&h.api.state().calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_subtracts_pods_convoy_did_not_start() {
    let h = harness(KubernetesConfig { pool_label: "pool".into(), ..Default::default() }).await;
    {
        let mut s = h.api.state();
        s.nodes = vec![
            json!({"metadata": {"name": "worker-1", "labels": {"pool": "fast"}}, "spec": {},
                   "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"metadata": {"name": "worker-2"}, "spec": {"unschedulable": true, "taints": [{"key": "dedicated", "value": "db", "effect": "NoExecute"}]},
                   "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}}),
        ];
        s.foreign_pods = vec![
            json!({"metadata": {"name": "system", "namespace": "kube-system"}, "spec": {"nodeName": "worker-1",
                   "containers": [{"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "convoy-x", "namespace": "default", "labels": {"convoy.io/run-id": "x"}}, "spec": {"nodeName": "worker-1",
                   "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}]}, "status": {"phase": "Running"}}),
        ];
    }
    let nodes = h.rt.nodes().await.expect("nodes");
    assert_eq!(nodes.len(), 2);
    let w1 = &nodes[0];
    assert_eq!((w1.name.as_str(), w1.pool.as_str(), w1.unschedulable), ("worker-1", "fast", false));
    assert_eq!(
        (w1.allocatable.get("cpu"), w1.unallocatable.get("cpu"), w1.unallocatable.get("memory")),
        (8000, 250, 256 << 20)
    );
    let w2 = &nodes[1];
    assert_eq!((w2.pool.as_str(), w2.unschedulable, w2.taints.len()), ("default", true, 1));
    let pod_lists = h.api.calls(Method::GET, "/api/v1/pods");
    assert_eq!(
        pod_lists[0].query.get("fieldSelector").map(String::as_str),
        Some("status.phase!=Succeeded,status.phase!=Failed")
    );
    // Cached between refreshes.
    h.rt.nodes().await.expect("nodes");
    assert_eq!(h.api.calls(Method::GET, "/api/v1/nodes").len(), 1);
}

/// The whole agent with the kubernetes runtime: kubeconfig file → fake API, fake control plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_a_lease_as_a_pod_end_to_end() {
    let api = KubeApi::start().await;
    api.state().nodes = vec![
        json!({"metadata": {"name": "worker-1"}, "spec": {}, "status": {"allocatable": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}),
    ];
    let cp = ControlPlane::start(None);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\ncontexts:\n- name: t\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: t\n",
            api.url
        ),
    )
    .expect("kubeconfig");
    let mut cfg = config(vec![cp.url()], RuntimeKind::Kubernetes, dir.path());
    cfg.kubernetes.kubeconfig = Some(kubeconfig);
    let agent = InProcessAgent::start(cfg);
    let poll = wait_for(T, "a poll", || cp.last_poll()).await;
    assert_eq!(poll.nodes[0].name.as_str(), "worker-1");
    wait_for(T, "pod watch", || api.watching().then_some(())).await;
    let l = kube_lease();
    cp.push_lease(l.clone());
    cp.wait_kind(l.run_id, RunEventKind::Pending, T).await;
    let name = pod_name(l.job_id);
    api.push("MODIFIED", api.with_status(&name, json!({"phase": "Succeeded"})));
    let fin = cp.wait_final(l.run_id, T).await;
    assert_eq!(fin.kind, RunEventKind::Succeeded);
    // Acknowledged → the finished pod is deleted.
    wait_for(T, "pod deletion", || (!api.calls(Method::DELETE, &format!("/pods/{name}")).is_empty()).then_some(()))
        .await;
    agent.stop().await.expect("clean stop");
    super::kube_api::assert_rbac_allows(&api.state().calls);
}

/// The example Deployment's agent config is valid.
#[test]
fn example_deployment_config_is_valid() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/kubernetes/agent-deployment.yaml"))
            .expect("manifest");
    let config_map = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("YAML document"))
        .find(|v| v["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let toml_text = config_map["data"]["agent.toml"].as_str().expect("agent.toml");
    let cfg = convoy::agent::AgentConfig::from_toml_str(toml_text).expect("parses");
    cfg.validate().expect("valid");
    assert_eq!(cfg.runtime, RuntimeKind::Kubernetes);
    assert_eq!(cfg.kubernetes.namespace, "convoy-jobs");
}
