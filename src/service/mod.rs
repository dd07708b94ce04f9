//! What Convoy does for a caller, whatever the transport: submit, cancel, reprioritize and
//! preempt jobs, read jobs and their output, queue operations, nodes, and the access checks in
//! front of them. The REST API ([`crate::api`]), the gRPC API ([`crate::grpc`]) and the web UI
//! ([`crate::ui`]) are peers over this layer: each parses its own requests, calls the same
//! operation, and maps the one domain error ([`ServiceError`]) in one place.
//!
//! An operation checks the request, writes one command through [`crate::control::Control`] (the
//! state machine decides the rest), and answers in the API's types ([`crate::model::api`]).

pub(crate) mod access;
pub(crate) mod data_dir;
mod error;
pub(crate) mod events;
pub(crate) mod executors;
mod job_policy;
pub(crate) mod jobs;
pub(crate) mod metrics;
pub(crate) mod nodes;
pub(crate) mod output;
pub(crate) mod queues;
pub(crate) mod replay;
pub(crate) mod scenario;
pub(crate) mod validate;
pub(crate) mod why;

pub use data_dir::DataDirError;
pub(crate) use error::{ErrorKind, ServiceError, error_chain};
