//! The executor API client on its own: errors that name the server, failover order.

use super::control_plane::ControlPlane;
use convoy::agent::client::{ClientError, ExecutorClient};
use convoy::model::ExecutorName;
use convoy::model::api::{EventsRequest, LeaseRequest};

fn empty_poll() -> LeaseRequest {
    LeaseRequest { nodes: vec![], runs: vec![], wait_seconds: Some(0.0), max_leases: Some(1) }
}

fn executor() -> ExecutorName {
    ExecutorName::new("e1").expect("name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_server_and_the_cause() {
    let cp = ControlPlane::start(Some("right"));
    // A path that is not the executor API: something answers, but not Convoy.
    let wrong_path = format!("{}/not-convoy", cp.url());
    let c = ExecutorClient::new(std::slice::from_ref(&wrong_path), executor(), Some("right".into())).expect("client");
    let e = c.lease(&empty_poll()).await.expect_err("wrong address");
    assert!(matches!(e, ClientError::WrongAddress { status: 404, .. }), "{e}");
    assert!(e.to_string().contains(&wrong_path), "{e}");

    let c = ExecutorClient::new(&[cp.url()], executor(), Some("wrong".into())).expect("client");
    let e = c.events(&EventsRequest { events: vec![] }).await.expect_err("unauthorized");
    assert!(e.is_unauthorized(), "{e}");
    assert!(e.to_string().contains(&cp.url()) && e.to_string().contains("CONVOY_EXECUTOR_TOKEN"), "{e}");

    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let c = ExecutorClient::new(std::slice::from_ref(&dead_url), executor(), None).expect("client");
    let e = c.lease(&empty_poll()).await.expect_err("unreachable");
    assert!(matches!(e, ClientError::Unreachable { .. }) && e.to_string().contains(&dead_url), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_skips_bad_addresses_and_sticks_to_the_one_that_answers() {
    let good = ControlPlane::start(None);
    let other = ControlPlane::start(None);
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let servers = [dead_url, format!("{}/not-convoy", other.url()), good.url(), other.url()];
    let c = ExecutorClient::new(&servers, executor(), None).expect("client");
    c.lease(&empty_poll()).await.expect("the third address answers");
    assert_eq!(c.current_server(), good.url());
    c.events(&EventsRequest { events: vec![] }).await.expect("events go to the same server");
    assert_eq!(good.script().hits.get("events"), Some(&1));
    assert_eq!(other.script().poll_count, 0);
}
