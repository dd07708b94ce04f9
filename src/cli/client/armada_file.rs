//! armadactl's job files, read by `convoy submit` unchanged: `queue`, `jobSetId` and `jobs` with
//! `priority`, `namespace`, `clientId`, `labels`, `annotations`, `podSpec` (or a one-element
//! `podSpecs`), `ingress` and `services` (built into Kubernetes objects as the gRPC API builds
//! them), quantities written as numbers (`cpu: 0.2`), turned into Convoy's submission.

use serde_json::{Map, Value};

/// Why an Armada file cannot be taken: the field (in Convoy's spelling) and the problem.
pub(super) type Refusal = (String, String);

/// Whether a document with `jobs` is armadactl's: it spells the job set `jobSetId`, or a job
/// has `podSpec` or `podSpecs`.
pub(super) fn is_armada(doc: &Value) -> bool {
    doc.get("jobSetId").is_some()
        || doc
            .get("jobs")
            .and_then(Value::as_array)
            .is_some_and(|jobs| jobs.iter().any(|j| j.get("podSpec").is_some() || j.get("podSpecs").is_some()))
}

/// Convoy's submission for an Armada job file.
pub(super) fn to_convoy(doc: Value) -> Result<Value, Refusal> {
    let Value::Object(top) = doc else { return Err((".".into(), "must be a mapping".into())) };
    let mut out = Map::new();
    for (key, value) in top {
        match key.as_str() {
            "queue" => out.insert("queue".into(), value),
            "jobSetId" | "job_set" => out.insert("job_set".into(), value),
            "jobs" => {
                let Value::Array(jobs) = value else { return Err(("jobs".into(), "must be a list".into())) };
                let jobs = jobs
                    .into_iter()
                    .enumerate()
                    .map(|(i, j)| {
                        job(j).map_err(|(f, m)| (format!("jobs[{i}].{f}").trim_end_matches('.').to_string(), m))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                out.insert("jobs".into(), Value::Array(jobs))
            }
            other => {
                return Err((other.into(), "is not a field of an armadactl job file (queue, jobSetId, jobs)".into()));
            }
        };
    }
    Ok(Value::Object(out))
}

/// One of `jobs`.
fn job(j: Value) -> Result<Value, Refusal> {
    let Value::Object(fields) = j else { return Err((String::new(), "must be a mapping".into())) };
    let mut out = Map::new();
    let (mut ingress, mut services) = (Value::Null, Value::Null);
    for (key, value) in fields {
        match key.as_str() {
            "priority" => {
                out.insert("priority".into(), priority(&value)?);
            }
            "namespace" | "labels" | "annotations" => {
                out.insert(key, value);
            }
            "clientId" | "client_id" => {
                out.insert("client_id".into(), value);
            }
            "priorityClassName" => {
                out.insert("priority_class".into(), value);
            }
            "podSpec" | "pod_spec" => {
                out.insert("pod_spec".into(), pod_spec(value)?);
            }
            "podSpecs" => match value {
                Value::Array(mut specs) if specs.len() == 1 => {
                    out.insert("pod_spec".into(), pod_spec(specs.remove(0))?);
                }
                _ => return Err(("podSpecs".into(), "Convoy runs one pod per job: give one pod spec".into())),
            },
            "ingress" => ingress = value,
            "services" => services = value,
            // Armada's `scheduler` picks one of its schedulers; Convoy has one.
            "scheduler" => {}
            other => {
                return Err((
                    other.into(),
                    "is not a field of an armadactl job (priority, namespace, clientId, labels, annotations, podSpec)"
                        .into(),
                ));
            }
        }
    }
    if !ingress.is_null() || !services.is_null() {
        let spec = out.get("pod_spec").cloned().unwrap_or(Value::Null);
        let (svc, ing) = kubernetes_objects(&spec, &ingress, &services)?;
        out.insert("services".into(), Value::Array(svc));
        out.insert("ingresses".into(), Value::Array(ing));
    }
    Ok(Value::Object(out))
}

/// Armada's ingress and service configs as the Kubernetes objects Convoy's submission carries,
/// built as the gRPC API builds them.
#[cfg(feature = "grpc")]
fn kubernetes_objects(spec: &Value, ingress: &Value, services: &Value) -> Result<(Vec<Value>, Vec<Value>), Refusal> {
    convoy::grpc::ingress::from_job_file(spec, ingress, services)
}

#[cfg(not(feature = "grpc"))]
fn kubernetes_objects(_: &Value, _: &Value, _: &Value) -> Result<(Vec<Value>, Vec<Value>), Refusal> {
    Err(("ingress".into(), "Armada's ingress and service configs need a convoy built with the grpc feature".into()))
}

/// Armada's priority is a number; Convoy's a whole number from 0.
fn priority(v: &Value) -> Result<Value, Refusal> {
    match v.as_f64() {
        Some(p) if p >= 0.0 && p.fract() == 0.0 && p <= f64::from(u32::MAX) => Ok(Value::from(p as u32)),
        _ => Err(("priority".into(), format!("{v} is not a whole number from 0"))),
    }
}

/// A pod spec with its quantities as Kubernetes writes them: numbers become strings
/// (`cpu: 0.2` → `"0.2"`), as `kubectl` reads them.
fn pod_spec(mut spec: Value) -> Result<Value, Refusal> {
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                for kind in ["requests", "limits"] {
                    if let Some(m) = c.get_mut("resources").and_then(|r| r.get_mut(kind)).and_then(Value::as_object_mut)
                    {
                        quantities(m);
                    }
                }
            }
        }
    }
    if let Some(m) = spec.get_mut("overhead").and_then(Value::as_object_mut) {
        quantities(m);
    }
    Ok(spec)
}

fn quantities(m: &mut Map<String, Value>) {
    for v in m.values_mut() {
        if let Value::Number(n) = v {
            *v = Value::String(n.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// armadactl's example file, as its users write it.
    const ARMADA: &str = "
queue: test
jobSetId: job-set-1
jobs:
  - priority: 0
    namespace: default
    clientId: a-1
    labels: {team: ml}
    podSpec:
      terminationGracePeriodSeconds: 0
      restartPolicy: Never
      containers:
        - name: sleep
          imagePullPolicy: IfNotPresent
          image: alpine:latest
          command: [sh, -c]
          args: [sleep 5]
          resources:
            limits: {memory: 64Mi, cpu: 0.2}
            requests: {memory: 64Mi, cpu: 150m, nvidia.com/gpu: 1}
";

    #[test]
    fn armadactls_files_become_convoys_submission() {
        let doc: Value = serde_yaml_ng::from_str(ARMADA).unwrap();
        assert!(is_armada(&doc));
        let out = to_convoy(doc).unwrap();
        assert_eq!((&out["queue"], &out["job_set"]), (&json!("test"), &json!("job-set-1")));
        let j = &out["jobs"][0];
        assert_eq!((&j["priority"], &j["client_id"], &j["namespace"]), (&json!(0), &json!("a-1"), &json!("default")));
        let r = &j["pod_spec"]["containers"][0]["resources"];
        assert_eq!((&r["limits"]["cpu"], &r["requests"]["cpu"]), (&json!("0.2"), &json!("150m")));
        assert_eq!(r["requests"]["nvidia.com/gpu"], json!("1"));
        // It decodes as Convoy's own submission.
        let _: convoy::model::api::SubmitRequest = serde_json::from_value(out).unwrap();
        // Armada's ingress and service configs become Kubernetes objects, as over gRPC.
        let with_ports = json!({"jobSetId": "s", "jobs": [{
            "podSpec": {"containers": [{"name": "web", "ports": [{"containerPort": 8080}]}]},
            "ingress": [{"type": "Ingress", "ports": [8080]}],
            "services": [{"type": "NodePort", "ports": [8080]}]}]});
        let out = to_convoy(with_ports).unwrap();
        let job = &out["jobs"][0];
        let kinds: Vec<&str> =
            job["services"].as_array().unwrap().iter().map(|s| s["spec"]["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ClusterIP", "NodePort"]);
        assert_eq!(job["ingresses"].as_array().map(Vec::len), Some(1));
        assert!(job.get("ingress").is_none() && job.get("podSpec").is_none());
        assert!(!is_armada(&json!({"queue": "a", "job_set": "s", "jobs": [{"pod_spec": {}}]})));
    }

    #[test]
    fn what_convoy_cannot_take_is_refused_naming_the_field() {
        let refuse = |doc: Value| to_convoy(doc).unwrap_err();
        let e = refuse(json!({"jobSetId": "s", "jobs": [{"podSpec": {}, "priority": 1.5}]}));
        assert_eq!(e.0, "jobs[0].priority");
        let e = refuse(json!({"jobSetId": "s", "jobs": [{"podSpecs": [{}, {}]}]}));
        assert_eq!(e.0, "jobs[0].podSpecs");
        let e = refuse(json!({"jobSetId": "s", "jobs": [{"podSpec": {}, "ingress": [{"ports": [80]}]}]}));
        assert_eq!(e.0, "jobs[0].ingress[0].ports[0]", "{e:?}");
        let e = refuse(json!({"jobSetId": "s", "jobs": [{"podSpec": {}, "colour": "blue"}]}));
        assert_eq!(e.0, "jobs[0].colour");
    }
}
