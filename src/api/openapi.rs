//! The OpenAPI 3.1 document of the HTTP API, served at `GET /openapi.json`.
//!
//! The document is not written by hand: [`routes()`](super::routes()) registers every handler through
//! `utoipa_axum::routes!`, which takes the method, path, parameters, bodies and responses from the
//! handler's `#[utoipa::path]` annotation and the schemas from the body types' `ToSchema`. This
//! module adds what no handler says: the title and version, the tags, and the bearer security
//! scheme that the operations needing a token refer to.

use super::problem::ApiError;
use crate::model::{ExecutorName, JobId, JobSetName, QueueName};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, License, OpenApi, OpenApiBuilder};

/// Name of the security scheme of operations that need a token (`security(("bearer" = []))`).
pub(super) const BEARER: &str = "bearer";

/// The tags operations are grouped by, with their descriptions.
const TAGS: [(&str, &str); 5] = [
    ("queues", "Queues: the unit of fair share."),
    ("jobs", "Submitting, controlling and reading jobs."),
    ("events", "A job set's events as a resumable server-sent event stream."),
    ("executors", "The executor API that agents poll for work and report runs to."),
    ("operations", "Health, readiness, metrics, cluster status, the state digest and this document."),
];

/// The document before any path is added: info, tags and the security scheme.
pub(super) fn base() -> OpenApi {
    let info = InfoBuilder::new()
        .title("Convoy")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "A batch-job scheduler with fair-share scheduling. Every error is `application/problem+json` \
             (RFC 9457). Every answer carries an `x-request-id` header (a client may send its own); \
             a problem body repeats it as `request_id`. \
             When authentication is enabled, operations with a security requirement need \
             `Authorization: Bearer <token>`, or `Authorization: Basic <base64 of name:password>` \
             for a user of the server's `[auth] users` (the same principal, groups and roles).",
        ))
        .license(Some(License::builder().name("Apache-2.0").identifier(Some("Apache-2.0")).build()))
        .build();
    let bearer = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some(
            "A token from the server's `[auth] tokens`; roles decide what it may do. HTTP Basic \
             credentials of `[auth] users` are accepted wherever a token is.",
        ))
        .build();
    // Path and query parameters refer to these, but utoipa collects schemas only from bodies.
    let components = ComponentsBuilder::new()
        .schema_from::<QueueName>()
        .schema_from::<JobSetName>()
        .schema_from::<ExecutorName>()
        .schema_from::<JobId>()
        .security_scheme(BEARER, SecurityScheme::Http(bearer))
        .build();
    let tags =
        TAGS.iter().map(|(name, description)| TagBuilder::new().name(*name).description(Some(*description)).build());
    OpenApiBuilder::new().info(info).components(Some(components)).tags(Some(tags)).build()
}

/// The whole document, as the router's handlers describe it.
pub(super) fn openapi() -> OpenApi {
    super::routes().into_openapi()
}

/// The document's JSON, built once.
fn document_json() -> Result<&'static str, ApiError> {
    static JSON: OnceLock<Result<String, String>> = OnceLock::new();
    JSON.get_or_init(|| openapi().to_json().map_err(|e| e.to_string()))
        .as_deref()
        .map_err(|e| ApiError::internal(format!("building the OpenAPI document: {e}")))
}

/// This document
///
/// The OpenAPI 3.1 description of the HTTP API.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object, content_type = "application/json"))
)]
pub(super) async fn document() -> Response {
    match document_json() {
        Ok(json) => ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], json).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Checks `value` against `schema`, a schema of the document `doc` (e.g.
/// `{"$ref": "#/components/schemas/Queue"}`), structurally: JSON types, `enum`, `required`,
/// properties, additional properties, array items, `$ref`, `oneOf`, `anyOf` and `allOf`. Stricter
/// than JSON Schema in one way, to catch undocumented fields: an object schema that lists
/// `properties` and says nothing of `additionalProperties` admits no other property. Formats,
/// patterns and bounds are not checked. The error names the JSON path of the first mismatch.
pub fn check_value(doc: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    check_at(doc, schema, value, "$", 0)
}

fn check_at(doc: &Value, schema: &Value, value: &Value, at: &str, depth: usize) -> Result<(), String> {
    if depth > 64 {
        return Err(format!("{at}: schema nesting too deep (a reference loop?)"));
    }
    let schema = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{at}: no value is allowed here")),
        Value::Object(s) => s,
        other => return Err(format!("{at}: {other} is not a schema")),
    };
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix('#')
            .and_then(|p| doc.pointer(p))
            .ok_or_else(|| format!("{at}: unresolved reference {r}"))?;
        check_at(doc, target, value, at, depth + 1)?;
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            check_at(doc, s, value, at, depth + 1)?;
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|s| check_at(doc, s, value, at, depth + 1).is_ok())
    {
        return Err(format!("{at}: {value} matches none of anyOf"));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let errors: Vec<String> = one.iter().filter_map(|s| check_at(doc, s, value, at, depth + 1).err()).collect();
        match one.len() - errors.len() {
            1 => {}
            0 => return Err(format!("{at}: {value} matches none of oneOf ({})", errors.join("; "))),
            n => return Err(format!("{at}: {value} matches {n} of oneOf")),
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !types.iter().any(|t| type_matches(t, value)) {
            return Err(format!("{at}: {value} is not of type {t}"));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {}", Value::Array(allowed.clone())));
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            for name in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
            {
                if !fields.contains_key(name) {
                    return Err(format!("{at}: required property {name:?} is missing"));
                }
            }
            let extra = schema.get("additionalProperties");
            for (name, v) in fields {
                let here = format!("{at}.{name}");
                if let Some(names) = schema.get("propertyNames") {
                    check_at(doc, names, &Value::String(name.clone()), &here, depth + 1)?;
                }
                match (properties.and_then(|p| p.get(name)), extra) {
                    (Some(s), _) => check_at(doc, s, v, &here, depth + 1)?,
                    (None, Some(s)) => check_at(doc, s, v, &here, depth + 1)?,
                    (None, None) if properties.is_some() => {
                        return Err(format!("{here}: the schema lists no such property"));
                    }
                    (None, None) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    check_at(doc, s, v, &format!("{at}[{i}]"), depth + 1)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn type_matches(t: &str, value: &Value) -> bool {
    match (t, value) {
        ("null", Value::Null) | ("boolean", Value::Bool(_)) | ("string", Value::String(_)) => true,
        ("object", Value::Object(_)) | ("array", Value::Array(_)) | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::api::*;
    use crate::model::{EventKind, JobId, JobState, Queue, QueueName, Resources, RunId, RunState};
    use serde_json::json;
    use std::collections::{BTreeMap, BTreeSet};

    fn doc() -> Value {
        serde_json::to_value(openapi()).expect("the document serializes")
    }

    fn schema_ref(name: &str) -> Value {
        json!({ "$ref": format!("#/components/schemas/{name}") })
    }

    /// Paths and methods (upper case, without the HEAD axum adds to GET) the router serves, read
    /// from its `Debug` output: axum has no other way to list routes.
    fn served(router: &axum::Router<std::sync::Arc<crate::control::Control>>) -> BTreeMap<String, BTreeSet<String>> {
        let text = format!("{router:?}");
        // Only the main path router; the fallback router follows it.
        let main = text.split(", fallback_router:").next().expect("router debug output");
        let (routes, nodes) = main.split_once("node: Node { paths: {").expect("axum's Router debug output lists paths");
        let mut paths = BTreeMap::new();
        for entry in nodes.split("RouteId(").skip(1) {
            let (id, rest) = entry.split_once("): \"").expect("route id and path");
            let path = rest.split('"').next().expect("quoted path");
            paths.insert(id.to_string(), path.to_string());
        }
        let mut out = BTreeMap::new();
        for entry in routes.split("RouteId(").skip(1) {
            let (id, rest) = entry.split_once("): ").expect("route id");
            let allow = rest
                .split_once("allow_header: Bytes(b\"")
                .map(|(_, a)| a.split('"').next().unwrap_or(""))
                .unwrap_or("");
            let methods: BTreeSet<String> =
                allow.split(',').filter(|m| !m.is_empty() && *m != "HEAD").map(str::to_string).collect();
            let path = paths.get(id).unwrap_or_else(|| panic!("route {id} has no path in {text}"));
            out.insert(path.clone(), methods);
        }
        out
    }

    #[test]
    fn every_served_route_is_documented_with_its_methods() {
        let (router, api) = super::super::routes().split_for_parts();
        let served = served(&router);
        assert!(served.len() >= 17, "the router debug output was not understood: {served:?}");
        let documented: BTreeMap<String, BTreeSet<String>> = serde_json::to_value(&api.paths.paths)
            .expect("paths serialize")
            .as_object()
            .expect("paths object")
            .iter()
            .map(|(path, item)| {
                let methods = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];
                (path.clone(), methods.iter().filter(|m| item.get(**m).is_some()).map(|m| m.to_uppercase()).collect())
            })
            .collect();
        assert_eq!(served, documented, "every route must be registered with routes!(..) from an annotated handler");
        // The contract of DESIGN.md §6.
        let contract = [
            ("/v1/queues", "GET,POST"),
            ("/v1/queues/{queue}", "DELETE,GET,PUT"),
            ("/v1/queues/{queue}/report", "GET"),
            ("/v1/queues/{queue}/cordon", "POST"),
            ("/v1/queues/{queue}/uncordon", "POST"),
            ("/v1/queues/{queue}/cancel", "POST"),
            ("/v1/queues/{queue}/preempt", "POST"),
            ("/v1/queues/{queue}/job-sets/{job_set}/events", "GET"),
            ("/v1/jobs", "GET,POST"),
            ("/v1/jobs/cancel", "POST"),
            ("/v1/jobs/reprioritize", "POST"),
            ("/v1/jobs/preempt", "POST"),
            ("/v1/jobs/{id}", "GET"),
            ("/v1/jobs/{id}/logs", "GET"),
            ("/v1/jobs/{id}/output", "GET"),
            ("/v1/jobs/{id}/why", "GET"),
            ("/v1/runs/{run_id}", "GET"),
            ("/v1/executors/{executor}/lease", "POST"),
            ("/v1/executors/{executor}/events", "POST"),
            ("/v1/executors/{executor}/output", "POST"),
            ("/v1/cluster", "GET"),
            ("/v1/cluster/digest", "GET"),
            ("/v1/cluster/members", "POST"),
            ("/v1/cluster/members/{id}", "DELETE"),
            ("/v1/cluster/nodes", "GET"),
            ("/v1/cluster/nodes/{executor}/{node}/quarantine", "DELETE"),
            ("/v1/scenario", "GET"),
            ("/v1/replay", "GET"),
            ("/healthz", "GET"),
            ("/readyz", "GET"),
            ("/metrics", "GET"),
            ("/openapi.json", "GET"),
        ];
        let contract: BTreeMap<String, BTreeSet<String>> =
            contract.iter().map(|(p, m)| (p.to_string(), m.split(',').map(str::to_string).collect())).collect();
        assert_eq!(served, contract);
    }

    #[test]
    fn document_has_info_security_tags_and_unique_operations() {
        let d = doc();
        assert_eq!(d["openapi"], "3.1.0");
        assert_eq!(d["info"]["title"], "Convoy");
        assert_eq!(d["info"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            d["components"]["securitySchemes"][BEARER],
            json!({"type": "http", "scheme": "bearer", "description": d["components"]["securitySchemes"][BEARER]["description"]})
        );
        let mut ids = BTreeSet::new();
        for (path, item) in d["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                assert!(ids.insert(id.to_string()), "operationId {id} is used twice");
                let tags = op["tags"].as_array().unwrap_or_else(|| panic!("{method} {path} has no tag"));
                assert_eq!(tags.len(), 1, "{method} {path}: {tags:?}");
                assert!(TAGS.iter().any(|(t, _)| tags[0] == *t), "{method} {path}: unknown tag {tags:?}");
                assert!(op["summary"].is_string(), "{method} {path} has no summary");
                // Token-protected exactly when the handler takes a Principal: everything but operations.
                let public = ["/healthz", "/readyz", "/metrics", "/openapi.json"].contains(&path.as_str());
                let security = &op["security"];
                if public {
                    assert!(security.is_null(), "{method} {path} should need no token");
                } else {
                    assert_eq!(security, &json!([{ BEARER: [] }]), "{method} {path}");
                    assert!(op["responses"]["401"].is_object(), "{method} {path} must document 401");
                }
                for (status, resp) in op["responses"].as_object().expect("responses") {
                    if status.starts_with('4') || status.starts_with('5') {
                        let problem = &resp["content"]["application/problem+json"]["schema"];
                        assert_eq!(problem, &schema_ref("Problem"), "{method} {path} {status}");
                    }
                }
            }
        }
        assert_eq!(ids.len(), 36);
    }

    #[test]
    fn content_types_of_streams_and_text() {
        let d = doc();
        let ok = |path: &str| {
            d["paths"][path]["get"]["responses"]["200"]["content"]
                .as_object()
                .map(|c| c.keys().cloned().collect::<Vec<_>>())
        };
        assert_eq!(ok("/v1/queues/{queue}/job-sets/{job_set}/events"), Some(vec!["text/event-stream".to_string()]));
        assert_eq!(ok("/metrics"), Some(vec!["text/plain".to_string()]));
        assert_eq!(ok("/v1/jobs/{id}/logs"), Some(vec!["text/plain".to_string()]));
        assert_eq!(ok("/v1/jobs/{id}"), Some(vec!["application/json".to_string()]));
        assert_eq!(
            d["paths"]["/v1/queues"]["post"]["responses"]["201"]["content"]["application/json"]["schema"],
            schema_ref("Queue")
        );
        assert!(d["paths"]["/v1/queues/{queue}"]["delete"]["responses"]["204"]["content"].is_null());
        let params: Vec<String> = d["paths"]["/v1/jobs"]["get"]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .map(|p| format!("{}:{}", p["in"].as_str().unwrap_or(""), p["name"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(
            params,
            ["query:queue", "query:job_set", "query:state", "query:limit", "query:after", "query:text", "query:order"]
        );
        let stream = &d["paths"]["/v1/queues/{queue}/job-sets/{job_set}/events"]["get"]["parameters"];
        let names: Vec<&str> =
            stream.as_array().expect("parameters").iter().filter_map(|p| p["name"].as_str()).collect();
        assert_eq!(names, ["queue", "job_set", "from", "follow", "Last-Event-ID"]);
        let force = &d["paths"]["/v1/queues/{queue}"]["delete"]["parameters"][1];
        assert_eq!((force["name"].as_str(), force["in"].as_str()), (Some("force"), Some("query")));
    }

    #[test]
    fn components_exist_and_every_reference_resolves() {
        let d = doc();
        let schemas = d["components"]["schemas"].as_object().expect("schemas");
        for name in [
            "Queue",
            "SubmitRequest",
            "SubmitItem",
            "SubmitResponse",
            "CancelRequest",
            "ReprioritizeRequest",
            "PreemptRequest",
            "JobIdsResponse",
            "JobView",
            "RunView",
            "JobList",
            "EventView",
            "QueueReport",
            "QueuePoolReport",
            "PoolPolicy",
            "LeaseRequest",
            "NodeReport",
            "HeldRun",
            "LeaseResponse",
            "LeaseOrder",
            "KillOrder",
            "EventsRequest",
            "RunEventReport",
            "RunEventKind",
            "EventsResponse",
            "Problem",
            "JobState",
            "RunState",
            "EventKind",
            "Taint",
            "TaintEffect",
            "Resources",
            "QueueName",
            "JobSetName",
            "JobId",
            "RunId",
            "NodeName",
            "PoolName",
            "PriorityClassName",
            "ExecutorName",
            "Health",
            "Readiness",
            "ClusterStatus",
            "ClusterMember",
        ] {
            assert!(
                schemas.contains_key(name),
                "no component schema {name}; have {:?}",
                schemas.keys().collect::<Vec<_>>()
            );
        }
        fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::Object(m) => {
                    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                        out.push(r);
                    }
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        let mut all = vec![];
        refs(&d, &mut all);
        assert!(all.len() > 50);
        for r in all {
            let target = r.strip_prefix('#').and_then(|p| d.pointer(p));
            assert!(target.is_some_and(Value::is_object), "unresolved {r}");
        }
        assert_eq!(
            schemas["JobState"]["enum"],
            json!(["queued", "leased", "pending", "running", "succeeded", "failed", "cancelled", "preempted"])
        );
        assert_eq!(schemas["QueueName"]["pattern"], "^[A-Za-z0-9][A-Za-z0-9._\\-]{0,62}$");
        assert_eq!(schemas["JobSetName"]["maxLength"], 1024);
        assert_eq!(schemas["JobSetName"]["pattern"], "^[^\\p{Cc}]+$");
        assert_eq!(schemas["Resources"]["additionalProperties"]["type"], "string");
        assert_eq!(schemas["SubmitItem"]["properties"]["pod_spec"]["type"], "object");
        assert_eq!(schemas["SubmitItem"]["properties"]["services"]["items"]["type"], "object");
        assert_eq!(schemas["SubmitItem"]["required"], json!(["pod_spec"]));
        assert_eq!(schemas["Problem"]["required"], json!(["type", "title", "status", "detail"]));
        let example = schemas["JobId"]["examples"][0].as_str().expect("an example id");
        assert!(example.parse::<JobId>().is_ok());
    }

    fn resources(pairs: &[(&str, &str)]) -> Resources {
        Resources::parse(pairs.iter().copied()).expect("valid quantities")
    }

    /// Serializes `v` and checks it against schema `name`; with `exact`, also that it has every
    /// property the schema lists.
    fn conforms<T: serde::Serialize>(d: &Value, name: &str, v: &T, exact: bool) -> Value {
        let value = serde_json::to_value(v).expect("serializes");
        check_value(d, &schema_ref(name), &value).unwrap_or_else(|e| panic!("{name}: {e}\n{value:#}"));
        if exact {
            let listed: BTreeSet<&String> =
                d["components"]["schemas"][name]["properties"].as_object().expect("properties").keys().collect();
            let present: BTreeSet<&String> = value.as_object().expect("an object").keys().collect();
            assert_eq!(listed, present, "{name}");
        }
        value
    }

    #[test]
    fn real_bodies_match_their_schemas() {
        let d = doc();
        let mut q = Queue::new(QueueName::new("team-a").expect("name"), 2.0);
        q.owners.push("alice".into());
        q.groups.push("ml".into());
        q.resource_limits.insert(crate::model::ResourceName::cpu(), 0.5);
        q.resource_limits_by_priority_class
            .insert(crate::model::PriorityClassName::new("default").expect("name"), q.resource_limits.clone());
        q.cordoned = true;
        q.labels.insert("team".into(), "a".into());
        q.parent = Some(QueueName::new("tenant").expect("name"));
        q.priority_offset = -3;
        q.priority_policy = crate::model::PriorityPolicy::Fence;
        q.sort_priority = crate::model::SortPriority::Disabled;
        q.guaranteed = resources(&[("cpu", "6"), ("memory", "24Gi")]);
        q.retry = Some(crate::model::api::JobRetryPolicy {
            max_attempts: 3,
            on_exit_codes: vec![75],
            on_oom: true,
            on_node_failure: true,
            backoff_seconds: 30,
        });
        q.preemption_policy = crate::model::PreemptionPolicy::Fence;
        conforms(&d, "Queue", &q, true);
        let job_id = JobId::from_parts(1_700_000_000_000, 7);
        let run_id = RunId::from_parts(1_700_000_000_001, 8);
        let run = RunView {
            run_id,
            executor: "cluster-1".into(),
            node: crate::model::NodeName::new("n1").expect("name"),
            pool: crate::model::PoolName::default_pool(),
            state: RunState::Failed,
            leased_at: "2026-01-01T00:00:00.000Z".into(),
            pending_at: Some("2026-01-01T00:00:01.000Z".into()),
            running_at: Some("2026-01-01T00:00:02.000Z".into()),
            finished_at: Some("2026-01-01T00:00:03.000Z".into()),
            exit_code: Some(1),
            reason: Some("exit code 1".into()),
            message: Some("boom".into()),
            pod: Some(crate::model::RunPod {
                name: "armada-01m83szbrqev3e1yk9cw9xg4zq-0".into(),
                namespace: "ml".into(),
                uid: "6f1c2d0e-8a4b-4c1d-9e2f-3a4b5c6d7e8f".into(),
            }),
            usage: Some(crate::model::RunUsage { cpu_ms: 1250, peak_memory_bytes: 64 << 20 }),
            attempt: 1,
        };
        conforms(&d, "RunView", &run, true);
        let details = RunDetails {
            job_id,
            queue: q.name.clone(),
            job_set: crate::model::JobSetName::new("s").expect("name"),
            namespace: Some(crate::model::Namespace::new("ml").expect("namespace")),
            run: run.clone(),
        };
        conforms(&d, "RunDetails", &details, true);
        let event = EventView {
            seq: 3,
            job_id,
            at: "2026-01-01T00:00:00.000Z".into(),
            kind: EventKind::CancelRequested,
            run_id: Some(run_id),
            message: None,
        };
        conforms(&d, "EventView", &event, true);
        let job = JobView {
            id: job_id,
            queue: q.name.clone(),
            job_set: crate::model::JobSetName::new("set/1").expect("name"),
            state: JobState::Failed,
            priority: 3,
            priority_class: crate::model::PriorityClassName::new("default").expect("name"),
            submitted_at: "2026-01-01T00:00:00.000Z".into(),
            requests: resources(&[("cpu", "1.5"), ("memory", "4Gi"), ("nvidia.com/gpu", "1")]),
            annotations: BTreeMap::from([("a".into(), "b".into())]),
            labels: BTreeMap::new(),
            client_id: Some("c1".into()),
            namespace: Some(crate::model::Namespace::new("ml").expect("namespace")),
            owner: Some("alice".into()),
            reason: Some("exit code 1".into()),
            runs: vec![run.clone()],
            events: Some(vec![event.clone()]),
            pod_spec: Some(json!({"containers": [{"name": "main", "image": "busybox"}]})),
            depends_on: vec![crate::model::api::JobDependencyStatus {
                job_id: JobId::from_parts(1_700_000_000_000, 6),
                on: crate::model::DependencyCondition::Succeeded,
                met: true,
            }],
            retry: Some(crate::model::api::JobRetryPolicy {
                max_attempts: 3,
                on_exit_codes: vec![75],
                on_oom: false,
                on_node_failure: true,
                backoff_seconds: 30,
            }),
        };
        let v = conforms(&d, "JobView", &job, true);
        assert_eq!(v["requests"], json!({"cpu": "1500m", "memory": "4Gi", "nvidia.com/gpu": "1"}));
        // As listed: without events and pod spec, which the schema does not require.
        let listed = JobView { events: None, pod_spec: None, client_id: None, reason: None, ..job };
        conforms(&d, "JobList", &JobList { jobs: vec![listed], next: Some(job_id) }, false);
        conforms(&d, "JobList", &JobList { jobs: vec![], next: None }, true);
        conforms(&d, "SubmitResponse", &SubmitResponse { job_ids: vec![job_id] }, true);
        let cancel = QueueCancelRequest {
            states: vec![JobState::Queued],
            priority_classes: vec![crate::model::PriorityClassName::new("default").expect("name")],
            pools: vec![crate::model::PoolName::default_pool()],
            reason: Some("drain".into()),
        };
        conforms(&d, "QueueCancelRequest", &cancel, true);
        let preempt = QueuePreemptRequest {
            priority_classes: vec![crate::model::PriorityClassName::new("default").expect("name")],
            pools: vec![],
            reason: None,
        };
        conforms(&d, "QueuePreemptRequest", &preempt, false);
        let report = QueueReport {
            queue: q.name.clone(),
            weight: 0.5,
            pools: vec![QueuePoolReport {
                pool: crate::model::PoolName::default_pool(),
                fair_share: 0.5,
                adjusted_fair_share: 0.6,
                actual_share: 0.25,
                protected: true,
                allocated: resources(&[("cpu", "2")]),
                demand: resources(&[("cpu", "4")]),
                pool_total: resources(&[("cpu", "8"), ("memory", "32Gi")]),
                home_allocated: resources(&[("cpu", "1")]),
                guest_allocated: resources(&[("cpu", "1")]),
                usage: 0.375,
                parent: Some(QueueName::new("tenant").unwrap()),
                is_parent: false,
                policy: crate::model::PoolPolicy::Proportional,
                proportional_target: Some(resources(&[("nvidia.com/gpu", "4")])),
                guaranteed_share: Some(0.25),
                guarantee_scaled: true,
            }],
            jobs: BTreeMap::from([(JobState::Queued, 2), (JobState::Running, 1)]),
            usage: BTreeMap::from([(crate::model::PoolName::default_pool(), 0.3125)]),
        };
        conforms(&d, "QueueReport", &report, true);
        let problem = Problem {
            kind: "https://convoy.dev/problems/400".into(),
            title: "Bad Request".into(),
            status: 400,
            detail: "must be > 0".into(),
            field: Some("priority_factor".into()),
            request_id: Some("01J9Z8Q6M3X2V7N5K4H1G0F9E8".into()),
        };
        conforms(&d, "Problem", &problem, true);
        let lease = LeaseResponse {
            leases: vec![LeaseOrder {
                run_id,
                job_id,
                queue: q.name.clone(),
                job_set: crate::model::JobSetName::new("s").expect("name"),
                node: crate::model::NodeName::new("n1").expect("name"),
                priority_class: crate::model::PriorityClassName::new("default").expect("name"),
                pod_spec: crate::model::api::raw_json(&json!({"containers": []})),
                services: vec![crate::model::api::raw_json(&json!({"kind": "Service"}))],
                ingresses: vec![],
                annotations: BTreeMap::new(),
                labels: BTreeMap::new(),
                termination_grace_period_seconds: 30.0,
                active_deadline_seconds: 0,
                namespace: Some(crate::model::Namespace::new("ml").expect("namespace")),
                owner: Some("alice".into()),
                output_tail_bytes: Some(65536),
            }],
            kills: vec![KillOrder {
                run_id,
                job_id: Some(job_id),
                grace_period_seconds: 5.0,
                reason: "cancelled".into(),
            }],
            output: vec![crate::model::api::OutputWanted {
                run_id,
                stream: crate::model::api::OutputStream::Stderr,
                from: Some(12),
            }],
        };
        conforms(&d, "LeaseResponse", &lease, true);
        let page = crate::model::api::OutputPage {
            run_id: Some(run_id),
            stream: crate::model::api::OutputStream::Stdout,
            from: 0,
            next: Some(6),
            data: "hello\n".into(),
            done: false,
            run_over: false,
            note: Some("no output yet".into()),
        };
        conforms(&d, "OutputPage", &page, true);
        conforms(&d, "EventsResponse", &EventsResponse { accepted: 2 }, true);
        conforms(&d, "Health", &super::super::ops::Health { status: "ok".into() }, true);
        conforms(&d, "Readiness", &super::super::ops::Readiness { leader: None, status: "ready".into() }, true);
    }

    #[test]
    fn real_requests_match_their_schemas() {
        let d = doc();
        let submit = json!({"queue": "A", "job_set": "s", "jobs": [{
            "priority": 1, "priority_class": "default", "client_id": "c",
            "pod_spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
            "annotations": {"a": "b"}, "labels": {}, "services": [{"kind": "Service"}], "ingresses": []
        }]});
        let parsed: SubmitRequest = serde_json::from_value(submit.clone()).expect("a valid submission");
        check_value(&d, &schema_ref("SubmitRequest"), &submit).expect("the submission conforms");
        conforms(&d, "SubmitRequest", &parsed, true);
        let lease = json!({"nodes": [{"name": "n1", "pool": "gpu", "labels": {"rack": "r1"}, "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
            "allocatable": {"cpu": "8", "memory": "32Gi"}, "unallocatable": {"cpu": "500m"}, "unschedulable": false}],
            "runs": [{"run_id": "01J9Z8Q6M3X2V7N5K4H1G0F9E8", "job_id": "01J9Z8Q6M3X2V7N5K4H1G0F9E9", "state": "running"}],
            "wait_seconds": 1.5, "max_leases": 4});
        let parsed: LeaseRequest = serde_json::from_value(lease.clone()).expect("a valid lease request");
        check_value(&d, &schema_ref("LeaseRequest"), &lease).expect("the lease request conforms");
        conforms(&d, "LeaseRequest", &parsed, true);
        let events = json!({"events": [{"run_id": "01J9Z8Q6M3X2V7N5K4H1G0F9E8", "job_id": "01J9Z8Q6M3X2V7N5K4H1G0F9E9", "kind": "failed",
            "time_ms": 1, "exit_code": 2, "reason": "r", "message": "m", "log_tail": "x"}]});
        let parsed: EventsRequest = serde_json::from_value(events.clone()).expect("valid events");
        conforms(&d, "EventsRequest", &parsed, true);
        let cancel = json!({"queue": "A", "job_set": "s", "job_ids": ["01J9Z8Q6M3X2V7N5K4H1G0F9E8"], "states": ["queued"], "reason": "r"});
        let parsed: CancelRequest = serde_json::from_value(cancel).expect("a valid cancel");
        conforms(&d, "CancelRequest", &parsed, true);
    }

    #[test]
    fn the_check_catches_mismatches() {
        let d = doc();
        let q = |v: Value| check_value(&d, &schema_ref("Queue"), &v);
        assert!(q(json!({"name": "a"})).is_ok());
        assert!(q(json!({"name": "a", "colour": "blue"})).unwrap_err().contains("$.colour"));
        assert!(q(json!({"priority_factor": 1.0})).unwrap_err().contains("\"name\""));
        assert!(q(json!({"name": "a", "cordoned": "yes"})).unwrap_err().contains("$.cordoned"));
        assert!(q(json!({"name": 3})).is_err());
        let r = |v: Value| check_value(&d, &schema_ref("Resources"), &v);
        assert!(r(json!({"cpu": "1"})).is_ok());
        assert!(r(json!({"cpu": 1})).is_err());
        let s = |v: Value| check_value(&d, &schema_ref("JobState"), &v);
        assert!(s(json!("running")).is_ok());
        assert!(s(json!("sleeping")).is_err());
        let p = |v: Value| check_value(&d, &schema_ref("JobView"), &v);
        assert!(p(json!({})).unwrap_err().contains("required"));
    }
}
