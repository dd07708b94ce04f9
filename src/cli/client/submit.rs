//! `convoy submit FILE|-`: a submission file (Convoy's, or armadactl's), or a bare PodSpec, from
//! a file or standard input.

use super::armada_file;
use super::doc::Doc;
use super::http::{Client, RequestError, Retry};
use super::output::Format;
use anyhow::bail;
use convoy::model::api::{SubmitItem, SubmitRequest, SubmitResponse};
use convoy::model::{JobSetName, QueueName};
use reqwest::Method;
use std::path::PathBuf;
use std::time::Duration;

/// The queue `convoy up` makes, used when neither the file nor `--queue` names one.
pub(super) const DEFAULT_QUEUE: &str = "default";
/// The job set used when neither the file nor `--job-set` names one.
pub(super) const DEFAULT_JOB_SET: &str = "default";

/// Flags of `convoy submit`.
#[derive(clap::Args, Debug)]
pub(crate) struct SubmitArgs {
    /// A YAML or JSON file: `{queue, job_set, jobs: [...]}`, armadactl's `{queue, jobSetId, jobs:
    /// [{podSpec, ...}]}`, or a bare PodSpec; `-` reads standard input.
    file: PathBuf,
    /// The queue, when the file names none (default: `default`, the queue `convoy up` makes).
    #[arg(long)]
    queue: Option<QueueName>,
    /// The job set, when the file names none (default: `default`).
    #[arg(long)]
    job_set: Option<JobSetName>,
    /// With a bare PodSpec: how many copies.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// With a bare PodSpec: its priority class.
    #[arg(long)]
    priority_class: Option<String>,
    /// Every job of the file starts only after job ID ended as asked: `ID` or `ID:ok`
    /// (succeeded), `ID:notok` (failed), `ID:any` (ended in any way); repeatable.
    #[arg(long, value_name = "ID[:ok|notok|any]", value_parser = super::after::parse_after)]
    after: Vec<convoy::model::api::JobDependency>,
    /// `table` (default: the ids, one per line, under a summary) or `json` (the API's answer).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Sending a submission again after 503 or no answer: 5 attempts over about 3 s.
const RETRY: Retry = Retry { attempts: 5, first_pause: Duration::from_millis(200), max_pause: Duration::from_secs(2) };

/// Submits the jobs and prints their ids.
pub(super) async fn run(c: &Client, args: SubmitArgs) -> anyhow::Result<()> {
    let doc = Doc::read(&args.file)?;
    let mut req = request(&doc, &args)?;
    for job in &mut req.jobs {
        job.depends_on.extend(args.after.iter().cloned());
    }
    let answer = send(c, req.clone(), Some(&doc)).await?;
    match args.output {
        Format::Json => super::http::print_json(&answer),
        Format::Table => {
            let n = answer.job_ids.len();
            let jobs = if n == 1 { "job" } else { "jobs" };
            eprintln!("submitted {n} {jobs} to queue {}, job set {}:", req.queue, req.job_set);
            for id in &answer.job_ids {
                println!("{id}");
            }
            Ok(())
        }
    }
}

/// Sends a submission, every job with a client id, the same body again after a 503 or a lost
/// answer: a write the server could not confirm in time may still commit, and the server
/// answers the ids of jobs it already holds instead of adding them twice. A refusal naming a
/// field says where it is in `doc`.
pub(super) async fn send(c: &Client, mut req: SubmitRequest, doc: Option<&Doc>) -> anyhow::Result<SubmitResponse> {
    give_client_ids(&mut req, ulid::Ulid::generate());
    let body = serde_json::to_vec(&req)?;
    match c.send_json_retrying(Method::POST, "/v1/jobs", body, RETRY).await {
        Ok(a) => Ok(a),
        Err(e) if e.is_retryable() => Err(anyhow::Error::new(e).context(format!(
            "no confirmation after {} attempts; the jobs may still have been accepted: look with `convoy jobs --queue {} --job-set {}` before submitting again",
            RETRY.attempts, req.queue, req.job_set
        ))),
        Err(RequestError::Refused { problem: Some(p), status, .. }) if doc.is_some() && p.field.is_some() => {
            let (doc, field) = (doc.expect("checked"), p.field.as_deref().unwrap_or_default());
            let detail = super::doc::without_json_place(&p.detail);
            let hint = if status == reqwest::StatusCode::NOT_FOUND && field == "queue" {
                " (give --queue, or create it with `convoy queue create NAME`)"
            } else {
                ""
            };
            bail!("{status}: {field}: {detail}{hint}{}", doc.place_of(field))
        }
        Err(e) => Err(e.into()),
    }
}

/// Gives each job without a client id `cli-<invocation>-<index>`: unique per job and per run
/// of `convoy submit`, the same for every attempt of one run.
fn give_client_ids(req: &mut SubmitRequest, invocation: ulid::Ulid) {
    for (i, item) in req.jobs.iter_mut().enumerate() {
        if item.client_id.is_none() {
            item.client_id = Some(format!("cli-{invocation}-{i}"));
        }
    }
}

/// The submission the document and flags describe. A document with `jobs` is a whole
/// submission (Convoy's or armadactl's); anything else is one PodSpec, submitted `--count`
/// times. The queue and job set come from the document, else the flags, else the defaults.
fn request(doc: &Doc, args: &SubmitArgs) -> anyhow::Result<SubmitRequest> {
    let mut value = doc.value()?;
    if value.get("jobs").is_some() {
        if armada_file::is_armada(&value) {
            value = armada_file::to_convoy(value).map_err(|(field, message)| doc.error_at(&field, &message))?;
        }
        if let Some(map) = value.as_object_mut() {
            fill(map, "queue", args.queue.as_ref().map(QueueName::as_str), DEFAULT_QUEUE, "--queue")?;
            fill(map, "job_set", args.job_set.as_ref().map(JobSetName::as_str), DEFAULT_JOB_SET, "--job-set")?;
        }
        return doc.decode(value);
    }
    let (queue, job_set) = place(args.queue.as_ref(), args.job_set.as_ref())?;
    let item = SubmitItem::of_pod_spec(serde_json::value::to_raw_value(&value)?, args.priority_class.clone());
    Ok(SubmitRequest { queue, job_set, jobs: vec![item; args.count as usize] })
}

/// The queue and job set the flags name, else the defaults.
pub(super) fn place(
    queue: Option<&QueueName>,
    job_set: Option<&JobSetName>,
) -> anyhow::Result<(QueueName, JobSetName)> {
    let queue = queue.cloned().map_or_else(|| QueueName::new(DEFAULT_QUEUE), Ok)?;
    let job_set = job_set.cloned().map_or_else(|| JobSetName::new(DEFAULT_JOB_SET), Ok)?;
    Ok((queue, job_set))
}

/// Sets `key` from the flag or the default when the document has none; a flag that
/// contradicts the document is refused.
fn fill(
    map: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    flag: Option<&str>,
    default: &str,
    flag_name: &str,
) -> anyhow::Result<()> {
    match (map.get(key).and_then(|v| v.as_str()), flag) {
        (Some(written), Some(f)) if written != f => {
            bail!("the file says {key} {written:?} and {flag_name} says {f:?}: give one of them")
        }
        (Some(_), _) => {}
        (None, f) => {
            map.insert(key.to_string(), serde_json::Value::from(f.unwrap_or(default)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(queue: Option<&str>, count: u32) -> SubmitArgs {
        SubmitArgs {
            file: PathBuf::from("jobs.yaml"),
            queue: queue.map(|q| QueueName::new(q).unwrap()),
            job_set: Some(JobSetName::new("s").unwrap()),
            count,
            priority_class: None,
            after: vec![],
            output: Format::Table,
        }
    }

    fn doc(text: &str) -> Doc {
        Doc { name: "jobs.yaml".into(), text: text.into() }
    }

    #[test]
    fn every_job_gets_a_client_id_and_given_ones_are_kept() {
        let d = doc(
            "queue: A\njob_set: s\njobs:\n  - pod_spec: {}\n    client_id: mine\n  - pod_spec: {}\n  - pod_spec: {}\n",
        );
        let mut req = request(&d, &args(Some("A"), 1)).unwrap();
        let run = ulid::Ulid::generate();
        give_client_ids(&mut req, run);
        let ids: Vec<&str> = req.jobs.iter().map(|j| j.client_id.as_deref().unwrap()).collect();
        assert_eq!(ids, ["mine".to_string(), format!("cli-{run}-1"), format!("cli-{run}-2")]);
        // Another run of `convoy submit` is another submission.
        let mut again = request(&d, &args(Some("A"), 1)).unwrap();
        give_client_ids(&mut again, ulid::Ulid::generate());
        assert_eq!(again.jobs[0].client_id.as_deref(), Some("mine"));
        assert_ne!(again.jobs[1].client_id, req.jobs[1].client_id);
    }

    #[test]
    fn copies_of_a_bare_pod_spec_are_distinct_jobs_in_the_default_queue() {
        let d = doc(r#"{"containers": [{"name": "main"}]}"#);
        let mut req = request(&d, &args(None, 3)).unwrap();
        give_client_ids(&mut req, ulid::Ulid::generate());
        let ids: std::collections::HashSet<_> = req.jobs.iter().map(|j| j.client_id.clone().unwrap()).collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(req.jobs[2].pod_spec.get(), r#"{"containers":[{"name":"main"}]}"#);
        assert_eq!((req.queue.as_str(), req.job_set.as_str()), ("default", "s"));
    }

    #[test]
    fn the_queue_and_job_set_come_from_the_file_the_flags_or_the_defaults() {
        let d = doc("jobs:\n  - pod_spec: {}\n");
        let req = request(&d, &args(None, 1)).unwrap();
        assert_eq!((req.queue.as_str(), req.job_set.as_str()), ("default", "s"));
        let req = request(&d, &args(Some("B"), 1)).unwrap();
        assert_eq!(req.queue.as_str(), "B");
        let d = doc("queue: A\njobs:\n  - pod_spec: {}\n");
        let e = request(&d, &args(Some("B"), 1)).unwrap_err().to_string();
        assert!(e.contains("queue \"A\"") && e.contains("--queue says \"B\""), "{e}");
    }
}
