//! What a service operation answers when it refuses or fails: a kind that says what went wrong in
//! the domain's terms, the words for people, and the field of the request at fault. Each
//! transport maps the kind once: REST to an HTTP status (`api::problem`), gRPC to a status code
//! (`grpc::status`), the web UI to a page.

use crate::model::FieldError;

/// What kind of refusal or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The request breaks a rule (a field's value, a combination of fields).
    Invalid,
    /// No valid credentials.
    Unauthenticated,
    /// The caller may not do this.
    Forbidden,
    /// What the request names does not exist.
    NotFound,
    /// The request conflicts with the state (a queue that exists, jobs that are not finished).
    Conflict,
    /// The cluster cannot serve it now (no leader, no majority, a write cut short): retry.
    Unavailable,
    /// The data directory is below its reserve: writes wait for space.
    InsufficientStorage,
    /// The server failed (storage, a bug).
    Internal,
}

impl ErrorKind {
    /// The HTTP status of this kind, for the transports that speak HTTP (the REST API and the web
    /// UI): the one table of it.
    pub(crate) fn http_status(self) -> u16 {
        match self {
            ErrorKind::Invalid => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::Unavailable => 503,
            ErrorKind::InsufficientStorage => 507,
            ErrorKind::Internal => 500,
        }
    }
}

/// A refusal or failure of a service operation.
#[derive(Debug, Clone)]
pub(crate) struct ServiceError {
    /// What kind.
    pub kind: ErrorKind,
    /// What went wrong, for people.
    pub detail: String,
    /// The offending field of the request, as a path (`jobs[3].pod_spec.containers[0]`).
    pub field: Option<String>,
}

impl ServiceError {
    /// An error about no field in particular.
    pub(crate) fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        ServiceError { kind, detail: detail.into(), field: None }
    }
    /// An error about `field`.
    pub(crate) fn field(kind: ErrorKind, field: impl Into<String>, detail: impl Into<String>) -> Self {
        ServiceError { kind, detail: detail.into(), field: Some(field.into()) }
    }
    /// `field` breaks a rule.
    pub(crate) fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::field(ErrorKind::Invalid, field, detail)
    }
    /// What the request names does not exist.
    pub(crate) fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, detail)
    }
    /// The cluster cannot serve the request now.
    pub(crate) fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, detail)
    }
    /// The server failed.
    pub(crate) fn internal(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, detail)
    }
    /// The caller may not do this.
    pub(crate) fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, detail)
    }
    /// No valid credentials.
    pub(crate) fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, detail)
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {}", self.detail),
            None => f.write_str(&self.detail),
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<FieldError> for ServiceError {
    fn from(e: FieldError) -> Self {
        ServiceError::invalid(e.field, e.message)
    }
}

/// An error and its causes on one line (`a: b: c`).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

impl From<crate::store::StoreError> for ServiceError {
    fn from(e: crate::store::StoreError) -> Self {
        let chain = error_chain(&e);
        tracing::error!(error = %chain, "storage error");
        ServiceError::internal(format!("storage error: {chain}"))
    }
}

impl From<crate::control::WriteError> for ServiceError {
    fn from(e: crate::control::WriteError) -> Self {
        use crate::control::WriteError;
        match e {
            WriteError::Rejected(r) => r.into(),
            WriteError::DiskFull(d) => ServiceError::new(ErrorKind::InsufficientStorage, d.to_string()),
            WriteError::NotLeader { leader: Some(l) } => {
                ServiceError::unavailable(format!("this server is not the leader; send writes to {l}"))
            }
            WriteError::NotLeader { leader: None } => {
                ServiceError::unavailable("no leader is elected yet; retry shortly")
            }
            e @ (WriteError::Unavailable(_)
            | WriteError::Timeout
            | WriteError::NoMajority
            | WriteError::Interrupted) => ServiceError::unavailable(e.to_string()),
        }
    }
}

impl From<crate::state::Rejection> for ServiceError {
    fn from(r: crate::state::Rejection) -> Self {
        let kind = match r.kind {
            crate::state::RejectKind::Invalid => ErrorKind::Invalid,
            crate::state::RejectKind::NotFound => ErrorKind::NotFound,
            crate::state::RejectKind::Conflict => ErrorKind::Conflict,
        };
        ServiceError { kind, detail: r.message, field: r.field }
    }
}
