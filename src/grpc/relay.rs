//! gRPC writes reaching a follower are relayed to the leader, as REST writes are
//! (`api::forward`): the call is sent on over HTTP/2 and the leader's answer, trailers and all,
//! streams back to the client, once this server has applied what the leader had. Reads are
//! answered by any server from its own state.

use crate::api::forward::{APPLIED_HEADER, FORWARDED_HEADER, Unrelayable, catch_up, relayable};
use crate::control::{Control, RelayError};
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// The methods of the services that change state (`api.Submit`, `api.QueueService`) which only
/// read: every other method of those services is a write.
const READS: &[&str] = &["Health", "GetQueue", "GetQueues", "GetActiveQueues"];

/// Whether the call at `path` (`/api.Submit/SubmitJobs`) changes state, so only the leader may
/// answer it.
fn is_write(path: &str) -> bool {
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else { return false };
    matches!(service, "api.Submit" | "api.QueueService") && !READS.contains(&method)
}

/// Middleware on the gRPC routes: on a follower that knows the leader, relays writes to it; on
/// the leader, marks a write's answer with the index it had applied (what a relaying follower
/// waits for).
pub(super) async fn route(State(app): State<Arc<Control>>, req: Request, next: Next) -> Response {
    if !is_write(req.uri().path()) {
        return next.run(req).await;
    }
    if app.cluster.is_leader() || req.headers().contains_key(&FORWARDED_HEADER) {
        // A relayed call reaching a server that no longer leads is refused by the handler
        // (UNAVAILABLE): one hop only.
        let mut resp = next.run(req).await;
        if let Ok(v) = HeaderValue::from_str(&app.cluster.applied_index().to_string()) {
            resp.headers_mut().insert(APPLIED_HEADER.clone(), v);
        }
        return resp;
    }
    let Some(leader) = app.cluster.leader_addr() else {
        // No leader to relay to: the handler says so.
        return next.run(req).await;
    };
    relay(&app, &leader, req).await
}

async fn relay(app: &Control, leader: &str, req: Request) -> Response {
    let outgoing = match relayable(app, req).await {
        Ok(r) => r,
        Err(Unrelayable::TooLarge(m)) => return Status::resource_exhausted(m).into_http(),
        Err(Unrelayable::Invalid(m)) => return Status::internal(m).into_http(),
    };
    let timeout = app.config.server.write_timeout + Duration::from_secs(5);
    let answer = match app.cluster.relay_h2(leader, outgoing, timeout).await {
        Ok(a) => a,
        Err(e @ RelayError::NotSent { .. }) => {
            tracing::warn!(error = %e, "could not relay a gRPC call to the leader");
            return Status::unavailable(format!("this server relays writes to the leader, and {e}; retry")).into_http();
        }
        Err(e @ RelayError::Lost { .. }) => {
            tracing::warn!(error = %e, "a gRPC call relayed to the leader got no answer");
            return Status::unavailable(format!(
                "the call was relayed to the leader and {e}: the outcome is unknown. Retry it; a submission is safe \
                 to retry only with the same client_id for each job"
            ))
            .into_http();
        }
    };
    catch_up(app, answer.headers()).await;
    answer
}

#[cfg(test)]
mod tests {
    use super::is_write;

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
}
