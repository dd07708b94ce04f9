//! The HTTP side of the client verbs: the server's address and token, answers decoded into the
//! API's types, and refusals decoded from their problem+json bodies.

use super::ClientArgs;
use anyhow::Context;
use convoy::certs::{certificate_error, https_client};
use convoy::model::api::Problem;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Why a request gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum RequestError {
    /// No answer: the server is down, unreachable, or the connection broke.
    #[error("cannot reach the convoy server at {base}")]
    Unreachable {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server's TLS certificate was refused: not signed by the trusted CA, expired, or issued
    /// for another name.
    #[error("the convoy server at {base} presented a certificate that is not trusted ({problem}); {hint}")]
    Untrusted { base: String, problem: String, hint: String },
    /// The server refused the request; its problem body names the field when there is one.
    #[error("{}", refusal(*status, problem.as_ref(), text))]
    Refused { status: StatusCode, problem: Option<Problem>, text: String },
    /// The answer is not what this client expects (a server of another version?).
    #[error("unexpected answer to {what}: {message}")]
    Unexpected { what: String, message: String },
}

impl RequestError {
    /// True when the request may not have been carried out and sending it again is the way to
    /// find out: no answer, or 503 (no leader, or the write was not confirmed in time).
    pub(super) fn is_retryable(&self) -> bool {
        match self {
            RequestError::Unreachable { .. } => true,
            RequestError::Untrusted { .. } => false,
            RequestError::Refused { status, .. } => *status == StatusCode::SERVICE_UNAVAILABLE,
            RequestError::Unexpected { .. } => false,
        }
    }
}

/// `503 Service Unavailable: jobs[2].pod_spec: …`, as the server's problem body has it.
fn refusal(status: StatusCode, problem: Option<&Problem>, text: &str) -> String {
    match problem {
        Some(Problem { field: Some(f), detail, .. }) => format!("{status}: {f}: {detail}"),
        Some(p) => format!("{status}: {}", p.detail),
        None if text.trim().is_empty() => status.to_string(),
        None => format!("{status}: {}", text.trim()),
    }
}

/// A client of the servers of one cluster: requests go to the current one; when it cannot be
/// reached (no connection, so the request was not sent), the next one is tried and becomes
/// current. Any member answers every request, so which one does not matter.
pub(super) struct Client {
    http: reqwest::Client,
    bases: Vec<String>,
    current: AtomicUsize,
    token: Option<String>,
    ca: Option<PathBuf>,
}

impl Client {
    pub(super) fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        let bases: Vec<String> = args
            .server
            .split(',')
            .map(|s| s.trim().trim_end_matches('/').to_string())
            .filter(|s| !s.is_empty())
            .collect();
        anyhow::ensure!(!bases.is_empty(), "--server (CONVOY_SERVER): no server address given");
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        // Reading the operating system's trust store (hundreds of files) was most of a short
        // command's time: skip it when no server is reached over TLS.
        let plain = args.ca.is_none() && bases.iter().all(|b| b.starts_with("http://"));
        let builder = if plain {
            builder.tls_certs_only(Vec::new())
        } else {
            https_client(builder, args.ca.as_deref()).context("--ca (CONVOY_CA)")?
        };
        Ok(Client {
            http: builder.build()?,
            bases,
            current: AtomicUsize::new(0),
            token: args.token.clone(),
            ca: args.ca.clone(),
        })
    }

    /// The server requests go to now.
    fn base(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// The error of a request that got no answer: a refused certificate says what to do.
    fn unreachable(&self, source: reqwest::Error) -> RequestError {
        let Some(problem) = certificate_error(&source) else {
            return RequestError::Unreachable { base: self.bases.join(", "), source };
        };
        let hint = match &self.ca {
            Some(ca) => format!("it is not signed by the CA in {}", ca.display()),
            None => "pass the CA certificate that signed it with --ca FILE or CONVOY_CA".to_string(),
        };
        RequestError::Untrusted { base: self.base().to_string(), problem: problem.to_string(), hint }
    }

    /// The same client (connections, token, trust) for the server at `base`.
    pub(super) fn with_base(&self, base: &str) -> Client {
        Client {
            http: self.http.clone(),
            bases: vec![base.trim_end_matches('/').to_string()],
            current: AtomicUsize::new(0),
            token: self.token.clone(),
            ca: self.ca.clone(),
        }
    }

    /// A request to `path` (which starts with `/`), with the token when there is one.
    pub(super) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base()));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// Sends `r`; a success answer as it came, anything else as an error.
    pub(super) async fn send_raw(&self, r: RequestBuilder) -> Result<reqwest::Response, RequestError> {
        let resp = self.send_to_any(r).await.map_err(|source| self.unreachable(source))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let problem = serde_json::from_str::<Problem>(&text).ok();
        Err(RequestError::Refused { status, problem, text })
    }

    /// Sends `r` to the current server, and on to the next ones while the connection fails.
    async fn send_to_any(&self, r: RequestBuilder) -> Result<reqwest::Response, reqwest::Error> {
        let request = r.build()?;
        let n = self.bases.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        // The path and query, after whichever base the request was made for.
        let url = request.url().to_string();
        let rest = self.bases.iter().find_map(|b| url.strip_prefix(b.as_str())).map(str::to_string);
        let (Some(rest), true) = (rest, n > 1) else { return self.http.execute(request).await };
        for step in 0..n {
            let idx = (first + step) % n;
            let Some(mut attempt) = request.try_clone() else { break };
            if let Ok(u) = reqwest::Url::parse(&format!("{}{rest}", self.bases[idx])) {
                *attempt.url_mut() = u;
            }
            match self.http.execute(attempt).await {
                Ok(resp) => {
                    self.current.store(idx, Ordering::Relaxed);
                    return Ok(resp);
                }
                // Not connected: the request never reached that server, so another may take it.
                Err(e) if e.is_connect() && step + 1 < n => {
                    tracing::debug!(server = %self.bases[idx], error = %e, "server unreachable; trying the next");
                }
                Err(e) => return Err(e),
            }
        }
        self.http.execute(request).await
    }

    /// Sends `r` and decodes the answer's body as `T`.
    pub(super) async fn send<T: DeserializeOwned>(&self, r: RequestBuilder, what: &str) -> Result<T, RequestError> {
        let resp = self.send_raw(r).await?;
        let bytes =
            resp.bytes().await.map_err(|source| RequestError::Unreachable { base: self.base().to_string(), source })?;
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(de).map_err(|e| RequestError::Unexpected {
            what: what.to_string(),
            message: format!("{}: {}", e.path(), e.inner()),
        })
    }

    /// `GET path`, decoded as `T`. A read changes nothing, so it is sent again while the answer
    /// is worth retrying (no server reachable, or 503 during an election), a few times.
    pub(super) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, RequestError> {
        let what = format!("GET {path}");
        let mut pause = READ_RETRY.first_pause;
        let mut attempt = 1;
        loop {
            match self.send(self.request(Method::GET, path), &what).await {
                Err(e) if e.is_retryable() && attempt < READ_RETRY.attempts => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(READ_RETRY.max_pause);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// `method path` with a JSON body, the answer decoded as `T`.
    pub(super) async fn send_json<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, RequestError> {
        let what = format!("{method} {path}");
        self.send(self.request(method, path).json(body), &what).await
    }
}

/// Retries of reads: about 6 s in all, longer than an election.
const READ_RETRY: Retry =
    Retry { attempts: 5, first_pause: Duration::from_millis(200), max_pause: Duration::from_secs(2) };

/// How often a request is sent before giving up, and the pauses between: `first_pause`,
/// doubling up to `max_pause`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Retry {
    pub attempts: u32,
    pub first_pause: Duration,
    pub max_pause: Duration,
}

impl Client {
    /// Sends the same JSON body (`body`, serialized once) to `method path` until an answer is not
    /// worth retrying ([`RequestError::is_retryable`]) or `retry.attempts` were made. Only for
    /// requests that are safe to repeat, such as submissions whose jobs all carry client ids.
    pub(super) async fn send_json_retrying<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
        retry: Retry,
    ) -> Result<T, RequestError> {
        let what = format!("{method} {path}");
        let mut pause = retry.first_pause;
        let mut attempt = 1;
        loop {
            let r = self.request(method.clone(), path).header("content-type", "application/json").body(body.clone());
            match self.send(r, &what).await {
                Err(e) if e.is_retryable() && attempt < retry.attempts => {
                    let cause = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
                    eprintln!(
                        "{what} not confirmed ({e}{cause}); sending it again in {pause:?} (attempt {} of {})",
                        attempt + 1,
                        retry.attempts
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(retry.max_pause);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Prints an answer as indented JSON.
pub(super) fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
