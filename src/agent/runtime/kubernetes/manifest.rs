//! Kubernetes objects for a lease (pod, services, ingresses) and the node inventory from the API's
//! nodes and pods.

use crate::agent::config::{IngressDefaults, is_label_value};
use crate::agent::runtime::RuntimeError;
use crate::model::api::{LeaseOrder, NodeReport};
use crate::model::{JobId, Labels, NodeName, PoolName, RESERVED_FOR_LABEL, Resources, Taint, TaintEffect};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// Label: the run a pod belongs to (present on every pod Convoy starts).
pub(crate) const LABEL_RUN_ID: &str = "convoy.io/run-id";
/// Label: the job a pod runs.
pub(crate) const LABEL_JOB_ID: &str = "convoy.io/job-id";
/// Label: the executor that started the pod.
pub(crate) const LABEL_EXECUTOR: &str = "convoy.io/executor";
/// Label and annotation: the job's queue.
pub(crate) const LABEL_QUEUE: &str = "convoy.io/queue";
/// Label and annotation: the job's job set.
pub(crate) const LABEL_JOB_SET: &str = "convoy.io/job-set";

/// Placeholder in the names and hosts of a job's services and ingresses: the run's pod name.
pub(crate) const PLACEHOLDER_POD: &str = "{pod}";
/// Placeholder: the namespace the agent creates the objects in.
pub(crate) const PLACEHOLDER_NAMESPACE: &str = "{namespace}";
/// Placeholder in ingress hosts: `.` and the agent's `ingress.host_suffix`, or nothing.
pub(crate) const PLACEHOLDER_HOST_SUFFIX: &str = "{host_suffix}";
/// Placeholder in ingress TLS secret names: `-` and the agent's `ingress.cert_name_suffix`, or
/// nothing.
pub(crate) const PLACEHOLDER_CERT_SUFFIX: &str = "{cert_suffix}";

/// Name of the pod of a job's run: `armada-<job id in lower case>-0`, the name Armada gives the
/// first pod of a job (Armada's Airflow operator finds a job's logs by it). A job has at most one
/// live run, so the name is unique among live runs; the pod of an earlier run of the job may
/// still hold it, which `start` resolves (see `KubernetesRuntime`).
pub(crate) fn pod_name(job_id: JobId) -> String {
    format!("armada-{}-0", job_id.to_string().to_ascii_lowercase())
}

/// The namespace a lease's objects go to: the job's, else the agent's configured one.
pub(crate) fn namespace_of<'a>(lease: &'a LeaseOrder, default: &'a str) -> &'a str {
    lease.namespace.as_ref().map_or(default, |ns| ns.as_str())
}

/// Label selector of the pods this executor started.
pub(crate) fn selector(executor: &str) -> String {
    format!("{LABEL_EXECUTOR}={executor},{LABEL_RUN_ID}")
}

/// Labels Convoy puts on every object of a run (values that are not valid label values, such as
/// job sets with `/`, are left to the annotations).
fn convoy_labels(lease: &LeaseOrder, executor: &str) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(LABEL_RUN_ID.to_string(), lease.run_id.to_string());
    l.insert(LABEL_JOB_ID.to_string(), lease.job_id.to_string());
    l.insert(LABEL_EXECUTOR.to_string(), executor.to_string());
    for (k, v) in [(LABEL_QUEUE, lease.queue.as_str()), (LABEL_JOB_SET, lease.job_set.as_str())] {
        if is_label_value(v) {
            l.insert(k.to_string(), v.to_string());
        }
    }
    l
}

/// A Kubernetes object from the JSON text the lease carries; an error names the field.
fn from_json_text<T: serde::de::DeserializeOwned>(
    text: &serde_json::value::RawValue,
) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text.get()))
}

/// The pod for a lease: the job's PodSpec bound to the leased node, never restarted, with the
/// lease's grace period and deadline.
pub(crate) fn build_pod(lease: &LeaseOrder, executor: &str, namespace: &str) -> Result<Pod, RuntimeError> {
    let mut spec: PodSpec =
        from_json_text(&lease.pod_spec).map_err(|e| RuntimeError::InvalidJob(format!("pod spec: {e}")))?;
    if spec.containers.is_empty() {
        return Err(RuntimeError::InvalidJob("pod spec: no containers".into()));
    }
    spec.node_name = Some(lease.node.to_string());
    spec.restart_policy = Some("Never".into());
    let grace = lease.termination_grace_period_seconds;
    spec.termination_grace_period_seconds =
        Some(if grace.is_finite() && grace > 0.0 { grace.ceil() as i64 } else { 1 });
    if lease.active_deadline_seconds > 0 {
        spec.active_deadline_seconds = Some(i64::try_from(lease.active_deadline_seconds).unwrap_or(i64::MAX));
    }
    let mut labels: BTreeMap<String, String> = lease.labels.clone();
    labels.extend(convoy_labels(lease, executor));
    let mut annotations: BTreeMap<String, String> = lease.annotations.clone();
    annotations.insert(LABEL_QUEUE.to_string(), lease.queue.to_string());
    annotations.insert(LABEL_JOB_SET.to_string(), lease.job_set.to_string());
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(lease.job_id)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// Owner reference to the run's pod, so Kubernetes deletes services and ingresses with it.
pub(crate) fn owner_reference(pod_name: &str, pod_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod_name.to_string(),
        uid: pod_uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn object_meta(
    mut meta: ObjectMeta,
    default_name: String,
    lease: &LeaseOrder,
    executor: &str,
    namespace: &str,
) -> ObjectMeta {
    if meta.name.as_deref().is_none_or(str::is_empty) {
        meta.name = Some(default_name);
    }
    meta.generate_name = None;
    meta.namespace = Some(namespace.to_string());
    meta.labels.get_or_insert_with(BTreeMap::new).extend(convoy_labels(lease, executor));
    meta
}

/// Fills in the placeholders of `s` (left as is without any).
fn fill_in(s: &mut String, pod: &str, namespace: &str, ingress: &IngressDefaults) {
    if !s.contains('{') {
        return;
    }
    let host_suffix = ingress.host_suffix.as_deref().map(|h| format!(".{h}")).unwrap_or_default();
    let cert_suffix = ingress.cert_name_suffix.as_deref().map(|c| format!("-{c}")).unwrap_or_default();
    *s = s
        .replace(PLACEHOLDER_POD, pod)
        .replace(PLACEHOLDER_NAMESPACE, namespace)
        .replace(PLACEHOLDER_HOST_SUFFIX, &host_suffix)
        .replace(PLACEHOLDER_CERT_SUFFIX, &cert_suffix);
}

/// The job's services, named `<pod>-svc-<i>` unless named, selecting the run's pod unless they
/// select something themselves. Owner references are added once the pod exists.
pub(crate) fn build_services(
    lease: &LeaseOrder,
    executor: &str,
    namespace: &str,
) -> Result<Vec<Service>, RuntimeError> {
    let pod = pod_name(lease.job_id);
    lease
        .services
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut s: Service =
                from_json_text(v).map_err(|e| RuntimeError::InvalidJob(format!("services[{i}]: {e}")))?;
            s.metadata =
                object_meta(std::mem::take(&mut s.metadata), format!("{pod}-svc-{i}"), lease, executor, namespace);
            if let Some(name) = s.metadata.name.as_mut() {
                fill_in(name, &pod, namespace, &IngressDefaults::default());
            }
            let spec = s.spec.get_or_insert_with(Default::default);
            if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) {
                spec.selector = Some(BTreeMap::from([(LABEL_RUN_ID.to_string(), lease.run_id.to_string())]));
            }
            s.status = None;
            Ok(s)
        })
        .collect()
}

/// The job's ingresses, named `<pod>-ing-<i>` unless named, with the placeholders of their
/// names, hosts, service backends and TLS secrets filled in and the agent's ingress annotations
/// (the ingress's own win).
pub(crate) fn build_ingresses(
    lease: &LeaseOrder,
    executor: &str,
    namespace: &str,
    defaults: &IngressDefaults,
) -> Result<Vec<Ingress>, RuntimeError> {
    let pod = pod_name(lease.job_id);
    lease
        .ingresses
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut g: Ingress =
                from_json_text(v).map_err(|e| RuntimeError::InvalidJob(format!("ingresses[{i}]: {e}")))?;
            g.metadata =
                object_meta(std::mem::take(&mut g.metadata), format!("{pod}-ing-{i}"), lease, executor, namespace);
            let resolve = |s: &mut String| fill_in(s, &pod, namespace, defaults);
            if let Some(name) = g.metadata.name.as_mut() {
                resolve(name);
            }
            if !defaults.annotations.is_empty() {
                let own = g.metadata.annotations.take().unwrap_or_default();
                let mut merged = defaults.annotations.clone();
                merged.extend(own);
                g.metadata.annotations = Some(merged);
            }
            if let Some(spec) = g.spec.as_mut() {
                let backends = spec.default_backend.iter_mut().chain(
                    spec.rules
                        .iter_mut()
                        .flatten()
                        .flat_map(|r| r.http.iter_mut().flat_map(|h| h.paths.iter_mut().map(|p| &mut p.backend))),
                );
                for b in backends {
                    if let Some(s) = b.service.as_mut() {
                        resolve(&mut s.name);
                    }
                }
                for r in spec.rules.iter_mut().flatten() {
                    if let Some(h) = r.host.as_mut() {
                        resolve(h);
                    }
                }
                for t in spec.tls.iter_mut().flatten() {
                    t.hosts.iter_mut().flatten().for_each(resolve);
                    if let Some(secret) = t.secret_name.as_mut() {
                        resolve(secret);
                    }
                }
            }
            g.status = None;
            Ok(g)
        })
        .collect()
}

/// Parses a map of quantities, skipping (and logging) those that do not parse.
fn resources(map: Option<&BTreeMap<String, Quantity>>, what: &str) -> Resources {
    let mut out = Resources::new();
    for (name, q) in map.into_iter().flatten() {
        match Resources::parse([(name.as_str(), q.0.as_str())]) {
            Ok(r) => out.add(&r),
            Err(e) => tracing::debug!(what, error = %e, "quantity skipped"),
        }
    }
    out
}

/// Effective requests of a pod: the sum over containers, at least the largest init container,
/// plus the pod overhead.
pub(crate) fn pod_requests(spec: &PodSpec) -> Resources {
    let mut sum = Resources::new();
    for c in &spec.containers {
        sum.add(&resources(c.resources.as_ref().and_then(|r| r.requests.as_ref()), "container request"));
    }
    for c in spec.init_containers.iter().flatten() {
        sum.max_with(&resources(c.resources.as_ref().and_then(|r| r.requests.as_ref()), "init container request"));
    }
    sum.add(&resources(spec.overhead.as_ref(), "pod overhead"));
    sum
}

/// Puts the node's earmark in `labels`: the `convoy.io/reserved-for` label, or else the annotation
/// of that name (a label value cannot hold a comma, so several queues are named there). A value
/// that names no valid queue is dropped with a warning rather than read as "earmarked for
/// nobody".
fn earmark(node: &str, labels: &mut Labels, annotations: Option<&BTreeMap<String, String>>) {
    if !labels.contains_key(RESERVED_FOR_LABEL)
        && let Some(v) = annotations.and_then(|a| a.get(RESERVED_FOR_LABEL))
    {
        labels.insert(RESERVED_FOR_LABEL.to_string(), v.clone());
    }
    if let Some(v) = labels.get(RESERVED_FOR_LABEL) {
        match crate::model::parse_reserved_for(v) {
            Ok(queues) => {
                labels.insert(RESERVED_FOR_LABEL.to_string(), crate::model::reserved_for_value(&queues));
            }
            Err(e) => {
                tracing::warn!(node, value = %v, error = %e, "node earmark ({RESERVED_FOR_LABEL}) ignored");
                labels.remove(RESERVED_FOR_LABEL);
            }
        }
    }
}

/// A node as the agent reports it; `used_by_others` is what pods Convoy did not start request.
pub(crate) fn node_report(node: &Node, pool_label: &str, used_by_others: Resources) -> Option<NodeReport> {
    let raw_name = node.metadata.name.as_deref()?;
    let name = match NodeName::new(raw_name) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(node = raw_name, error = %e, "node skipped");
            return None;
        }
    };
    let mut labels: Labels = node.metadata.labels.clone().unwrap_or_default();
    earmark(raw_name, &mut labels, node.metadata.annotations.as_ref());
    let pool = labels.get(pool_label).and_then(|p| PoolName::new(p).ok()).unwrap_or_else(PoolName::default_pool);
    let spec = node.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let effect = match t.effect.as_str() {
                "NoSchedule" => TaintEffect::NoSchedule,
                "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                "NoExecute" => TaintEffect::NoExecute,
                _ => return None,
            };
            Some(Taint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect })
        })
        .collect();
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    Some(NodeReport {
        name,
        pool,
        labels,
        taints,
        allocatable: resources(status.and_then(|s| s.allocatable.as_ref()), "node allocatable"),
        unallocatable: used_by_others,
        unschedulable: cordoned || !ready,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(services: Vec<serde_json::Value>, ingresses: Vec<serde_json::Value>) -> LeaseOrder {
        let raw = |v: Vec<serde_json::Value>| v.iter().map(crate::model::api::raw_json).collect();
        LeaseOrder {
            services: raw(services),
            ingresses: raw(ingresses),
            ..LeaseOrder::sample(serde_json::json!({"containers": [{"name": "main"}]}))
        }
    }

    #[test]
    fn placeholders_in_services_and_ingresses_are_filled_in() {
        use serde_json::json;
        let service = json!({"metadata": {"name": "{pod}-service-0"}, "spec": {"type": "ClusterIP", "clusterIP": "None",
            "ports": [{"name": "main-8080", "port": 8080}]}});
        let ingress = json!({"metadata": {"name": "{pod}-ingress-1", "annotations": {"a": "job"}},
            "spec": {"rules": [{"host": "main-8080-{pod}.{namespace}{host_suffix}", "http": {"paths": [{"path": "/",
                "pathType": "Prefix", "backend": {"service": {"name": "{pod}-service-0", "port": {"number": 8080}}}}]}}],
                "tls": [{"hosts": ["main-8080-{pod}.{namespace}{host_suffix}"], "secretName": "{namespace}{cert_suffix}"}]}});
        let l = lease(vec![service], vec![ingress]);
        let pod = pod_name(l.job_id);
        let run = l.run_id.to_string();
        let job = l.job_id.to_string();
        let labels = json!({"convoy.io/executor": "ex", "convoy.io/job-id": job, "convoy.io/job-set": "s",
                            "convoy.io/queue": "q", "convoy.io/run-id": run});
        let services = build_services(&l, "ex", "jobs").unwrap();
        assert_eq!(
            serde_json::to_value(&services).unwrap(),
            json!([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("{pod}-service-0"), "namespace": "jobs", "labels": labels},
                    "spec": {"type": "ClusterIP", "clusterIP": "None", "ports": [{"name": "main-8080", "port": 8080}],
                             "selector": {"convoy.io/run-id": run}}}])
        );
        let defaults = IngressDefaults {
            host_suffix: Some("jobs.example.com".into()),
            cert_name_suffix: Some("wildcard".into()),
            annotations: [
                ("a".to_string(), "agent".to_string()),
                ("kubernetes.io/ingress.class".to_string(), "nginx".to_string()),
            ]
            .into(),
        };
        let host = format!("main-8080-{pod}.jobs.jobs.example.com");
        let expected = |host: &str, secret: &str, annotations: serde_json::Value| {
            json!([{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": format!("{pod}-ingress-1"), "namespace": "jobs", "labels": labels,
                                 "annotations": annotations},
                    "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": format!("{pod}-service-0"), "port": {"number": 8080}}}}]}}],
                             "tls": [{"hosts": [host], "secretName": secret}]}}])
        };
        let ingresses = build_ingresses(&l, "ex", "jobs", &defaults).unwrap();
        assert_eq!(
            serde_json::to_value(&ingresses).unwrap(),
            expected(&host, "jobs-wildcard", json!({"a": "job", "kubernetes.io/ingress.class": "nginx"}))
        );
        // Without suffixes the host ends with the namespace and the secret is named after it.
        let ingresses = build_ingresses(&l, "ex", "jobs", &IngressDefaults::default()).unwrap();
        assert_eq!(
            serde_json::to_value(&ingresses).unwrap(),
            expected(&format!("main-8080-{pod}.jobs"), "jobs", json!({"a": "job"}))
        );
    }

    #[test]
    fn requests_sum_containers_and_cover_init_containers() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}}
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
            "overhead": {"cpu": "100m"}
        }))
        .expect("spec");
        let r = pod_requests(&spec);
        assert_eq!(r.get("cpu"), 2100);
        assert_eq!(r.get("memory"), 1 << 30);
    }

    #[test]
    fn node_report_reads_pool_taints_and_readiness() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"convoy.io/pool": "gpu", "zone": "a"}},
            "spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .expect("node");
        let r = node_report(&node, "convoy.io/pool", Resources::new()).expect("report");
        assert_eq!(r.pool.as_str(), "gpu");
        assert_eq!(r.taints.len(), 1);
        assert_eq!(r.allocatable.get("cpu"), 8000);
        assert!(r.unschedulable, "a node that is not Ready takes no jobs");
        assert!(!r.labels.contains_key(RESERVED_FOR_LABEL));
    }

    #[test]
    fn node_report_reads_the_earmark_from_the_label_or_the_annotation() {
        let report = |metadata: serde_json::Value| {
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": metadata, "status": {"allocatable": {"cpu": "8"}}
            }))
            .expect("node");
            let r = node_report(&node, "convoy.io/pool", Resources::new()).expect("report");
            r.labels.get(RESERVED_FOR_LABEL).cloned()
        };
        let label = serde_json::json!({"name": "n1", "labels": {"convoy.io/reserved-for": "ml"}});
        assert_eq!(report(label).as_deref(), Some("ml"));
        // Several queues: the annotation (a label value cannot hold a comma).
        let annotation = serde_json::json!({"name": "n1", "annotations": {"convoy.io/reserved-for": "ml, physics"}});
        assert_eq!(report(annotation).as_deref(), Some("ml,physics"));
        // The label wins over the annotation.
        let both = serde_json::json!({"name": "n1", "labels": {"convoy.io/reserved-for": "ml"},
                                      "annotations": {"convoy.io/reserved-for": "physics"}});
        assert_eq!(report(both).as_deref(), Some("ml"));
        let bad = serde_json::json!({"name": "n1", "annotations": {"convoy.io/reserved-for": "ml,,x"}});
        assert_eq!(report(bad), None);
    }
}
