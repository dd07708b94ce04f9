//! Group commit: writes from concurrent requests are gathered into one `Command::Batch` per log
//! entry, so one fsync serves many requests.
//!
//! When the log tells when its appends are durable, the next batch is formed as soon as the
//! previous one is on disk, while it is still being applied: requests that arrive during an
//! append wait for it and then go together, instead of a small batch queueing behind the append
//! and costing a whole fsync of its own. Without that signal, a fixed number of batches are in
//! flight at once.

use crate::state::{Command, Rejection, Response};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

/// Why a write did not happen, or may not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WriteError {
    /// This server does not lead the cluster: nothing was proposed.
    #[error("this server is not the leader{}", .leader.as_ref().map(|l| format!("; the leader is {l}")).unwrap_or_default())]
    NotLeader {
        /// The leader's address, if one is known.
        leader: Option<String>,
    },
    /// This server leads, but no majority acknowledged it lately (it may be cut off from the
    /// others): nothing was proposed.
    #[error(
        "this server was elected leader but has not heard from a majority of the servers lately, so it takes no \
         writes; nothing was stored. Retry (on another server if this one stays cut off)"
    )]
    NoMajority,
    /// Proposed, and then this server lost its leadership or its majority before the write was
    /// committed: the next leader may still commit it, so the outcome is unknown.
    #[error(
        "this server lost its leadership (or its majority) while the write was being committed; the next leader \
         may still commit it, so retry it only with the same client_id for each job (a retry without one may \
         submit the jobs twice)"
    )]
    Interrupted,
    /// Refused before it was proposed: the data directory is (nearly) full.
    #[error(transparent)]
    DiskFull(#[from] super::disk::DiskFull),
    /// The cluster could not commit it (no quorum, Raft stopped).
    #[error("the cluster cannot commit writes right now: {0}")]
    Unavailable(String),
    /// No answer within the write timeout. The command was proposed and may still be committed:
    /// the outcome is unknown, so only a retry that is idempotent (a submission with the same
    /// client ids) is safe.
    #[error(
        "the write was not confirmed within the write timeout; it may still be committed, so retry it only \
         with the same client_id for each job (a retry without one may submit the jobs twice)"
    )]
    Timeout,
    /// Committed, and refused by the state machine (the state moved on since it was checked).
    #[error("{}", .0.message)]
    Rejected(Rejection),
}

/// Something that commits a command through the replicated log and returns its response.
pub(crate) trait Replicate: Send + Sync + 'static {
    /// Proposes `cmd` and resolves to what applying it answered, once it is committed and applied.
    fn replicate(&self, cmd: Command) -> BoxFuture<'static, Result<Response, WriteError>>;

    /// Changes each time a log append is durable, if the log can tell.
    fn log_flushed(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

struct Pending {
    cmd: Command,
    reply: oneshot::Sender<Result<Response, WriteError>>,
}

/// Handle for proposing commands.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Pending>,
    timeout: std::time::Duration,
}

/// Most commands in one log entry.
const MAX_BATCH: usize = 512;
/// Batches being committed at once when the log does not say when its appends are durable.
const IN_FLIGHT: usize = 2;

impl Writer {
    /// Starts the batching task over `log`.
    pub(crate) fn start(log: Arc<dyn Replicate>, timeout: std::time::Duration) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Pending>(16 * 1024);
        let flushed = log.log_flushed();
        tokio::spawn(async move {
            // With the flush signal one batch at a time owns the log, until it is durable.
            let slots = Arc::new(Semaphore::new(if flushed.is_some() { 1 } else { IN_FLIGHT }));
            while let Some(first) = rx.recv().await {
                // Wait for a free slot first: meanwhile more requests queue up and join the batch.
                let Ok(permit) = slots.clone().acquire_owned().await else { break };
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                let mut flushed = flushed.clone();
                if let Some(f) = flushed.as_mut() {
                    // Only appends after this batch is proposed count.
                    f.mark_unchanged();
                }
                let log = log.clone();
                tokio::spawn(async move {
                    let done = commit(log.as_ref(), batch);
                    tokio::pin!(done);
                    let Some(mut flushed) = flushed else {
                        done.await;
                        drop(permit);
                        return;
                    };
                    // The first append made durable after proposing is this batch's (or, rarely,
                    // another proposer's, which only lets the next batch go early). An error means
                    // the log is gone: stop gating on it either way.
                    tokio::select! {
                        () = &mut done => return,
                        _ = flushed.changed() => drop(permit),
                    }
                    done.await;
                });
            }
        });
        Writer { tx, timeout }
    }

    /// Commits a command and returns its response.
    pub(crate) async fn write(&self, cmd: Command) -> Result<Response, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending { cmd, reply })
            .await
            .map_err(|_| WriteError::Unavailable("the server is shutting down".into()))?;
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(WriteError::Unavailable("the write was dropped".into())),
            Err(_) => Err(WriteError::Timeout),
        }
    }
}

async fn commit(log: &dyn Replicate, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let Some(p) = batch.pop() else { return };
        let _ = p.reply.send(log.replicate(p.cmd).await);
        return;
    }
    let (cmds, replies): (Vec<Command>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    match log.replicate(Command::Batch(cmds)).await {
        Ok(Response::Batch(rs)) if rs.len() == replies.len() => {
            for (r, reply) in rs.into_iter().zip(replies) {
                let _ = reply.send(Ok(r));
            }
        }
        Ok(other) => {
            for reply in replies {
                let _ = reply.send(Err(WriteError::Unavailable(format!("unexpected batch response {other:?}"))));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every log entry and answers `Ok` per command.
    struct Log(Mutex<Vec<usize>>);

    impl Replicate for Log {
        fn replicate(&self, cmd: Command) -> BoxFuture<'static, Result<Response, WriteError>> {
            let n = match &cmd {
                Command::Batch(c) => c.len(),
                _ => 1,
            };
            if let Ok(mut v) = self.0.lock() {
                v.push(n);
            }
            Box::pin(async move {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok(match cmd {
                    Command::Batch(c) => Response::Batch(c.iter().map(|_| Response::Ok).collect()),
                    _ => Response::Ok,
                })
            })
        }
    }

    #[tokio::test]
    async fn concurrent_writes_share_log_entries() {
        let log = Arc::new(Log(Mutex::new(vec![])));
        let w = Writer::start(log.clone(), std::time::Duration::from_secs(5));
        let cmd = || Command::ExecutorLost { executor: "e".parse().unwrap(), at_ms: 0, max_attempted_runs: 1 };
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let w = w.clone();
                tokio::spawn(async move { w.write(cmd()).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(Response::Ok));
        }
        let entries = log.0.lock().unwrap().clone();
        assert_eq!(entries.iter().sum::<usize>(), 200);
        assert!(entries.len() < 200, "writes were batched: {entries:?}");
    }

    /// A log that signals durable appends; its entries complete only when the test says so.
    struct GatedLog {
        entries: Mutex<usize>,
        flushed: watch::Sender<u64>,
        release: watch::Sender<bool>,
    }

    impl Replicate for GatedLog {
        fn replicate(&self, _cmd: Command) -> BoxFuture<'static, Result<Response, WriteError>> {
            if let Ok(mut n) = self.entries.lock() {
                *n += 1;
            }
            let mut release = self.release.subscribe();
            Box::pin(async move {
                let _ = release.wait_for(|r| *r).await;
                Ok(Response::Ok)
            })
        }

        fn log_flushed(&self) -> Option<watch::Receiver<u64>> {
            Some(self.flushed.subscribe())
        }
    }

    async fn wait_entries(log: &GatedLog, n: usize) {
        for _ in 0..500 {
            if *log.entries.lock().unwrap() >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        panic!("expected {n} log entries, have {}", *log.entries.lock().unwrap());
    }

    #[tokio::test]
    async fn next_batch_waits_for_the_append_to_be_durable_not_applied() {
        let log = Arc::new(GatedLog {
            entries: Mutex::new(0),
            flushed: watch::Sender::new(0),
            release: watch::Sender::new(false),
        });
        let w = Writer::start(log.clone(), std::time::Duration::from_secs(5));
        let cmd = || Command::ExecutorLost { executor: "e".parse().unwrap(), at_ms: 0, max_attempted_runs: 1 };
        let first = tokio::spawn({
            let w = w.clone();
            async move { w.write(cmd()).await }
        });
        wait_entries(&log, 1).await;
        let second = tokio::spawn({
            let w = w.clone();
            async move { w.write(cmd()).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(*log.entries.lock().unwrap(), 1, "the second batch waits while the first is being appended");
        log.flushed.send_modify(|n| *n += 1);
        wait_entries(&log, 2).await;
        assert!(!first.is_finished(), "the second batch went before the first was applied");
        log.release.send_replace(true);
        assert_eq!(first.await.unwrap(), Ok(Response::Ok));
        assert_eq!(second.await.unwrap(), Ok(Response::Ok));
    }
}
