//! Tests of the `raft` module: openraft's storage conformance suite, restart, codec, snapshot
//! files, and three-node clusters over real HTTP (one with the server's own state machine, caught
//! up by snapshot).

mod catch_up;
mod cluster;
mod storage;
pub(crate) mod test_state;

/// Installs the process-wide rustls provider reqwest needs (the binary does this in `main`).
pub(crate) fn install_crypto_provider() {
    // Another test may have installed it already: that is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Opens (or creates) the redb file at `path`. A database dropped a moment ago may still be held
/// by a Raft task that is winding down, so "already open" is retried for a while.
pub(crate) async fn open_db(path: &std::path::Path) -> std::sync::Arc<redb::Database> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match redb::Database::create(path) {
            Ok(db) => return std::sync::Arc::new(db),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot open {}: {e}", path.display()),
        }
    }
}

/// The snapshot directory of the member whose database is at `db_path`.
pub(crate) fn snapshots(db_path: &std::path::Path) -> std::path::PathBuf {
    db_path.with_extension("snapshots")
}

/// A member's peer RPC server in a test: stopped with [`Serving::stop`].
pub(crate) struct Serving {
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

/// Serves `router` on `listener` until stopped.
pub(crate) fn serve(listener: tokio::net::TcpListener, router: axum::Router) -> Serving {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "test raft server failed");
        }
    });
    Serving { stop, server }
}

impl Serving {
    /// Stops the node's Raft, then its server, as a crash would look to its peers.
    pub(crate) async fn stop(self, node: &super::RaftNode) {
        node.shutdown().await.expect("raft shuts down");
        let _ = self.stop.send(());
        let mut server = self.server;
        if tokio::time::timeout(std::time::Duration::from_secs(5), &mut server).await.is_err() {
            server.abort();
            let _ = server.await;
        }
    }
}

/// Waits up to `within` for `f` to return `Some`, polling.
pub(crate) async fn eventually<T, F, Fut>(what: &str, within: std::time::Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
