//! `convoy cancel ID…` (jobs by id alone), `convoy cancel --queue Q --job-set S [--states …]`
//! (a whole job set), and the older `convoy cancel QUEUE JOB_SET [ID…]`.

use super::http::{Client, print_json};
use super::output::Format;
use convoy::model::api::{CancelRequest, JobIdsResponse, JobView};
use convoy::model::{JobId, JobSetName, JobState, QueueName};
use reqwest::Method;
use std::collections::BTreeMap;

/// Flags of `convoy cancel`.
#[derive(clap::Args, Debug)]
pub(crate) struct CancelArgs {
    /// Job ids (or, in the older form, QUEUE JOB_SET then job ids).
    args: Vec<String>,
    /// With --job-set: the queue of the job set to cancel.
    #[arg(long, requires = "job_set")]
    queue: Option<QueueName>,
    /// Cancel this whole job set (of --queue).
    #[arg(long, requires = "queue")]
    job_set: Option<JobSetName>,
    /// Only jobs in these states (comma-separated).
    #[arg(long)]
    states: Option<String>,
    /// Why, recorded with each job's cancellation.
    #[arg(long)]
    reason: Option<String>,
    /// `table` (default: the ids cancelled, one per line) or `json`.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// What to cancel.
#[derive(Debug, PartialEq)]
enum Target {
    /// Jobs by id: their queue and job set are looked up.
    Jobs(Vec<JobId>),
    /// A job set, or some of its jobs.
    Set { queue: QueueName, job_set: JobSetName, ids: Vec<JobId> },
}

/// Cancels; prints the jobs cancelled (those already over are left out).
pub(super) async fn run(c: &Client, args: CancelArgs) -> anyhow::Result<()> {
    let states = args.states.as_deref().map(parse_states).transpose()?;
    let mut requests = Vec::new();
    match target(&args)? {
        Target::Set { queue, job_set, ids } => requests.push((queue, job_set, ids)),
        Target::Jobs(ids) => {
            let mut by_set: BTreeMap<(QueueName, JobSetName), Vec<JobId>> = BTreeMap::new();
            for id in ids {
                let j: JobView = c.get(&format!("/v1/jobs/{id}")).await?;
                by_set.entry((j.queue, j.job_set)).or_default().push(id);
            }
            requests.extend(by_set.into_iter().map(|((q, s), ids)| (q, s, ids)));
        }
    }
    let mut cancelled = Vec::new();
    for (queue, job_set, ids) in requests {
        let body = CancelRequest {
            queue,
            job_set,
            job_ids: (!ids.is_empty()).then_some(ids),
            states: states.clone(),
            reason: args.reason.clone(),
        };
        let answer: JobIdsResponse = c.send_json(Method::POST, "/v1/jobs/cancel", &body).await?;
        cancelled.extend(answer.job_ids);
    }
    match args.output {
        Format::Json => print_json(&JobIdsResponse { job_ids: cancelled }),
        Format::Table => {
            if cancelled.is_empty() {
                eprintln!("(no job was cancelled: none left that had not ended)");
            }
            for id in cancelled {
                println!("{id}");
            }
            Ok(())
        }
    }
}

/// What the arguments name: ids alone, `--queue Q --job-set S [ids]`, or the older `QUEUE
/// JOB_SET [ids]`.
fn target(args: &CancelArgs) -> anyhow::Result<Target> {
    let parse_ids = |list: &[String]| -> anyhow::Result<Vec<JobId>> {
        list.iter().map(|s| s.parse::<JobId>().map_err(|e| anyhow::anyhow!("{s:?} is not a job id: {e}"))).collect()
    };
    if let (Some(queue), Some(job_set)) = (&args.queue, &args.job_set) {
        return Ok(Target::Set { queue: queue.clone(), job_set: job_set.clone(), ids: parse_ids(&args.args)? });
    }
    match args.args.as_slice() {
        [] => anyhow::bail!("name the jobs to cancel (ids), or a whole job set with --queue Q --job-set S"),
        [first, ..] if first.parse::<JobId>().is_ok() => {
            if args.states.is_some() {
                anyhow::bail!("--states goes with a job set (--queue Q --job-set S)");
            }
            Ok(Target::Jobs(parse_ids(&args.args)?))
        }
        [queue, job_set, ids @ ..] => Ok(Target::Set {
            queue: QueueName::new(queue).map_err(|e| anyhow::anyhow!("queue {queue:?}: {e}"))?,
            job_set: JobSetName::new(job_set).map_err(|e| anyhow::anyhow!("job set {job_set:?}: {e}"))?,
            ids: parse_ids(ids)?,
        }),
        [other] => anyhow::bail!("{other:?} is not a job id (a whole job set is --queue Q --job-set S)"),
    }
}

/// `queued, running` → the states; an unknown one is refused naming the flag and the choices.
pub(super) fn parse_states(text: &str) -> anyhow::Result<Vec<JobState>> {
    text.split(',')
        .map(str::trim)
        .map(|s| {
            JobState::parse(s).ok_or_else(|| {
                let known: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                anyhow::anyhow!("--states: unknown state {s:?} (known: {})", known.join(", "))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CancelArgs,
    }

    fn target_of(argv: &[&str]) -> anyhow::Result<Target> {
        let cli = Cli::try_parse_from(std::iter::once("cancel").chain(argv.iter().copied()))?;
        target(&cli.args)
    }

    #[test]
    fn states_are_parsed_or_refused_naming_the_flag() {
        assert_eq!(parse_states("queued, running").unwrap(), [JobState::Queued, JobState::Running]);
        let e = parse_states("queued,lost").unwrap_err().to_string();
        assert!(e.contains("--states") && e.contains("\"lost\"") && e.contains("cancelled"), "{e}");
    }

    #[test]
    fn jobs_are_named_by_id_alone_or_by_their_set() {
        let (a, b) = ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAW");
        let id = |s: &str| s.parse::<JobId>().unwrap();
        assert_eq!(target_of(&[a, b]).unwrap(), Target::Jobs(vec![id(a), id(b)]));
        let set = |ids: Vec<JobId>| Target::Set {
            queue: QueueName::new("A").unwrap(),
            job_set: JobSetName::new("s").unwrap(),
            ids,
        };
        assert_eq!(target_of(&["--queue", "A", "--job-set", "s"]).unwrap(), set(vec![]));
        assert_eq!(target_of(&["A", "s", a]).unwrap(), set(vec![id(a)]));
        assert!(target_of(&[]).unwrap_err().to_string().contains("--job-set"));
        assert!(target_of(&["nope"]).unwrap_err().to_string().contains("not a job id"));
        assert!(target_of(&[a, "--states", "queued"]).unwrap_err().to_string().contains("--states goes with"));
        assert!(target_of(&["--queue", "A"]).is_err(), "--queue needs --job-set");
    }
}
