//! Stored formats across versions, on real `convoy server` processes: a data directory written by
//! an earlier release opens with everything in it, and one written by a newer release is refused
//! with a message that says so.

use crate::common::{self, Server, config};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A copy of the fixture data directory `name` in a fresh temporary directory, at `<tmp>/data`
/// (where [`config`] puts it).
fn copy_fixture(name: &str) -> tempfile::TempDir {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    for file in ["convoy.redb", "raft.redb"] {
        std::fs::copy(src.join(file), data.join(file)).expect("copy fixture");
    }
    tmp
}

fn by_client_id(jobs: &Value) -> std::collections::BTreeMap<String, Value> {
    jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| (j["client_id"].as_str().expect("client id").to_string(), j.clone()))
        .collect()
}

/// The fixture's jobs finished when it was written: a retention that keeps them whatever the
/// date (the default, 7 days, would delete `c1` a week after the fixture was made).
const KEEP: &str = "job_retention = \"36500days\"";

#[tokio::test]
async fn a_data_dir_of_state_schema_2_and_log_format_1_opens_with_everything_in_it() {
    let tmp = copy_fixture("datadir-v2");
    let dir = tmp.path();
    let mut server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;

    let (s, q) = server.get("/v1/queues/physics").await;
    assert_eq!(s, 200, "{q}");
    assert_eq!(
        (q["priority_factor"].as_f64(), &q["owners"], &q["labels"]["dept"]),
        (Some(2.0), &json!(["alice"]), &json!("science"))
    );

    let (s, jobs) = server.get("/v1/jobs?queue=physics&job_set=run-1").await;
    assert_eq!(s, 200, "{jobs}");
    let jobs = by_client_id(&jobs);
    let state = |c: &str| jobs[c]["state"].as_str().unwrap_or_default().to_string();
    assert_eq!((state("c1"), state("c2"), state("c3")), ("succeeded".into(), "running".into(), "queued".into()));
    assert_eq!(jobs["c1"]["id"], "01M83SZBRQEV3E1YK9CW9XG4ZQ");
    let running = &jobs["c2"]["runs"][0];
    assert_eq!(
        (&running["executor"], &running["node"], &running["state"]),
        (&json!("ex1"), &json!("n1"), &json!("running"))
    );
    assert_eq!(jobs["c2"]["requests"]["cpu"], "2");
    // Migration 7 indexed the runs of the old jobs by id; the jobs have no namespace, the runs no pod.
    let c1_run = jobs["c1"]["runs"][0]["run_id"].as_str().expect("c1's run").to_string();
    for (client, run) in [("c1", &c1_run), ("c2", &running["run_id"].as_str().expect("c2's run").to_string())] {
        let (s, r) = server.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(
            (s, &r["job_id"], &r["namespace"], &r["run"]["pod"]),
            (200, &jobs[client]["id"], &json!(null), &json!(null)),
            "{r}"
        );
    }

    // The finished job's output and events are where the old server left them.
    assert_eq!(server.logs("01M83SZBRQEV3E1YK9CW9XG4ZQ").await, "hello\n");
    let detail = server.job("01M83SZBRQEV3E1YK9CW9XG4ZQ").await;
    let kinds: Vec<&str> = detail["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["submitted", "queued", "leased", "running", "succeeded"]);

    // Resubmitting under an old client id is still idempotent, and new writes go to the old log.
    let again =
        server.submit("physics", "run-1", vec![json!({"client_id": "c3", "pod_spec": common::pod("1", "true")})]).await;
    assert_eq!(again, vec!["01M83SZBRQEV3E1YK9CW9XG4ZS".to_string()]);
    let new = server.submit("physics", "run-2", vec![common::job("100m")]).await;
    assert_eq!(server.terminate(), Some(0), "clean stop:\n{}", server.log());

    // And it all reads back after a restart.
    let mut server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    assert_eq!(server.job(&new[0]).await["job_set"], "run-2");
    assert_eq!(server.job("01M83SZBRQEV3E1YK9CW9XG4ZR").await["state"], "running");
    assert_eq!(server.terminate(), Some(0), "clean stop:\n{}", server.log());

    // The migration indexed the finished job: a short retention deletes it, and only it.
    let server = Server::start_in(dir, &config(dir, "job_retention = \"1s\""));
    server.ready().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/v1/jobs/01M83SZBRQEV3E1YK9CW9XG4ZQ").await.0 != 404 {
        assert!(Instant::now() < deadline, "the migrated finished job was not purged:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.job("01M83SZBRQEV3E1YK9CW9XG4ZR").await["state"], "running");
    assert_eq!(server.job("01M83SZBRQEV3E1YK9CW9XG4ZS").await["state"], "queued");
    // Its run went out of the index with it.
    assert_eq!(server.get(&format!("/v1/runs/{c1_run}")).await.0, 404);
    let c1 =
        server.submit("physics", "run-1", vec![json!({"client_id": "c1", "pod_spec": common::pod("1", "true")})]).await;
    assert_ne!(c1, vec!["01M83SZBRQEV3E1YK9CW9XG4ZQ".to_string()], "c1 names a new job");
}

#[tokio::test]
async fn a_data_dir_of_state_schema_6_opens_with_its_runs_indexed() {
    // Written by `convoy up` of schema 6 (log format 6, marked 5): job `done` (client id) succeeded,
    // job `live` was running when the server stopped; queue `default`, job set `set-6`.
    let tmp = copy_fixture("datadir-v6");
    let dir = tmp.path();
    let mut server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    let (s, jobs) = server.get("/v1/jobs?queue=default&job_set=set-6").await;
    assert_eq!(s, 200, "{jobs}");
    let jobs = by_client_id(&jobs);
    let expected = [
        ("done", "01M852HR31ZDRXH66DHCFAMZF3", "01M852HRE6WGRH5J3N5YMYA6TB"),
        ("live", "01M852HYKPKN8Q243RZY4JKHT5", "01M852HYMT3JEQ3TZDY2XZD1W5"),
    ];
    for (client, job, run) in expected {
        assert_eq!((&jobs[client]["id"], &jobs[client]["namespace"]), (&json!(job), &json!(null)));
        assert_eq!((&jobs[client]["runs"][0]["run_id"], &jobs[client]["runs"][0]["pod"]), (&json!(run), &json!(null)));
        let (s, r) = server.get(&format!("/v1/runs/{run}")).await;
        assert_eq!((s, &r["job_id"], &r["job_set"]), (200, &json!(job), &json!("set-6")), "{r}");
    }
    assert_eq!(jobs["done"]["state"], "succeeded");
    // New jobs take namespaces, and everything reads back after a restart.
    let body = json!({"queue": "default", "job_set": "set-7", "jobs": [{"pod_spec": common::pod("1", "true"), "namespace": "team-a"}]});
    let (s, r) = server.post("/v1/jobs", &body).await;
    assert_eq!(s, 200, "{r}");
    let new = r["job_ids"][0].as_str().expect("id").to_string();
    assert_eq!(server.terminate(), Some(0), "clean stop:\n{}", server.log());
    let server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    assert_eq!(server.job(&new).await["namespace"], "team-a");
    let (s, r) = server.get("/v1/runs/01M852HRE6WGRH5J3N5YMYA6TB").await;
    assert_eq!((s, &r["job_id"]), (200, &json!("01M852HR31ZDRXH66DHCFAMZF3")), "{r}");
}

#[tokio::test]
async fn a_data_dir_of_state_schema_7_opens_and_new_jobs_have_owners() {
    // Written by `convoy server` of schema 7 (log format 7): queue `default`, job set `set-7`, job
    // `done` (client id) succeeded on executor `vm`, job `live` running there when it stopped.
    let tmp = copy_fixture("datadir-v7");
    let dir = tmp.path();
    let mut server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    let (s, jobs) = server.get("/v1/jobs?queue=default&job_set=set-7").await;
    assert_eq!(s, 200, "{jobs}");
    let jobs = by_client_id(&jobs);
    let expected = [
        ("done", "01M865YBGHZKV1WHMRM51BBHDW", "01M865YBGQ5YHH998VFQV761QE", "succeeded"),
        ("live", "01M865YBGHZKV1WHMRM51BBHDX", "01M865YBGQJ21XWH6JFSPTS9CT", "running"),
    ];
    for (client, job, run, state) in expected {
        let j = &jobs[client];
        assert_eq!((&j["id"], &j["state"], &j["owner"]), (&json!(job), &json!(state), &json!(null)), "{j}");
        assert_eq!(j["runs"][0]["run_id"], run);
    }
    let (s, r) = server.get("/v1/jobs/01M865YBGHZKV1WHMRM51BBHDW/logs").await;
    assert_eq!(s, 200, "{r}");
    // New jobs get their owner (the anonymous principal with auth off), kept across a restart.
    let body = json!({"queue": "default", "job_set": "set-8", "jobs": [{"pod_spec": common::pod("1", "true")}]});
    let (s, r) = server.post("/v1/jobs", &body).await;
    assert_eq!(s, 200, "{r}");
    let new = r["job_ids"][0].as_str().expect("id").to_string();
    assert_eq!(server.job(&new).await["owner"], "anonymous");
    assert_eq!(server.terminate(), Some(0), "clean stop:\n{}", server.log());
    let server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    assert_eq!(server.job(&new).await["owner"], "anonymous");
    assert_eq!(server.job("01M865YBGHZKV1WHMRM51BBHDX").await["owner"], json!(null));
}

#[tokio::test]
async fn a_data_dir_of_state_schema_8_opens_and_ended_runs_keep_what_they_used() {
    // Written by `convoy server` of schema 8 (log format 8): queue `default`, job set `set-8`, job
    // `done` (client id) succeeded on executor `vm`, job `live` running there when it stopped.
    let tmp = copy_fixture("datadir-v8");
    let dir = tmp.path();
    let mut server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    let (s, jobs) = server.get("/v1/jobs?queue=default&job_set=set-8").await;
    assert_eq!(s, 200, "{jobs}");
    let jobs = by_client_id(&jobs);
    let expected = [
        ("done", "01M8BEMEMSV5PHFDY3A7F2PPHQ", "01M8BEMF4T1S0FBX7W6H4EGVMK", "succeeded"),
        ("live", "01M8BEMEMSV5PHFDY3A7F2PPHR", "01M8BEMF4TZDC1XABYGM4DGMAS", "running"),
    ];
    for (client, job, run, state) in expected {
        let j = &jobs[client];
        assert_eq!((&j["id"], &j["state"], &j["owner"]), (&json!(job), &json!(state), &json!("anonymous")), "{j}");
        assert_eq!(j["runs"][0]["run_id"], run);
        assert_eq!(j["runs"][0].get("usage"), None, "runs that ended before were not measured: {j}");
    }
    // The running job ends now, with what it used: kept, across a restart too.
    let usage = json!({"cpu_ms": 1250, "peak_memory_bytes": 67_108_864});
    let events = vec![json!({"run_id": "01M8BEMF4TZDC1XABYGM4DGMAS", "job_id": "01M8BEMEMSV5PHFDY3A7F2PPHR",
        "kind": "failed", "exit_code": 2, "usage": usage})];
    assert_eq!(server.report("vm", events).await, 1);
    let j = server.job("01M8BEMEMSV5PHFDY3A7F2PPHR").await;
    assert_eq!((&j["state"], &j["runs"][0]["usage"]), (&json!("failed"), &usage), "{j}");
    assert_eq!(server.terminate(), Some(0), "clean stop:\n{}", server.log());
    let server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    assert_eq!(server.job("01M8BEMEMSV5PHFDY3A7F2PPHR").await["runs"][0]["usage"], usage);
    let (s, list) = server.get("/v1/jobs?queue=default&job_set=set-8&state=failed").await;
    assert_eq!((s, &list["jobs"][0]["runs"][0]["usage"]), (200, &usage), "{list}");
}

/// Runs `convoy server` on `dir`, expecting it to refuse to start; returns what it printed.
fn refused_start(dir: &Path) -> String {
    std::fs::write(dir.join("convoy.toml"), config(dir, "")).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_convoy"))
        .arg("server")
        .arg("--config")
        .arg(dir.join("convoy.toml"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convoy starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("convoy server started on a data dir it must refuse");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("stderr");
    assert!(!status.success(), "convoy server must exit with an error: {err}");
    err
}

fn set_meta(db: &Path, table: &str, key: &str, value: &[u8]) {
    let db = redb::Database::open(db).expect("open fixture");
    let tx = db.begin_write().expect("write");
    {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(table);
        tx.open_table(def).expect("table").insert(key, value).expect("insert");
    }
    tx.commit().expect("commit");
}

#[test]
fn a_state_database_of_a_newer_schema_is_refused() {
    let tmp = copy_fixture("datadir-v2");
    let before = std::fs::read(tmp.path().join("data/raft.redb")).unwrap();
    set_meta(&tmp.path().join("data/convoy.redb"), "meta", "schema_version", &99u32.to_be_bytes());
    let err = refused_start(tmp.path());
    assert!(err.contains("schema version 99") && err.contains("written by a newer convoy"), "{err}");
    assert_eq!(std::fs::read(tmp.path().join("data/raft.redb")).unwrap(), before, "the log was not touched");
}

#[test]
fn a_raft_log_of_a_newer_format_is_refused() {
    let tmp = copy_fixture("datadir-v2");
    let newer = convoy::record::LOG_FORMAT_VERSION + 1;
    set_meta(&tmp.path().join("data/raft.redb"), "raft_meta", "format_version", &newer.to_be_bytes());
    let err = refused_start(tmp.path());
    assert!(err.contains(&format!("format version {newer}")) && err.contains("written by a newer convoy"), "{err}");
}

/// The inline snapshot a release of log format 1 kept in `raft_snapshot`: the state tables of
/// `convoy.redb`, copied into one state schema 2 `SnapshotRecord` (as that release's export did),
/// with the meta of its applied log id and membership.
fn old_inline_snapshot(state_db: &Path) -> (Vec<u8>, Vec<u8>) {
    use convoy::record::raft::{LogIdRecord, SnapshotMetaRecord, StoredMembershipRecord};
    use convoy::record::{SnapshotRecord, decode, encode};
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    let db = redb::Database::open(state_db).expect("open state");
    let tx = db.begin_read().expect("read");
    let bytes = |name: &str| -> Vec<(String, Vec<u8>)> {
        let t = tx.open_table(TableDefinition::<&str, &[u8]>::new(name)).expect("table");
        t.iter()
            .expect("iter")
            .map(|r| r.expect("row"))
            .map(|(k, v)| (k.value().to_string(), v.value().to_vec()))
            .collect()
    };
    let ids = |name: &str| -> Vec<([u8; 16], Vec<u8>)> {
        let t = tx.open_table(TableDefinition::<&[u8; 16], &[u8]>::new(name)).expect("table");
        t.iter().expect("iter").map(|r| r.expect("row")).map(|(k, v)| (*k.value(), v.value().to_vec())).collect()
    };
    let raw = |name: &str| -> Vec<(Vec<u8>, Vec<u8>)> {
        let t = tx.open_table(TableDefinition::<&[u8], &[u8]>::new(name)).expect("table");
        t.iter()
            .expect("iter")
            .map(|r| r.expect("row"))
            .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
            .collect()
    };
    let meta = bytes("meta");
    let snapshot = SnapshotRecord {
        schema_version: 2,
        meta: meta.iter().filter(|(k, _)| k != "schema_version").cloned().collect(),
        queues: bytes("queues"),
        jobs: ids("jobs"),
        payloads: ids("payloads"),
        live_jobs: {
            let t = tx.open_table(TableDefinition::<&[u8; 16], ()>::new("live_jobs")).expect("table");
            t.iter().expect("iter").map(|r| *r.expect("row").0.value()).collect()
        },
        job_sets: {
            let t = tx.open_table(TableDefinition::<&[u8], ()>::new("job_sets")).expect("table");
            t.iter().expect("iter").map(|r| r.expect("row").0.value().to_vec()).collect()
        },
        events: raw("event_chunks"),
        event_seqs: {
            let t = tx.open_table(TableDefinition::<&[u8], u64>::new("event_seqs")).expect("table");
            t.iter().expect("iter").map(|r| r.expect("row")).map(|(k, v)| (k.value().to_vec(), v.value())).collect()
        },
        client_ids: {
            let t = tx.open_table(TableDefinition::<&[u8], &[u8; 16]>::new("client_ids")).expect("table");
            t.iter().expect("iter").map(|r| r.expect("row")).map(|(k, v)| (k.value().to_vec(), *v.value())).collect()
        },
        executors: bytes("executors"),
    };
    let get = |k: &str| meta.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).expect("raft meta");
    let applied: Option<LogIdRecord> = decode(&get("raft_applied")).expect("applied");
    let membership: StoredMembershipRecord = decode(&get("raft_membership")).expect("membership");
    let meta = SnapshotMetaRecord {
        last_log_id: applied,
        last_membership: membership,
        snapshot_id: "1-1-6-1763900000000".into(),
    };
    (encode(&meta).expect("meta"), encode(&snapshot).expect("snapshot"))
}

#[tokio::test]
async fn an_inline_snapshot_of_log_format_1_becomes_a_snapshot_file() {
    let tmp = copy_fixture("datadir-v2");
    let dir = tmp.path();
    let data = dir.join("data");
    let (meta, snapshot) = old_inline_snapshot(&data.join("convoy.redb"));
    set_meta(&data.join("raft.redb"), "raft_snapshot", "meta", &meta);
    set_meta(&data.join("raft.redb"), "raft_snapshot", "data", &snapshot);

    let mut server = Server::start_in(dir, &config(dir, KEEP));
    server.ready().await;
    assert!(server.log().contains("converted the inline raft snapshot"), "{}", server.log());
    // The same state is still served, and the snapshot is a whole file of the new format.
    assert_eq!(server.job("01M83SZBRQEV3E1YK9CW9XG4ZR").await["state"], "running");
    let file = data.join("snapshots/1-1-6-1763900000000.snap");
    let reader = convoy::raft::SnapshotReader::open(&file).expect("a snapshot file");
    assert_eq!(reader.meta().last_log_id.map(|l| l.index), Some(6));
    assert!(reader.verify().expect("whole") > 10, "it holds the rows");
    // Usable: installed into an empty store, it is the state the old release snapshotted, in
    // today's schema: the conversion indexed the finished job `c1` exactly as the migration of the
    // state database did (the digests cover the `finished` index).
    let check = tempfile::tempdir().unwrap();
    let store = convoy::store::Store::open(&check.path().join("convoy.redb")).unwrap();
    let mut frames = convoy::raft::SnapshotReader::open(&file).unwrap();
    store.import_stream(&mut frames, &[], 1000).unwrap();
    let (s, digest) = server.get("/v1/cluster/digest").await;
    assert_eq!(s, 200, "{digest}");
    // Nothing was written since: the served state is the snapshot's, row for row. Its applied
    // index may have moved past 6 by a leader's blank entry (one more after a re-election on a
    // starved machine), which changes no row.
    assert!(digest["applied_index"].as_u64().is_some_and(|i| i >= 6), "{digest}");
    assert_eq!(store.digest().unwrap().hex(), digest["digest"].as_str().unwrap(), "{digest}");
    assert_eq!(server.terminate(), Some(0), "clean stop:\n{}", server.log());
    // The log is of today's format now (an older release refuses it), its inline bytes gone.
    use redb::ReadableDatabase;
    let db = redb::Database::open(data.join("raft.redb")).unwrap();
    let tx = db.begin_read().unwrap();
    let raft_meta = tx.open_table(redb::TableDefinition::<&str, &[u8]>::new("raft_meta")).unwrap();
    assert_eq!(
        raft_meta.get("format_version").unwrap().map(|v| v.value().to_vec()),
        Some(convoy::record::LOG_FORMAT_VERSION.to_be_bytes().to_vec())
    );
    let snap = tx.open_table(redb::TableDefinition::<&str, &[u8]>::new("raft_snapshot")).unwrap();
    assert!(snap.get("data").unwrap().is_none());
    assert!(snap.get("file").unwrap().is_some());
}
