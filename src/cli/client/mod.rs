//! Client verbs over the REST API: `convoy queue|submit|cancel|reprioritize|jobs|job|watch|why|cluster`.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::io::Write;

/// Where the server is and who we are.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// Server address (before the verb: `convoy --server URL jobs`).
    #[arg(long, env = "CONVOY_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// Bearer token.
    #[arg(long, env = "CONVOY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Queue verbs.
#[derive(Subcommand, Debug)]
pub enum QueueCommand {
    /// Create a queue.
    Create {
        name: String,
        #[arg(long, default_value_t = 1.0)]
        priority_factor: f64,
        /// Owners (repeatable).
        #[arg(long = "owner")]
        owners: Vec<String>,
        /// Groups (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// List queues.
    List,
    /// Show one queue.
    Get { name: String },
    /// Replace a queue's settings from a JSON or YAML file.
    Update { name: String, file: std::path::PathBuf },
    /// Delete a queue (with --force, cancelling its jobs).
    Delete {
        name: String,
        #[arg(long)]
        force: bool,
    },
    /// Fair share, allocation and demand.
    Report { name: String },
}

/// The client verbs.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Manage queues.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Submit jobs: a JSON or YAML file holding `{queue, job_set, jobs: [...]}`, or a bare PodSpec
    /// with --queue and --job-set.
    Submit {
        file: std::path::PathBuf,
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        job_set: Option<String>,
        /// With a bare PodSpec: how many copies.
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long)]
        priority_class: Option<String>,
    },
    /// Cancel jobs (named ones, or a whole job set).
    Cancel {
        queue: String,
        job_set: String,
        job_ids: Vec<String>,
        /// Only jobs in these states (comma-separated).
        #[arg(long)]
        states: Option<String>,
    },
    /// Change the priority of jobs within their queue.
    Reprioritize { queue: String, job_set: String, priority: u32, job_ids: Vec<String> },
    /// List jobs.
    Jobs {
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        job_set: Option<String>,
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show a job with its runs and events.
    Job { id: String },
    /// Follow a job set's events.
    Watch {
        queue: String,
        job_set: String,
        #[arg(long, default_value_t = 1)]
        from: u64,
    },
    /// Why a job is where it is.
    Why { id: String },
    /// Raft status of the server.
    Cluster,
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(5)).build()?;
        Ok(Client { http, base: args.server.trim_end_matches('/').to_string(), token: args.token.clone() })
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn send(&self, r: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let resp = r.send().await.with_context(|| format!("cannot reach the convoy server at {}", self.base))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let body: Value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        if !status.is_success() {
            let detail = body["detail"].as_str().unwrap_or("");
            match body["field"].as_str() {
                Some(f) => bail!("{status}: {f}: {detail}"),
                None => bail!("{status}: {detail}"),
            }
        }
        Ok(body)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(self.req(reqwest::Method::POST, path).json(body)).await
    }
}

fn print(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn read_doc(path: &std::path::Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value = serde_yaml_ng::from_str(&text).with_context(|| format!("{} is not JSON or YAML", path.display()))?;
    Ok(v)
}

/// Runs a client verb.
pub async fn run(args: ClientArgs, cmd: ClientCommand) -> anyhow::Result<()> {
    let c = Client::new(&args)?;
    match cmd {
        ClientCommand::Queue(q) => match q {
            QueueCommand::Create { name, priority_factor, owners, groups } => print(
                &c.post(
                    "/v1/queues",
                    &json!({"name": name, "priority_factor": priority_factor, "owners": owners, "groups": groups}),
                )
                .await?,
            ),
            QueueCommand::List => print(&c.get("/v1/queues").await?),
            QueueCommand::Get { name } => print(&c.get(&format!("/v1/queues/{name}")).await?),
            QueueCommand::Update { name, file } => {
                let body = read_doc(&file)?;
                print(&c.send(c.req(reqwest::Method::PUT, &format!("/v1/queues/{name}")).json(&body)).await?)
            }
            QueueCommand::Delete { name, force } => {
                c.send(c.req(reqwest::Method::DELETE, &format!("/v1/queues/{name}?force={force}"))).await?;
                println!("queue {name} deleted");
                Ok(())
            }
            QueueCommand::Report { name } => print(&c.get(&format!("/v1/queues/{name}/report")).await?),
        },
        ClientCommand::Submit { file, queue, job_set, count, priority_class } => {
            let doc = read_doc(&file)?;
            let body = if doc.get("jobs").is_some() {
                doc
            } else {
                let (Some(queue), Some(job_set)) = (queue, job_set) else {
                    bail!("{} holds a bare PodSpec: give --queue and --job-set", file.display());
                };
                let item = json!({"pod_spec": doc, "priority_class": priority_class});
                json!({"queue": queue, "job_set": job_set, "jobs": vec![item; count as usize]})
            };
            print(&c.post("/v1/jobs", &body).await?)
        }
        ClientCommand::Cancel { queue, job_set, job_ids, states } => {
            let mut body = json!({"queue": queue, "job_set": job_set});
            if !job_ids.is_empty() {
                body["job_ids"] = json!(job_ids);
            }
            if let Some(s) = states {
                body["states"] = json!(s.split(',').map(str::trim).collect::<Vec<_>>());
            }
            print(&c.post("/v1/jobs/cancel", &body).await?)
        }
        ClientCommand::Reprioritize { queue, job_set, priority, job_ids } => {
            let mut body = json!({"queue": queue, "job_set": job_set, "priority": priority});
            if !job_ids.is_empty() {
                body["job_ids"] = json!(job_ids);
            }
            print(&c.post("/v1/jobs/reprioritize", &body).await?)
        }
        ClientCommand::Jobs { queue, job_set, state, limit } => {
            let mut q = vec![format!("limit={limit}")];
            for (k, v) in [("queue", queue), ("job_set", job_set), ("state", state)] {
                if let Some(v) = v {
                    q.push(format!("{k}={v}"));
                }
            }
            let v = c.get(&format!("/v1/jobs?{}", q.join("&"))).await?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{:<28} {:<12} {:<16} {:<10} REASON", "ID", "QUEUE", "JOB SET", "STATE")?;
            for j in v["jobs"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{:<28} {:<12} {:<16} {:<10} {}",
                    j["id"].as_str().unwrap_or(""),
                    j["queue"].as_str().unwrap_or(""),
                    j["job_set"].as_str().unwrap_or(""),
                    j["state"].as_str().unwrap_or(""),
                    j["reason"].as_str().unwrap_or("")
                )?;
            }
            Ok(())
        }
        ClientCommand::Job { id } => print(&c.get(&format!("/v1/jobs/{id}")).await?),
        ClientCommand::Why { id } => {
            let j = c.get(&format!("/v1/jobs/{id}")).await?;
            let state = j["state"].as_str().unwrap_or("?");
            match j["reason"].as_str() {
                Some(r) => println!("{id} is {state}: {r}"),
                None => println!("{id} is {state}"),
            }
            Ok(())
        }
        ClientCommand::Watch { queue, job_set, from } => {
            let mut resp = c
                .req(reqwest::Method::GET, &format!("/v1/queues/{queue}/job-sets/{job_set}/events?from={from}"))
                .send()
                .await?;
            if !resp.status().is_success() {
                bail!("{}: {}", resp.status(), resp.text().await.unwrap_or_default());
            }
            let mut buf = String::new();
            while let Some(chunk) = resp.chunk().await? {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let block: String = buf.drain(..end + 2).collect();
                    if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) {
                        let e: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                        println!(
                            "{:>6} {} {:<18} {} {}",
                            e["seq"],
                            e["at"].as_str().unwrap_or(""),
                            e["kind"].as_str().unwrap_or(""),
                            e["job_id"].as_str().unwrap_or(""),
                            e["message"].as_str().unwrap_or("")
                        );
                    }
                }
            }
            Ok(())
        }
        ClientCommand::Cluster => print(&c.get("/v1/cluster").await?),
    }
}
