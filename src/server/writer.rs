//! Group commit: writes from concurrent requests are gathered into one `Command::Batch` per log
//! entry, with a few batches in flight at once, so one fsync serves many requests.

use crate::state::{Command, Response};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("this server is not the leader{}", .leader.as_ref().map(|l| format!("; the leader is {l}")).unwrap_or_default())]
    NotLeader { leader: Option<String> },
    #[error("the cluster cannot commit writes right now: {0}")]
    Unavailable(String),
    #[error("the write was not committed within the write timeout")]
    Timeout,
}

/// Something that commits a command through the replicated log and returns its response.
pub trait Replicate: Send + Sync + 'static {
    fn replicate(&self, cmd: Command) -> BoxFuture<'static, Result<Response, WriteError>>;
}

struct Pending {
    cmd: Command,
    reply: oneshot::Sender<Result<Response, WriteError>>,
}

/// Handle for proposing commands.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Pending>,
    timeout: std::time::Duration,
}

/// Most commands in one log entry.
const MAX_BATCH: usize = 512;
/// Batches being committed at once (measured: 2 beats 1 and 3 on this path).
const IN_FLIGHT: usize = 2;

impl Writer {
    /// Starts the batching task over `log`.
    pub fn start(log: Arc<dyn Replicate>, timeout: std::time::Duration) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Pending>(16 * 1024);
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(IN_FLIGHT));
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
                let log = log.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    commit(log.as_ref(), batch).await;
                });
            }
        });
        Writer { tx, timeout }
    }

    /// Commits a command and returns its response.
    pub async fn write(&self, cmd: Command) -> Result<Response, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Pending { cmd, reply }).await.map_err(|_| WriteError::Unavailable("the server is shutting down".into()))?;
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
        let tasks: Vec<_> = (0..200).map(|_| {
            let w = w.clone();
            tokio::spawn(async move { w.write(cmd()).await })
        }).collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(Response::Ok));
        }
        let entries = log.0.lock().unwrap().clone();
        assert_eq!(entries.iter().sum::<usize>(), 200);
        assert!(entries.len() < 200, "writes were batched: {entries:?}");
    }
}
