//! HTTP client for the executor API (`/lease`, `/events`) over one or more server addresses.
//!
//! A request goes to the current server; when that one is unreachable or unavailable the client
//! tries the next address, and the one that answers becomes current. Callers retry with
//! [`Backoff`] when every address failed.
//!
//! `https://` servers are verified against the configured CA (`ca` in the agent's config) when
//! there is one, else against the operating system's trust store (see [`crate::certs`]).

use crate::certs::{PemFileError, certificate_error, https_client};
use crate::model::ExecutorName;
use crate::model::api::{EventsRequest, EventsResponse, LeaseRequest, LeaseResponse, OutputReport, Problem};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Time allowed to open a connection to a server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for an `/events` request.
const EVENTS_TIMEOUT: Duration = Duration::from_secs(30);
/// Time a lease poll may take beyond the wait the agent asked for.
const LEASE_SLACK: Duration = Duration::from_secs(15);

/// Why a request to the servers failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A server address is not usable.
    #[error("invalid server address {address:?}: {message}")]
    BadAddress {
        /// The address as given (empty when none was).
        address: String,
        /// Why it is not usable.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Build(String),
    /// The CA file that verifies the servers is not usable.
    #[error("CA file {0}")]
    Ca(#[from] PemFileError),
    /// No connection, or the connection broke or timed out.
    #[error("cannot reach the server at {server}: {message}")]
    Unreachable {
        /// Base URL of the server.
        server: String,
        /// The connection error with its causes.
        message: String,
    },
    /// The server refused the executor token.
    #[error("the server at {server} refused this executor's token (HTTP {status}): {detail}; check `token` in the agent config or {env}", env = super::config::TOKEN_ENV)]
    Unauthorized {
        /// Base URL of the server.
        server: String,
        /// HTTP status: 401 or 403.
        status: u16,
        /// The server's explanation: its problem's title and detail, or the start of the body.
        detail: String,
    },
    /// Something answered that does not speak the executor API (wrong address or path).
    #[error("{server} does not look like a Convoy server (HTTP {status} at {path}): {detail}")]
    WrongAddress {
        /// Base URL of the server.
        server: String,
        /// HTTP status of the answer.
        status: u16,
        /// Path of the request, e.g. `/v1/executors/<executor>/lease`.
        path: String,
        /// What was wrong with the answer: its body, or why it does not decode.
        detail: String,
    },
    /// The server is up but cannot serve the request now (5xx, 429, not the leader).
    #[error("the server at {server} is unavailable (HTTP {status}): {detail}")]
    Unavailable {
        /// Base URL of the server.
        server: String,
        /// HTTP status: 408, 421, 425, 429 or 5xx.
        status: u16,
        /// The server's explanation: its problem's title and detail, or the start of the body.
        detail: String,
    },
    /// The server refused the request itself; sending it again will not help.
    #[error("the server at {server} rejected the request (HTTP {status}): {detail}")]
    Rejected {
        /// Base URL of the server.
        server: String,
        /// HTTP status of the answer.
        status: u16,
        /// The server's problem document, if it sent one.
        problem: Option<Box<Problem>>,
        /// The server's explanation: its problem's title and detail, or the start of the body.
        detail: String,
    },
}

impl ClientError {
    /// True when the request itself was refused (no other server would accept it either).
    pub fn is_rejection(&self) -> bool {
        matches!(self, ClientError::Rejected { .. })
    }

    /// True when the token was refused.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, ClientError::Unauthorized { .. })
    }
}

/// Client of the executor API of one executor.
#[derive(Debug)]
pub struct ExecutorClient {
    http: reqwest::Client,
    servers: Vec<String>,
    executor: ExecutorName,
    token: Option<String>,
    ca: Option<PathBuf>,
    current: AtomicUsize,
}

impl ExecutorClient {
    /// A client for `executor` over `servers` (base URLs), sending `token` as a bearer token;
    /// `https://` servers are verified against the operating system's trust store.
    pub fn new(servers: &[String], executor: ExecutorName, token: Option<String>) -> Result<Self, ClientError> {
        Self::with_ca(servers, executor, token, None)
    }

    /// [`ExecutorClient::new`], trusting only the CA certificates of the PEM file `ca` (when
    /// given) for `https://` servers.
    pub fn with_ca(
        servers: &[String],
        executor: ExecutorName,
        token: Option<String>,
        ca: Option<&Path>,
    ) -> Result<Self, ClientError> {
        super::install_crypto_provider();
        if servers.is_empty() {
            return Err(ClientError::BadAddress { address: String::new(), message: "no server address given".into() });
        }
        let mut bases = Vec::with_capacity(servers.len());
        for s in servers {
            let url = reqwest::Url::parse(s)
                .map_err(|e| ClientError::BadAddress { address: s.clone(), message: e.to_string() })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ClientError::BadAddress {
                    address: s.clone(),
                    message: "the scheme must be http or https".into(),
                });
            }
            bases.push(s.trim_end_matches('/').to_string());
        }
        let builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("convoy-agent/", env!("CARGO_PKG_VERSION")));
        let http = https_client(builder, ca)?.build().map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(Self { http, servers: bases, executor, token, ca: ca.map(Path::to_path_buf), current: AtomicUsize::new(0) })
    }

    /// The base URL requests go to first.
    pub fn current_server(&self) -> &str {
        &self.servers[self.current.load(Ordering::Relaxed) % self.servers.len()]
    }

    /// `POST /v1/executors/{executor}/lease`: long-polls for leases and kill orders.
    pub async fn lease(&self, req: &LeaseRequest) -> Result<LeaseResponse, ClientError> {
        let wait = Duration::from_secs_f64(req.wait_seconds.unwrap_or(30.0).clamp(0.0, 60.0));
        self.post("lease", req, wait + LEASE_SLACK).await
    }

    /// `POST /v1/executors/{executor}/events`: reports run events.
    pub async fn events(&self, req: &EventsRequest) -> Result<EventsResponse, ClientError> {
        self.post("events", req, EVENTS_TIMEOUT).await
    }

    /// `POST /v1/executors/{executor}/output`: sends followed output.
    pub async fn output(&self, req: &OutputReport) -> Result<EventsResponse, ClientError> {
        self.post("output", req, EVENTS_TIMEOUT).await
    }

    /// Sends the request to the current server, then to each other one until one answers.
    async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        endpoint: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, ClientError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| ClientError::Build(format!("encoding the {endpoint} request: {e}")))?;
        let n = self.servers.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last_error = None;
        for step in 0..n {
            let idx = (first + step) % n;
            match self.post_one(idx, endpoint, bytes.clone(), timeout).await {
                Ok(resp) => {
                    if idx != first {
                        tracing::info!(server = %self.servers[idx], executor = %self.executor, "switched to another server");
                        self.current.store(idx, Ordering::Relaxed);
                    }
                    return Ok(resp);
                }
                Err(e) if e.is_rejection() => return Err(e),
                Err(e) => {
                    if n > 1 {
                        tracing::warn!(server = %self.servers[idx], executor = %self.executor, error = %e, "server failed; trying the next one");
                    }
                    last_error = Some(e);
                }
            }
        }
        // Start the next attempt at the address after the one that failed first.
        self.current.store((first + 1) % n, Ordering::Relaxed);
        Err(last_error.unwrap_or_else(|| ClientError::Build("no server address".into())))
    }

    async fn post_one<Resp: DeserializeOwned>(
        &self,
        idx: usize,
        endpoint: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Resp, ClientError> {
        let server = &self.servers[idx];
        let path = format!("/v1/executors/{}/{endpoint}", self.executor);
        let mut rb = self
            .http
            .post(format!("{server}{path}"))
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body);
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| ClientError::Unreachable { server: server.clone(), message: self.explain(&e) })?;
        let status = resp.status();
        let is_problem = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/problem+json") || ct.starts_with("application/json"));
        let text = resp
            .text()
            .await
            .map_err(|e| ClientError::Unreachable { server: server.clone(), message: error_chain(&e) })?;
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|e| ClientError::WrongAddress {
                server: server.clone(),
                status: status.as_u16(),
                path: path.clone(),
                detail: format!("unexpected answer body ({e}): {}", snippet(&text)),
            });
        }
        let problem: Option<Problem> = if is_problem { serde_json::from_str(&text).ok() } else { None };
        let detail = match &problem {
            Some(p) => format!("{}: {}", p.title, p.detail),
            None => snippet(&text),
        };
        let code = status.as_u16();
        Err(match code {
            401 | 403 => ClientError::Unauthorized { server: server.clone(), status: code, detail },
            404 | 405 if problem.is_none() => {
                ClientError::WrongAddress { server: server.clone(), status: code, path, detail }
            }
            408 | 421 | 425 | 429 | 500..=599 => {
                ClientError::Unavailable { server: server.clone(), status: code, detail }
            }
            _ => ClientError::Rejected { server: server.clone(), status: code, problem: problem.map(Box::new), detail },
        })
    }
}

impl ExecutorClient {
    /// The error chain of a failed request, with what to do when the server's certificate was
    /// not trusted.
    fn explain(&self, e: &reqwest::Error) -> String {
        let chain = error_chain(e);
        if certificate_error(e).is_none() {
            return chain;
        }
        match &self.ca {
            Some(ca) => format!("{chain} (the server's certificate is not trusted by the CA in {})", ca.display()),
            None => format!(
                "{chain} (the server's certificate is not trusted: set `ca` in the agent config to the CA certificate that signed it)"
            ),
        }
    }
}

/// An error with its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn snippet(text: &str) -> String {
    let t = text.trim();
    if t.is_empty() {
        return "(empty body)".to_string();
    }
    let mut end = t.len().min(200);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_string()
}

/// Exponential backoff with jitter between retries.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses from `min`, doubling up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self { min, max: max.max(min), next: min }
    }

    /// The next pause (with ±20 % jitter so agents do not retry in step).
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        let jitter = 0.8 + 0.4 * random_fraction();
        base.mul_f64(jitter).min(self.max)
    }

    /// Back to the shortest pause after a success.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

/// A number in [0, 1) that differs between calls (good enough for jitter).
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(80) && d[0] <= Duration::from_millis(120), "{d:?}");
        assert!(d[5] <= Duration::from_secs(1) && d[5] >= Duration::from_millis(800), "{d:?}");
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(120));
    }

    #[test]
    fn bad_addresses_are_refused() {
        let e = ExecutorClient::new(&["not a url".into()], ExecutorName::default_executor(), None).unwrap_err();
        assert!(e.to_string().contains("not a url"), "{e}");
        let e = ExecutorClient::new(&["ftp://x".into()], ExecutorName::default_executor(), None).unwrap_err();
        assert!(e.to_string().contains("http or https"), "{e}");
    }
}
