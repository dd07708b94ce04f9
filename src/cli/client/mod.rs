//! Client verbs over the REST API: `convoy run|queue|submit|cancel|reprioritize|jobs|job|logs|watch|why|cluster`,
//! one module each. Bodies are the API's own types (`convoy::model::api`).

mod after;
mod armada_file;
mod cancel;
mod cluster;
mod doc;
mod http;
mod job;
mod jobs;
mod logs;
mod output;
mod queue;
mod reprioritize;
mod run;
pub(crate) mod scenario;
mod submit;
mod watch;
mod why;

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Where the server is and who we are.
#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// Server address, or several of one cluster separated by commas (tried in turn when one
    /// cannot be reached); before the verb: `convoy --server URL jobs`.
    #[arg(long, env = "CONVOY_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// Bearer token.
    #[arg(long, env = "CONVOY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) that signed an https:// server's certificate; when given, the only
    /// one trusted (default: the operating system's trust store).
    #[arg(long, env = "CONVOY_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// The client verbs.
#[derive(Subcommand, Debug)]
pub(crate) enum ClientCommand {
    /// Run a command as a job and stream its output: `convoy run -- CMD [ARGS…]` ends with the
    /// job's exit code; Ctrl-C cancels it.
    Run(run::RunArgs),
    /// Manage queues.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// Submit jobs: a JSON or YAML file (or `-`, standard input) holding `{queue, job_set, jobs:
    /// [...]}`, armadactl's job file, or a bare PodSpec.
    Submit(submit::SubmitArgs),
    /// Cancel jobs: by id, or a whole job set (--queue Q --job-set S).
    Cancel(cancel::CancelArgs),
    /// Change the priority of jobs within their queue.
    Reprioritize(reprioritize::ReprioritizeArgs),
    /// List jobs, newest first.
    Jobs(jobs::JobsArgs),
    /// Show a job with its runs and events.
    Job(job::JobArgs),
    /// Print a job's output (the whole of it once the job ended); --follow keeps printing while it
    /// runs.
    Logs(logs::LogsArgs),
    /// Follow a job set's events (--until-done: until every job of it has ended).
    Watch(watch::WatchArgs),
    /// Why a job is where it is.
    Why(why::WhyArgs),
    /// The Raft cluster: status, and adding and removing servers.
    Cluster(cluster::ClusterArgs),
}

/// Runs a client verb.
pub(crate) async fn run(args: ClientArgs, cmd: ClientCommand) -> anyhow::Result<()> {
    let c = http::Client::new(&args)?;
    match cmd {
        ClientCommand::Run(a) => run::run(&c, a).await,
        ClientCommand::Queue(q) => queue::run(&c, q).await,
        ClientCommand::Submit(a) => submit::run(&c, a).await,
        ClientCommand::Cancel(a) => cancel::run(&c, a).await,
        ClientCommand::Reprioritize(a) => reprioritize::run(&c, a).await,
        ClientCommand::Jobs(a) => jobs::run(&c, a).await,
        ClientCommand::Job(a) => job::run(&c, a).await,
        ClientCommand::Logs(a) => logs::run(&c, a).await,
        ClientCommand::Watch(a) => watch::run(&c, a).await,
        ClientCommand::Why(a) => why::run(&c, a).await,
        ClientCommand::Cluster(a) => cluster::run(&c, a).await,
    }
}
