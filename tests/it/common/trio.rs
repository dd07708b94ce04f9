//! Three (or more) `convoy server` processes forming one Raft cluster on 127.0.0.1, with an
//! optional fault proxy in front of each server's peer traffic.
//!
//! Each member listens on its own port (the API the tests and agents use). Its peers reach it at
//! its *peer address*: the same port, or, with [`Trio::start_with_proxy`], a proxy in this test
//! process that forwards to it and can cut nodes off ([`FaultProxy::isolate`]). Peer RPCs name
//! their sender (`x-convoy-sender-node`), so a proxy can drop everything an isolated node sends
//! as well as everything sent to it: a real partition, while clients still reach every server.

use super::procs::{config_on_port, free_port};
use super::{Api, Server};
use serde_json::Value;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One member: its id, ports, data dir and (while running) its process.
pub(crate) struct Member {
    pub id: u64,
    pub port: u16,
    pub peer_port: u16,
    pub dir: PathBuf,
    pub config: String,
    pub server: Option<Server>,
}

impl Member {
    /// The running server (panics if it is stopped).
    pub(crate) fn api(&self) -> &Server {
        self.server.as_ref().unwrap_or_else(|| panic!("member {} is not running", self.id))
    }

    /// Starts (or restarts) the member's process with its configuration.
    pub(crate) fn start(&mut self) {
        assert!(self.server.is_none(), "member {} runs already", self.id);
        self.server = Some(Server::start_in(&self.dir, &self.config));
    }

    /// kill -9.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill9();
        }
    }

    /// The member's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// A cluster of servers in one temporary directory.
pub(crate) struct Trio {
    pub members: Vec<Member>,
    pub proxy: Option<FaultProxy>,
    _tmp: tempfile::TempDir,
}

/// `[cluster]` timings and anything else the tests add to every member's `[server]` section.
const SERVER_EXTRA: &str = "";

impl Trio {
    /// Starts `n` servers whose configurations list each other as peers.
    pub(crate) async fn start(n: u64) -> Trio {
        Self::start_opts(n, false, "").await
    }

    /// Like [`start`](Self::start), with peer traffic through a [`FaultProxy`].
    pub(crate) async fn start_with_proxy(n: u64) -> Trio {
        Self::start_opts(n, true, "").await
    }

    /// `cluster_extra` goes into every member's `[cluster]` section.
    pub(crate) async fn start_opts(n: u64, proxied: bool, cluster_extra: &str) -> Trio {
        Self::start_configured(n, proxied, "", cluster_extra).await
    }

    /// `server_extra` goes into every member's `[server]` section, `cluster_extra` into its
    /// `[cluster]` section.
    pub(crate) async fn start_configured(n: u64, proxied: bool, server_extra: &str, cluster_extra: &str) -> Trio {
        let mut trio = Self::prepare(n, proxied, server_extra, cluster_extra).await;
        trio.start_all();
        trio
    }

    /// [`start_configured`](Self::start_configured) without starting the servers: the test
    /// prepares their directories first, then calls [`start_all`](Self::start_all).
    pub(crate) async fn prepare(n: u64, proxied: bool, server_extra: &str, cluster_extra: &str) -> Trio {
        let tmp = tempfile::tempdir().expect("temp dir");
        let ids: Vec<u64> = (1..=n).collect();
        let ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
        let peer_ports: Vec<u16> = if proxied { ids.iter().map(|_| free_port()).collect() } else { ports.clone() };
        let proxy = if proxied {
            let routes = ids.iter().zip(&peer_ports).zip(&ports).map(|((id, pp), p)| (*id, *pp, *p)).collect();
            Some(FaultProxy::start(routes).await)
        } else {
            None
        };
        let peers = peers_toml(&ids, &peer_ports);
        let mut members = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let dir = tmp.path().join(format!("node-{id}"));
            std::fs::create_dir_all(&dir).expect("member dir");
            let config = member_config_with(&dir, *id, ports[i], peer_ports[i], &peers, server_extra, cluster_extra);
            members.push(Member { id: *id, port: ports[i], peer_port: peer_ports[i], dir, config, server: None });
        }
        Trio { members, proxy, _tmp: tmp }
    }

    /// Starts every member that is not running.
    pub(crate) fn start_all(&mut self) {
        for m in self.members.iter_mut().filter(|m| m.server.is_none()) {
            m.start();
        }
    }

    /// The member with node id `id`.
    pub(crate) fn member(&mut self, id: u64) -> &mut Member {
        self.members.iter_mut().find(|m| m.id == id).unwrap_or_else(|| panic!("no member {id}"))
    }

    /// The API of member `id`.
    pub(crate) fn api(&self, id: u64) -> &Server {
        self.members.iter().find(|m| m.id == id).unwrap_or_else(|| panic!("no member {id}")).api()
    }

    /// Ids of the running members.
    pub(crate) fn running(&self) -> Vec<u64> {
        self.members.iter().filter(|m| m.server.is_some()).map(|m| m.id).collect()
    }

    /// Waits until every running member in `among` (all running ones if empty) names the same
    /// leader, one of them, and that leader serves; its id.
    pub(crate) async fn leader_among(&self, among: &[u64], within: Duration) -> u64 {
        let among: Vec<u64> = if among.is_empty() { self.running() } else { among.to_vec() };
        let deadline = Instant::now() + within;
        let mut last = Vec::new();
        loop {
            last.clear();
            for id in &among {
                last.push((*id, status(self.api(*id)).await));
            }
            let leaders: HashSet<Option<u64>> =
                last.iter().map(|(_, s)| s.as_ref().and_then(|s| s["leader"].as_u64())).collect();
            if leaders.len() == 1
                && let Some(Some(l)) = leaders.into_iter().next()
                && among.contains(&l)
                && last.iter().any(|(id, s)| *id == l && s.as_ref().is_some_and(|s| s["serving"] == true))
            {
                return l;
            }
            if Instant::now() > deadline {
                let logs: String =
                    among.iter().map(|id| format!("--- node {id}\n{}", tail(&self.members_log(*id)))).collect();
                panic!("no common serving leader among {among:?} within {within:?}: {last:?}\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a leader among all running members.
    pub(crate) async fn leader(&self) -> u64 {
        self.leader_among(&[], Duration::from_secs(30)).await
    }

    fn members_log(&self, id: u64) -> String {
        self.members.iter().find(|m| m.id == id).map(Member::log).unwrap_or_default()
    }
}

impl Drop for Trio {
    /// A failed test shows what every member logged.
    fn drop(&mut self) {
        if std::thread::panicking() {
            for m in &self.members {
                let log = m.log();
                let lines: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
                eprintln!("--- node {} ---\n{}", m.id, lines[lines.len().saturating_sub(80)..].join("\n"));
            }
        }
    }
}

/// `GET /v1/cluster` of a server; None if it does not answer.
pub(crate) async fn status(api: &Api) -> Option<Value> {
    let r = api.client.get(format!("{}/v1/cluster", api.url)).timeout(Duration::from_secs(2)).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The `peers` array of every member's `[cluster]` section.
pub(crate) fn peers_toml(ids: &[u64], peer_ports: &[u16]) -> String {
    let entries: Vec<String> =
        ids.iter().zip(peer_ports).map(|(id, p)| format!("{{ id = {id}, addr = \"http://127.0.0.1:{p}\" }}")).collect();
    format!("[{}]", entries.join(", "))
}

/// A member's configuration: the test defaults on `port`, its node id, advertised peer address,
/// and the cluster's peers.
pub(crate) fn member_config(
    dir: &std::path::Path,
    id: u64,
    port: u16,
    peer_port: u16,
    peers: &str,
    cluster_extra: &str,
) -> String {
    member_config_with(dir, id, port, peer_port, peers, "", cluster_extra)
}

/// [`member_config`] with more `[server]` keys.
pub(crate) fn member_config_with(
    dir: &std::path::Path,
    id: u64,
    port: u16,
    peer_port: u16,
    peers: &str,
    server_extra: &str,
    cluster_extra: &str,
) -> String {
    let server =
        format!("node_id = {id}\nadvertise = \"http://127.0.0.1:{peer_port}\"\n{SERVER_EXTRA}\n{server_extra}");
    let mut text = config_on_port(dir, port, &server);
    // Test timings a little longer than the defaults (100 ms / 400 ms): two to five servers of a
    // debug build share two cores with other tests here.
    let timings = if cluster_extra.contains("heartbeat_interval") {
        ""
    } else {
        "heartbeat_interval = \"150ms\"\nelection_timeout = \"600ms\"\n"
    };
    text.push_str(&format!("\n[cluster]\npeers = {peers}\n{timings}{cluster_extra}\n"));
    text
}

/// HTTP proxies in front of the members' peer ports that can cut nodes off.
pub(crate) struct FaultProxy {
    isolated: Arc<Mutex<HashSet<u64>>>,
    /// Nodes whose traffic is held, unanswered, until [`heal`](Self::heal): a blackhole route.
    blackholed: Arc<Mutex<HashSet<u64>>>,
    /// Pairs of nodes that cannot reach each other (smaller id first).
    cuts: Arc<Mutex<HashSet<(u64, u64)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FaultProxy {
    /// One proxy per `(node id, listen port, target port)`.
    async fn start(routes: Vec<(u64, u16, u16)>) -> FaultProxy {
        super::install_crypto();
        let isolated = Arc::new(Mutex::new(HashSet::new()));
        let blackholed = Arc::new(Mutex::new(HashSet::new()));
        let cuts = Arc::new(Mutex::new(HashSet::new()));
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("proxy client");
        let mut tasks = Vec::new();
        for (id, listen, target) in routes {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", listen)).await.expect("proxy port");
            let (isolated, blackholed, cuts, client) =
                (isolated.clone(), blackholed.clone(), cuts.clone(), client.clone());
            let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                let (isolated, blackholed, cuts, client) =
                    (isolated.clone(), blackholed.clone(), cuts.clone(), client.clone());
                async move {
                    let from = sender(&req);
                    // A blackhole answers nothing: the request waits until the link heals.
                    while {
                        let b = blackholed.lock().expect("lock");
                        b.contains(&id) || from.is_some_and(|f| b.contains(&f))
                    } {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    forward(id, target, &isolated, &cuts, &client, req).await
                }
            });
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        FaultProxy { isolated, blackholed, cuts, tasks }
    }

    /// Cuts node `id` off from the others like a blackhole route: nothing it sends to a peer and
    /// nothing sent to it through the proxies (peer RPCs, relayed requests) is answered or
    /// refused until [`heal`](Self::heal); its clients still reach it.
    pub(crate) fn blackhole(&self, id: u64) {
        self.blackholed.lock().expect("lock").insert(id);
    }

    /// Cuts node `id` off from the others: nothing it sends to a peer and nothing sent to it
    /// through the proxies gets through (its clients still reach it).
    pub(crate) fn isolate(&self, id: u64) {
        self.isolated.lock().expect("lock").insert(id);
    }

    /// Cuts the link between nodes `a` and `b` only: each still reaches the others.
    pub(crate) fn cut(&self, a: u64, b: u64) {
        self.cuts.lock().expect("lock").insert((a.min(b), a.max(b)));
    }

    /// Reconnects every node.
    pub(crate) fn heal(&self) {
        self.isolated.lock().expect("lock").clear();
        self.blackholed.lock().expect("lock").clear();
        self.cuts.lock().expect("lock").clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The node that sent a peer RPC (none for relayed client requests).
fn sender(req: &axum::extract::Request) -> Option<u64> {
    req.headers().get("x-convoy-sender-node").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
}

/// Forwards one request to `127.0.0.1:target` (node `to`), unless either end is isolated or the
/// link between them is cut.
async fn forward(
    to: u64,
    target: u16,
    isolated: &Mutex<HashSet<u64>>,
    cuts: &Mutex<HashSet<(u64, u64)>>,
    client: &reqwest::Client,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let from = sender(&req);
    let cut = {
        let i = isolated.lock().expect("lock");
        i.contains(&to)
            || from.is_some_and(|f| i.contains(&f) || cuts.lock().expect("lock").contains(&(f.min(to), f.max(to))))
    };
    if cut {
        return (axum::http::StatusCode::BAD_GATEWAY, "partitioned by the test").into_response();
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = client.request(parts.method.clone(), format!("http://127.0.0.1:{target}{path}")).body(bytes);
    for (k, v) in &parts.headers {
        if !matches!(k.as_str(), "host" | "content-length" | "connection") {
            out = out.header(k, v);
        }
    }
    match out.send().await {
        Ok(r) => {
            let status = r.status();
            let headers = r.headers().clone();
            let body = r.bytes().await.unwrap_or_default();
            let mut resp = (status, body).into_response();
            for (k, v) in &headers {
                if !matches!(k.as_str(), "content-length" | "connection" | "transfer-encoding") {
                    resp.headers_mut().insert(k, v.clone());
                }
            }
            resp
        }
        Err(e) => (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}
