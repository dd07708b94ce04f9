//! Errors as `application/problem+json` (RFC 9457), and a JSON body extractor whose errors name
//! the offending field.

use crate::model::FieldError;
use crate::model::api::Problem;
use crate::model::strict_json::parse_json;
use crate::service::ServiceError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

/// An API error.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    /// The HTTP status (a 4xx for the client's mistakes, 5xx for the server's).
    pub status: StatusCode,
    /// What went wrong, for people.
    pub detail: String,
    /// The offending field of the request, as a path (`jobs[3].pod_spec.containers[0]`).
    pub field: Option<String>,
}

impl ApiError {
    /// An error with `status` about no field in particular.
    pub(crate) fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        ApiError { status, detail: detail.into(), field: None }
    }
    /// An error with `status` about `field`.
    pub(crate) fn field(status: StatusCode, field: impl Into<String>, detail: impl Into<String>) -> Self {
        ApiError { status, detail: detail.into(), field: Some(field.into()) }
    }
    /// 400: `field` breaks a rule.
    pub(crate) fn bad_request(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::field(StatusCode::BAD_REQUEST, field, detail)
    }
    /// 404.
    pub(crate) fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }
    /// 503: this server cannot serve it now (not the leader, no quorum); retry.
    pub(crate) fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, detail)
    }
    /// 500: the server failed.
    pub(crate) fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, detail)
    }
    /// 401: no valid token.
    pub(crate) fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, detail)
    }
}

/// The one place a service error becomes an HTTP status.
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status = StatusCode::from_u16(e.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError { status, detail: e.detail, field: e.field }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        ServiceError::from(e).into()
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ServiceError::from(e).into()
    }
}

impl From<crate::control::WriteError> for ApiError {
    fn from(e: crate::control::WriteError) -> Self {
        ServiceError::from(e).into()
    }
}

impl From<crate::state::Rejection> for ApiError {
    fn from(r: crate::state::Rejection) -> Self {
        ServiceError::from(r).into()
    }
}

impl ApiError {
    /// The problem body; `request_id` is left for [`fill_request_id`] (or the caller) to set.
    pub(crate) fn problem(&self) -> Problem {
        Problem {
            kind: format!("https://convoy.dev/problems/{}", self.status.as_u16()),
            title: self.status.canonical_reason().unwrap_or("Error").to_string(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            field: self.field.clone(),
            request_id: None,
        }
    }
}

/// A problem+json answer of `status` with `body`.
fn problem_response(status: StatusCode, body: &Problem) -> Response {
    let mut resp = (status, axum::Json(body)).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        let mut resp = problem_response(self.status, &problem);
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // Every 503 is passing (an election, a lost majority, a write not yet confirmed).
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        // Kept for `fill_request_id`, which knows the request id and renders the body again.
        resp.extensions_mut().insert(problem);
        resp
    }
}

/// The request id of a request: the `x-request-id` header that the request-id layer set, or
/// that the client sent.
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    headers.get(&REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()).map(str::to_string)
}

/// The header carrying request ids.
pub(crate) static REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Middleware: puts the request's id into every problem answer made from an [`ApiError`],
/// wherever it was made (handler, extractor rejection, fallback). It must run inside the layer
/// that assigns request ids. Only error answers are touched, and they are small.
pub(crate) async fn fill_request_id(req: Request, next: Next) -> Response {
    let id = request_id(req.headers());
    let resp = next.run(req).await;
    let Some(id) = id else { return resp };
    let (mut parts, body) = resp.into_parts();
    let Some(mut problem) = parts.extensions.remove::<Problem>() else {
        return Response::from_parts(parts, body);
    };
    problem.request_id = Some(id);
    let fresh = problem_response(parts.status, &problem);
    // The new body has another length; every other header (x-request-id, tracing) is kept.
    parts.headers.remove(header::CONTENT_LENGTH);
    let (_, body) = fresh.into_parts();
    Response::from_parts(parts, body)
}

/// A JSON body whose deserialization errors are 400s naming the field (`jobs[3].pod_spec`).
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !ct.is_empty() && !ct.starts_with("application/json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("content type {ct:?} is not application/json"),
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            ApiError::new(status, format!("reading the request body: {}", e.body_text()))
        })?;
        let value = parse_json(&bytes).map_err(|(path, message)| {
            let field = if path == "." { "body".to_string() } else { path };
            ApiError::bad_request(field, format!("invalid request body: {message}"))
        })?;
        Ok(ApiJson(value))
    }
}

/// A 200 JSON answer.
pub(crate) fn json<T: serde::Serialize>(v: T) -> Response {
    axum::Json(v).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_503_says_when_to_retry_and_other_errors_do_not() {
        let r = ApiError::unavailable("an election").into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
        assert_eq!(
            r.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            Some("application/problem+json")
        );
        for e in [ApiError::internal("disk"), ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "full")] {
            assert!(e.into_response().headers().get(header::RETRY_AFTER).is_none());
        }
    }
}
