//! HTTPS on the server's one listener (the API, the executor API and the peer RPC), and the
//! loading and reloading of its certificate and key.
//!
//! Without `[tls]` the listener serves plain HTTP as before. With it, every connection is a TLS
//! connection offering HTTP/2 and HTTP/1.1 through ALPN. Handshakes run in tasks of their own,
//! so a slow or silent client holds up nobody; a failed handshake drops its connection only. A
//! client that speaks plain HTTP to the port gets a `400` saying to use `https://` and nothing
//! from the API. [`ServerTls::reload`] reads the certificate and key again (the server does it on
//! SIGHUP): new connections use the new pair, and a pair that does not load leaves the old one in
//! place.

use crate::config::TlsConfig;
use axum::Router;
use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::server::TlsStream;

/// Longest a client may take from connecting to the end of its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most handshakes under way at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 512;

/// First byte of a TLS record carrying a handshake message (a ClientHello, from a client).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What a client that sent plain HTTP to the TLS port is told.
const PLAIN_HTTP_MESSAGE: &str = "this convoy server speaks HTTPS on this port: use https://\n";

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
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// The file holds no PEM section at all (a DER file, or something else).
    #[error("not a PEM file (expected sections such as -----BEGIN CERTIFICATE-----)")]
    NotPem,
    /// A PEM section is malformed.
    #[error("malformed PEM: {0}")]
    Pem(String),
    /// The file holds no `CERTIFICATE` section.
    #[error("no certificate in the file (expected -----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    /// The file holds no private key section.
    #[error("no private key in the file (expected a PKCS#8, PKCS#1 or SEC1 PEM key)")]
    NoKey,
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
}

/// Reads a PEM file, refusing files that hold no PEM section at all.
fn read_pem(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| TlsError::new(key, path, TlsProblem::Read(e)))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(TlsError::new(key, path, TlsProblem::NotPem));
    }
    Ok(bytes)
}

fn pem_problem(e: pem::Error) -> TlsProblem {
    TlsProblem::Pem(match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".to_string(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".to_string(),
        pem::Error::Base64Decode(m) => format!("a section is not valid base64 ({m})"),
        other => other.to_string(),
    })
}

/// The certificates of a PEM file, in order (at least one).
pub fn load_certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(key, path, pem_problem(e)))?;
    if certs.is_empty() {
        return Err(TlsError::new(key, path, TlsProblem::NoCertificate));
    }
    Ok(certs)
}

/// The first private key of a PEM file.
fn load_private_key(key: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_pem(key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        let problem = match e {
            pem::Error::NoItemsFound => TlsProblem::NoKey,
            other => pem_problem(other),
        };
        TlsError::new(key, path, problem)
    })
}

/// The CA certificates of a PEM file as trust anchors (`key` names the file in errors).
pub fn load_ca(key: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certificates(key, path)? {
        roots.add(cert).map_err(|e| TlsError::new(key, path, TlsProblem::BadCa(e)))?;
    }
    Ok(roots)
}

/// The rustls server configuration of a certificate chain and its key: ring's algorithms, safe
/// protocol versions, HTTP/2 then HTTP/1.1 offered through ALPN.
fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let chain = load_certificates("tls.cert", cert)?;
    let private = load_private_key("tls.key", key)?;
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
                tracing::error!(file = %e.path.display(), error = %e, "TLS reload failed; the previous certificate and key stay in use");
                Err(e)
            }
        }
    }

    /// The configuration new connections get.
    fn current(&self) -> Arc<rustls::ServerConfig> {
        self.inner.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for the requests under
/// way: HTTPS with `tls`, else plain HTTP. TCP_NODELAY is set on every connection.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => {
            // No Nagle: small answers (long-poll leases, SSE events) must not wait for a delayed ACK.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY");
                }
            });
            axum::serve(listener, router).with_graceful_shutdown(shutdown).await
        }
        Some(tls) => {
            let listener = TlsListener::start(listener, tls)?;
            axum::serve(listener, router).with_graceful_shutdown(shutdown).await
        }
    }
}

type Accepted = (TlsStream<TcpStream>, SocketAddr);

/// A listener whose connections have completed their TLS handshake. A task accepts TCP
/// connections and hands each to a handshake task of its own; finished handshakes queue here.
/// Dropping the listener (axum does at shutdown) stops the accepting and closes the port.
struct TlsListener {
    ready: mpsc::Receiver<Accepted>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn start(tcp: TcpListener, tls: ServerTls) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tokio::spawn(accept_loop(tcp, tls, tx));
        Ok(TlsListener { ready, local, acceptor })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> Accepted {
        match self.ready.recv().await {
            Some(conn) => conn,
            None => {
                // The accepting task is gone (it only stops when this listener is dropped).
                tracing::error!("the TLS accept task stopped; no new connections are accepted");
                std::future::pending().await
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

async fn accept_loop(tcp: TcpListener, tls: ServerTls, ready: mpsc::Sender<Accepted>) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let permit = tokio::select! {
            _ = ready.closed() => return,
            p = handshakes.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = ready.closed() => return,
            accepted = tcp.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        // No Nagle: small answers (long-poll leases, SSE events) must not wait for a delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "TCP_NODELAY");
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
        let ready = ready.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(stream, acceptor)).await {
                Ok(Ok(Some(conn))) => {
                    // Err: the server is stopping; the connection is dropped.
                    let _ = ready.send((conn, peer)).await;
                }
                Ok(Ok(None)) => tracing::debug!(%peer, "plain HTTP on the TLS port answered with 400"),
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out"),
            }
        });
    }
}

/// Errors of `accept` that concern one connection are skipped; others (out of file
/// descriptors) get a pause so the loop does not spin.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; retrying in 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The TLS handshake of one connection; `None` when the client spoke plain HTTP (it was told to
/// use HTTPS).
async fn handshake(
    stream: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
) -> std::io::Result<Option<TlsStream<TcpStream>>> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before the handshake"));
    }
    if first[0] != TLS_HANDSHAKE_RECORD && first[0].is_ascii_uppercase() {
        answer_plain_http(stream).await;
        return Ok(None);
    }
    acceptor.accept(stream).await.map(Some)
}

/// Tells a plain-HTTP client to use HTTPS, then closes. The request is read first (as far as it
/// came), so that closing does not reset the connection before the client reads the answer.
async fn answer_plain_http(mut stream: TcpStream) {
    let mut buf = [0u8; 8192];
    let _ = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{PLAIN_HTTP_MESSAGE}",
        PLAIN_HTTP_MESSAGE.len()
    );
    if stream.write_all(answer.as_bytes()).await.is_ok() {
        let _ = stream.shutdown().await;
        // Drain until the client closes (briefly), for the same reason.
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        })
        .await;
    }
}
