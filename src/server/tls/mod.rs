//! HTTPS on the server's one listener (the API, the executor API and the peer RPC): loading and
//! reloading its certificate and key, and the listener itself (module `listener`).
//!
//! Without `[tls]` the listener serves plain HTTP as before. With it, every connection is a TLS
//! connection (rustls with ring's algorithms) offering HTTP/2 and HTTP/1.1 through ALPN.
//! [`ServerTls::reload`] reads the certificate and key again (the server does it on SIGHUP): new
//! connections use the new pair, and a pair that does not load leaves the old one in place.

mod listener;

pub(crate) use listener::serve;

use crate::certs::{PemFileError, PemProblem, read_certificates, read_private_key};
use crate::config::TlsConfig;
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

/// Why a TLS file could not be used: the config key (`tls.cert`, `tls.key`, `tls.ca`), its file
/// and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {}: {problem}", path.display())]
pub struct TlsError {
    /// The config key naming the file.
    pub key: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: TlsProblem,
}

/// What is wrong with a TLS file.
#[derive(Debug, thiserror::Error)]
pub enum TlsProblem {
    /// The file cannot be read as PEM, or holds nothing of the kind expected.
    #[error(transparent)]
    Pem(PemProblem),
    /// The key is not the one of the certificate.
    #[error("the key does not match the certificate in {}", .0.display())]
    KeyMismatch(PathBuf),
    /// A certificate could not be used as a trust anchor.
    #[error("not a usable CA certificate: {0}")]
    BadCa(rustls::Error),
    /// rustls refused the certificate or the key (e.g. an unsupported key type).
    #[error("refused by rustls: {0}")]
    Rustls(rustls::Error),
}

impl TlsError {
    fn new(key: &'static str, path: &Path, problem: TlsProblem) -> Self {
        TlsError { key, path: path.to_path_buf(), problem }
    }

    fn pem(key: &'static str, e: PemFileError) -> Self {
        TlsError { key, path: e.path, problem: TlsProblem::Pem(e.problem) }
    }
}

/// The CA certificates of a PEM file as trust anchors (`key` names the file in errors).
pub fn load_ca(key: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(path).map_err(|e| TlsError::pem(key, e))? {
        roots.add(cert).map_err(|e| TlsError::new(key, path, TlsProblem::BadCa(e)))?;
    }
    Ok(roots)
}

/// The rustls server configuration of a certificate chain and its key: ring's algorithms, safe
/// protocol versions, HTTP/2 then HTTP/1.1 offered through ALPN.
fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let chain = read_certificates(cert).map_err(|e| TlsError::pem("tls.cert", e))?;
    let private = read_private_key(key).map_err(|e| TlsError::pem("tls.key", e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("tls.cert", cert, TlsProblem::Rustls(e)))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                TlsError::new("tls.key", key, TlsProblem::KeyMismatch(cert.to_path_buf()))
            }
            // An unreadable certificate shows as a bad end-entity certificate, anything else is
            // about the key (its type or encoding).
            rustls::Error::InvalidCertificate(_) => TlsError::new("tls.cert", cert, TlsProblem::Rustls(e)),
            other => TlsError::new("tls.key", key, TlsProblem::Rustls(other)),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Checks that every file of `[tls]` loads: the certificate chain, its key (and that they
/// match), and the CA.
pub fn check(config: &TlsConfig) -> Result<(), TlsError> {
    server_config(&config.cert, &config.key)?;
    if let Some(ca) = &config.ca {
        load_ca("tls.ca", ca)?;
    }
    Ok(())
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
