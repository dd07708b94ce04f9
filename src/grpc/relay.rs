//! gRPC writes reaching a follower are relayed to the leader, as REST writes are
//! (`api::forward`): the call is sent on over HTTP/2 and the leader's answer, trailers and all,
//! streams back to the client, once this server has applied what the leader had. The relay
//! follows the leadership through a failover for at most `server.relay_timeout`, sending the
//! call to the next leader only when that is safe ([`resend_safe`]). Reads are answered by any
//! server from its own state.

use crate::control::Control;
use crate::control::relay::{
    APPLIED_HEADER, FORWARDED_HEADER, Relayed, Unrelayable, catch_up, follow_leader, outgoing, read_whole,
};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use tonic::Status;

/// The methods of the services that change state (`api.Submit`, `api.QueueService`) which only
/// read: every other method of those services is a write.
const READS: &[&str] = &["Health", "GetQueue", "GetQueues", "GetActiveQueues"];

/// Writes that change nothing more when done twice: cancels, priority changes, cordons and
/// queue updates set a value. `SubmitJobs` is one when every item carries a `client_id`.
const IDEMPOTENT: &[&str] = &[
    "CancelJobs",
    "CancelJobSet",
    "ReprioritizeJobs",
    "CordonQueue",
    "UncordonQueue",
    "CancelOnQueue",
    "UpdateQueue",
    "UpdateQueues",
];

/// Whether the call at `path` (`/api.Submit/SubmitJobs`) changes state, so only the leader may
/// answer it.
fn is_write(path: &str) -> bool {
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else { return false };
    matches!(service, "api.Submit" | "api.QueueService") && !READS.contains(&method)
}

/// Whether the write at `path` with the gRPC-framed `body` may be sent to another leader after
/// it may already have reached one that never answered (see `api::forward::resend_safe`).
fn resend_safe(path: &str, body: &[u8]) -> bool {
    let method = path.rsplit('/').next().unwrap_or_default();
    if IDEMPOTENT.contains(&method) {
        return true;
    }
    method == "SubmitJobs" && every_item_has_a_client_id(body)
}

/// The fields of `JobSubmitRequest` that say whether every item carries a client id.
#[derive(Clone, PartialEq, prost::Message)]
struct SubmitProbe {
    #[prost(message, repeated, tag = "3")]
    items: Vec<ItemProbe>,
}

/// `JobSubmitRequestItem.client_id`.
#[derive(Clone, PartialEq, prost::Message)]
struct ItemProbe {
    #[prost(string, tag = "8")]
    client_id: String,
}

/// True if `body` is one uncompressed gRPC message, a `JobSubmitRequest` whose every item has a
/// `client_id`.
fn every_item_has_a_client_id(body: &[u8]) -> bool {
    let Some((&[0, a, b, c, d], message)) = body.split_first_chunk::<5>() else { return false };
    if u32::from_be_bytes([a, b, c, d]) as usize != message.len() {
        return false;
    }
    <SubmitProbe as prost::Message>::decode(message)
        .is_ok_and(|p| !p.items.is_empty() && p.items.iter().all(|i| !i.client_id.is_empty()))
}

/// Middleware on the gRPC routes: on a follower, relays writes to the leader; on the leader,
/// marks a write's answer with the index it had applied (what a relaying follower waits for).
pub(super) async fn route(State(app): State<Arc<Control>>, req: Request, next: Next) -> Response {
    if !is_write(req.uri().path()) {
        return next.run(req).await;
    }
    if app.cluster.is_leader() || req.headers().contains_key(&FORWARDED_HEADER) {
        // A relayed call reaching a server that no longer leads is refused by the handler
        // (UNAVAILABLE): one hop only.
        return serve_here(&app, req, next).await;
    }
    let (parts, body) = match read_whole(&app, req).await {
        Ok(r) => r,
        Err(Unrelayable::TooLarge(m)) => return Status::resource_exhausted(m).into_http(),
        Err(Unrelayable::Invalid(m)) => return Status::internal(m).into_http(),
    };
    let request = match outgoing(&app, &parts, &body) {
        Ok(r) => r,
        Err(Unrelayable::TooLarge(m) | Unrelayable::Invalid(m)) => return Status::internal(m).into_http(),
    };
    let safe = || resend_safe(parts.uri.path(), &body);
    let bound = app.config.relay_timeout();
    match follow_leader(&app, request, &safe, bound, |addr, r, t| app.cluster.relay_h2(&addr, r, t)).await {
        Relayed::Answer(answer) => {
            catch_up(&app, answer.headers()).await;
            answer
        }
        Relayed::Here => serve_here(&app, Request::from_parts(parts, Body::from(body)), next).await,
        Relayed::Failed(detail) => Status::unavailable(detail).into_http(),
    }
}

/// Runs the handler here, marking the answer with the index this server had applied.
async fn serve_here(app: &Control, req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&app.cluster.applied_index().to_string()) {
        resp.headers_mut().insert(APPLIED_HEADER.clone(), v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::{is_write, resend_safe};

    #[test]
    fn only_the_state_changing_methods_of_submit_and_queue_service_are_writes() {
        for w in ["/api.Submit/SubmitJobs", "/api.Submit/CreateQueue", "/api.QueueService/DeleteQueue"] {
            assert!(is_write(w), "{w}");
        }
        for r in [
            "/api.Submit/Health",
            "/api.QueueService/GetQueues",
            "/api.Submit/GetQueue",
            "/api.Jobs/GetJobStatus",
            "/api.Event/GetJobSetEvents",
            "/api.Other/SubmitJobs",
            "/nothing",
        ] {
            assert!(!is_write(r), "{r}");
        }
    }

    #[test]
    fn a_submission_is_safe_to_send_again_only_when_every_item_has_a_client_id() {
        use prost::Message;
        let frame = |req: &super::super::pb::JobSubmitRequest| {
            let msg = req.encode_to_vec();
            let mut body = vec![0u8];
            body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            body.extend_from_slice(&msg);
            body
        };
        let item = |c: &str| super::super::pb::JobSubmitRequestItem { client_id: c.into(), ..Default::default() };
        let mut req = super::super::pb::JobSubmitRequest {
            queue: "q".into(),
            job_set_id: "s".into(),
            job_request_items: vec![item("a"), item("b")],
        };
        assert!(resend_safe("/api.Submit/SubmitJobs", &frame(&req)));
        req.job_request_items.push(item(""));
        assert!(!resend_safe("/api.Submit/SubmitJobs", &frame(&req)));
        // A compressed or cut frame cannot be read: not safe.
        req.job_request_items.pop();
        let mut compressed = frame(&req);
        compressed[0] = 1;
        assert!(!resend_safe("/api.Submit/SubmitJobs", &compressed));
        let whole = frame(&req);
        assert!(!resend_safe("/api.Submit/SubmitJobs", &whole[..whole.len() - 1]));
        assert!(resend_safe("/api.Submit/CancelJobs", &[]));
        assert!(!resend_safe("/api.Submit/CreateQueue", &[]));
        assert!(!resend_safe("/api.Submit/PreemptJobs", &[]));
        assert!(!resend_safe("/api.QueueService/DeleteQueue", &[]));
    }
}
