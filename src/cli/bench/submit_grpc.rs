//! `convoy bench submit --grpc`: batched submissions through Armada's `api.Submit/SubmitJobs`
//! (a tonic client over h2c, one HTTP/2 connection per client) beside the same batches through
//! REST's `POST /v1/jobs`, against the same server in the same run.

use convoy::grpc::k8s;
use convoy::grpc::pb::{self, submit_client::SubmitClient};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Endpoint;

/// The gRPC twin of the REST benchmark's job: the same pod spec.
fn item(i: u64) -> anyhow::Result<pb::JobSubmitRequestItem> {
    let spec = json!({"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", format!("echo {i}")],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]});
    let pod_spec = k8s::from_json(&spec).map_err(|e| anyhow::anyhow!("the benchmark's pod spec: {e}"))?;
    Ok(pb::JobSubmitRequestItem { pod_specs: vec![pod_spec], namespace: "default".into(), ..Default::default() })
}

/// Sends `total` SubmitJobs requests of `per_request` items from `clients` tasks, each on its own
/// h2c connection to `url`; returns (wall time, sorted latencies, jobs acked), as the REST
/// driver does.
pub(super) async fn drive(
    url: &str,
    clients: usize,
    total: u64,
    per_request: usize,
) -> anyhow::Result<(Duration, Vec<Duration>, u64)> {
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        let ch = Endpoint::from_shared(url.to_string())?.connect().await?;
        conns.push(SubmitClient::new(ch).max_decoding_message_size(64 << 20));
    }
    let items = (0..per_request as u64).map(item).collect::<anyhow::Result<Vec<_>>>()?;
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, mut client) in conns.into_iter().enumerate() {
        let (next, acked) = (next.clone(), acked.clone());
        // One request per client, built once: the server is measured, not the client.
        let request = pb::JobSubmitRequest {
            queue: "bench".into(),
            job_set_id: format!("grpc-client-{c}"),
            job_request_items: items.clone(),
        };
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let t = Instant::now();
                match client.submit_jobs(request.clone()).await {
                    Ok(r) => {
                        lat.push(t.elapsed());
                        acked.fetch_add(r.into_inner().job_response_items.len() as u64, Ordering::Relaxed);
                    }
                    Err(e) => eprintln!("SubmitJobs failed: {} {}", e.code(), e.message()),
                }
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await?);
    }
    let wall = start.elapsed();
    lat.sort();
    Ok((wall, lat, acked.load(Ordering::Relaxed)))
}
