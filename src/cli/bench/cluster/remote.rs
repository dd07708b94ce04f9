//! `convoy bench cluster --servers`: a running cluster, e.g. servers on machines of their own,
//! measured through the throughput phases alone (the bench kills only servers it started). Its
//! jobs ask for a node label no node has, so none runs, and its job sets are cancelled at the end
//! through whichever server answers.

use super::{ClusterArgs, SendTo, append_mean_ms, leader_among, ms, serving_leader_id, status, throughput};
use crate::cli::bench::submit::Sending;
use anyhow::bail;
use serde_json::{Value, json};
use std::time::Duration;

/// How long one request to a cluster the bench did not start may take.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(60);
/// Rounds over the servers to cancel one job set (an election may be under way).
const CANCEL_ROUNDS: u32 = 5;

/// `--servers`: the throughput phases through a running cluster, then its job sets cancelled.
pub(super) async fn run(args: &ClusterArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.failovers == 0,
        "--servers: this bench kills only servers it started; add --failovers 0 to measure a running cluster"
    );
    let urls = server_urls(&args.servers)?;
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let prefix = format!("bench-{}-{}-", since_epoch.as_millis(), std::process::id());
    let to = Sending::remote(&args.queue, &prefix, args.token.as_deref(), REMOTE_TIMEOUT)?;
    let http = to.client(1)?;
    for url in &urls {
        // A refusal is said at once, not waited on as if there were no leader yet.
        if let Ok(r) = http.get(format!("{url}/v1/cluster")).send().await
            && r.status() == reqwest::StatusCode::UNAUTHORIZED
        {
            let fix =
                if args.token.is_some() { "is the token right?" } else { "give one with --token or CONVOY_TOKEN" };
            bail!("{url} wants a valid bearer token (401): {fix}");
        }
    }
    let (first, leader_url) = leader_among(&http, &urls).await?;
    ensure_queue(&http, &leader_url, &args.queue).await?;
    let targets = match args.send_to {
        SendTo::All => urls.clone(),
        SendTo::Leader => vec![leader_url.clone()],
    };
    let measured = throughput(args, &to, &targets, &leader_url).await;
    // Even when a phase failed, and through any server that answers (followers relay).
    let cancelled = cancel_job_sets(&http, &urls, &to, args.batch_clients.max(args.single_clients)).await;
    let (mut out, cancelled) = match (measured, cancelled) {
        (Ok(out), Ok(n)) => (out, n),
        (Err(e), Ok(n)) => return Err(e.context(format!("the bench stopped; the {n} jobs it left were cancelled"))),
        (Ok(_), Err(c)) => return Err(c),
        (Err(e), Err(c)) => bail!("{e:#}; cancelling what the bench left failed too: {c:#}"),
    };
    let now = serving_leader(&http, &urls).await;
    let rest = json!({
        "servers": urls.len(),
        "queue": args.queue,
        "batch_clients": args.batch_clients,
        "single_clients": args.single_clients,
        "send_to": args.send_to.as_str(),
        // Null when no leader could be named at the end.
        "leader_changed_during_throughput": now.map(|(id, _)| id != first),
        "append_rtt_ms_mean": ms(append_mean_ms(&http, &leader_url).await),
        "cancelled": cancelled,
    });
    if let (Some(o), Value::Object(r)) = (out.as_object_mut(), rest) {
        o.extend(r);
    }
    println!("{out}");
    Ok(())
}

/// The `--servers` addresses, without a trailing `/`, each once.
fn server_urls(given: &[String]) -> anyhow::Result<Vec<String>> {
    let mut urls: Vec<String> = Vec::new();
    for u in given {
        let u = u.trim().trim_end_matches('/');
        anyhow::ensure!(
            u.starts_with("http://") || u.starts_with("https://"),
            "--servers: {u:?} is not an http:// or https:// address"
        );
        if !urls.iter().any(|known| known == u) {
            urls.push(u.to_string());
        }
    }
    Ok(urls)
}

/// The leader as the servers name it now, if one that serves answers; no waiting.
async fn serving_leader(http: &reqwest::Client, urls: &[String]) -> Option<(u64, String)> {
    for url in urls {
        if let Some(id) = status(http, url).await.as_ref().and_then(serving_leader_id) {
            return Some((id, url.clone()));
        }
    }
    None
}

/// Makes `queue` on the cluster unless it is there (making one takes an admin's token; using one
/// takes a submitter's).
async fn ensure_queue(http: &reqwest::Client, url: &str, queue: &str) -> anyhow::Result<()> {
    let mut path = reqwest::Url::parse(&format!("{url}/v1/queues"))?;
    path.path_segments_mut().map_err(|()| anyhow::anyhow!("{url} cannot hold a path"))?.push(queue);
    let r = http.get(path).send().await?;
    match r.status() {
        s if s.is_success() => return Ok(()),
        reqwest::StatusCode::NOT_FOUND => {}
        s => bail!("reading the queue {queue}: {s} {}", r.text().await.unwrap_or_default()),
    }
    let r = http.post(format!("{url}/v1/queues")).json(&json!({"name": queue})).send().await?;
    if !r.status().is_success() && r.status() != reqwest::StatusCode::CONFLICT {
        bail!(
            "the queue {queue} does not exist and making it failed (it takes an admin's token): {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// Cancels what is left of the job sets of clients `0..clients` (a cluster not the bench's own
/// keeps none of its load), through whichever server answers, a few rounds each; every job set
/// is tried. The number of jobs cancelled.
async fn cancel_job_sets(http: &reqwest::Client, urls: &[String], to: &Sending, clients: usize) -> anyhow::Result<u64> {
    let (mut cancelled, mut failed) = (0u64, Vec::new());
    for c in 0..clients {
        let job_set = format!("{}{c}", to.job_set_prefix);
        let body = json!({"queue": to.queue, "job_set": job_set, "reason": "convoy bench cluster ended"});
        let mut last = String::new();
        let mut done = false;
        'rounds: for round in 0..CANCEL_ROUNDS {
            for url in urls {
                match http.post(format!("{url}/v1/jobs/cancel")).json(&body).send().await {
                    Ok(r) if r.status().is_success() => {
                        let v: Value = r.json().await.unwrap_or_default();
                        cancelled += v["job_ids"].as_array().map_or(0, Vec::len) as u64;
                        done = true;
                        break 'rounds;
                    }
                    Ok(r) => {
                        let status = r.status();
                        last = format!("{url}: {status} {}", r.text().await.unwrap_or_default());
                        // Refused, not unavailable: asking again changes nothing.
                        if status.is_client_error() {
                            break 'rounds;
                        }
                    }
                    Err(e) => last = format!("{url}: {e}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(500) * (round + 1)).await;
        }
        if !done {
            failed.push(format!("{job_set} ({last})"));
        }
    }
    if failed.is_empty() {
        Ok(cancelled)
    } else {
        bail!("cancelling the bench's job sets in queue {} failed: {}", to.queue, failed.join("; "))
    }
}
