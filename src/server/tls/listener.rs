//! The listener: plain HTTP, or TLS connections offering HTTP/2 and HTTP/1.1 through ALPN.
//!
//! Handshakes run in tasks of their own, so a slow or silent client holds up nobody; a failed
//! handshake drops its connection only. A client that speaks plain HTTP to a TLS port gets a
//! `400` saying to use `https://` and nothing from the API. Each handshake takes the certificate
//! that is current when its connection is accepted, so a reload reaches new connections while the
//! listener and the connections already open carry on.

use super::ServerTls;
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
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
