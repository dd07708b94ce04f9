//! The fields of Armada's requests as Convoy's values: each refusal is INVALID_ARGUMENT naming
//! the field as Armada's request spells it.

use super::pb;
use super::required;
use crate::model::{JobSetName, JobState, QueueName};
use tonic::Status;

pub(super) fn invalid(field: impl std::fmt::Display, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {message}"))
}

/// A queue name of a request, INVALID_ARGUMENT naming `field` if it is not one.
pub(super) fn queue_name(field: &str, value: &str) -> Result<QueueName, Status> {
    QueueName::new(required(field, value)?).map_err(|e| invalid(field, e))
}

/// A job set name of a request, INVALID_ARGUMENT naming `field` if it is not one.
pub(super) fn job_set_name(field: &str, value: &str) -> Result<JobSetName, Status> {
    JobSetName::new(required(field, value)?).map_err(|e| invalid(field, e))
}

/// Armada's job state `s` of the request field `field` as Convoy's live state: INVALID_ARGUMENT
/// naming the field for a finished state or a number that is not a state.
pub(super) fn cancellable_state_at(field: String, s: i32) -> Result<JobState, Status> {
    match pb::JobState::try_from(s) {
        Ok(pb::JobState::Queued | pb::JobState::Submitted) => Ok(JobState::Queued),
        Ok(pb::JobState::Leased) => Ok(JobState::Leased),
        Ok(pb::JobState::Pending) => Ok(JobState::Pending),
        Ok(pb::JobState::Running) => Ok(JobState::Running),
        Ok(other) => Err(invalid(field, format!("{} jobs cannot be cancelled", other.as_str_name()))),
        Err(_) => Err(invalid(field, format!("{s} is not a job state"))),
    }
}
