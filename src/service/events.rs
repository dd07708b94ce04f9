//! Following a job set's events: the stored ones from a sequence number on, then (when
//! following) new ones as they are applied, until the server stops. The REST API's server-sent
//! events and the gRPC `api.Event` service both follow through here; each reads the store its own
//! way (REST sends the events, gRPC Armada's messages) and renders what it reads.

use crate::control::Control;
use crate::model::{JobSetName, QueueName};
use futures::stream::{self, Stream};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// How often a follower reads again without news (news can be lost to lag).
const RECHECK: Duration = Duration::from_secs(5);

/// Where a follower stands in a job set's events.
pub(crate) struct JobSetCursor {
    /// The queue of the job set.
    pub queue: QueueName,
    /// The job set.
    pub job_set: JobSetName,
    /// The next sequence number to read.
    pub next: u64,
    /// Keep waiting for new events once the stored ones are read.
    pub follow: bool,
    /// News of job sets with new events.
    pub news: broadcast::Receiver<(QueueName, JobSetName)>,
    /// True once the server stops.
    pub stopping: watch::Receiver<bool>,
}

impl JobSetCursor {
    /// A cursor at sequence number `from` of a job set, subscribed to the server's news.
    pub(crate) fn new(app: &Control, queue: QueueName, job_set: JobSetName, from: u64, follow: bool) -> Self {
        JobSetCursor {
            queue,
            job_set,
            next: from,
            follow,
            news: app.notify.subscribe_job_sets(),
            stopping: app.shutdown.clone(),
        }
    }
}

/// The stored events could not be read from `next` on: the follower's last item.
#[derive(Debug)]
pub(crate) struct ReadFailed<E> {
    /// The sequence number the read started at (a client resumes there).
    pub next: u64,
    /// Why.
    pub error: E,
}

struct Follower<F, T> {
    cursor: JobSetCursor,
    fetch: F,
    buffer: VecDeque<T>,
    failed: bool,
}

/// The items `fetch` reads of the cursor's job set, in sequence order. `fetch(queue, job_set,
/// next)` reads a batch from sequence number `next` on, each item with its sequence number; an
/// empty batch means nothing more is stored. A failed read ends the stream with
/// [`ReadFailed`] rather than as if complete, so a client not following does not take it for
/// the whole.
pub(crate) fn follow<F, Fut, T, E>(cursor: JobSetCursor, fetch: F) -> impl Stream<Item = Result<T, ReadFailed<E>>>
where
    F: Fn(QueueName, JobSetName, u64) -> Fut,
    Fut: Future<Output = Result<Vec<(u64, T)>, E>>,
{
    let follower = Follower { cursor, fetch, buffer: VecDeque::new(), failed: false };
    stream::unfold(follower, |mut f| async move {
        if f.failed {
            return None;
        }
        loop {
            if let Some(item) = f.buffer.pop_front() {
                return Some((Ok(item), f));
            }
            let c = &mut f.cursor;
            // Drain news before reading, so none that comes after the read is missed.
            while c.news.try_recv().is_ok() {}
            let batch = match (f.fetch)(c.queue.clone(), c.job_set.clone(), c.next).await {
                Ok(batch) => batch,
                Err(error) => {
                    f.failed = true;
                    let next = f.cursor.next;
                    return Some((Err(ReadFailed { next, error }), f));
                }
            };
            if let Some((last, _)) = batch.last() {
                c.next = last + 1;
                f.buffer.extend(batch.into_iter().map(|(_, item)| item));
                continue;
            }
            if !c.follow || *c.stopping.borrow() {
                return None;
            }
            // Wait for news of this job set (or a periodic recheck), unless the server stops.
            loop {
                let news = tokio::select! {
                    n = tokio::time::timeout(RECHECK, c.news.recv()) => n,
                    _ = c.stopping.changed() => return None,
                };
                match news {
                    Ok(Ok((q, s))) if q == c.queue && s == c.job_set => break,
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) | Err(_) => break,
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                }
            }
        }
    })
}
