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
