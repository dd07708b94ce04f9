//! `api.QueueService` (and the same queue RPCs of `api.Submit`): queue CRUD over the REST API's
//! queue logic: admins change queues, anyone authenticated reads them; cordon and uncordon
//! (admins), and the queue-wide cancel and preempt (whoever may cancel in the queue) over
//! [`queue_ops`].

use super::fields::{cancellable_state_at, queue_name};
use super::pb::{self, queue_service_server};
use super::{leading, principal, status};
use crate::config::Role;
use crate::control::Control;
use crate::model::Queue;
use crate::model::api::{QueueCancelRequest, QueuePreemptRequest};
use crate::model::{PoolName, PriorityClassName};
use crate::service::access::Principal;
use crate::service::{ErrorKind, ServiceError, queues as queue_ops};
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Code, Request, Response, Status};

/// The `api.QueueService` service.
pub(super) struct QueueService(pub Arc<Control>);

/// An Armada queue as Convoy's, starting from `base` (the stored queue on an update, so the
/// settings Armada's message does not carry, such as resource limits, are kept).
fn convoy_queue(q: &pb::Queue, base: Option<Queue>) -> Result<Queue, Status> {
    let name = queue_name("name", &q.name)?;
    let mut queue = base.unwrap_or_else(|| Queue::new(name.clone(), 1.0));
    // Armada's default factor is 1 too; 0 is "not set" in proto3.
    queue.priority_factor = if q.priority_factor == 0.0 { 1.0 } else { q.priority_factor };
    queue.owners = q.user_owners.clone();
    queue.groups = q.group_owners.clone();
    // Armada's permission subjects: users and groups.
    for p in &q.permissions {
        for s in &p.subjects {
            let list = match s.kind.to_ascii_lowercase().as_str() {
                "user" => &mut queue.owners,
                "group" => &mut queue.groups,
                _ => continue,
            };
            if !list.contains(&s.name) {
                list.push(s.name.clone());
            }
        }
    }
    queue.cordoned = q.cordoned;
    queue.labels = q.labels.clone().into_iter().collect();
    queue.validate().map_err(|e| Status::invalid_argument(format!("{}: {}", e.field, e.message)))?;
    Ok(queue)
}

/// A Convoy queue as Armada's message.
pub(super) fn armada_queue(q: &Queue) -> pb::Queue {
    pb::Queue {
        name: q.name.to_string(),
        priority_factor: q.priority_factor,
        user_owners: q.owners.clone(),
        group_owners: q.groups.clone(),
        permissions: vec![],
        cordoned: q.cordoned,
        labels: q.labels.clone().into_iter().collect(),
    }
}

fn admin<T>(app: &Control, request: &Request<T>) -> Result<Principal, Status> {
    let p = principal(app, request)?;
    p.require(Role::Admin).map_err(status)?;
    Ok(p)
}

/// A creation's refusal: as REST's, but an existing queue is ALREADY_EXISTS (as Armada answers).
fn create_status(e: ServiceError) -> Status {
    if e.kind == ErrorKind::Conflict {
        return Status::new(Code::AlreadyExists, e.detail);
    }
    status(e)
}

pub(super) async fn create(app: &Control, request: Request<pb::Queue>) -> Result<Response<()>, Status> {
    let p = admin(app, &request)?;
    create_one(app, &p, request.get_ref()).await?;
    Ok(Response::new(()))
}

async fn create_one(app: &Control, p: &Principal, q: &pb::Queue) -> Result<(), Status> {
    let queue = convoy_queue(q, None)?;
    leading(app).await?;
    queue_ops::create(app, p, queue).await.map_err(create_status)
}

pub(super) async fn update(app: &Control, request: Request<pb::Queue>) -> Result<Response<()>, Status> {
    let p = admin(app, &request)?;
    update_one(app, &p, request.get_ref()).await?;
    Ok(Response::new(()))
}

async fn update_one(app: &Control, p: &Principal, q: &pb::Queue) -> Result<(), Status> {
    let name = queue_name("name", &q.name)?;
    let stored = queue_ops::get(app, &name).map_err(status)?;
    let queue = convoy_queue(q, Some(stored))?;
    leading(app).await?;
    queue_ops::update(app, p, queue).await.map_err(status)
}

/// A refusal of a whole batch rather than of one queue: no leader, or the write could not be
/// committed (the client retries the batch).
fn whole_batch(s: &Status) -> bool {
    s.code() == Code::Unavailable || s.code() == Code::Internal
}

/// CreateQueues: each queue on its own, as Armada: the answer lists the queues that failed, each
/// with its error; the others are created.
pub(super) async fn create_many(
    app: &Control,
    request: Request<pb::QueueList>,
) -> Result<Response<pb::BatchQueueCreateResponse>, Status> {
    let p = admin(app, &request)?;
    let mut failed = Vec::new();
    for q in &request.get_ref().queues {
        if let Err(e) = create_one(app, &p, q).await {
            if whole_batch(&e) {
                return Err(e);
            }
            failed.push(pb::QueueCreateResponse { queue: Some(q.clone()), error: e.message().to_string() });
        }
    }
    Ok(Response::new(pb::BatchQueueCreateResponse { failed_queues: failed }))
}

/// UpdateQueues: each queue on its own, as Armada (see [`create_many`]).
pub(super) async fn update_many(
    app: &Control,
    request: Request<pb::QueueList>,
) -> Result<Response<pb::BatchQueueUpdateResponse>, Status> {
    let p = admin(app, &request)?;
    let mut failed = Vec::new();
    for q in &request.get_ref().queues {
        if let Err(e) = update_one(app, &p, q).await {
            if whole_batch(&e) {
                return Err(e);
            }
            failed.push(pb::QueueUpdateResponse { queue: Some(q.clone()), error: e.message().to_string() });
        }
    }
    Ok(Response::new(pb::BatchQueueUpdateResponse { failed_queues: failed }))
}

pub(super) async fn delete(app: &Control, request: Request<pb::QueueDeleteRequest>) -> Result<Response<()>, Status> {
    let p = admin(app, &request)?;
    let name = queue_name("name", &request.get_ref().name)?;
    leading(app).await?;
    // As Armada: a queue with jobs that are not over is not deleted (REST's force=false).
    queue_ops::delete(app, &p, name, false).await.map_err(status)?;
    Ok(Response::new(()))
}

pub(super) async fn get(app: &Control, request: Request<pb::QueueGetRequest>) -> Result<Response<pb::Queue>, Status> {
    principal(app, &request)?;
    let name = queue_name("name", &request.get_ref().name)?;
    let queue = queue_ops::get(app, &name).map_err(status)?;
    Ok(Response::new(armada_queue(&queue)))
}

pub(super) async fn cordon(app: &Control, request: Request<pb::QueueCordonRequest>) -> Result<Response<()>, Status> {
    set_cordon(app, request, |r| &r.name, true).await
}

pub(super) async fn uncordon(
    app: &Control,
    request: Request<pb::QueueUncordonRequest>,
) -> Result<Response<()>, Status> {
    set_cordon(app, request, |r| &r.name, false).await
}

/// Cordon or uncordon: REST's [`queue_ops::set_cordon`] (admins only).
async fn set_cordon<T>(
    app: &Control,
    request: Request<T>,
    name: impl Fn(&T) -> &String,
    cordoned: bool,
) -> Result<Response<()>, Status> {
    let p = principal(app, &request)?;
    let name = queue_name("name", name(request.get_ref()))?;
    leading(app).await?;
    queue_ops::set_cordon(app, &p, &name, cordoned).await.map_err(status)?;
    Ok(Response::new(()))
}

/// Priority class names of a request field, INVALID_ARGUMENT naming the one that is not a name.
fn priority_classes(field: &str, names: &[String]) -> Result<Vec<PriorityClassName>, Status> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| PriorityClassName::new(n).map_err(|e| Status::invalid_argument(format!("{field}[{i}]: {e}"))))
        .collect()
}

/// Pool names of a request field, INVALID_ARGUMENT naming the one that is not a name.
fn pools(field: &str, names: &[String]) -> Result<Vec<PoolName>, Status> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| PoolName::new(n).map_err(|e| Status::invalid_argument(format!("{field}[{i}]: {e}"))))
        .collect()
}

/// A REST error of a queue-wide operation with its field as Armada's request spells it.
fn armada_status(mut e: ServiceError) -> Status {
    e.field = e.field.map(|f| {
        f.replacen("priority_classes", "priorityClasses", 1)
            .replacen("states", "jobStates", 1)
            .replacen("queue", "name", 1)
    });
    status(e)
}

/// CancelOnQueue: REST's [`queue_ops::cancel_on_queue`].
pub(super) async fn cancel_on(app: &Control, request: Request<pb::QueueCancelRequest>) -> Result<Response<()>, Status> {
    let p = principal(app, &request)?;
    let req = request.into_inner();
    let name = queue_name("name", &req.name)?;
    let mut states = Vec::new();
    for (i, s) in req.job_states.iter().enumerate() {
        let s = cancellable_state_at(format!("jobStates[{i}]"), *s)?;
        if !states.contains(&s) {
            states.push(s);
        }
    }
    let cancel = QueueCancelRequest {
        states,
        priority_classes: priority_classes("priorityClasses", &req.priority_classes)?,
        pools: pools("pools", &req.pools)?,
        reason: None,
    };
    leading(app).await?;
    queue_ops::cancel_on_queue(app, &p, &name, cancel).await.map_err(armada_status)?;
    Ok(Response::new(()))
}

/// PreemptOnQueue: REST's [`queue_ops::preempt_on_queue`].
pub(super) async fn preempt_on(
    app: &Control,
    request: Request<pb::QueuePreemptRequest>,
) -> Result<Response<()>, Status> {
    let p = principal(app, &request)?;
    let req = request.into_inner();
    let name = queue_name("name", &req.name)?;
    let preempt = QueuePreemptRequest {
        priority_classes: priority_classes("priorityClasses", &req.priority_classes)?,
        pools: pools("pools", &req.pools)?,
        reason: None,
    };
    leading(app).await?;
    queue_ops::preempt_on_queue(app, &p, &name, preempt).await.map_err(armada_status)?;
    Ok(Response::new(()))
}

/// The stream of GetQueues.
pub(super) type QueueStream = Pin<Box<dyn futures::Stream<Item = Result<pb::StreamingQueueMessage, Status>> + Send>>;

#[tonic::async_trait]
impl queue_service_server::QueueService for QueueService {
    async fn create_queue(&self, request: Request<pb::Queue>) -> Result<Response<()>, Status> {
        create(&self.0, request).await
    }

    async fn update_queue(&self, request: Request<pb::Queue>) -> Result<Response<()>, Status> {
        update(&self.0, request).await
    }

    async fn create_queues(
        &self,
        request: Request<pb::QueueList>,
    ) -> Result<Response<pb::BatchQueueCreateResponse>, Status> {
        create_many(&self.0, request).await
    }

    async fn update_queues(
        &self,
        request: Request<pb::QueueList>,
    ) -> Result<Response<pb::BatchQueueUpdateResponse>, Status> {
        update_many(&self.0, request).await
    }

    async fn delete_queue(&self, request: Request<pb::QueueDeleteRequest>) -> Result<Response<()>, Status> {
        delete(&self.0, request).await
    }

    async fn get_queue(&self, request: Request<pb::QueueGetRequest>) -> Result<Response<pb::Queue>, Status> {
        get(&self.0, request).await
    }

    async fn cordon_queue(&self, request: Request<pb::QueueCordonRequest>) -> Result<Response<()>, Status> {
        cordon(&self.0, request).await
    }

    async fn uncordon_queue(&self, request: Request<pb::QueueUncordonRequest>) -> Result<Response<()>, Status> {
        uncordon(&self.0, request).await
    }

    async fn cancel_on_queue(&self, request: Request<pb::QueueCancelRequest>) -> Result<Response<()>, Status> {
        cancel_on(&self.0, request).await
    }

    async fn preempt_on_queue(&self, request: Request<pb::QueuePreemptRequest>) -> Result<Response<()>, Status> {
        preempt_on(&self.0, request).await
    }

    type GetQueuesStream = QueueStream;

    async fn get_queues(
        &self,
        request: Request<pb::StreamingQueueGetRequest>,
    ) -> Result<Response<QueueStream>, Status> {
        list(&self.0, request)
    }
}

/// Every queue (at most `num` when it is not 0) in name order, then an end marker.
pub(super) fn list(
    app: &Control,
    request: Request<pb::StreamingQueueGetRequest>,
) -> Result<Response<QueueStream>, Status> {
    principal(app, &request)?;
    let num = request.get_ref().num as usize;
    let mut queues: Vec<pb::Queue> = queue_ops::list(app).iter().map(armada_queue).collect();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    if num > 0 {
        queues.truncate(num);
    }
    let messages = queues
        .into_iter()
        .map(|q| pb::StreamingQueueMessage { event: Some(pb::streaming_queue_message::Event::Queue(q)) })
        .chain(std::iter::once(pb::StreamingQueueMessage {
            event: Some(pb::streaming_queue_message::Event::End(pb::EndMarker {})),
        }))
        .map(Ok);
    Ok(Response::new(Box::pin(futures::stream::iter(messages))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armada_queues_map_onto_convoy_s_and_back() {
        let mut q = pb::Queue {
            name: "physics".into(),
            priority_factor: 2.0,
            user_owners: vec!["alice".into()],
            group_owners: vec!["phys".into()],
            cordoned: true,
            ..Default::default()
        };
        q.permissions.push(pb::queue::Permissions {
            subjects: vec![
                pb::queue::permissions::Subject { kind: "Group".into(), name: "lab".into() },
                pb::queue::permissions::Subject { kind: "User".into(), name: "alice".into() },
            ],
            verbs: vec!["submit".into()],
        });
        q.labels.insert("team".into(), "p".into());
        let c = convoy_queue(&q, None).unwrap();
        assert_eq!((c.priority_factor, c.cordoned), (2.0, true));
        assert_eq!(c.owners, ["alice"]);
        assert_eq!(c.groups, ["phys", "lab"]);
        let back = armada_queue(&c);
        assert_eq!(
            (back.name.as_str(), back.group_owners.clone()),
            ("physics", vec!["phys".to_string(), "lab".to_string()])
        );
        assert_eq!(back.labels.get("team").map(String::as_str), Some("p"));

        let unset = convoy_queue(&pb::Queue { name: "b".into(), ..Default::default() }, None).unwrap();
        assert_eq!(unset.priority_factor, 1.0);
        let e = convoy_queue(&pb::Queue { name: "b".into(), priority_factor: -1.0, ..Default::default() }, None)
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().starts_with("priority_factor: "), "{}", e.message());
        assert_eq!(convoy_queue(&pb::Queue::default(), None).unwrap_err().message(), "name: is required");
    }

    #[test]
    fn an_update_keeps_what_armada_s_queue_does_not_carry() {
        let mut stored = Queue::new("a".parse().unwrap(), 1.0);
        stored.resource_limits.insert(crate::model::ResourceName::cpu(), 0.5);
        // Armada has no guarantee or preemption fence: they stay as set through REST.
        stored.guaranteed = crate::model::Resources::parse([("cpu", "6")]).unwrap();
        stored.preemption_policy = crate::model::PreemptionPolicy::Fence;
        let c = convoy_queue(&pb::Queue { name: "a".into(), priority_factor: 3.0, ..Default::default() }, Some(stored))
            .unwrap();
        assert_eq!(c.priority_factor, 3.0);
        assert_eq!(c.resource_limits.len(), 1);
        assert_eq!((c.guaranteed.get("cpu"), c.preemption_policy), (6000, crate::model::PreemptionPolicy::Fence));
    }
}
