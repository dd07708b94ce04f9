//! HTTPS on the server's one listener (the API, the executor API and the peer RPC): loading and
//! reloading its certificate and key, and the listener itself (module `listener`).
//!
//! Without `[tls]` the listener serves plain HTTP as before. With it, every connection is a TLS
//! connection (rustls with ring's algorithms) offering HTTP/2 and HTTP/1.1 through ALPN.
//! [`ServerTls::reload`] reads the certificate and key again (the server does it on SIGHUP): new
//! connections use the new pair, and a pair that does not load leaves the old one in place.

mod listener;

pub(crate) use listener::serve;

use crate::certs::server_config;
use crate::config::TlsConfig;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

pub(super) use crate::certs::TlsError;

/// Checks that every file of `[tls]` loads: the certificate chain, its key (and that they
/// match), and the CA.
#[cfg(test)]
fn check(config: &TlsConfig) -> Result<(), TlsError> {
    crate::certs::check_server_files(&config.cert, &config.key, config.ca.as_deref())
}

/// The listener's certificate and key, reloadable. Clones share them.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Inner>,
}

struct Inner {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("cert", &self.inner.cert).field("key", &self.inner.key).finish()
    }
}

impl ServerTls {
    /// Loads the certificate chain and key named by `config`.
    pub fn load(config: &TlsConfig) -> Result<Self, TlsError> {
        let current = server_config(&config.cert, &config.key)?;
        Ok(ServerTls {
            inner: Arc::new(Inner {
                cert: config.cert.clone(),
                key: config.key.clone(),
                current: RwLock::new(Arc::new(current)),
            }),
        })
    }

    /// Reads the certificate and key again from their files; connections accepted afterwards use
    /// them. When they do not load, the previous pair stays in use and the error (naming the
    /// file) is logged and returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        match server_config(&self.inner.cert, &self.inner.key) {
            Ok(config) => {
                *self.inner.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
                tracing::info!(cert = %self.inner.cert.display(), key = %self.inner.key.display(), "TLS certificate and key reloaded");
                Ok(())
            }
            Err(e) => {
                tracing::error!(key = e.key, file = %e.path.display(), error = %e, "TLS reload failed; the previous certificate and key stay in use");
                Err(e)
            }
        }
    }

    /// The configuration new connections get.
    fn current(&self) -> Arc<rustls::ServerConfig> {
        self.inner.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests;
