//! The HTTP face of a server: the REST API's routes ([`crate::api`]) and the web UI's
//! ([`crate::ui`]), relayed to the leader where they must be, with problem+json fallbacks (a gRPC
//! call of a service not served gets a gRPC answer), the body limit, request ids and tracing.
//! The gRPC services ([`crate::grpc`]) and Raft's endpoints are merged beside it.

use crate::api::{
    self,
    problem::{ApiError, REQUEST_ID_HEADER, fill_request_id},
};
use crate::control::Control;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::Request;
use std::sync::Arc;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// Request ids: ULIDs (clients may send their own `x-request-id`).
#[derive(Clone, Default)]
struct Ulids;

impl MakeRequestId for Ulids {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        axum::http::HeaderValue::from_str(&crate::control::ids::run_id().to_string()).ok().map(RequestId::new)
    }
}

/// The whole HTTP API: [`api::routes()`] and the web UI, problem+json fallbacks, body limit, request ids and tracing.
pub(super) fn router(app: Arc<Control>) -> Router {
    let limit = app.config.server.max_request_bytes;
    let (routes, _) = api::routes().split_for_parts();
    let routes = routes
        .layer(axum::middleware::from_fn_with_state(app.clone(), api::forward::route))
        // Latency by matched route template (a route layer: unmatched paths are not recorded).
        .route_layer(axum::middleware::from_fn(crate::metrics::track_requests))
        // The UI's actions are relayed to the leader like the API's writes.
        .merge(crate::ui::router().layer(axum::middleware::from_fn_with_state(app.clone(), api::forward::route)));
    with_layers(routes, limit).with_state(app)
}

/// Fallbacks and the layers every route gets. Outermost first: request ids are assigned, the
/// request is traced, the id is copied to the answer, problem answers get the id in their body,
/// bodies are limited.
fn with_layers<S: Clone + Send + Sync + 'static>(routes: Router<S>, body_limit: usize) -> Router<S> {
    routes
        .fallback(|req: Request<axum::body::Body>| async move {
            // A gRPC call of a service this server does not serve gets a gRPC answer.
            #[cfg(feature = "grpc")]
            if crate::grpc::is_grpc(req.headers()) {
                return crate::grpc::unimplemented(req.uri().path());
            }
            let _ = req;
            axum::response::IntoResponse::into_response(ApiError::not_found("no such endpoint"))
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn(fill_request_id))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID_HEADER.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let id = req.headers().get(&REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID_HEADER.clone(), Ulids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::problem::ApiJson;
    use crate::model::api::Problem;
    use axum::body::Body;
    use axum::http::{Method, StatusCode};
    use axum::routing::{get, post};
    use tower::ServiceExt;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Thing {
        count: u32,
    }

    fn app() -> Router {
        let routes = Router::new()
            .route("/ok", get(|| async { "fine" }))
            .route("/missing", get(|| async { ApiError::not_found("no such thing") }))
            .route("/things", post(|ApiJson(_): ApiJson<Thing>| async { "stored" }));
        with_layers(routes, 64)
    }

    async fn call(req: Request<Body>) -> (StatusCode, Option<String>, Option<String>, Vec<u8>) {
        let resp = app().oneshot(req).await.unwrap();
        let header = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (id, ct) = (header("x-request-id"), header("content-type"));
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        (status, id, ct, body.to_vec())
    }

    fn request(method: Method, uri: &str, content_type: &str, body: &str) -> Request<Body> {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    #[tokio::test]
    async fn every_problem_carries_the_request_id_of_its_answer() {
        let cases = [
            (request(Method::GET, "/missing", "", ""), StatusCode::NOT_FOUND),
            (request(Method::GET, "/nowhere", "", ""), StatusCode::NOT_FOUND),
            (request(Method::DELETE, "/ok", "", ""), StatusCode::METHOD_NOT_ALLOWED),
            (request(Method::POST, "/things", "application/json", r#"{"count": "x"}"#), StatusCode::BAD_REQUEST),
            (request(Method::POST, "/things", "text/plain", "x"), StatusCode::UNSUPPORTED_MEDIA_TYPE),
            (request(Method::POST, "/things", "application/json", &" ".repeat(100)), StatusCode::PAYLOAD_TOO_LARGE),
        ];
        for (req, status) in cases {
            let what = format!("{} {}", req.method(), req.uri());
            let (st, id, ct, body) = call(req).await;
            assert_eq!(st, status, "{what}");
            assert_eq!(ct.as_deref(), Some("application/problem+json"), "{what}");
            let id = id.expect("the answer has an x-request-id");
            assert_eq!(ulid::Ulid::from_string(&id).map(|_| ()), Ok(()), "{what}: {id} is not a ULID");
            let p: Problem = serde_json::from_slice(&body).unwrap();
            assert_eq!(p.request_id.as_deref(), Some(id.as_str()), "{what}");
            assert_eq!(p.status, status.as_u16(), "{what}");
        }
    }

    #[tokio::test]
    async fn a_client_request_id_is_kept_and_successes_are_untouched() {
        let mut req = request(Method::GET, "/missing", "", "");
        req.headers_mut().insert("x-request-id", "client-chosen-42".parse().unwrap());
        let (_, id, _, body) = call(req).await;
        assert_eq!(id.as_deref(), Some("client-chosen-42"));
        let p: Problem = serde_json::from_slice(&body).unwrap();
        assert_eq!(p.request_id.as_deref(), Some("client-chosen-42"));
        assert_eq!(p.detail, "no such thing");

        let (st, id, _, body) = call(request(Method::GET, "/ok", "", "")).await;
        assert_eq!((st, body.as_slice()), (StatusCode::OK, b"fine".as_slice()));
        assert!(id.is_some());
    }
}
