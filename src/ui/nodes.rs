//! The nodes page: each executor with the time of its last report, and each of its nodes with
//! what is allocated there (bars of CPU and memory), its pool, labels, taints, cordon and
//! quarantine; and the cluster page: the Raft members as this server sees them.

use super::bars::{self, Bar};
use super::html::{escape, page_for};
use super::session::{Viewer, signed_in_line};
use crate::control::Control;
use crate::model::human;
use crate::model::{ResourceName, Resources};
use crate::service::nodes::node_views;
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// `GET /ui/nodes`.
pub(crate) async fn nodes_handler(State(app): State<Arc<Control>>, Viewer(principal): Viewer) -> Response {
    let now = crate::control::now_ms();
    let user = signed_in_line(&app, &principal);
    let mut body = String::new();
    let st = app.state();
    // What the jobs with a live run hold, per (executor, node).
    let mut allocated: BTreeMap<(String, String), Resources> = BTreeMap::new();
    for j in st.jobs_with_active_runs() {
        if let Some(run) = j.record.active_run() {
            allocated
                .entry((run.executor.as_str().to_string(), run.node.as_str().to_string()))
                .or_default()
                .add(&j.info.requirements.requests);
        }
    }
    let mut views = node_views(&st, &app.config.scheduler.quarantine, now);
    crate::service::nodes::mark_reserved(&mut views, &app);
    let health: BTreeMap<(String, String), _> =
        views.into_iter().map(|v| ((v.executor.as_str().to_string(), v.name.as_str().to_string()), v)).collect();
    body.push_str("<div id=\"nodes\" data-live=\"\">");
    if st.executors().next().is_none() {
        body.push_str("<p>No executor has reported nodes yet.</p>");
    }
    body.push_str(
        "<p class=\"legend\"><span class=\"key cpu\"></span> CPU <span class=\"key mem\"></span> memory \
         (allocated, of what the node offers)</p>",
    );
    for e in st.executors() {
        let age = (now - e.updated_at_ms).max(0) as f64 / 1000.0;
        let _ = write!(
            body,
            "<h2>Executor {}</h2><p>Last report {} ({age:.0} s ago), {} nodes</p>\
             <table class=\"nodes\"><thead><tr><th>Node</th><th>Pool</th><th>Allocated</th><th>Jobs</th>\
             <th>Allocated / offered</th><th>State</th><th>Labels</th><th>Taints</th></tr></thead><tbody>",
            escape(e.name.as_str()),
            escape(&crate::control::rfc3339(e.updated_at_ms)),
            e.nodes().len()
        );
        for n in e.nodes() {
            let key = (e.name.as_str().to_string(), n.name.as_str().to_string());
            let held = allocated.get(&key).cloned().unwrap_or_default();
            let share = |r: ResourceName| {
                let total = n.allocatable.get(r.as_str());
                if total > 0 { held.get(r.as_str()) as f64 / total as f64 } else { 0.0 }
            };
            let svg = bars::svg(&[
                Bar { label: "CPU", share: share(ResourceName::cpu()), class: "cpu" },
                Bar { label: "memory", share: share(ResourceName::memory()), class: "mem" },
            ]);
            let view = health.get(&key);
            let mut state = Vec::new();
            if n.unschedulable {
                state.push("<span class=\"badge\">unschedulable</span>".to_string());
            }
            if let Some(q) = view.and_then(|v| v.quarantine.as_ref()) {
                state.push(format!(
                    "<span class=\"badge\" title=\"{}\">quarantined until {}</span>",
                    escape(&q.reason),
                    escape(&q.until)
                ));
            }
            if let Some(r) = view.and_then(|v| v.reserved_for.as_ref()) {
                let until =
                    r.expected_start.as_deref().map(|at| format!("; expected to fit at {at}")).unwrap_or_default();
                state.push(format!(
                    "<span class=\"badge\" title=\"no other new job starts here until it fits, except jobs whose \
                     deadline ends first{}\">reserved for job <a href=\"/ui/jobs/{id}\">{id}</a></span>",
                    escape(&until),
                    id = escape(&r.job_id.to_string())
                ));
            }
            if state.is_empty() {
                state.push("ready".into());
            }
            let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{}={}", escape(k), escape(v))).collect();
            let taints: Vec<String> =
                n.taints.iter().map(|t| escape(&format!("{}={}:{:?}", t.key, t.value, t.effect))).collect();
            let _ = write!(
                body,
                "<tr data-node=\"{name}\"><td>{name}</td><td>{}</td><td>{svg}</td><td class=\"num\">{}</td><td>{} / {}</td>\
                 <td>{}</td><td class=\"small\">{}</td><td class=\"small\">{}</td></tr>",
                escape(n.pool.as_str()),
                view.map_or(0, |v| v.jobs),
                escape(&human::resources(&held)),
                escape(&human::resources(&n.allocatable)),
                state.join(" "),
                labels.join("<br>"),
                taints.join("<br>"),
                name = escape(n.name.as_str()),
            );
        }
        body.push_str("</tbody></table>");
    }
    drop(st);
    body.push_str("</div><script src=\"/ui/app.js\"></script>");
    Html(page_for("Nodes", &user, &body)).into_response()
}

/// `GET /ui/cluster`.
pub(crate) async fn cluster_handler(State(app): State<Arc<Control>>, Viewer(principal): Viewer) -> Response {
    let s = app.cluster.status();
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "—".into());
    let user = signed_in_line(&app, &principal);
    let mut body = String::new();
    let _ = write!(
        body,
        "<dl class=\"cluster\"><dt>This server</dt><dd>{} ({}{})</dd><dt>Leader</dt><dd>{}</dd><dt>Term</dt><dd>{}</dd>\
         <dt>Last log index</dt><dd>{}</dd><dt>Applied</dt><dd>{}</dd><dt>Leader changes seen</dt><dd>{}</dd></dl>",
        s.id,
        escape(&s.state),
        if s.serving { ", serving" } else { "" },
        s.leader
            .map_or_else(|| "none".to_string(), |l| format!("{l} {}", escape(s.leader_addr.as_deref().unwrap_or("")))),
        s.term,
        opt(s.last_log_index),
        opt(s.last_applied),
        s.leader_changes,
    );
    body.push_str(
        "<table class=\"members\"><thead><tr><th>Member</th><th>Address</th><th>Votes</th><th>Matched index</th>\
         <th>Lag</th></tr></thead><tbody>",
    );
    for m in &s.members {
        let _ = write!(
            body,
            "<tr data-member=\"{}\"><td>{}{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            m.id,
            m.id,
            if Some(m.id) == s.leader { " (leader)" } else { "" },
            escape(&m.addr),
            if m.voter { "yes" } else { "learner" },
            opt(m.matched_index),
            opt(m.lag),
        );
    }
    body.push_str("</tbody></table><p class=\"note\">Matched index and lag are known on the leader.</p>");
    body.push_str(
        "<p class=\"scenario\"><a href=\"/ui/scenario.yaml\" download>The state as a simulate scenario</a> (YAML, \
         admins): run the next cycle offline with <code>convoy simulate FILE</code>, after changing weights, nodes or \
         jobs to ask what if.</p>",
    );
    Html(page_for("Cluster", &user, &body)).into_response()
}

/// `GET /ui/scenario.yaml`: this server's state as a `convoy simulate` scenario, to download
/// (admins), as `convoy simulate --from-server` writes it.
pub(crate) async fn scenario_handler(State(app): State<Arc<Control>>, Viewer(principal): Viewer) -> Response {
    let yaml = crate::service::scenario::export(&app, &principal).and_then(|s| {
        s.to_export_yaml("the convoy server", std::time::SystemTime::now())
            .map_err(|e| crate::service::ServiceError::internal(e.to_string()))
    });
    match yaml {
        Ok(text) => (
            [
                (axum::http::header::CONTENT_TYPE, "application/yaml"),
                (axum::http::header::CONTENT_DISPOSITION, "attachment; filename=\"convoy-scenario.yaml\""),
            ],
            text,
        )
            .into_response(),
        Err(e) => {
            let body = format!("<p class=\"error\" role=\"alert\">{}</p>", escape(&e.detail));
            (super::html::status_of(&e), Html(page_for("Scenario", "", &body))).into_response()
        }
    }
}
