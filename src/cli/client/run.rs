//! `convoy run [--queue Q] [--job-set S] [--cpu C] [--memory M] [--gpu N] [--detach] -- CMD
//! [ARGS…]`: one job running CMD, its output streamed to the terminal, and its exit code as
//! this command's, the way `srun` and `nomad job run` work.

use super::http::Client;
use super::logs::{Follow, follow_output};
use super::submit::{place, send};
use convoy::model::api::{CancelRequest, JobIdsResponse, JobView, SubmitItem, SubmitRequest};
use convoy::model::{JobId, JobSetName, JobState, QueueName};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

/// Flags of `convoy run`.
#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
    /// The queue (default: `default`, the queue `convoy up` makes).
    #[arg(long)]
    queue: Option<QueueName>,
    /// The job set (default: `default`).
    #[arg(long)]
    job_set: Option<JobSetName>,
    /// CPUs to request (a quantity: `1`, `0.5`, `500m`).
    #[arg(long, default_value = "1")]
    cpu: String,
    /// Memory to request (`512Mi`, `4Gi`).
    #[arg(long, default_value = "1Gi")]
    memory: String,
    /// GPUs to request (`nvidia.com/gpu`).
    #[arg(long)]
    gpu: Option<u32>,
    /// The container image, for Kubernetes executors (the process runtime runs CMD on the host
    /// and ignores it).
    #[arg(long)]
    image: Option<String>,
    /// An environment variable for the job, `NAME=VALUE` (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// The priority class.
    #[arg(long)]
    priority_class: Option<String>,
    /// Start only after job ID ended as asked: `ID` or `ID:ok` (succeeded), `ID:notok` (failed),
    /// `ID:any` (ended in any way); repeatable. If it can no longer, the job fails naming it.
    #[arg(long, value_name = "ID[:ok|notok|any]", value_parser = super::after::parse_after)]
    after: Vec<convoy::model::api::JobDependency>,
    /// Print the job's id and return at once, without waiting for it.
    #[arg(short, long)]
    detach: bool,
    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Exit status when the job ended without an exit code of its own (cancelled, preempted, never
/// started, killed), as `srun` uses 1 for a job that failed to run.
const NO_EXIT_CODE: u8 = 1;
/// Exit status after Ctrl-C cancelled the job, as a shell reports SIGINT.
const INTERRUPTED: u8 = 130;

/// Submits the job, streams its output, and ends with its exit code.
pub(super) async fn run(c: &Client, args: RunArgs) -> anyhow::Result<()> {
    let req = request(&args)?;
    let (queue, job_set) = (req.queue.clone(), req.job_set.clone());
    let answer = send(c, req, None).await?;
    let Some(&id) = answer.job_ids.first() else { anyhow::bail!("the server answered no job id") };
    if args.detach {
        println!("{id}");
        return Ok(());
    }
    eprintln!("convoy: job {id} submitted to queue {queue}, job set {job_set}");
    let streams = async {
        let from_start = Follow { from: Some(0), follow: true };
        let quiet = |n: &str| {
            // The notes that matter here: the job waits, or only a tail of its output is left.
            if n.contains("not started") || n.contains("server kept") || n.contains("without running") {
                eprintln!("convoy: {n}");
            }
        };
        let mut stdout = std::io::stdout();
        let mut stderr = std::io::stderr();
        let out = follow_output(c, id, "stdout", from_start, &mut stdout, quiet);
        let err = follow_output(c, id, "stderr", from_start, &mut stderr, |_| {});
        let (a, b) = tokio::join!(out, err);
        a.and(b)
    };
    let mut streams = std::pin::pin!(streams);
    tokio::select! {
        r = &mut streams => r?,
        _ = tokio::signal::ctrl_c() => {
            cancel(c, id, queue, job_set).await?;
            // The output goes on to the run's end (a second Ctrl-C stops waiting for it).
            tokio::select! {
                _ = &mut streams => {
                    if let Ok(j) = ended(c, id).await {
                        eprintln!("convoy: job {id} is {}", j.state);
                    }
                }
                _ = tokio::signal::ctrl_c() => {}
            }
            std::process::exit(i32::from(INTERRUPTED));
        }
    }
    let j = ended(c, id).await?;
    std::process::exit(i32::from(exit_status(&j)));
}

/// After Ctrl-C: cancels the job (its run gets its grace period).
async fn cancel(c: &Client, id: JobId, queue: QueueName, job_set: JobSetName) -> anyhow::Result<()> {
    eprintln!("convoy: cancelling job {id} (Ctrl-C again to stop waiting)");
    let body = CancelRequest {
        queue,
        job_set,
        job_ids: Some(vec![id]),
        states: None,
        reason: Some("Ctrl-C on convoy run".into()),
    };
    let _: JobIdsResponse = c.send_json(Method::POST, "/v1/jobs/cancel", &body).await?;
    Ok(())
}

/// The job once it has ended (its output streams end with its run, the record a moment later).
async fn ended(c: &Client, id: JobId) -> anyhow::Result<JobView> {
    loop {
        let j: JobView = c.get(&format!("/v1/jobs/{id}")).await?;
        if j.state.is_terminal() {
            return Ok(j);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The job's exit code as this command's status: its last run's, else 1 (with why on stderr).
fn exit_status(j: &JobView) -> u8 {
    let code = j.runs.last().and_then(|r| r.exit_code);
    match (j.state, code) {
        (JobState::Succeeded, _) => 0,
        (_, Some(c)) => u8::try_from(c).ok().filter(|c| *c != 0).unwrap_or(NO_EXIT_CODE),
        (state, None) => {
            let why = j.reason.as_deref().unwrap_or("no reason given");
            let said = j.runs.last().and_then(|r| r.message.as_deref()).map(|m| format!(": {m}")).unwrap_or_default();
            eprintln!("convoy: job {} {state}: {why}{said}", j.id);
            NO_EXIT_CODE
        }
    }
}

/// The submission: one job whose only container runs the command.
fn request(args: &RunArgs) -> anyhow::Result<SubmitRequest> {
    let (program, rest) = args.command.split_first().ok_or_else(|| anyhow::anyhow!("give the command after --"))?;
    let mut requests = serde_json::Map::new();
    requests.insert("cpu".into(), json!(args.cpu));
    requests.insert("memory".into(), json!(args.memory));
    if let Some(g) = args.gpu {
        requests.insert("nvidia.com/gpu".into(), json!(g.to_string()));
    }
    let mut env = Vec::new();
    for e in &args.env {
        let Some((name, value)) = e.split_once('=').filter(|(n, _)| !n.is_empty()) else {
            anyhow::bail!("--env {e:?}: give NAME=VALUE");
        };
        env.push(json!({"name": name, "value": value}));
    }
    let mut container = json!({
        "name": "main",
        "command": [program],
        "args": rest,
        "resources": {"requests": requests},
    });
    if let Some(image) = &args.image {
        container["image"] = json!(image);
    }
    if !env.is_empty() {
        container["env"] = json!(env);
    }
    let pod_spec = json!({"restartPolicy": "Never", "containers": [container]});
    let mut item = SubmitItem::of_pod_spec(serde_json::value::to_raw_value(&pod_spec)?, args.priority_class.clone());
    item.depends_on = args.after.clone();
    let (queue, job_set) = place(args.queue.as_ref(), args.job_set.as_ref())?;
    Ok(SubmitRequest { queue, job_set, jobs: vec![item] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }

    fn parse(argv: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("run").chain(argv.iter().copied())).expect("parses").args
    }

    #[test]
    fn the_command_becomes_one_container_with_the_requests_asked() {
        let args = parse(&["--cpu", "2", "--gpu", "1", "--env", "A=b=c", "--", "sh", "-c", "echo hi; exit 3"]);
        let req = request(&args).unwrap();
        assert_eq!((req.queue.as_str(), req.job_set.as_str()), ("default", "default"));
        let spec: serde_json::Value = serde_json::from_str(req.jobs[0].pod_spec.get()).unwrap();
        let c = &spec["containers"][0];
        assert_eq!((&c["command"], &c["args"]), (&json!(["sh"]), &json!(["-c", "echo hi; exit 3"])));
        assert_eq!(c["resources"]["requests"], json!({"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}));
        assert_eq!(c["env"], json!([{"name": "A", "value": "b=c"}]));
        assert!(c.get("image").is_none());
        let bad = parse(&["--env", "novalue", "--", "true"]);
        assert!(request(&bad).unwrap_err().to_string().contains("NAME=VALUE"));
    }

    #[test]
    fn the_exit_status_is_the_jobs() {
        let job = |state: &str, exit: Option<i32>| -> JobView {
            serde_json::from_value(json!({
                "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "queue": "q", "job_set": "s", "state": state,
                "priority": 0, "priority_class": "default", "submitted_at": "2026-11-26T07:00:00.000Z",
                "requests": {}, "annotations": {}, "labels": {},
                "runs": [{"run_id": "01ARZ3NDEKTSV4RRFFQ69G5FB1", "executor": "e", "node": "n1", "pool": "default",
                          "state": state, "leased_at": "2026-11-26T07:00:01.000Z", "exit_code": exit}]
            }))
            .expect("a job view")
        };
        assert_eq!(exit_status(&job("succeeded", Some(0))), 0);
        assert_eq!(exit_status(&job("failed", Some(3))), 3);
        assert_eq!(exit_status(&job("failed", Some(300))), NO_EXIT_CODE);
        assert_eq!(exit_status(&job("cancelled", None)), NO_EXIT_CODE);
    }
}
