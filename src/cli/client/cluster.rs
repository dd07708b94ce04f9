//! `convoy cluster`: the Raft cluster's members, leader, term and replication progress, adding
//! and removing servers, and the nodes of the executors with their quarantines.

use super::http::{Client, print_json};
use clap::{Args, Subcommand};
use convoy::model::api::{AddMemberRequest, ClusterStatus, MembershipChange, NodeList, NodeView};
use convoy::model::{ExecutorName, NodeName};
use reqwest::Method;

/// `convoy cluster [status|add|remove|nodes|lift-quarantine]`.
#[derive(Args, Debug)]
pub(crate) struct ClusterArgs {
    #[command(subcommand)]
    cmd: Option<ClusterCommand>,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Members, leader, term, and each member's replication progress (the default).
    Status {
        /// Print the leader's (or this server's) status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a server: it joins as a learner and votes once it has caught up. Start it first with
    /// a `[cluster] peers` list naming the members and itself.
    Add {
        /// Its node id (`server.node_id` in its configuration).
        id: u64,
        /// Its address as the other servers reach it (its `server.advertise`).
        addr: String,
        /// Seconds to wait for it to catch up (at most 30; the change goes on after that).
        #[arg(long, default_value_t = 20.0)]
        wait: f64,
    },
    /// Remove a server (stop it afterwards).
    Remove {
        /// Its node id.
        id: u64,
    },
    /// The executors' nodes: pool, jobs, failures of the node counted toward quarantine, and
    /// state (ready, cordoned, quarantined until when and why).
    Nodes {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lift a node's quarantine (admins): it takes new jobs again at once.
    LiftQuarantine {
        /// The node's executor.
        executor: ExecutorName,
        /// The node.
        node: NodeName,
    },
}

pub(super) async fn run(c: &Client, args: ClusterArgs) -> anyhow::Result<()> {
    match args.cmd.unwrap_or(ClusterCommand::Status { json: false }) {
        ClusterCommand::Status { json } => {
            let status = with_progress(c).await?;
            if json {
                return print_json(&status);
            }
            print!("{}", render(&status));
            Ok(())
        }
        ClusterCommand::Add { id, addr, wait } => {
            let path = format!("/v1/cluster/members?wait_seconds={wait}");
            let change: MembershipChange =
                c.send_json(Method::POST, &path, &AddMemberRequest { id, addr: addr.clone() }).await?;
            match change.outcome.as_str() {
                "voter" => println!("node {id} at {addr} is a voting member"),
                _ => println!(
                    "node {id} at {addr} is a learner catching up; the leader makes it a voter once it has \
                     (see `convoy cluster`)"
                ),
            }
            print!("{}", render(&change.cluster));
            Ok(())
        }
        ClusterCommand::Remove { id } => {
            let change: MembershipChange =
                c.send(c.request(Method::DELETE, &format!("/v1/cluster/members/{id}")), "DELETE").await?;
            println!("node {id} is no longer a member; stop it now");
            print!("{}", render(&change.cluster));
            Ok(())
        }
        ClusterCommand::Nodes { json } => {
            let list: NodeList = c.get("/v1/cluster/nodes").await?;
            if json {
                return print_json(&list);
            }
            print!("{}", render_nodes(&list.nodes));
            Ok(())
        }
        ClusterCommand::LiftQuarantine { executor, node } => {
            let path = format!("/v1/cluster/nodes/{executor}/{node}/quarantine");
            let _: NodeView = c.send(c.request(Method::DELETE, &path), "DELETE").await?;
            println!("node {node} of executor {executor} is no longer quarantined");
            Ok(())
        }
    }
}

/// Nodes as a table: executor, node, pool, jobs, recent failures, state and why.
fn render_nodes(nodes: &[NodeView]) -> String {
    if nodes.is_empty() {
        return "no nodes: no executor has reported any\n".to_string();
    }
    let rows: Vec<[String; 7]> = nodes
        .iter()
        .map(|n| {
            let (state, why) = match (&n.quarantine, n.unschedulable, n.reported) {
                (Some(q), _, _) => (format!("quarantined until {}", q.until), q.reason.clone()),
                (None, true, _) => ("cordoned".to_string(), String::new()),
                (None, false, true) => match &n.reserved_for {
                    Some(r) => (
                        format!("reserved for job {}", r.job_id),
                        match &r.expected_start {
                            Some(at) => format!("queue {}; expected to fit at {at}", r.queue),
                            None => format!("queue {}", r.queue),
                        },
                    ),
                    None => ("ready".to_string(), String::new()),
                },
                (None, false, false) => ("not reported".to_string(), String::new()),
            };
            let pool = n.pool.as_ref().map_or("-".to_string(), |p| p.to_string());
            [
                n.executor.to_string(),
                n.name.to_string(),
                pool,
                n.jobs.to_string(),
                n.recent_failures.to_string(),
                state,
                why,
            ]
        })
        .collect();
    let head = ["EXECUTOR", "NODE", "POOL", "JOBS", "FAILURES", "STATE", "REASON"];
    let width = |i: usize| rows.iter().map(|r| r[i].len()).chain([head[i].len()]).max().unwrap_or(0);
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let line = |cells: [&str; 7]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(&format!("{c:<w$}  ", w = widths[i]));
        }
        l.trim_end().to_string() + "\n"
    };
    let mut out = line(head);
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6]]));
    }
    out
}

/// The status of the server asked, or, when it is a follower that knows the leader, the
/// leader's, which alone knows how far each member is.
async fn with_progress(c: &Client) -> anyhow::Result<ClusterStatus> {
    let here: ClusterStatus = c.get("/v1/cluster").await?;
    if here.state == "Leader" {
        return Ok(here);
    }
    let Some(addr) = here.leader_addr.clone() else { return Ok(here) };
    match c.with_base(&addr).get::<ClusterStatus>("/v1/cluster").await {
        Ok(leader) if leader.state == "Leader" => Ok(leader),
        // The leader's address may not be reachable from here: the local view still helps.
        _ => Ok(here),
    }
}

/// A status as a heading and a table of members.
fn render(s: &ClusterStatus) -> String {
    let mut out = String::new();
    let leader = match (s.leader, &s.leader_addr) {
        (Some(id), Some(addr)) => format!("node {id} at {addr}"),
        (Some(id), None) => format!("node {id}"),
        _ => "none (an election is under way)".to_string(),
    };
    out.push_str(&format!("term {}, leader {leader}\n", s.term));
    out.push_str(&format!(
        "seen from node {} ({}{}): last log index {}, applied {}{}\n",
        s.id,
        s.state,
        if s.state == "Leader" && !s.serving { ", NOT serving: no recent majority" } else { "" },
        opt(s.last_log_index),
        opt(s.last_applied),
        match s.snapshots_installed {
            0 => String::new(),
            n => format!(", {n} snapshot(s) installed since it started"),
        },
    ));
    let rows: Vec<[String; 5]> = s
        .members
        .iter()
        .map(|m| {
            let role = if Some(m.id) == s.leader {
                "leader"
            } else if m.voter {
                "voter"
            } else {
                "learner"
            };
            [m.id.to_string(), m.addr.clone(), role.to_string(), opt(m.matched_index), opt(m.lag)]
        })
        .collect();
    let head = ["ID", "ADDRESS", "ROLE", "MATCHED", "LAG"];
    let width = |i: usize| rows.iter().map(|r| r[i].len()).chain([head[i].len()]).max().unwrap_or(0);
    let widths: Vec<usize> = (0..5).map(width).collect();
    let line = |cells: [&str; 5]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(&format!("{c:<w$}  ", w = widths[i]));
        }
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(head));
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
    out
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy::model::api::{ClusterMember, QuarantineView};

    #[test]
    fn the_node_table_shows_quarantines_with_their_reason() {
        let node = |name: &str, unschedulable, quarantine: Option<QuarantineView>| NodeView {
            executor: "e1".parse().unwrap(),
            name: name.parse().unwrap(),
            pool: Some("default".parse().unwrap()),
            reported: true,
            unschedulable,
            allocatable: Default::default(),
            jobs: 2,
            recent_failures: 1,
            quarantine,
            reserved_for: None,
        };
        let q = QuarantineView {
            since: "2026-01-01T00:00:00.000Z".into(),
            until: "2026-01-01T00:30:00.000Z".into(),
            reason: "3 failures of the node within 10m: image_pull ×3".into(),
        };
        let text = render_nodes(&[node("n1", false, None), node("n2", true, None), node("n3", false, Some(q))]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "EXECUTOR  NODE  POOL     JOBS  FAILURES  STATE                                       REASON"
        );
        assert_eq!(lines[1], "e1        n1    default  2     1         ready");
        assert_eq!(lines[2], "e1        n2    default  2     1         cordoned");
        assert_eq!(
            lines[3],
            "e1        n3    default  2     1         quarantined until 2026-01-01T00:30:00.000Z  3 failures of the node within 10m: image_pull ×3"
        );
        assert_eq!(render_nodes(&[]), "no nodes: no executor has reported any\n");
    }

    #[test]
    fn the_table_names_roles_and_progress() {
        let member = |id: u64, voter, matched: Option<u64>| ClusterMember {
            id,
            addr: format!("https://convoy-{id}:8080"),
            voter,
            matched_index: matched,
            lag: matched.map(|m| 120 - m),
        };
        let s = ClusterStatus {
            id: 1,
            state: "Leader".into(),
            serving: true,
            term: 3,
            leader: Some(1),
            leader_addr: Some("https://convoy-1:8080".into()),
            last_log_index: Some(120),
            last_applied: Some(120),
            snapshot_index: None,
            purged_index: None,
            millis_since_quorum_ack: Some(40),
            leader_changes: 0,
            snapshots_installed: 0,
            members: vec![member(1, true, None), member(2, true, Some(118)), member(4, false, Some(20))],
        };
        let text = render(&s);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "term 3, leader node 1 at https://convoy-1:8080");
        assert_eq!(lines[2], "ID  ADDRESS                ROLE     MATCHED  LAG");
        assert_eq!(lines[3], "1   https://convoy-1:8080  leader   -        -");
        assert_eq!(lines[4], "2   https://convoy-2:8080  voter    118      2");
        assert_eq!(lines[5], "4   https://convoy-4:8080  learner  20       100");
    }
}
