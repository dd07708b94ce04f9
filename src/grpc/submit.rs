//! `api.Submit`: submissions and cancellations through the REST API's own paths
//! ([`submit_jobs`], [`cancel_jobs`]), the queue RPCs Armada's clients call on this service, and
//! Health.

use super::fields::{cancellable_state_at, invalid, job_set_name, queue_name};
use super::k8s::{self, EncodedPodSpec};
use super::pb::{self, submit_server::Submit};
use super::{leading, principal, status};
use crate::control::Control;
use crate::model::api::{CancelRequest, PreemptRequest, ReprioritizeRequest, SubmitItem, SubmitRequest};
use crate::model::{JobId, JobState};
use crate::service::jobs::{cancel_jobs, preempt_jobs, reprioritize_jobs, submit_jobs};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Armada's annotation for a job's URI in another system, set from `external_job_uri`.
pub(super) const EXTERNAL_JOB_URI_ANNOTATION: &str = "armadaproject.io/externalJobUri";

/// The `api.Submit` service.
pub(super) struct SubmitService(pub Arc<Control>);

/// Armada's float priority as Convoy's: rounded to the nearest whole number and clamped to
/// 0..=u32::MAX, as Armada does; lower runs first in both.
fn priority(field: &str, p: f64) -> Result<u32, Status> {
    if p.is_nan() {
        return Err(invalid(field, "must be a number"));
    }
    Ok(p.round().clamp(0.0, f64::from(u32::MAX)) as u32)
}

/// The Kubernetes JSON text of an item's one pod spec, with `required_node_labels` merged into
/// its node selector.
fn pod_spec_text(i: usize, item: &pb::JobSubmitRequestItem) -> Result<String, Status> {
    let (field, spec): (String, &EncodedPodSpec) = match (&item.pod_spec, item.pod_specs.as_slice()) {
        (Some(_), [_, ..]) => {
            return Err(invalid(
                format_args!("job_request_items[{i}].pod_spec"),
                "set either pod_spec or pod_specs, not both",
            ));
        }
        (Some(spec), []) => (format!("job_request_items[{i}].pod_spec"), spec),
        (None, [spec]) => (format!("job_request_items[{i}].pod_specs[0]"), spec),
        (None, []) => return Err(invalid(format_args!("job_request_items[{i}].pod_specs"), "a pod spec is required")),
        (None, [_, _, ..]) => {
            return Err(invalid(format_args!("job_request_items[{i}].pod_specs"), "a job has exactly one pod spec"));
        }
    };
    let text = k8s::to_json_text(&spec.0).map_err(|e| {
        let at = if e.field.is_empty() { field.clone() } else { format!("{field}.{}", e.field) };
        invalid(at, e.message)
    })?;
    if item.required_node_labels.is_empty() {
        return Ok(text);
    }
    // Rare (Armada deprecated the field): merged on a parsed copy.
    let mut json: Json =
        serde_json::from_str(&text).map_err(|e| Status::internal(format!("the pod spec's JSON: {e}")))?;
    {
        // A pod spec converts to an object, and its nodeSelector (a map) to an object too.
        let selector = json
            .as_object_mut()
            .map(|o| o.entry("nodeSelector").or_insert_with(|| Json::Object(Default::default())))
            .and_then(Json::as_object_mut)
            .ok_or_else(|| Status::internal("the pod spec's JSON has no nodeSelector object"))?;
        for (k, v) in &item.required_node_labels {
            match selector.get(k) {
                Some(Json::String(s)) if s != v => {
                    return Err(invalid(
                        format_args!("job_request_items[{i}].required_node_labels.{k}"),
                        format!("is {v:?} but the pod spec's nodeSelector says {s:?}"),
                    ));
                }
                _ => {
                    selector.insert(k.clone(), Json::String(v.clone()));
                }
            }
        }
    }
    serde_json::to_string(&json).map_err(|e| Status::internal(format!("the pod spec as JSON: {e}")))
}

/// One Armada item as a Convoy submission item.
fn submit_item(i: usize, item: &pb::JobSubmitRequestItem) -> Result<SubmitItem, Status> {
    let text = pod_spec_text(i, item)?;
    let (services, ingresses) = if item.ingress.is_empty() && item.services.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let json: Json =
            serde_json::from_str(&text).map_err(|e| Status::internal(format!("the pod spec's JSON: {e}")))?;
        super::ingress::objects(i, item, &json)?
    };
    let raw =
        |v: &Json| serde_json::value::to_raw_value(v).map_err(|e| Status::internal(format!("object as JSON: {e}")));
    let pod_spec = serde_json::value::RawValue::from_string(text)
        .map_err(|e| Status::internal(format!("pod spec as JSON: {e}")))?;
    let mut annotations: BTreeMap<String, String> = item.annotations.clone().into_iter().collect();
    if !item.external_job_uri.is_empty() {
        annotations.entry(EXTERNAL_JOB_URI_ANNOTATION.to_string()).or_insert_with(|| item.external_job_uri.clone());
    }
    Ok(SubmitItem {
        priority: priority(&format!("job_request_items[{i}].priority"), item.priority)?,
        // Armada names the class in the pod spec (`priorityClassName`), which the submission
        // checks read for both APIs.
        priority_class: None,
        pod_spec,
        annotations,
        labels: item.labels.clone().into_iter().collect(),
        services: services.iter().map(raw).collect::<Result<_, _>>()?,
        ingresses: ingresses.iter().map(raw).collect::<Result<_, _>>()?,
        client_id: (!item.client_id.is_empty()).then(|| item.client_id.clone()),
        namespace: (!item.namespace.is_empty()).then(|| item.namespace.clone()),
        // Armada's JobSubmitRequestItem has no dependencies or retry policy: REST only.
        depends_on: Vec::new(),
        retry: None,
    })
}

/// A field path of the REST submission (`jobs[3].pod_spec.containers[0]`) as Armada's request
/// names it (`job_request_items[3].pod_specs[0].containers[0]`).
fn armada_field(rest: &str, req: &pb::JobSubmitRequest) -> String {
    let Some(tail) = rest.strip_prefix("jobs[") else {
        return match rest {
            "job_set" => "job_set_id".to_string(),
            "jobs" => "job_request_items".to_string(),
            other => other.to_string(),
        };
    };
    let Some((index, tail)) = tail.split_once(']') else { return rest.to_string() };
    let single = index
        .parse::<usize>()
        .ok()
        .and_then(|i| req.job_request_items.get(i))
        .is_some_and(|item| item.pod_spec.is_some());
    let tail = match tail.strip_prefix(".pod_spec") {
        Some(t) if !single => format!(".pod_specs[0]{t}"),
        _ => tail.to_string(),
    };
    format!("job_request_items[{index}]{tail}")
}

/// Armada's job states that a job set cancellation may name, as Convoy's.
fn cancellable_state(i: usize, s: i32) -> Result<JobState, Status> {
    cancellable_state_at(format!("filter.states[{i}]"), s)
}

/// Armada's per-job results: "" for each job acted on, `why_not` for each named job that was not.
fn results(named: &[JobId], done: &[JobId], why_not: &str) -> std::collections::HashMap<String, String> {
    let mut out: std::collections::HashMap<String, String> =
        done.iter().map(|id| (id.to_string(), String::new())).collect();
    for id in named {
        out.entry(id.to_string()).or_insert_with(|| why_not.to_string());
    }
    out
}

fn job_ids(field: &str, ids: &[String]) -> Result<Vec<JobId>, Status> {
    ids.iter().enumerate().map(|(i, id)| id.parse().map_err(|e| invalid(format_args!("{field}[{i}]"), e))).collect()
}

#[tonic::async_trait]
impl Submit for SubmitService {
    async fn submit_jobs(
        &self,
        request: Request<pb::JobSubmitRequest>,
    ) -> Result<Response<pb::JobSubmitResponse>, Status> {
        let app = &self.0;
        let p = principal(app, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("job_set_id", &req.job_set_id)?;
        let jobs =
            req.job_request_items.iter().enumerate().map(|(i, item)| submit_item(i, item)).collect::<Result<_, _>>()?;
        leading(app).await?;
        let ids = submit_jobs(app, &p, SubmitRequest { queue, job_set, jobs }).await.map_err(|mut e| {
            e.field = e.field.map(|f| armada_field(&f, &req));
            status(e)
        })?;
        Ok(Response::new(pb::JobSubmitResponse {
            job_response_items: ids
                .into_iter()
                .map(|id| pb::JobSubmitResponseItem { job_id: id.to_string(), error: String::new() })
                .collect(),
        }))
    }

    async fn cancel_jobs(
        &self,
        request: Request<pb::JobCancelRequest>,
    ) -> Result<Response<pb::CancellationResult>, Status> {
        let app = &self.0;
        let p = principal(app, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("job_set_id", &req.job_set_id)?;
        let mut ids = job_ids("job_ids", &req.job_ids)?;
        if !req.job_id.is_empty() {
            ids.insert(0, req.job_id.parse().map_err(|e| invalid("job_id", e))?);
        }
        if ids.is_empty() {
            return Err(invalid("job_ids", "name at least one job (CancelJobSet cancels a whole job set)"));
        }
        leading(app).await?;
        let reason = (!req.reason.is_empty()).then_some(req.reason);
        let cancel = CancelRequest { queue, job_set, job_ids: Some(ids), states: None, reason };
        let cancelled = cancel_jobs(app, &p, cancel).await.map_err(status)?;
        Ok(Response::new(pb::CancellationResult { cancelled_ids: cancelled.iter().map(ToString::to_string).collect() }))
    }

    async fn cancel_job_set(&self, request: Request<pb::JobSetCancelRequest>) -> Result<Response<()>, Status> {
        let app = &self.0;
        let p = principal(app, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("job_set_id", &req.job_set_id)?;
        let states = match &req.filter {
            Some(f) if !f.states.is_empty() => {
                let mut states = Vec::new();
                for (i, s) in f.states.iter().enumerate() {
                    let s = cancellable_state(i, *s)?;
                    if !states.contains(&s) {
                        states.push(s);
                    }
                }
                Some(states)
            }
            _ => None,
        };
        leading(app).await?;
        let reason = (!req.reason.is_empty()).then_some(req.reason);
        let cancel = CancelRequest { queue, job_set, job_ids: None, states, reason };
        cancel_jobs(app, &p, cancel).await.map_err(status)?;
        Ok(Response::new(()))
    }

    async fn reprioritize_jobs(
        &self,
        request: Request<pb::JobReprioritizeRequest>,
    ) -> Result<Response<pb::JobReprioritizeResponse>, Status> {
        let app = &self.0;
        let p = principal(app, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("job_set_id", &req.job_set_id)?;
        let named = job_ids("job_ids", &req.job_ids)?;
        let new_priority = priority("new_priority", req.new_priority)?;
        leading(app).await?;
        // No ids: the whole job set, as Armada.
        let job_ids = (!named.is_empty()).then(|| named.clone());
        let changed =
            reprioritize_jobs(app, &p, ReprioritizeRequest { queue, job_set, job_ids, priority: new_priority })
                .await
                .map_err(status)?;
        let why_not = format!("not reprioritized: the job is over or already has priority {new_priority}");
        Ok(Response::new(pb::JobReprioritizeResponse { reprioritization_results: results(&named, &changed, &why_not) }))
    }

    async fn preempt_jobs(
        &self,
        request: Request<pb::JobPreemptRequest>,
    ) -> Result<Response<pb::PreemptionResult>, Status> {
        let app = &self.0;
        let p = principal(app, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("job_set_id", &req.job_set_id)?;
        let named = job_ids("job_ids", &req.job_ids)?;
        if named.is_empty() {
            return Err(invalid("job_ids", "name at least one job to preempt"));
        }
        leading(app).await?;
        let reason = (!req.reason.is_empty()).then_some(req.reason);
        let preempted = preempt_jobs(app, &p, PreemptRequest { queue, job_set, job_ids: named.clone(), reason })
            .await
            .map_err(status)?;
        let why_not = "not preempted: the job holds no node (only leased, pending and running jobs are preempted)";
        Ok(Response::new(pb::PreemptionResult { preemption_results: results(&named, &preempted, why_not) }))
    }

    async fn create_queue(&self, request: Request<pb::Queue>) -> Result<Response<()>, Status> {
        super::queues::create(&self.0, request).await
    }

    async fn update_queue(&self, request: Request<pb::Queue>) -> Result<Response<()>, Status> {
        super::queues::update(&self.0, request).await
    }

    async fn create_queues(
        &self,
        request: Request<pb::QueueList>,
    ) -> Result<Response<pb::BatchQueueCreateResponse>, Status> {
        super::queues::create_many(&self.0, request).await
    }

    async fn update_queues(
        &self,
        request: Request<pb::QueueList>,
    ) -> Result<Response<pb::BatchQueueUpdateResponse>, Status> {
        super::queues::update_many(&self.0, request).await
    }

    async fn delete_queue(&self, request: Request<pb::QueueDeleteRequest>) -> Result<Response<()>, Status> {
        super::queues::delete(&self.0, request).await
    }

    async fn get_queue(&self, request: Request<pb::QueueGetRequest>) -> Result<Response<pb::Queue>, Status> {
        super::queues::get(&self.0, request).await
    }

    type GetQueuesStream = super::queues::QueueStream;

    async fn get_queues(
        &self,
        request: Request<pb::StreamingQueueGetRequest>,
    ) -> Result<Response<Self::GetQueuesStream>, Status> {
        super::queues::list(&self.0, request)
    }

    async fn health(&self, _request: Request<()>) -> Result<Response<pb::HealthCheckResponse>, Status> {
        Ok(Response::new(health(&self.0)))
    }
}

/// SERVING once the server has applied its log and knows a leader (as `/readyz`).
pub(super) fn health(app: &Control) -> pb::HealthCheckResponse {
    let serving = if app.cluster.ready() {
        pb::health_check_response::ServingStatus::Serving
    } else {
        pb::health_check_response::ServingStatus::NotServing
    };
    pb::HealthCheckResponse { status: serving as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_round_and_clamp_as_armada_s() {
        assert_eq!(priority("p", 0.0).unwrap(), 0);
        assert_eq!(priority("p", 2.5).unwrap(), 3);
        assert_eq!(priority("p", 2.4).unwrap(), 2);
        assert_eq!(priority("p", -7.0).unwrap(), 0);
        assert_eq!(priority("p", 1e12).unwrap(), u32::MAX);
        assert_eq!(priority("p", f64::INFINITY).unwrap(), u32::MAX);
        assert_eq!(priority("p", f64::NAN).unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn rest_field_paths_become_armada_s() {
        let item = |single: bool| pb::JobSubmitRequestItem {
            pod_spec: single.then(EncodedPodSpec::default),
            ..Default::default()
        };
        let req = pb::JobSubmitRequest { job_request_items: vec![item(false), item(true)], ..Default::default() };
        let cases = [
            ("jobs[0].pod_spec.containers[0].resources", "job_request_items[0].pod_specs[0].containers[0].resources"),
            ("jobs[1].pod_spec.containers", "job_request_items[1].pod_spec.containers"),
            ("jobs[0].annotations", "job_request_items[0].annotations"),
            ("jobs", "job_request_items"),
            ("job_set", "job_set_id"),
            ("queue", "queue"),
        ];
        for (rest, armada) in cases {
            assert_eq!(armada_field(rest, &req), armada, "{rest}");
        }
    }

    #[test]
    fn required_node_labels_join_the_node_selector_unless_they_conflict() {
        let spec =
            k8s::from_json(&serde_json::json!({"containers": [{"name": "a"}], "nodeSelector": {"zone": "a"}})).unwrap();
        let mut item = pb::JobSubmitRequestItem { pod_specs: vec![spec], ..Default::default() };
        item.required_node_labels.insert("disk".into(), "ssd".into());
        let json: serde_json::Value = serde_json::from_str(&pod_spec_text(0, &item).unwrap()).unwrap();
        assert_eq!(json["nodeSelector"], serde_json::json!({"disk": "ssd", "zone": "a"}));
        item.required_node_labels.insert("zone".into(), "b".into());
        let e = pod_spec_text(0, &item).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with("job_request_items[0].required_node_labels.zone: "), "{}", e.message());
    }

    #[test]
    fn only_live_states_may_be_cancelled() {
        assert_eq!(cancellable_state(0, pb::JobState::Submitted as i32).unwrap(), JobState::Queued);
        assert_eq!(cancellable_state(0, pb::JobState::Running as i32).unwrap(), JobState::Running);
        let e = cancellable_state(2, pb::JobState::Succeeded as i32).unwrap_err();
        assert_eq!(e.message(), "filter.states[2]: SUCCEEDED jobs cannot be cancelled");
        assert_eq!(cancellable_state(0, 99).unwrap_err().message(), "filter.states[0]: 99 is not a job state");
    }
}
