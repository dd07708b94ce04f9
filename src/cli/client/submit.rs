//! `convoy submit FILE`: a submission file, or a bare PodSpec with `--queue` and `--job-set`.

use super::doc;
use super::http::{Client, Retry, print_json};
use anyhow::bail;
use convoy::model::api::{SubmitItem, SubmitRequest, SubmitResponse};
use convoy::model::{JobSetName, QueueName};
use reqwest::Method;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `convoy submit`.
#[derive(clap::Args, Debug)]
pub(crate) struct SubmitArgs {
    file: PathBuf,
    #[arg(long)]
    queue: Option<QueueName>,
    #[arg(long)]
    job_set: Option<JobSetName>,
    /// With a bare PodSpec: how many copies.
    #[arg(long, default_value_t = 1)]
    count: u32,
    #[arg(long)]
    priority_class: Option<String>,
}

/// Sending a submission again after 503 or no answer: 5 attempts over about 3 s.
const RETRY: Retry = Retry { attempts: 5, first_pause: Duration::from_millis(200), max_pause: Duration::from_secs(2) };

/// Submits the jobs and prints their ids.
///
/// A write the server could not confirm in time answers 503 but may still commit, so every job
/// carries a client id (the file's, else one made here) and the very same body is sent again on
/// 503 or a broken connection: the server answers the ids of jobs it already holds instead of
/// adding them twice.
pub(super) async fn run(c: &Client, args: SubmitArgs) -> anyhow::Result<()> {
    let mut req = request(args)?;
    give_client_ids(&mut req, ulid::Ulid::generate());
    let body = serde_json::to_vec(&req)?;
    let answer: SubmitResponse = match c.send_json_retrying(Method::POST, "/v1/jobs", body, RETRY).await {
        Ok(a) => a,
        Err(e) if e.is_retryable() => {
            return Err(anyhow::Error::new(e).context(format!(
                "no confirmation after {} attempts; the jobs may still have been accepted: look with `convoy jobs --queue {} --job-set {}` before submitting again",
                RETRY.attempts, req.queue, req.job_set
            )));
        }
        Err(e) => return Err(e.into()),
    };
    print_json(&answer)
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

/// The submission the file and flags describe. A file with `jobs` is a whole submission (the
/// flags are not used); anything else is one PodSpec, submitted `--count` times.
fn request(args: SubmitArgs) -> anyhow::Result<SubmitRequest> {
    let value = doc::read_value(&args.file)?;
    if value.get("jobs").is_some() {
        return doc::decode(value, &args.file);
    }
    let (Some(queue), Some(job_set)) = (args.queue, args.job_set) else {
        bail!("{} holds a bare PodSpec: give --queue and --job-set", args.file.display());
    };
    let pod_spec = serde_json::value::to_raw_value(&value)?;
    let item = SubmitItem {
        priority: 0,
        priority_class: args.priority_class,
        pod_spec,
        annotations: Default::default(),
        labels: Default::default(),
        services: Vec::new(),
        ingresses: Vec::new(),
        client_id: None,
        namespace: None,
    };
    Ok(SubmitRequest { queue, job_set, jobs: vec![item; args.count as usize] })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(file: &std::path::Path, count: u32) -> SubmitArgs {
        SubmitArgs {
            file: file.to_path_buf(),
            queue: Some(QueueName::new("A").unwrap()),
            job_set: Some(JobSetName::new("s").unwrap()),
            count,
            priority_class: None,
        }
    }

    #[test]
    fn every_job_gets_a_client_id_and_given_ones_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.yaml");
        std::fs::write(
            &file,
            "queue: A\njob_set: s\njobs:\n  - pod_spec: {}\n    client_id: mine\n  - pod_spec: {}\n  - pod_spec: {}\n",
        )
        .unwrap();
        let mut req = request(args(&file, 1)).unwrap();
        let run = ulid::Ulid::generate();
        give_client_ids(&mut req, run);
        let ids: Vec<&str> = req.jobs.iter().map(|j| j.client_id.as_deref().unwrap()).collect();
        assert_eq!(ids, ["mine".to_string(), format!("cli-{run}-1"), format!("cli-{run}-2")]);
        // Another run of `convoy submit` is another submission.
        let mut again = request(args(&file, 1)).unwrap();
        give_client_ids(&mut again, ulid::Ulid::generate());
        assert_eq!(again.jobs[0].client_id.as_deref(), Some("mine"));
        assert_ne!(again.jobs[1].client_id, req.jobs[1].client_id);
    }

    #[test]
    fn copies_of_a_bare_pod_spec_are_distinct_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pod.json");
        std::fs::write(&file, r#"{"containers": [{"name": "main"}]}"#).unwrap();
        let mut req = request(args(&file, 3)).unwrap();
        give_client_ids(&mut req, ulid::Ulid::generate());
        let ids: std::collections::HashSet<_> = req.jobs.iter().map(|j| j.client_id.clone().unwrap()).collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(req.jobs[2].pod_spec.get(), r#"{"containers":[{"name":"main"}]}"#);
    }
}
