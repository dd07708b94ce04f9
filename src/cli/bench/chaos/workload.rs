//! The clients of a fault run: each submits, cancels, reprioritizes and reads its own jobs, one
//! operation at a time, retrying as Convoy's CLI does (another server after a 503 or a lost
//! connection; a submission without client ids only while nothing can have been applied), and
//! records every operation and every request in the history.

use convoy::chaos::history::{Attempt, Op, OpKind, OpResult, Outcome};
use rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The queue of every job of the run.
pub(super) const QUEUE: &str = "chaos";
/// The annotation that carries each job's key.
pub(super) const KEY_ANNOTATION: &str = "chaos.convoy.dev/key";
/// A request gives up after this long (and counts as unanswered).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// An operation stops retrying after this long.
const OP_DEADLINE: Duration = Duration::from_secs(40);

/// What the clients share: the servers, the clock, the record, and the stop flag.
pub(super) struct Shared {
    /// Base URLs of the servers in the cluster.
    pub urls: Vec<String>,
    /// Time zero of the history.
    pub t0: Instant,
    /// Operations recorded so far.
    pub ops: Mutex<Vec<Op>>,
    /// Set to end the clients (each finishes its operation).
    pub stop: AtomicBool,
}

impl Shared {
    /// Milliseconds since time zero.
    pub(super) fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1000.0
    }
}

/// A uniform draw in `[lo, hi)`.
pub(super) fn uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// One client's loop, until the stop flag.
pub(super) async fn client(shared: Arc<Shared>, index: usize, seed: u64) {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let http = match reqwest::Client::builder().timeout(REQUEST_TIMEOUT).connect_timeout(Duration::from_secs(2)).build()
    {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client");
            return;
        }
    };
    let mut c = Client { shared, index, http, jobs: Vec::new(), next: 0 };
    while !c.shared.stop.load(Ordering::Relaxed) {
        let draw = uniform(&mut rng, 0.0, 1.0);
        let kind = match draw {
            d if d < 0.45 || c.jobs.is_empty() => {
                let n = 1 + (rng.next_u64() % 3) as usize;
                let with_client_ids = uniform(&mut rng, 0.0, 1.0) >= 0.25;
                let keys = (0..n).map(|k| format!("c{index}-{}-{k}", c.next)).collect();
                c.next += 1;
                OpKind::Submit { job_set: format!("client-{index}"), keys, with_client_ids }
            }
            d if d < 0.55 => OpKind::Cancel { job_id: c.pick(&mut rng) },
            d if d < 0.70 => OpKind::Reprioritize { job_id: c.pick(&mut rng), priority: (rng.next_u64() % 10) as u32 },
            _ => OpKind::Read { job_id: c.pick(&mut rng) },
        };
        let runtime = uniform(&mut rng, 0.3, 3.0);
        let first = (rng.next_u64() % c.shared.urls.len() as u64) as usize;
        c.run(kind, runtime, first).await;
        tokio::time::sleep(Duration::from_millis(50 + rng.next_u64() % 100)).await;
    }
}

/// How one request ended.
enum Answer {
    /// Definite: the status and the body.
    Definite(u16, Value),
    /// Certainly not applied, worth another try (no connection, a 503 that says so).
    NotApplied(Option<u16>),
    /// Maybe applied (no answer, or a 503 that does not say).
    Unknown(Option<u16>),
}

struct Client {
    shared: Arc<Shared>,
    index: usize,
    http: reqwest::Client,
    /// Ids of the jobs this client submitted and had acknowledged.
    jobs: Vec<String>,
    next: usize,
}

impl Client {
    fn pick(&self, rng: &mut impl Rng) -> String {
        self.jobs[(rng.next_u64() % self.jobs.len() as u64) as usize].clone()
    }

    /// Runs one operation to its end and records it.
    async fn run(&mut self, kind: OpKind, runtime: f64, first: usize) {
        let invoke_ms = self.shared.now();
        let started = Instant::now();
        let mut attempts = Vec::new();
        let resend_safe = !matches!(kind, OpKind::Submit { with_client_ids: false, .. });
        let mut server = first;
        let outcome = loop {
            let start_ms = self.shared.now();
            let answer = self.send(&kind, runtime, server).await;
            let status = match &answer {
                Answer::Definite(s, _) => Some(*s),
                Answer::NotApplied(s) | Answer::Unknown(s) => *s,
            };
            attempts.push(Attempt { server, start_ms, end_ms: self.shared.now(), status });
            match answer {
                Answer::Definite(s, body) => break self.outcome(&kind, s, &body),
                Answer::Unknown(_) if !resend_safe => break Outcome::Unknown,
                _ if started.elapsed() > OP_DEADLINE || self.shared.stop.load(Ordering::Relaxed) => {
                    break if resend_safe { Outcome::Unknown } else { Outcome::Failed { status: status.unwrap_or(0) } };
                }
                _ => {}
            }
            server = (server + 1) % self.shared.urls.len();
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if let (OpKind::Submit { .. }, Outcome::Ok { result: OpResult::Submitted { job_ids } }) = (&kind, &outcome) {
            self.jobs.extend(job_ids.iter().cloned());
        }
        let op = Op { client: self.index, kind, invoke_ms, complete_ms: self.shared.now(), outcome, attempts };
        self.shared.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// What a definite answer means for the operation.
    fn outcome(&self, kind: &OpKind, status: u16, body: &Value) -> Outcome {
        let found_nothing = status == 404 && matches!(kind, OpKind::Read { .. });
        if !(200..300).contains(&status) && !found_nothing {
            return Outcome::Failed { status };
        }
        let result = match kind {
            OpKind::Submit { .. } => {
                let ids = body["job_ids"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|i| i.as_str().map(str::to_string)).collect());
                OpResult::Submitted { job_ids: ids.unwrap_or_default() }
            }
            OpKind::Read { .. } if status == 404 => OpResult::NotFound,
            OpKind::Read { .. } => OpResult::Found {
                state: body["state"].as_str().unwrap_or_default().to_string(),
                priority: body["priority"].as_u64().unwrap_or(0) as u32,
                runs: body["runs"].as_array().map_or(0, Vec::len),
            },
            _ => OpResult::Done,
        };
        Outcome::Ok { result }
    }

    /// Sends one request for `kind` to server `server`.
    async fn send(&self, kind: &OpKind, runtime: f64, server: usize) -> Answer {
        let url = &self.shared.urls[server];
        let request = match kind {
            OpKind::Submit { job_set, keys, with_client_ids } => {
                let jobs: Vec<Value> = keys
                    .iter()
                    .map(|k| {
                        let mut j = json!({
                            "pod_spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"],
                                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]},
                            "annotations": {KEY_ANNOTATION: k, "convoy.io/fake-runtime": format!("{runtime:.2}")},
                        });
                        if *with_client_ids {
                            j["client_id"] = json!(k);
                        }
                        j
                    })
                    .collect();
                self.http.post(format!("{url}/v1/jobs")).json(&json!({"queue": QUEUE, "job_set": job_set, "jobs": jobs}))
            }
            OpKind::Cancel { job_id } => self.http.post(format!("{url}/v1/jobs/cancel")).json(
                &json!({"queue": QUEUE, "job_set": format!("client-{}", self.index), "job_ids": [job_id]}),
            ),
            OpKind::Reprioritize { job_id, priority } => self.http.post(format!("{url}/v1/jobs/reprioritize")).json(
                &json!({"queue": QUEUE, "job_set": format!("client-{}", self.index), "job_ids": [job_id], "priority": priority}),
            ),
            OpKind::Read { job_id } => self.http.get(format!("{url}/v1/jobs/{job_id}?consistent=true")),
        };
        match request.send().await {
            Err(e) if e.is_connect() => Answer::NotApplied(None),
            Err(_) => Answer::Unknown(None),
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                if status != 503 {
                    return Answer::Definite(status, body);
                }
                let detail = body["detail"].as_str().unwrap_or_default();
                if detail.contains("nothing was applied") || detail.contains("nothing was stored") {
                    Answer::NotApplied(Some(status))
                } else {
                    Answer::Unknown(Some(status))
                }
            }
        }
    }
}
