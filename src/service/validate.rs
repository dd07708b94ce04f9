//! Submission checks (DESIGN.md §8): a whole request is checked before anything is stored, and
//! the first problem is reported with the job index and the field. Pure: no state, no I/O.

use crate::config::ServerConfig;
use crate::model::api::{SubmitItem, SubmitRequest};
use crate::model::placement::{
    NodeAffinity, NodeSelector, NodeSelectorTerm, SelectorOperator, SelectorRequirement, TaintEffect, Toleration,
    TolerationOperator,
};
use crate::model::quantity::{Unit, parse_quantity};
use crate::model::strict_json::parse_json;
use crate::model::strict_json::parse_strict;
use crate::model::{
    FieldError, GangSpec, JobPayload, Namespace, PriorityClassName, ResourceName, Resources, SchedulingRequirements,
};
use crate::scheduler::SchedulerConfig;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use std::collections::{BTreeMap, BTreeSet};

/// What a submission is checked against.
pub(crate) struct SubmitContext<'a> {
    /// Limits and defaults of the server (grace periods, deadlines, jobs per request).
    pub server: &'a ServerConfig,
    /// The priority classes and their defaults.
    pub scheduler: &'a SchedulerConfig,
    /// Largest amount of each resource on any known node (empty when no node is known yet).
    pub largest_node: &'a Resources,
    /// The resource names of the known nodes: a job may ask for these and those the scheduler's
    /// settings name. None: any (no node is known yet, or jobs larger than any node are queued).
    pub known_resources: Option<&'a BTreeSet<ResourceName>>,
    /// Every known node runs jobs as processes, which need `containers[0].command`.
    pub process_nodes_only: bool,
}

/// A checked job, ready to get its id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckedJob {
    /// Idempotency key within the queue, as submitted.
    pub client_id: Option<String>,
    /// Priority within the queue (lower first).
    pub priority: u32,
    /// The class asked for, or the configured default.
    pub priority_class: PriorityClassName,
    /// Effective requests and placement constraints read from the pod spec.
    pub requirements: SchedulingRequirements,
    /// Gang membership read from the annotations.
    pub gang: Option<GangSpec>,
    /// Annotations as submitted.
    pub annotations: BTreeMap<String, String>,
    /// Labels as submitted.
    pub labels: BTreeMap<String, String>,
    /// Grace period after the rules (unset or 0 → 1 s).
    pub termination_grace_period_ms: u64,
    /// The pod spec's deadline, or the default for CPU or GPU jobs.
    pub active_deadline_seconds: u64,
    /// Pod spec, services and ingresses as submitted.
    pub payload: JobPayload,
    /// Kubernetes namespace asked for; none: the agent's.
    pub namespace: Option<Namespace>,
    /// Dependencies and retry policy.
    pub policies: super::job_policy::CheckedPolicies,
}

const MAX_CLIENT_ID: usize = 256;
const MAX_META_KEY: usize = 253;
const MAX_META_VALUE: usize = 64 * 1024;

/// Checks a whole submission.
pub(crate) fn check_submission(req: &SubmitRequest, ctx: &SubmitContext<'_>) -> Result<Vec<CheckedJob>, FieldError> {
    if req.jobs.is_empty() {
        return Err(FieldError::new("jobs", "at least one job is needed"));
    }
    if req.jobs.len() > ctx.server.max_jobs_per_request {
        return Err(FieldError::new(
            "jobs",
            format!("{} jobs in one request; at most {} are allowed", req.jobs.len(), ctx.server.max_jobs_per_request),
        ));
    }
    let mut out = Vec::with_capacity(req.jobs.len());
    for (i, item) in req.jobs.iter().enumerate() {
        let within = |e: FieldError| e.within(&format!("jobs[{i}]"));
        let mut job = check_job(item, ctx).map_err(within)?;
        job.policies = super::job_policy::check_policies(item, &req.jobs[..i], job.gang.is_some()).map_err(within)?;
        out.push(job);
    }
    check_gangs(&out)?;
    Ok(out)
}

/// The priority class a job asks for: Convoy's `priority_class` or Kubernetes'
/// `pod_spec.priorityClassName` (Armada's way); both must agree if both are set. `None` when
/// neither is, else the name with the field it came from (for errors).
fn requested_priority_class<'a>(
    field: Option<&'a str>,
    pod_spec: Option<&'a str>,
) -> Result<Option<(&'a str, &'static str)>, FieldError> {
    match (field, pod_spec) {
        (Some(a), Some(b)) if a != b => Err(FieldError::new(
            "priority_class",
            format!(
                "priority_class {a:?} and pod_spec.priorityClassName {b:?} differ; set one of them, or both to the \
                 same class"
            ),
        )),
        (Some(a), _) => Ok(Some((a, "priority_class"))),
        (None, Some(b)) => Ok(Some((b, "pod_spec.priorityClassName"))),
        (None, None) => Ok(None),
    }
}

/// The configured class of a requested one, or the default class.
fn resolve_priority_class(
    requested: Option<(&str, &'static str)>,
    scheduler: &SchedulerConfig,
) -> Result<PriorityClassName, FieldError> {
    let Some((name, field)) = requested else { return Ok(scheduler.default_priority_class.clone()) };
    match scheduler.priority_class(name) {
        Some(pc) => Ok(pc.name.clone()),
        None => {
            let known: Vec<&str> = scheduler.priority_classes.iter().map(|p| p.name.as_str()).collect();
            Err(FieldError::new(field, format!("unknown priority class {name:?} (known: {})", known.join(", "))))
        }
    }
}

fn check_job(item: &SubmitItem, ctx: &SubmitContext<'_>) -> Result<CheckedJob, FieldError> {
    if let Some(c) = &item.client_id
        && (c.is_empty() || c.len() > MAX_CLIENT_ID)
    {
        return Err(FieldError::new("client_id", format!("must be 1 to {MAX_CLIENT_ID} characters")));
    }
    check_metadata("annotations", &item.annotations)?;
    check_metadata("labels", &item.labels)?;
    let namespace = match &item.namespace {
        None => None,
        Some(ns) => Some(Namespace::new(ns).map_err(|e| FieldError::new("namespace", e.to_string()))?),
    };

    let spec: PodSpec = parse_strict(item.pod_spec.get().as_bytes(), parse_json).map_err(|(path, message)| {
        FieldError::new(nested("pod_spec", &path), format!("is not a valid Kubernetes PodSpec: {message}"))
    })?;
    let priority_class = resolve_priority_class(
        requested_priority_class(item.priority_class.as_deref(), spec.priority_class_name.as_deref())?,
        ctx.scheduler,
    )?;
    if spec.containers.is_empty() {
        return Err(FieldError::new("pod_spec.containers", "at least one container is needed"));
    }
    let requests = effective_requests(&spec)?;
    if let Some(nodes) = ctx.known_resources {
        check_resource_names(&spec, nodes, ctx.scheduler)?;
    }
    check_fits_some_node(&spec, &requests, ctx.largest_node, ctx.scheduler)?;
    if ctx.server.reject_jobs_larger_than_any_node {
        check_fits_some_pool(&spec, &requests, ctx.scheduler)?;
    }
    if ctx.process_nodes_only {
        check_command(&spec)?;
    }

    let grace_s = spec.termination_grace_period_seconds.unwrap_or(0);
    if grace_s < 0 {
        return Err(FieldError::new("pod_spec.terminationGracePeriodSeconds", "must not be negative"));
    }
    // Unset and 0 both mean 1 s: a job always gets a moment to stop.
    let grace_ms = (grace_s.max(1) as u64).saturating_mul(1000);
    let max_grace = ctx.server.max_termination_grace_period;
    if grace_ms > max_grace.as_millis() as u64 {
        return Err(FieldError::new(
            "pod_spec.terminationGracePeriodSeconds",
            format!("{grace_s}s is above the maximum of {}s", max_grace.as_secs()),
        ));
    }
    let deadline = match spec.active_deadline_seconds {
        Some(d) if d <= 0 => {
            return Err(FieldError::new("pod_spec.activeDeadlineSeconds", "must be a positive number of seconds"));
        }
        Some(d) => d as u64,
        None => {
            let gpu = requests.iter().any(|(r, v)| v > 0 && r.as_str().contains("gpu"));
            if gpu {
                ctx.server.default_gpu_job_deadline.as_secs()
            } else {
                ctx.server.default_cpu_job_deadline.as_secs()
            }
        }
    };

    let requirements = SchedulingRequirements {
        requests,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        tolerations: convert_tolerations(spec.tolerations.as_deref().unwrap_or_default())?,
        node_affinity: convert_affinity(&spec)?,
    };
    if let Some(a) = &requirements.node_affinity {
        a.validate().map_err(|m| FieldError::new("pod_spec.affinity.nodeAffinity", m))?;
    }
    let gang = GangSpec::from_annotations(&item.annotations)?;
    // Read again when a run is lost (`state::runs`); checked here so only true or false is stored.
    crate::model::annotations::fail_fast(&item.annotations)?;

    let mut services = Vec::with_capacity(item.services.len());
    for (i, s) in item.services.iter().enumerate() {
        let service = parse_strict::<k8s_openapi::api::core::v1::Service>(s.get().as_bytes(), parse_json);
        service.map_err(|(path, message)| {
            let field = nested(&format!("services[{i}]"), &path);
            FieldError::new(field, format!("is not a valid Kubernetes Service: {message}"))
        })?;
        services.push(s.get().to_string());
    }
    let mut ingresses = Vec::with_capacity(item.ingresses.len());
    for (i, s) in item.ingresses.iter().enumerate() {
        let ingress = parse_strict::<k8s_openapi::api::networking::v1::Ingress>(s.get().as_bytes(), parse_json);
        ingress.map_err(|(path, message)| {
            let field = nested(&format!("ingresses[{i}]"), &path);
            FieldError::new(field, format!("is not a valid Kubernetes Ingress: {message}"))
        })?;
        ingresses.push(s.get().to_string());
    }
    Ok(CheckedJob {
        client_id: item.client_id.clone(),
        priority: item.priority,
        priority_class,
        requirements,
        gang,
        annotations: item.annotations.clone(),
        labels: item.labels.clone(),
        termination_grace_period_ms: grace_ms,
        active_deadline_seconds: deadline,
        payload: JobPayload { pod_spec: item.pod_spec.get().to_string(), services, ingresses },
        namespace,
        policies: Default::default(),
    })
}

/// The path of a field inside an embedded document: `prefix` joined with a path from
/// [`parse_json`], which is `.` for the document itself and starts with `[i]` in an array.
fn nested(prefix: &str, path: &str) -> String {
    match path {
        "." | "" => prefix.to_string(),
        p if p.starts_with('[') => format!("{prefix}{p}"),
        p => format!("{prefix}.{p}"),
    }
}

fn check_metadata(field: &str, m: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (k, v) in m {
        if k.is_empty() || k.len() > MAX_META_KEY {
            return Err(FieldError::new(
                format!("{field}.{k}"),
                format!("keys must be 1 to {MAX_META_KEY} characters"),
            ));
        }
        if v.len() > MAX_META_VALUE {
            return Err(FieldError::new(
                format!("{field}.{k}"),
                format!("values must be at most {MAX_META_VALUE} bytes"),
            ));
        }
    }
    Ok(())
}

/// Requests of one container; every container must have some.
/// Whether a container requests or limits any resource.
fn has_resources(c: &Container) -> bool {
    let r = c.resources.as_ref();
    let non_empty = |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
        m.is_some_and(|m| !m.is_empty())
    };
    non_empty(r.and_then(|r| r.requests.as_ref())) || non_empty(r.and_then(|r| r.limits.as_ref()))
}

/// A container's requests, with Kubernetes' defaulting: a resource it limits but does not
/// request is requested at its limit.
fn container_requests(c: &Container, list: &str, i: usize) -> Result<Resources, FieldError> {
    // Field names are only formatted for an error: this runs for every job of every request.
    let field = |kind: &str, name: &str| format!("pod_spec.{list}[{i}].resources.{kind}.{name}");
    if !has_resources(c) {
        return Err(FieldError::new(
            format!("pod_spec.{list}[{i}].resources.requests"),
            "every container must request resources (e.g. cpu and memory), or limit them",
        ));
    }
    let resources = c.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref()).into_iter().flatten().map(|e| ("requests", e));
    let limits = resources
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
        .filter(|(name, _)| !resources.and_then(|r| r.requests.as_ref()).is_some_and(|r| r.contains_key(*name)))
        .map(|e| ("limits", e));
    let mut out = Resources::new();
    for (kind, (name, q)) in requests.chain(limits) {
        let rn = ResourceName::new(name).map_err(|e| FieldError::new(field(kind, name), e.to_string()))?;
        let v = parse_quantity(&q.0, Unit::for_resource(name))
            .map_err(|e| FieldError::new(field(kind, name), e.to_string()))?;
        out.set(rn, v);
    }
    Ok(out)
}

/// The pod's effective requests: the sum over containers, at least the largest init container,
/// plus overhead (as Kubernetes computes them).
pub(crate) fn effective_requests(spec: &PodSpec) -> Result<Resources, FieldError> {
    let mut sum = Resources::new();
    for (i, c) in spec.containers.iter().enumerate() {
        sum.add(&container_requests(c, "containers", i)?);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        // Init containers without requests (or limits) are allowed; they run one at a time.
        if has_resources(c) {
            sum.max_with(&container_requests(c, "initContainers", i)?);
        }
    }
    if let Some(overhead) = &spec.overhead {
        for (name, q) in overhead {
            let f = || format!("pod_spec.overhead.{name}");
            let rn = ResourceName::new(name).map_err(|e| FieldError::new(f(), e.to_string()))?;
            let v = parse_quantity(&q.0, Unit::for_resource(name)).map_err(|e| FieldError::new(f(), e.to_string()))?;
            let cur = sum.get(name);
            sum.set(rn, cur + v);
        }
    }
    Ok(sum)
}

/// The resource names the scheduler's settings name: jobs may ask for them before any node has
/// them (nodes that have them may connect later).
fn configured_resources(scheduler: &SchedulerConfig) -> impl Iterator<Item = &ResourceName> + Clone {
    scheduler
        .dominant_resource_fairness_resources
        .iter()
        .chain(scheduler.resource_cost_weights.keys())
        .chain(scheduler.indexed_resources.iter())
        .chain(scheduler.floating_resources.iter().map(|f| &f.name))
}

/// Refuses a resource no node has and no setting names (a misspelling, most often: `cpus`),
/// naming the nearest known one.
fn check_resource_names(
    spec: &PodSpec,
    nodes: &BTreeSet<ResourceName>,
    scheduler: &SchedulerConfig,
) -> Result<(), FieldError> {
    let known_name = |name: &str| {
        nodes.iter().any(|k| k.as_str() == name) || configured_resources(scheduler).any(|k| k.as_str() == name)
    };
    let lists = [("containers", Some(&spec.containers)), ("initContainers", spec.init_containers.as_ref())];
    let mut asked: Vec<(String, &str)> = Vec::new();
    for (list, containers) in lists {
        for (i, c) in containers.into_iter().flatten().enumerate() {
            let r = c.resources.as_ref();
            for (kind, m) in
                [("requests", r.and_then(|r| r.requests.as_ref())), ("limits", r.and_then(|r| r.limits.as_ref()))]
            {
                for name in m.into_iter().flat_map(|m| m.keys()) {
                    asked.push((format!("pod_spec.{list}[{i}].resources.{kind}.{name}"), name));
                }
            }
        }
    }
    for name in spec.overhead.iter().flat_map(|m| m.keys()) {
        asked.push((format!("pod_spec.overhead.{name}"), name));
    }
    for (field, name) in asked {
        if known_name(name) {
            continue;
        }
        let known: BTreeSet<&str> = nodes.iter().chain(configured_resources(scheduler)).map(|k| k.as_str()).collect();
        let hint = crate::model::spelling::did_you_mean(name, known.iter().copied());
        let list: Vec<&str> = known.into_iter().collect();
        return Err(FieldError::new(
            field,
            format!(
                "no node has a resource named {name:?} and no setting names one{hint} (known: {})",
                list.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Refuses a job without `containers[0].command` when only process nodes could run it: the
/// process runtime runs that command (the image is not used), so the job could only fail.
fn check_command(spec: &PodSpec) -> Result<(), FieldError> {
    let has = spec.containers.first().and_then(|c| c.command.as_ref()).is_some_and(|c| !c.is_empty());
    if has {
        return Ok(());
    }
    Err(FieldError::new(
        "pod_spec.containers[0].command",
        "is needed: every node here runs jobs as processes, which run containers[0].command (with args) on the \
         host and do not use the image; give the command, e.g. [\"sh\", \"-c\", \"echo hi\"]",
    ))
}

/// Refuses a pod that requests more of a node resource than any node has (floating resources
/// are not on nodes: [`check_fits_some_pool`]).
fn check_fits_some_node(
    spec: &PodSpec,
    requests: &Resources,
    largest: &Resources,
    scheduler: &SchedulerConfig,
) -> Result<(), FieldError> {
    if largest.is_zero() {
        return Ok(());
    }
    for (r, v) in requests.iter() {
        if v > largest.get(r.as_str()) && scheduler.floating_resource(r.as_str()).is_none() {
            return Err(too_large(spec, r.as_str(), requests, largest));
        }
    }
    Ok(())
}

/// Refuses a pod that requests more of a floating resource than any pool has: it could never
/// run.
fn check_fits_some_pool(spec: &PodSpec, requests: &Resources, scheduler: &SchedulerConfig) -> Result<(), FieldError> {
    if scheduler.floating_resources.is_empty() {
        return Ok(());
    }
    for (r, v) in requests.iter() {
        if let Some(most) = scheduler.largest_floating(r.as_str())
            && v > most
        {
            let unit = Unit::for_resource(r.as_str());
            let asks = |c: &Container| {
                c.resources.as_ref().and_then(|x| x.requests.as_ref()).is_some_and(|m| m.contains_key(r.as_str()))
            };
            let field = match spec.containers.iter().position(asks) {
                Some(i) => format!("pod_spec.containers[{i}].resources.requests.{r}"),
                None => "pod_spec.containers".to_string(),
            };
            return Err(FieldError::new(
                field,
                format!(
                    "the pod requests {} {r}, a floating resource of which no pool has that much (largest: {}); set \
                     server.reject_jobs_larger_than_any_node = false to queue it anyway",
                    crate::model::quantity::format_quantity(v, unit),
                    crate::model::quantity::format_quantity(most, unit)
                ),
            ));
        }
    }
    Ok(())
}

/// The error for a pod that requests more of `name` than any node has. It names what asks for
/// it: a container (or init container) that alone is too large, else the containers together,
/// else the overhead that tips the pod over.
fn too_large(spec: &PodSpec, name: &str, requests: &Resources, largest: &Resources) -> FieldError {
    let have = largest.get(name);
    let rule = |what: String| {
        format!(
            "{what}, more than any node has (largest: {} {name}); set server.reject_jobs_larger_than_any_node = false to queue it anyway",
            largest.quantity_string(name)
        )
    };
    let mut together = Resources::new();
    let lists =
        [("initContainers", spec.init_containers.as_deref().unwrap_or_default()), ("containers", &spec.containers)];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            // Only init containers may lack requests (effective_requests parsed all the others).
            let Ok(req) = container_requests(c, list, i) else { continue };
            if req.get(name) > have {
                return FieldError::new(
                    format!("pod_spec.{list}[{i}].resources.requests.{name}"),
                    rule(format!("requests {} {name}", req.quantity_string(name))),
                );
            }
            if list == "containers" {
                together.add(&req);
            }
        }
    }
    if together.get(name) > have {
        return FieldError::new(
            "pod_spec.containers",
            rule(format!("the containers request {} {name} together", together.quantity_string(name))),
        );
    }
    let overhead = spec.overhead.as_ref().and_then(|o| o.get(name)).map(|q| q.0.as_str()).unwrap_or("0");
    FieldError::new(
        format!("pod_spec.overhead.{name}"),
        rule(format!(
            "with an overhead of {overhead} {name} the pod requests {} {name}",
            requests.quantity_string(name)
        )),
    )
}

fn convert_tolerations(ts: &[k8s_openapi::api::core::v1::Toleration]) -> Result<Vec<Toleration>, FieldError> {
    ts.iter()
        .enumerate()
        .map(|(i, t)| {
            let f = format!("pod_spec.tolerations[{i}]");
            let operator = match t.operator.as_deref() {
                None | Some("Equal") => TolerationOperator::Equal,
                Some("Exists") => TolerationOperator::Exists,
                Some(o) => {
                    return Err(FieldError::new(format!("{f}.operator"), format!("{o:?} is not Equal or Exists")));
                }
            };
            let effect = match t.effect.as_deref() {
                None | Some("") => None,
                Some("NoSchedule") => Some(TaintEffect::NoSchedule),
                Some("PreferNoSchedule") => Some(TaintEffect::PreferNoSchedule),
                Some("NoExecute") => Some(TaintEffect::NoExecute),
                Some(e) => {
                    return Err(FieldError::new(
                        format!("{f}.effect"),
                        format!("{e:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
                    ));
                }
            };
            Ok(Toleration {
                key: t.key.clone().unwrap_or_default(),
                operator,
                value: t.value.clone().unwrap_or_default(),
                effect,
            })
        })
        .collect()
}

fn convert_affinity(spec: &PodSpec) -> Result<Option<NodeAffinity>, FieldError> {
    let Some(sel) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return Ok(None);
    };
    let convert = |reqs: &Option<Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>,
                   f: &str|
     -> Result<Vec<SelectorRequirement>, FieldError> {
        reqs.iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| {
                let operator = match r.operator.as_str() {
                    "In" => SelectorOperator::In,
                    "NotIn" => SelectorOperator::NotIn,
                    "Exists" => SelectorOperator::Exists,
                    "DoesNotExist" => SelectorOperator::DoesNotExist,
                    "Gt" => SelectorOperator::Gt,
                    "Lt" => SelectorOperator::Lt,
                    o => {
                        return Err(FieldError::new(
                            format!("{f}[{i}].operator"),
                            format!("{o:?} is not a node selector operator"),
                        ));
                    }
                };
                Ok(SelectorRequirement { key: r.key.clone(), operator, values: r.values.clone().unwrap_or_default() })
            })
            .collect()
    };
    let base = "pod_spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    let terms = sel
        .node_selector_terms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Ok(NodeSelectorTerm {
                match_expressions: convert(&t.match_expressions, &format!("{base}[{i}].matchExpressions"))?,
                match_fields: convert(&t.match_fields, &format!("{base}[{i}].matchFields"))?,
            })
        })
        .collect::<Result<Vec<_>, FieldError>>()?;
    Ok(Some(NodeAffinity {
        required_during_scheduling_ignored_during_execution: Some(NodeSelector { node_selector_terms: terms }),
    }))
}

/// Gangs must arrive whole: every member in this request, agreeing on cardinality, minimum,
/// uniformity label and priority class.
fn check_gangs(jobs: &[CheckedJob]) -> Result<(), FieldError> {
    let mut gangs: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if let Some(g) = &j.gang {
            gangs.entry(g.id.as_str()).or_default().push(i);
        }
    }
    for (id, members) in gangs {
        let first = &jobs[members[0]];
        let Some(g) = &first.gang else { continue };
        for &m in &members[1..] {
            let other = &jobs[m];
            if other.gang.as_ref() != Some(g) {
                return Err(FieldError::new(
                    format!("jobs[{m}].annotations"),
                    format!(
                        "gang {id}: cardinality, minimum cardinality and node-uniformity label must be the same for every member (see jobs[{}])",
                        members[0]
                    ),
                ));
            }
            if other.priority_class != first.priority_class {
                return Err(FieldError::new(
                    format!("jobs[{m}].priority_class"),
                    format!("gang {id}: every member must have the same priority class"),
                ));
            }
        }
        if members.len() as u32 != g.cardinality {
            return Err(FieldError::new(
                format!("jobs[{}].annotations", members[0]),
                format!(
                    "gang {id} has cardinality {} but {} members are in this request; a gang must be submitted whole",
                    g.cardinality,
                    members.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(pod_spec: serde_json::Value) -> SubmitItem {
        SubmitItem {
            priority: 0,
            priority_class: None,
            pod_spec: serde_json::value::to_raw_value(&pod_spec).unwrap(),
            annotations: Default::default(),
            labels: Default::default(),
            services: vec![],
            ingresses: vec![],
            client_id: None,
            namespace: None,
            depends_on: vec![],
            retry: None,
        }
    }

    fn pod(cpu: &str) -> serde_json::Value {
        json!({"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]})
    }

    fn check(items: Vec<SubmitItem>) -> Result<Vec<CheckedJob>, FieldError> {
        let largest = Resources::parse([("cpu", "64"), ("memory", "256Gi"), ("nvidia.com/gpu", "8")]).unwrap();
        check_on(items, &SchedulerConfig::default(), &largest)
    }

    /// Checks against nodes whose largest is `largest` (and whose resources are its names).
    fn check_on(
        items: Vec<SubmitItem>,
        scheduler: &SchedulerConfig,
        largest: &Resources,
    ) -> Result<Vec<CheckedJob>, FieldError> {
        let server = ServerConfig::default();
        let names: BTreeSet<ResourceName> = largest.iter().map(|(r, _)| r.clone()).collect();
        let req = SubmitRequest { queue: "A".parse().unwrap(), job_set: "s".parse().unwrap(), jobs: items };
        let ctx = SubmitContext {
            server: &server,
            scheduler,
            largest_node: largest,
            known_resources: Some(&names),
            process_nodes_only: false,
        };
        check_submission(&req, &ctx)
    }

    fn check_on_process_nodes(items: Vec<SubmitItem>) -> Result<Vec<CheckedJob>, FieldError> {
        let (server, scheduler) = (ServerConfig::default(), SchedulerConfig::default());
        let largest = Resources::parse([("cpu", "4"), ("memory", "8Gi")]).unwrap();
        let req = SubmitRequest { queue: "A".parse().unwrap(), job_set: "s".parse().unwrap(), jobs: items };
        let ctx = SubmitContext {
            server: &server,
            scheduler: &scheduler,
            largest_node: &largest,
            known_resources: None,
            process_nodes_only: true,
        };
        check_submission(&req, &ctx)
    }

    #[test]
    fn misspelt_pod_spec_fields_are_refused_with_the_full_path_and_the_nearest_name() {
        let spec = json!({"containers": [{"name": "m", "comand": ["true"], "resources": {"requests": {"cpu": "1"}}}]});
        let e = check(vec![item(pod("1")), item(spec)]).unwrap_err();
        assert_eq!(e.field, "jobs[1].pod_spec.containers[0].comand");
        assert!(e.message.contains("did you mean \"command\""), "{}", e.message);
        let spec = json!({"containers": [{"name": "m", "resources": {"request": {"cpu": "1"}}}]});
        let e = check(vec![item(spec)]).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.containers[0].resources.request");
        assert!(e.message.contains("did you mean \"requests\""), "{}", e.message);
    }

    #[test]
    fn a_floating_resource_may_be_requested_up_to_the_largest_pool_amount() {
        let scheduler: SchedulerConfig =
            serde_yaml_ng::from_str("floating_resources: [{name: licence/matlab, pools: {default: \"3\", b: \"1\"}}]")
                .unwrap();
        let largest = Resources::parse([("cpu", "64"), ("memory", "256Gi")]).unwrap();
        let spec = |n: &str| json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "licence/matlab": n}}}]});
        // No node has it: node fit does not apply, the pools' amounts do.
        let ok = check_on(vec![item(spec("3"))], &scheduler, &largest).unwrap();
        assert_eq!(ok[0].requirements.requests.get("licence/matlab"), 3000);
        let e = check_on(vec![item(spec("1")), item(spec("4"))], &scheduler, &largest).unwrap_err();
        assert_eq!(e.field, "jobs[1].pod_spec.containers[0].resources.requests.licence/matlab");
        assert!(e.message.contains("largest: 3"), "{}", e.message);
        // Without the setting the name is unknown.
        let e = check_on(vec![item(spec("1"))], &SchedulerConfig::default(), &largest).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.containers[0].resources.requests.licence/matlab");
        assert!(e.message.contains("no node has a resource named \"licence/matlab\""), "{}", e.message);
    }

    #[test]
    fn a_resource_no_node_has_and_no_setting_names_is_refused_naming_it() {
        let spec = json!({"containers": [{"name": "m", "resources": {"requests": {"cpus": "1"}}}]});
        let e = check(vec![item(spec)]).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.containers[0].resources.requests.cpus");
        assert!(e.message.contains("\"cpus\"") && e.message.contains("did you mean \"cpu\"?"), "{}", e.message);
        assert!(!e.message.contains("reject_jobs_larger_than_any_node"), "{}", e.message);
        // A resource a setting names is fine even when no node has it yet (a larger node may
        // come), and then refused as too large as before.
        let mut scheduler = SchedulerConfig::default();
        scheduler.resource_cost_weights.insert(ResourceName::new("example.com/fpga").unwrap(), 1.0);
        let largest = Resources::parse([("cpu", "64"), ("memory", "256Gi")]).unwrap();
        let spec = json!({"containers": [{"name": "a", "resources": {"requests": {"example.com/fpga": "1"}}}]});
        let e = check_on(vec![item(spec)], &scheduler, &largest).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.containers[0].resources.requests.example.com/fpga");
        assert!(e.message.contains("requests 1 example.com/fpga, more than any node has"), "{e}");
    }

    #[test]
    fn on_process_nodes_a_job_without_a_command_is_refused() {
        let e = check_on_process_nodes(vec![item(pod("1"))]).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.containers[0].command");
        assert!(e.message.contains("runs jobs as processes"), "{}", e.message);
        let spec = json!({"containers": [{"name": "m", "command": ["sh", "-c", "true"], "resources": {"requests": {"cpu": "1"}}}]});
        assert!(check_on_process_nodes(vec![item(spec)]).is_ok());
        // Elsewhere (Kubernetes nodes run the image's entrypoint) it is fine.
        assert!(check(vec![item(pod("1"))]).is_ok());
    }

    #[test]
    fn a_good_job_gets_defaults() {
        let j = check(vec![item(pod("2"))]).unwrap().remove(0);
        assert_eq!(j.requirements.requests.get("cpu"), 2000);
        assert_eq!(j.termination_grace_period_ms, 1000);
        assert_eq!(j.active_deadline_seconds, 3 * 86400);
        assert_eq!(j.priority_class.as_str(), "default");
    }

    #[test]
    fn gpu_jobs_get_the_gpu_deadline_and_effective_requests_count_init_containers() {
        let spec = json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}}
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
            "terminationGracePeriodSeconds": 0
        });
        let j = check(vec![item(spec)]).unwrap().remove(0);
        assert_eq!(j.requirements.requests.get("cpu"), 4000);
        assert_eq!(j.active_deadline_seconds, 14 * 86400);
        assert_eq!(j.termination_grace_period_ms, 1000);
    }

    #[test]
    fn the_priority_class_comes_from_either_field_and_both_must_agree() {
        let with = |field: Option<&str>, spec: Option<&str>| {
            let mut p = pod("1");
            if let Some(s) = spec {
                p["priorityClassName"] = json!(s);
            }
            let mut i = item(p);
            i.priority_class = field.map(str::to_string);
            check(vec![i]).map(|mut j| j.remove(0).priority_class.to_string())
        };
        assert_eq!(with(None, None), Ok("default".to_string()));
        assert_eq!(with(Some("preemptible"), None), Ok("preemptible".to_string()));
        assert_eq!(with(None, Some("preemptible")), Ok("preemptible".to_string()));
        assert_eq!(with(Some("preemptible"), Some("preemptible")), Ok("preemptible".to_string()));
        let e = with(Some("default"), Some("preemptible")).unwrap_err();
        assert_eq!(e.field, "jobs[0].priority_class");
        assert_eq!(
            e.message,
            "priority_class \"default\" and pod_spec.priorityClassName \"preemptible\" differ; set one of them, or \
             both to the same class"
        );
        let e = with(None, Some("gold")).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.priorityClassName");
        assert_eq!(e.message, "unknown priority class \"gold\" (known: default, preemptible)");
        assert_eq!(with(Some("gold"), None).unwrap_err().field, "jobs[0].priority_class");
    }

    #[test]
    fn limits_without_requests_are_the_requests() {
        let reqs = |containers: serde_json::Value| {
            check(vec![item(json!({ "containers": containers }))]).map(|mut j| {
                let r = j.remove(0).requirements.requests;
                r.iter().map(|(n, v)| (n.to_string(), v)).collect::<Vec<_>>()
            })
        };
        // Only limits: requests = limits.
        assert_eq!(
            reqs(json!([{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}])),
            Ok(vec![("cpu".into(), 2000), ("memory".into(), 1 << 30)])
        );
        // Per resource: a request wins over its limit, a resource only limited is requested at
        // its limit, and containers add up.
        assert_eq!(
            reqs(json!([
                {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "4", "memory": "2Gi", "nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"memory": "1Gi"}}}
            ])),
            Ok(vec![("cpu".into(), 500), ("memory".into(), 3 << 30), ("nvidia.com/gpu".into(), 1000)])
        );
        // An init container with only limits counts as its limits.
        let j = check(vec![item(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "3"}}}]
        }))])
        .unwrap();
        assert_eq!(j[0].requirements.requests.get("cpu"), 3000);
        // A bad limit is named as a limit.
        let e = reqs(json!([{"name": "a", "resources": {"limits": {"cpu": "lots"}}}])).unwrap_err();
        assert_eq!(e.field, "jobs[0].pod_spec.containers[0].resources.limits.cpu");
    }

    #[test]
    fn every_rule_names_its_field() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (json!({"containers": [{"name": "a"}]}), "jobs[0].pod_spec.containers[0].resources.requests"),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}),
                "jobs[0].pod_spec.containers[0].resources.requests.cpu",
            ),
            (json!({"containers": "nope"}), "jobs[0].pod_spec.containers"),
            (json!({}), "jobs[0].pod_spec.containers"),
            (json!({"containers": []}), "jobs[0].pod_spec.containers"),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "terminationGracePeriodSeconds": 100000}),
                "jobs[0].pod_spec.terminationGracePeriodSeconds",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "terminationGracePeriodSeconds": 0.5}),
                "jobs[0].pod_spec.terminationGracePeriodSeconds",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "activeDeadlineSeconds": 0}),
                "jobs[0].pod_spec.activeDeadlineSeconds",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "128"}}}]}),
                "jobs[0].pod_spec.containers[0].resources.requests.cpu",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "tolerations": [{"operator": "Sometimes"}]}),
                "jobs[0].pod_spec.tolerations[0].operator",
            ),
        ];
        for (spec, field) in cases {
            let e = check(vec![item(pod("1")), item(spec.clone())]).map(|_| ()).unwrap_err();
            assert_eq!(e.field, field.replace("jobs[0]", "jobs[1]"), "{spec}: {e}");
        }
        let mut bad_class = item(pod("1"));
        bad_class.priority_class = Some("gold".into());
        assert_eq!(check(vec![bad_class]).unwrap_err().field, "jobs[0].priority_class");
        let mut bad_namespace = item(pod("1"));
        bad_namespace.namespace = Some("ML_team".into());
        let e = check(vec![item(pod("1")), bad_namespace]).unwrap_err();
        assert_eq!(e.field, "jobs[1].namespace");
        assert!(e.message.contains("DNS-1123"), "{e}");
    }

    #[test]
    fn a_namespace_is_kept_and_none_means_the_agents() {
        let mut with = item(pod("1"));
        with.namespace = Some("team-a".into());
        let checked = check(vec![with, item(pod("1"))]).unwrap();
        assert_eq!(checked[0].namespace.as_ref().map(|n| n.as_str()), Some("team-a"));
        assert_eq!(checked[1].namespace, None);
    }

    #[test]
    fn malformed_services_and_ingresses_name_real_paths() {
        let good = json!({"spec": {"ports": [{"port": 80}]}});
        let with = |services: Vec<serde_json::Value>, ingresses: Vec<serde_json::Value>| {
            let mut i = item(pod("1"));
            i.services = services.iter().map(|v| serde_json::value::to_raw_value(v).unwrap()).collect();
            i.ingresses = ingresses.iter().map(|v| serde_json::value::to_raw_value(v).unwrap()).collect();
            i
        };
        let bad_port = json!({"spec": {"ports": [{"port": 80}, {"port": "eighty"}]}});
        let bad_backend =
            json!({"spec": {"rules": [{"http": {"paths": [{"backend": {"service": {"port": {"number": "x"}}}}]}}]}});
        let cases = [
            (with(vec![good.clone(), json!("nope")], vec![]), "jobs[0].services[1]", "Service"),
            (with(vec![json!(null)], vec![]), "jobs[0].services[0]", "Service"),
            (with(vec![good.clone(), bad_port], vec![]), "jobs[0].services[1].spec.ports[1].port", "Service"),
            (with(vec![good.clone()], vec![json!([1, 2])]), "jobs[0].ingresses[0]", "Ingress"),
            (
                with(vec![], vec![bad_backend]),
                "jobs[0].ingresses[0].spec.rules[0].http.paths[0].backend.service.port.number",
                "Ingress",
            ),
        ];
        for (item, field, kind) in cases {
            let e = check(vec![item]).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(&format!("is not a valid Kubernetes {kind}")), "{e}");
        }
        assert!(check(vec![with(vec![good], vec![json!({"spec": {}})])]).is_ok());
        assert_eq!(nested("pod_spec", "."), "pod_spec");
        assert_eq!(nested("services[0]", "[2].a"), "services[0][2].a");
        assert_eq!(nested("pod_spec", "containers[0].name"), "pod_spec.containers[0].name");
    }

    #[test]
    fn too_large_requests_name_the_podspec_path_that_asks() {
        let c = |name: &str, reqs: serde_json::Value| json!({"name": name, "resources": {"requests": reqs}});
        let cases = [
            (
                json!({"containers": [c("a", json!({"cpu": "1"})), c("b", json!({"cpu": "100"}))]}),
                "jobs[0].pod_spec.containers[1].resources.requests.cpu",
                "requests 100 cpu",
            ),
            (
                json!({"containers": [c("a", json!({"cpu": "1"}))],
                       "initContainers": [c("i", json!({"cpu": "1", "nvidia.com/gpu": "9"}))]}),
                "jobs[0].pod_spec.initContainers[0].resources.requests.nvidia.com/gpu",
                "requests 9 nvidia.com/gpu",
            ),
            (
                json!({"containers": [c("a", json!({"memory": "300Gi"}))]}),
                "jobs[0].pod_spec.containers[0].resources.requests.memory",
                "requests 300Gi memory",
            ),
            (
                json!({"containers": [c("a", json!({"cpu": "40"})), c("b", json!({"cpu": "40"}))]}),
                "jobs[0].pod_spec.containers",
                "the containers request 80 cpu together",
            ),
            (
                json!({"containers": [c("a", json!({"cpu": "60"}))], "overhead": {"cpu": "8"}}),
                "jobs[0].pod_spec.overhead.cpu",
                "with an overhead of 8 cpu the pod requests 68 cpu",
            ),
        ];
        for (spec, field, what) in cases {
            let e = check(vec![item(spec.clone())]).unwrap_err();
            assert_eq!(e.field, field, "{spec}: {e}");
            assert!(e.message.contains(what) && e.message.contains("more than any node has"), "{spec}: {e}");
        }
    }

    #[test]
    fn gangs_must_be_whole_and_consistent() {
        let member = |card: &str| {
            let mut i = item(pod("1"));
            i.annotations.insert("convoy.io/gang-id".into(), "g".into());
            i.annotations.insert("convoy.io/gang-cardinality".into(), card.into());
            i
        };
        assert!(check(vec![member("2"), member("2")]).is_ok());
        let e = check(vec![member("3"), member("3")]).unwrap_err();
        assert!(e.message.contains("submitted whole"), "{e}");
        let e = check(vec![member("2"), member("3")]).unwrap_err();
        assert_eq!(e.field, "jobs[1].annotations");
        let mut bad = member("2");
        bad.annotations.insert("convoy.io/gang-minimum-cardinality".into(), "5".into());
        assert_eq!(check(vec![bad]).unwrap_err().field, "jobs[0].annotations.convoy.io/gang-minimum-cardinality");
    }

    #[test]
    fn armada_gang_and_fail_fast_annotations() {
        let member = |id: &str| {
            let mut i = item(pod("1"));
            i.annotations.insert("armadaproject.io/gangId".into(), id.into());
            i.annotations.insert("armadaproject.io/gangCardinality".into(), "2".into());
            i.annotations.insert("armadaproject.io/gangMinimumCardinality".into(), "1".into());
            i
        };
        let jobs = check(vec![member("g"), member("g")]).unwrap();
        let g = jobs[0].gang.as_ref().expect("a gang");
        assert_eq!((g.id.as_str(), g.cardinality, g.min_cardinality), ("g", 2, 1));
        assert_eq!(jobs[0].gang, jobs[1].gang);
        let mut both = member("g");
        both.annotations.insert("convoy.io/gang-cardinality".into(), "3".into());
        let e = check(vec![both, member("g")]).unwrap_err();
        assert_eq!(e.field, "jobs[0].annotations.armadaproject.io/gangCardinality");
        let mut old = item(pod("1"));
        old.annotations.insert("armadaproject.io/gang-id".into(), "g".into());
        let e = check(vec![old]).unwrap_err();
        assert_eq!(e.field, "jobs[0].annotations.armadaproject.io/gang-id");
        assert!(e.message.contains("armadaproject.io/gangId"), "{e}");
        let mut ff = item(pod("1"));
        ff.annotations.insert("armadaproject.io/failFast".into(), "sometimes".into());
        assert_eq!(check(vec![ff.clone()]).unwrap_err().field, "jobs[0].annotations.armadaproject.io/failFast");
        ff.annotations.insert("armadaproject.io/failFast".into(), "true".into());
        assert!(check(vec![ff]).is_ok());
    }

    #[test]
    fn affinity_and_selectors_become_requirements() {
        let spec = json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            "nodeSelector": {"rack": "r1"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
            ]}}}
        });
        let j = check(vec![item(spec)]).unwrap().remove(0);
        assert_eq!(j.requirements.node_selector.get("rack").map(String::as_str), Some("r1"));
        assert_eq!(j.requirements.tolerations[0].operator, TolerationOperator::Exists);
        let aff = j.requirements.node_affinity.unwrap();
        let term = &aff.required_during_scheduling_ignored_during_execution.unwrap().node_selector_terms[0];
        assert_eq!(term.match_expressions[0].values, vec!["a", "b"]);
    }
}
