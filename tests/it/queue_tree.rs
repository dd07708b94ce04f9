//! The queue tree over HTTP and the CLI: a parent must exist, no cycles, jobs go to leaves only,
//! a queue with jobs does not become a parent, a parent with children is not deleted, offsets
//! are i32; `convoy queue list --tree` indents children under their parents.

use crate::cli_client::ok;
use crate::common::{Server, job};
use serde_json::json;

#[tokio::test]
async fn the_tree_rules_and_the_cli_listing() {
    let s = Server::start("");
    s.ready().await;
    let (status, body) = s.post("/v1/queues", &json!({"name": "orphan", "parent": "nobody"})).await;
    assert_eq!((status, &body["field"]), (400, &json!("parent")), "{body}");
    assert!(body["detail"].as_str().unwrap_or("").contains("does not exist"), "{body}");

    let (status, body) = s.post("/v1/queues", &json!({"name": "big", "priority_offset": 3_000_000_000u64})).await;
    assert_eq!((status, &body["field"]), (400, &json!("priority_offset")), "{body}");

    let (status, _) =
        s.post("/v1/queues", &json!({"name": "tenant", "priority_policy": "fence", "priority_offset": 10})).await;
    assert_eq!(status, 201);
    let out = ok(&s.url, &["queue", "create", "team", "--parent", "tenant", "--sort-priority", "disabled"]).await;
    let team: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!((&team["parent"], &team["sort_priority"]), (&json!("tenant"), &json!("disabled")));
    let (status, _) = s.post("/v1/queues", &json!({"name": "sub", "parent": "team"})).await;
    assert_eq!(status, 201);

    // tenant under its grandchild: a cycle.
    let (status, body) = s.put("/v1/queues/tenant", &json!({"name": "tenant", "parent": "sub"})).await;
    assert_eq!((status, &body["field"]), (400, &json!("parent")), "{body}");
    assert!(body["detail"].as_str().unwrap_or("").contains("own ancestor"), "{body}");

    // Jobs go to leaves only.
    let (status, body) = s.post("/v1/jobs", &json!({"queue": "team", "job_set": "s", "jobs": [job("1")]})).await;
    assert_eq!((status, &body["field"]), (409, &json!("queue")), "{body}");
    assert!(body["detail"].as_str().unwrap_or("").contains("leaf queues only"), "{body}");
    let (status, body) = s.post("/v1/jobs", &json!({"queue": "sub", "job_set": "s", "jobs": [job("1")]})).await;
    assert_eq!(status, 200, "{body}");

    // sub holds a job: it cannot become a parent.
    let (status, body) = s.post("/v1/queues", &json!({"name": "below-sub", "parent": "sub"})).await;
    assert_eq!((status, &body["field"]), (409, &json!("parent")), "{body}");

    // A parent with children is not deleted, even with force.
    let (status, body) = s.delete("/v1/queues/team?force=true").await;
    assert_eq!(status, 409, "{body}");
    assert!(body["detail"].as_str().unwrap_or("").contains("parent of sub"), "{body}");

    let tree = ok(&s.url, &["queue", "list", "--tree"]).await;
    assert_eq!(
        tree,
        "tenant (weight 1, priority_offset 10, fence)\n  team (weight 1, sort_priority disabled)\n    sub (weight 1)\n"
    );
    // The update flags change the stored queue; --top-level takes it out of the tree.
    let out = ok(&s.url, &["queue", "update", "team", "--priority-offset", "-5", "--top-level"]).await;
    let team: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!((&team["parent"], &team["priority_offset"]), (&json!(null), &json!(-5)));
    let (_, stored) = s.get("/v1/queues/team").await;
    assert_eq!((&stored["parent"], &stored["sort_priority"]), (&json!(null), &json!("disabled")));
}
