//! `api.Event`: a job set's events from the same event log as REST's event stream, as Armada's
//! messages. A message's id is the event's sequence number in its job set, so `from_message_id`
//! resumes right after the last message a client received, without gaps or duplicates.

use super::fields::{job_set_name, queue_name};
use super::pb::{self, event_message::Events, event_server::Event};
use super::principal;
use super::submit::health;
use crate::control::Control;
use crate::model::{Event as StoredEvent, EventKind, Job, JobId, JobSetName, QueueName};
use crate::service::events::{JobSetCursor, follow};
use crate::store::Store;
use futures::{Stream, StreamExt};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The `api.Event` service.
pub(super) struct EventService(pub Arc<Control>);

/// Events read from the store at a time.
const BATCH: usize = 1000;

/// The stream of GetJobSetEvents.
pub(super) type EventStream = Pin<Box<dyn Stream<Item = Result<pb::EventStreamMessage, Status>> + Send>>;

/// What a message needs besides the event: the job's queue and job set, and the run's place.
struct Context<'a> {
    queue: &'a QueueName,
    job_set: &'a JobSetName,
    /// The jobs of the events with a run, as stored.
    jobs: &'a HashMap<JobId, Job>,
}

pub(super) fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as i32 }
}

/// Armada's message for a stored event.
fn message(e: &StoredEvent, c: &Context<'_>) -> pb::EventStreamMessage {
    let (job_id, job_set_id, queue, created) =
        (e.job_id.to_string(), c.job_set.to_string(), c.queue.to_string(), Some(timestamp(e.at_ms)));
    let run = e.run_id.and_then(|id| c.jobs.get(&e.job_id)?.runs.iter().find(|r| r.run_id == id));
    let cluster_id = run.map(|r| r.executor.to_string()).unwrap_or_default();
    let pool = run.map(|r| r.pool.to_string()).unwrap_or_default();
    let node_name = run.map(|r| r.node.to_string()).unwrap_or_default();
    // The pod the run became, as the Kubernetes agent reported it (empty for other runtimes);
    // a Convoy job has one pod per run, number 0, as Armada numbers a job's only pod.
    let pod = run.and_then(|r| r.pod.as_ref());
    let pod_name = pod.map(|p| p.name.clone()).unwrap_or_default();
    let pod_namespace = pod.map(|p| p.namespace.clone()).unwrap_or_default();
    let kubernetes_id = pod.map(|p| p.uid.clone()).unwrap_or_default();
    let pod_number = 0;
    let text = e.message.clone().unwrap_or_default();
    let events = match e.kind {
        EventKind::Submitted => Events::Submitted(pb::JobSubmittedEvent { job_id, job_set_id, queue, created }),
        EventKind::Queued => Events::Queued(pb::JobQueuedEvent { job_id, job_set_id, queue, created }),
        EventKind::Leased => {
            Events::Leased(pb::JobLeasedEvent { job_id, job_set_id, queue, created, cluster_id, pool })
        }
        EventKind::Pending => Events::Pending(pb::JobPendingEvent {
            job_id,
            job_set_id,
            queue,
            created,
            cluster_id,
            pool,
            kubernetes_id,
            pod_number,
            pod_name,
            pod_namespace,
        }),
        EventKind::Running => Events::Running(pb::JobRunningEvent {
            job_id,
            job_set_id,
            queue,
            created,
            cluster_id,
            node_name,
            pool,
            kubernetes_id,
            pod_number,
            pod_name,
            pod_namespace,
        }),
        EventKind::Succeeded => Events::Succeeded(pb::JobSucceededEvent {
            job_id,
            job_set_id,
            queue,
            created,
            cluster_id,
            node_name,
            kubernetes_id,
            pod_number,
            pod_name,
            pod_namespace,
        }),
        EventKind::Failed => {
            let exit = run.and_then(|r| r.exit_code);
            let container_statuses = exit
                .map(|code| vec![pb::ContainerStatus { exit_code: code, message: text.clone(), ..Default::default() }])
                .unwrap_or_default();
            Events::Failed(pb::JobFailedEvent {
                job_id,
                job_set_id,
                queue,
                created,
                cluster_id,
                node_name,
                reason: text,
                container_statuses,
                kubernetes_id,
                pod_number,
                pod_name,
                pod_namespace,
                ..Default::default()
            })
        }
        EventKind::CancelRequested => Events::Cancelling(pb::JobCancellingEvent {
            job_id,
            job_set_id,
            queue,
            created,
            reason: text,
            requestor: String::new(),
        }),
        EventKind::Cancelled => Events::Cancelled(pb::JobCancelledEvent {
            job_id,
            job_set_id,
            queue,
            created,
            reason: text,
            requestor: String::new(),
        }),
        EventKind::PreemptRequested => Events::Preempting(pb::JobPreemptingEvent {
            job_id,
            job_set_id,
            queue,
            created,
            reason: text,
            requestor: String::new(),
        }),
        EventKind::Preempted => Events::Preempted(pb::JobPreemptedEvent {
            job_id,
            job_set_id,
            queue,
            created,
            cluster_id,
            run_id: e.run_id.map(|r| r.to_string()).unwrap_or_default(),
            reason: text,
            ..Default::default()
        }),
        EventKind::Reprioritized => Events::Reprioritized(pb::JobReprioritizedEvent {
            job_id,
            job_set_id,
            queue,
            created,
            // The state machine writes "priority <n>".
            new_priority: text.strip_prefix("priority ").and_then(|p| p.parse().ok()).unwrap_or_default(),
            requestor: String::new(),
        }),
        EventKind::Requeued => Events::LeaseReturned(pb::JobLeaseReturnedEvent {
            job_id,
            job_set_id,
            queue,
            created,
            cluster_id,
            reason: text,
            run_attempted: run.is_some_and(|r| r.running_at_ms.is_some()),
            kubernetes_id,
            pod_number,
        }),
    };
    pb::EventStreamMessage { id: e.seq.to_string(), message: Some(pb::EventMessage { events: Some(events) }) }
}

/// The stored events of a job set from `next` on, with the jobs of those that concern a run.
fn read(
    store: &Store,
    queue: &QueueName,
    job_set: &JobSetName,
    next: u64,
) -> Result<(Vec<StoredEvent>, HashMap<JobId, Job>), crate::store::StoreError> {
    let events = store.events(queue, job_set, next, BATCH)?;
    let mut jobs = HashMap::new();
    for e in events.iter().filter(|e| e.run_id.is_some()) {
        if !jobs.contains_key(&e.job_id)
            && let Some(job) = store.job(e.job_id)?
        {
            jobs.insert(e.job_id, job);
        }
    }
    Ok((events, jobs))
}

/// A batch of Armada's messages from sequence number `next` on, each with its sequence number.
async fn fetch(
    app: Arc<Control>,
    queue: QueueName,
    job_set: JobSetName,
    next: u64,
) -> Result<Vec<(u64, pb::EventStreamMessage)>, Status> {
    let (store, q, s) = (app.store.clone(), queue.clone(), job_set.clone());
    let (events, jobs) = tokio::task::spawn_blocking(move || read(&store, &q, &s, next))
        .await
        .map_err(|e| Status::internal(format!("the read task failed: {e}")))?
        .map_err(|e| Status::internal(format!("reading the stored events failed: {e}; resume from the last id")))?;
    let context = Context { queue: &queue, job_set: &job_set, jobs: &jobs };
    Ok(events.iter().map(|e| (e.seq, message(e, &context))).collect())
}

/// The sequence number to start from: 1, or the one after `value` (a message id of the stream).
fn after(field: &str, value: &str) -> Result<u64, Status> {
    if value.is_empty() {
        return Ok(1);
    }
    let id: u64 = value.parse().map_err(|_| {
        Status::invalid_argument(format!("{field}: {value:?} is not the id of a message of this stream"))
    })?;
    Ok(id + 1)
}

/// The job set's events from sequence number `next`, kept open for new ones if `watch`.
async fn events(
    app: Arc<Control>,
    queue: QueueName,
    job_set: JobSetName,
    next: u64,
    watch: bool,
    error_if_missing: bool,
) -> Result<Response<EventStream>, Status> {
    if error_if_missing {
        let (store, q, s) = (app.store.clone(), queue.clone(), job_set.clone());
        let any = tokio::task::spawn_blocking(move || store.events(&q, &s, 1, 1))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(e.to_string()))?;
        if any.is_empty() {
            return Err(Status::not_found(format!("job set {job_set} of queue {queue} has no events")));
        }
    }
    let cursor = JobSetCursor::new(&app, queue, job_set, next, watch);
    let messages = follow(cursor, move |q, s, next| fetch(app.clone(), q, s, next)).map(|m| m.map_err(|f| f.error));
    Ok(Response::new(Box::pin(messages)))
}

#[tonic::async_trait]
impl Event for EventService {
    type GetJobSetEventsStream = EventStream;

    async fn get_job_set_events(&self, request: Request<pb::JobSetRequest>) -> Result<Response<EventStream>, Status> {
        principal(&self.0, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("id", &req.id)?;
        let next = after("from_message_id", &req.from_message_id)?;
        events(self.0.clone(), queue, job_set, next, req.watch, req.error_if_missing).await
    }

    type WatchStream = EventStream;

    /// Armada's older call: GetJobSetEvents with `watch` always on.
    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<EventStream>, Status> {
        principal(&self.0, &request)?;
        let req = request.into_inner();
        let queue = queue_name("queue", &req.queue)?;
        let job_set = job_set_name("job_set_id", &req.job_set_id)?;
        let next = after("from_id", &req.from_id)?;
        events(self.0.clone(), queue, job_set, next, true, false).await
    }

    async fn health(&self, _request: Request<()>) -> Result<Response<pb::HealthCheckResponse>, Status> {
        Ok(Response::new(health(&self.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_keep_milliseconds() {
        assert_eq!(timestamp(1_700_000_000_123), prost_types::Timestamp { seconds: 1_700_000_000, nanos: 123_000_000 });
        assert_eq!(timestamp(-1), prost_types::Timestamp { seconds: -1, nanos: 999_000_000 });
    }

    #[test]
    fn reprioritized_events_carry_the_new_priority() {
        let (q, s) = ("q".parse().unwrap(), JobSetName::new("s").unwrap());
        let jobs = HashMap::new();
        let c = Context { queue: &q, job_set: &s, jobs: &jobs };
        let e = StoredEvent {
            seq: 7,
            job_id: crate::control::ids::job_id(),
            at_ms: 5,
            kind: EventKind::Reprioritized,
            run_id: None,
            message: Some("priority 42".into()),
        };
        let m = message(&e, &c);
        assert_eq!(m.id, "7");
        let Some(pb::EventMessage { events: Some(Events::Reprioritized(r)) }) = m.message else { panic!("{m:?}") };
        assert_eq!((r.new_priority, r.queue.as_str(), r.job_set_id.as_str()), (42.0, "q", "s"));
    }
}
