//! The background tasks a runtime owns (run watchers, sweepers): spawned in the caller's tracing
//! span, reaped as they finish, and aborted when the runtime is dropped.

use std::future::Future;
use std::sync::Mutex;
use tokio::task::JoinSet;

/// Tasks that live no longer than their owner.
#[derive(Default)]
pub(crate) struct OwnedTasks(Mutex<JoinSet<()>>);

impl OwnedTasks {
    /// Spawns `fut`, dropping the handles of tasks that have finished.
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        while tasks.try_join_next().is_some() {}
        tasks.spawn(tracing::Instrument::in_current_span(fut));
    }
}

impl Drop for OwnedTasks {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).abort_all();
    }
}
