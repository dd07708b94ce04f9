//! Requests to a running server's API, shared by every test that talks HTTP: one call answers
//! `(status, body)` with the body parsed as JSON when it is JSON.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A server's base URL and an HTTP client for it.
pub(crate) struct Api {
    pub url: String,
    pub client: reqwest::Client,
}

impl Api {
    /// A client for the server at `url` (requests time out after 60 s).
    pub(crate) fn new(url: String) -> Api {
        super::install_crypto();
        let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
        Api { url, client }
    }

    /// Sends `method path` with an optional bearer token and JSON body. The body of the answer is
    /// JSON when it parses, else its text; `null` when empty.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut r = self.client.request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        (status, body)
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None, None).await
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, None, Some(body)).await
    }

    pub(crate) async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call(reqwest::Method::PUT, path, None, Some(body)).await
    }

    pub(crate) async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path, None, None).await
    }

    /// `GET path` as text (metrics, logs, event streams that end).
    pub(crate) async fn text(&self, path: &str) -> (u16, String) {
        let r = self.client.get(format!("{}{path}", self.url)).send().await.expect("request");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    pub(crate) async fn create_queue(&self, name: &str) {
        let (s, v) = self.post("/v1/queues", &json!({"name": name})).await;
        assert_eq!(s, 201, "{v}");
    }

    /// Submits jobs and returns their ids.
    pub(crate) async fn submit(&self, queue: &str, job_set: &str, jobs: Vec<Value>) -> Vec<String> {
        let (s, v) = self.post("/v1/jobs", &json!({"queue": queue, "job_set": job_set, "jobs": jobs})).await;
        assert_eq!(s, 200, "{v}");
        ids(&v)
    }

    pub(crate) async fn job(&self, id: &str) -> Value {
        let (s, v) = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// The job's output as `/v1/jobs/{id}/logs` serves it.
    pub(crate) async fn logs(&self, id: &str) -> String {
        let (s, text) = self.text(&format!("/v1/jobs/{id}/logs")).await;
        assert_eq!(s, 200, "{text}");
        text
    }

    /// How many jobs `GET /v1/jobs?{query}` lists.
    pub(crate) async fn count_jobs(&self, query: &str) -> usize {
        let (s, v) = self.get(&format!("/v1/jobs?{query}")).await;
        assert_eq!(s, 200, "{v}");
        v["jobs"].as_array().map(|a| a.len()).unwrap_or(0)
    }

    /// Every job `GET /v1/jobs?{query}` lists, page after page (1,000 a page).
    pub(crate) async fn all_jobs(&self, query: &str) -> Vec<Value> {
        let mut jobs = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut path = format!("/v1/jobs?{query}&limit=1000");
            if let Some(a) = &after {
                path.push_str(&format!("&after={a}"));
            }
            let (s, v) = self.get(&path).await;
            assert_eq!(s, 200, "{v}");
            jobs.extend(v["jobs"].as_array().cloned().unwrap_or_default());
            match v["next"].as_str() {
                Some(n) => after = Some(n.to_string()),
                None => return jobs,
            }
        }
    }

    /// Polls the job every 25 ms until `f(job)` holds; panics after `within` saying it is not
    /// `what`.
    pub(crate) async fn wait_job(&self, id: &str, within: Duration, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let j = self.job(id).await;
            if f(&j) {
                return j;
            }
            assert!(Instant::now() < deadline, "job {id}: not {what} after {within:?}: {j:#}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// One lease poll of a fake executor holding `nodes` and `runs`, waiting at most `wait`
    /// seconds; the answer.
    pub(crate) async fn poll(&self, executor: &str, nodes: &[Value], runs: &[Value], wait: f64) -> Value {
        let body = json!({"nodes": nodes, "runs": runs, "wait_seconds": wait});
        let (st, v) = self.post(&format!("/v1/executors/{executor}/lease"), &body).await;
        assert_eq!(st, 200, "{v}");
        v
    }

    /// Reports run events as the executor; how many the server accepted.
    pub(crate) async fn report(&self, executor: &str, events: Vec<Value>) -> u64 {
        let (st, v) = self.post(&format!("/v1/executors/{executor}/events"), &json!({"events": events})).await;
        assert_eq!(st, 200, "{v}");
        v["accepted"].as_u64().unwrap_or(0)
    }
}

/// The `job_ids` of a submission's answer.
pub(crate) fn ids(answer: &Value) -> Vec<String> {
    answer["job_ids"].as_array().expect("job_ids").iter().map(|x| x.as_str().expect("id").to_string()).collect()
}
