//! `api.Jobs`: job states as Armada's. A job the store does not hold (never submitted, or
//! deleted after `job_retention`) is UNKNOWN, not an error, as Armada answers.

use super::pb::{self, jobs_server::Jobs};
use super::principal;
use crate::control::Control;
use crate::model::{JobId, JobState};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The `api.Jobs` service.
pub struct JobsService(pub Arc<Control>);

/// Most job ids one GetJobStatus may ask about.
const MAX_IDS: usize = 10_000;

/// Armada's state of a Convoy job state.
pub fn armada_state(s: JobState) -> pb::JobState {
    match s {
        JobState::Queued => pb::JobState::Queued,
        JobState::Leased => pb::JobState::Leased,
        JobState::Pending => pb::JobState::Pending,
        JobState::Running => pb::JobState::Running,
        JobState::Succeeded => pb::JobState::Succeeded,
        JobState::Failed => pb::JobState::Failed,
        JobState::Cancelled => pb::JobState::Cancelled,
        JobState::Preempted => pb::JobState::Preempted,
    }
}

#[tonic::async_trait]
impl Jobs for JobsService {
    async fn get_job_status(
        &self,
        request: Request<pb::JobStatusRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        principal(&self.0, &request)?;
        let ids = request.into_inner().job_ids;
        if ids.len() > MAX_IDS {
            return Err(Status::invalid_argument(format!("job_ids: at most {MAX_IDS} ids per request")));
        }
        let store = self.0.store.clone();
        let states = tokio::task::spawn_blocking(move || -> Result<_, crate::store::StoreError> {
            let mut states = std::collections::HashMap::new();
            for id in ids {
                // An id that is not a job id names no job: UNKNOWN too.
                let state = match id.parse::<JobId>() {
                    Ok(job) => store.job(job)?.map_or(pb::JobState::Unknown, |j| armada_state(j.state)),
                    Err(_) => pb::JobState::Unknown,
                };
                states.insert(id, state as i32);
            }
            Ok(states)
        })
        .await
        .map_err(|e| Status::internal(format!("the read task failed: {e}")))?
        .map_err(|e| Status::internal(format!("reading jobs failed: {e}")))?;
        Ok(Response::new(pb::JobStatusResponse { job_states: states }))
    }
}
