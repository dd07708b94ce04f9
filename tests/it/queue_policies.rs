//! Guaranteed resources and preemption fences over HTTP and the CLI: the fields are refused by
//! name when malformed, stored and shown; a real server gives a guaranteed queue its guarantee
//! over another queue's preemptible jobs and says so in the queue report, and an urgent job
//! inside a fence waits rather than displace a job outside it, saying why.

use crate::cli_client::ok;
use crate::common::{Server, config, node};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A one-cpu job of `class`.
fn job_of(class: &str) -> Value {
    json!({
        "priority_class": class,
        "pod_spec": {"containers": [{
            "name": "main",
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}
        }]}
    })
}

/// A fake executor with one 8-cpu node: it runs what it is leased and stops what it is told to
/// kill, at once or, with `stop_after`, only after that long (as a real agent waits out a pod's
/// grace period), reporting the run as running meanwhile.
#[derive(Default)]
struct Executor {
    runs: Vec<Value>,
    stop_after: Duration,
    /// Runs told to stop, and when they will have stopped.
    stopping: Vec<(Value, Instant)>,
}

impl Executor {
    async fn poll(&mut self, s: &Server) {
        let now = Instant::now();
        self.stopping.retain(|(_, at)| *at > now);
        let held: Vec<Value> = self.runs.iter().chain(self.stopping.iter().map(|(r, _)| r)).cloned().collect();
        let v = s.poll("e1", &[node("n1", "8")], &held, 0.2).await;
        let kills: Vec<&Value> = v["kills"].as_array().into_iter().flatten().map(|k| &k["run_id"]).collect();
        let (killed, kept): (Vec<Value>, Vec<Value>) =
            std::mem::take(&mut self.runs).into_iter().partition(|r| kills.contains(&&r["run_id"]));
        self.runs = kept;
        if !self.stop_after.is_zero() {
            self.stopping.extend(killed.into_iter().map(|r| (r, now + self.stop_after)));
        }
        for l in v["leases"].as_array().into_iter().flatten() {
            self.runs.push(json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "running"}));
        }
    }
}

/// Polls as `e` until `queue`'s report for its first pool satisfies `f`; that pool's report.
async fn wait_report(s: &Server, e: &mut Executor, queue: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        e.poll(s).await;
        let (st, r) = s.get(&format!("/v1/queues/{queue}/report")).await;
        assert_eq!(st, 200, "{r}");
        if let Some(p) = r["pools"].as_array().and_then(|p| p.first())
            && f(p)
        {
            return p.clone();
        }
        assert!(Instant::now() < deadline, "queue {queue}: not {what}: {r:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn policies_are_checked_stored_and_shown() {
    let s = Server::start("");
    s.ready().await;
    let (status, body) = s.post("/v1/queues", &json!({"name": "a", "guaranteed": {"cpu": "lots"}})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["field"].as_str().unwrap_or("").starts_with("guaranteed"), "{body}");
    let (status, body) = s.post("/v1/queues", &json!({"name": "a", "preemption_policy": "wall"})).await;
    assert_eq!((status, &body["field"]), (400, &json!("preemption_policy")), "{body}");
    // Nothing was half-stored.
    let (status, _) = s.get("/v1/queues/a").await;
    assert_eq!(status, 404);

    let (status, body) = s.post("/v1/queues", &json!({"name": "a", "guaranteed": {"cpu": "6", "memory": "8Gi"}})).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["guaranteed"], json!({"cpu": "6", "memory": "8Gi"}));
    let out = ok(&s.url, &["queue", "create", "tenant", "--preemption-policy", "fence", "--guaranteed", "cpu=2"]).await;
    let tenant: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!((&tenant["preemption_policy"], &tenant["guaranteed"]), (&json!("fence"), &json!({"cpu": "2"})));
    // A plain queue shows neither field.
    s.create_queue("plain").await;
    let (_, plain) = s.get("/v1/queues/plain").await;
    assert!(plain.get("guaranteed").is_none() && plain.get("preemption_policy").is_none(), "{plain}");
    // Tree flags leave the policies as they are; --guaranteed none removes the guarantee.
    ok(&s.url, &["queue", "update", "tenant", "--priority-offset", "3"]).await;
    let (_, t) = s.get("/v1/queues/tenant").await;
    assert_eq!((&t["preemption_policy"], &t["guaranteed"]), (&json!("fence"), &json!({"cpu": "2"})), "{t}");
    ok(&s.url, &["queue", "update", "tenant", "--guaranteed", "none"]).await;
    let (_, t) = s.get("/v1/queues/tenant").await;
    assert!(t.get("guaranteed").is_none() && t["preemption_policy"] == "fence", "{t}");
    let tree = ok(&s.url, &["queue", "list", "--tree"]).await;
    assert!(tree.contains("a (weight 1, guaranteed cpu=6,memory=8Gi)"), "{tree}");
    assert!(tree.contains("tenant (weight 1, priority_offset 3, preemption fence)"), "{tree}");
}

/// Queue A, guaranteed 6 cpu, asks for the whole 8-cpu node once queue B fills it with
/// preemptible jobs.
async fn a_guaranteed_6_of_bs_8(s: &Server, e: &mut Executor) {
    s.ready().await;
    let (status, body) = s.post("/v1/queues", &json!({"name": "A", "guaranteed": {"cpu": "6"}})).await;
    assert_eq!(status, 201, "{body}");
    s.create_queue("B").await;
    e.poll(s).await;
    s.submit("B", "s", (0..8).map(|_| job_of("preemptible")).collect()).await;
    wait_report(s, e, "B", "holding the node", |p| p["allocated"]["cpu"] == "8").await;
    s.submit("A", "s", (0..8).map(|_| job_of("preemptible")).collect()).await;
}

#[tokio::test]
async fn a_guarantee_takes_room_from_another_queues_preemptible_jobs() {
    let s = Server::start("");
    let mut e = Executor::default();
    a_guaranteed_6_of_bs_8(&s, &mut e).await;
    let a = wait_report(&s, &mut e, "A", "at its guarantee", |p| p["allocated"]["cpu"] == "6").await;
    assert_eq!((&a["guaranteed_share"], a.get("guarantee_scaled")), (&json!(0.75), None), "{a}");
    let b = wait_report(&s, &mut e, "B", "down to the rest", |p| p["allocated"]["cpu"] == "2").await;
    assert!(b.get("guaranteed_share").is_none(), "{b}");
    let (_, metrics) = s.text("/metrics").await;
    assert!(metrics.contains("convoy_queue_guaranteed_share{pool=\"default\",queue=\"A\"} 0.75"), "{metrics}");
}

#[tokio::test]
async fn jobs_placed_in_room_an_eviction_made_keep_it_while_the_evicted_runs_stop() {
    // The evicted runs take two seconds to stop, as pods do: cycles run meanwhile, and must not
    // count the room those runs still use against the jobs that were given it.
    let s = Server::start("");
    let mut e = Executor { stop_after: Duration::from_secs(2), ..Executor::default() };
    a_guaranteed_6_of_bs_8(&s, &mut e).await;
    wait_report(&s, &mut e, "A", "at its guarantee", |p| p["allocated"]["cpu"] == "6").await;
    // Until well after the evicted runs stopped, A keeps all six.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        e.poll(&s).await;
        let (_, r) = s.get("/v1/queues/A/report").await;
        assert_eq!(r["jobs"].get("preempted"), None, "A's jobs were preempted while B's stopped: {r:#}");
        assert_eq!(r["pools"][0]["allocated"]["cpu"], "6", "{r:#}");
    }
    assert!(e.stopping.is_empty(), "the evicted runs have stopped by now");
}

#[tokio::test]
async fn an_urgent_job_inside_a_fence_waits_rather_than_displace_outside_it() {
    // Without fair-share eviction only urgency could make room.
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let text = config(dir, "").replace("[scheduler]", "[scheduler]\nnode_eviction_probability = 0.0");
    let s = Server::start_in(dir, &text);
    s.ready().await;
    s.create_queue("B").await;
    let (status, body) = s.post("/v1/queues", &json!({"name": "T", "preemption_policy": "fence"})).await;
    assert_eq!(status, 201, "{body}");
    let mut e = Executor::default();
    s.submit("B", "s", (0..8).map(|_| job_of("preemptible")).collect()).await;
    wait_report(&s, &mut e, "B", "holding the node", |p| p["allocated"]["cpu"] == "8").await;
    let urgent = s.submit("T", "s", vec![job_of("default")]).await;
    let want = "no room in pool default without preempting jobs outside queue T, whose preemption fence stops its \
                jobs from displacing them (preemption_policy = fence)";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        e.poll(&s).await;
        let j = s.job(&urgent[0]).await;
        if j["reason"] == want {
            assert_eq!(j["state"], "queued", "{j:#}");
            break;
        }
        assert!(Instant::now() < deadline, "not stopped by its fence: {j:#}");
    }
    // Without the fence it takes a preemptible job's place.
    let (status, body) = s.put("/v1/queues/T", &json!({"name": "T"})).await;
    assert_eq!(status, 200, "{body}");
    s.wait_job(&urgent[0], Duration::from_secs(30), "leased once unfenced", |j| j["state"] == "leased").await;
}

/// A job of job priority `priority` and `class` requesting one GPU.
fn gpu_job(priority: u32, class: &str) -> Value {
    let resources = json!({"cpu": "1", "memory": "64Mi", "nvidia.com/gpu": "1"});
    json!({
        "priority": priority,
        "priority_class": class,
        "pod_spec": {"containers": [{
            "name": "main",
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": resources, "limits": resources}
        }]}
    })
}

/// Polls as an executor with one 1-GPU node in pool gpu (running what it is leased, stopping
/// what it is told to kill) until job `id` satisfies `f`.
async fn poll_gpu_until(s: &Server, runs: &mut Vec<Value>, id: &str, what: &str, f: impl Fn(&Value) -> bool) {
    let nodes =
        [json!({"name": "g1", "pool": "gpu", "allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}})];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = s.poll("e1", &nodes, runs, 0.2).await;
        let kills: Vec<&Value> = v["kills"].as_array().into_iter().flatten().map(|k| &k["run_id"]).collect();
        runs.retain(|r| !kills.contains(&&r["run_id"]));
        for l in v["leases"].as_array().into_iter().flatten() {
            runs.push(json!({"run_id": l["run_id"], "job_id": l["job_id"], "state": "running"}));
        }
        let j = s.job(id).await;
        if f(&j) {
            return;
        }
        assert!(Instant::now() < deadline, "job {id} not {what}: {j:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_fenced_job_in_a_priority_pool_preempts_nothing_outside_its_fence() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let pool = "[scheduler.pools.gpu]\npolicy = \"priority\"\npreemption = true\n\n[auth]";
    let s = Server::start_in(dir, &config(dir, "").replace("[auth]", pool));
    s.ready().await;
    s.create_queue("B").await;
    let (status, body) = s.post("/v1/queues", &json!({"name": "T", "preemption_policy": "fence"})).await;
    assert_eq!(status, 201, "{body}");
    let mut runs = Vec::new();
    let low = s.submit("B", "s", vec![gpu_job(5, "preemptible")]).await;
    let started = |j: &Value| j["state"] == "leased" || j["state"] == "running";
    poll_gpu_until(&s, &mut runs, &low[0], "started", started).await;
    // T's priority-1 job could start only by preempting B's priority-5 job: the fence stops it.
    let high = s.submit("T", "s", vec![gpu_job(1, "default")]).await;
    let want = "no room in pool gpu without preempting jobs outside queue T, whose preemption fence stops its \
                jobs from displacing them (preemption_policy = fence)";
    poll_gpu_until(&s, &mut runs, &high[0], "stopped by its fence", |j| j["reason"] == want).await;
    assert!(started(&s.job(&low[0]).await), "B's job keeps running");
    // Without the fence it preempts B's job and starts.
    let (status, body) = s.put("/v1/queues/T", &json!({"name": "T"})).await;
    assert_eq!(status, 200, "{body}");
    poll_gpu_until(&s, &mut runs, &high[0], "started once unfenced", started).await;
    assert!(!started(&s.job(&low[0]).await), "B's job was preempted");
}
