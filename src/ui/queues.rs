//! The queues page: every queue with its weight, cordon and jobs by state, and per pool the
//! shares of the leader's latest scheduling cycle as bars.

use super::bars::{self, Bar};
use super::html::{escape, page};
use super::session::{Viewer, signed_in_line};
use crate::control::Control;
use crate::model::JobState;
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;

/// Job states shown as columns.
const STATES: [(JobState, &str); 4] = [
    (JobState::Queued, "queued"),
    (JobState::Leased, "leased"),
    (JobState::Pending, "pending"),
    (JobState::Running, "running"),
];

/// `GET /ui/queues`.
pub async fn page_handler(
    State(app): State<Arc<Control>>,
    Viewer(principal): Viewer,
    Query(notice): Query<super::jobs::Notice>,
) -> Response {
    let mut body = signed_in_line(&app, &principal);
    body.push_str(&super::jobs::notice_line(&notice));
    body.push_str(&queue_table(&app, super::actions::may_cordon(&principal)));
    body.push_str(&pool_sections(&app));
    Html(page("Queues", &body)).into_response()
}

fn queue_table(app: &Control, cordon: bool) -> String {
    let st = app.state();
    let mut out = String::from(
        "<table class=\"queues\"><thead><tr><th>Queue</th><th>Weight</th><th>Priority factor</th><th>Cordoned</th>",
    );
    for (_, name) in STATES {
        let _ = write!(out, "<th>{name}</th>");
    }
    if cordon {
        out.push_str("<th>Actions</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for (name, q) in &st.queues {
        let factor = q.queue.priority_factor;
        let _ = write!(
            out,
            "<tr data-queue=\"{n}\"><td>{n}</td><td>{w:.3}</td><td>{factor}</td><td>{c}</td>",
            n = escape(name.as_str()),
            w = 1.0 / factor,
            c = if q.queue.cordoned { "<span class=\"badge\">cordoned</span>" } else { "no" },
        );
        for (state, _) in STATES {
            let _ = write!(out, "<td class=\"num\">{}</td>", q.counts.get(&state).copied().unwrap_or(0));
        }
        if cordon {
            let (verb, what) = if q.queue.cordoned {
                ("uncordon", "Its queued jobs are scheduled again.")
            } else {
                ("cordon", "It takes new jobs, but none of its jobs is scheduled until it is uncordoned.")
            };
            let _ = write!(
                out,
                "<td><details class=\"action\"><summary>{verb}…</summary><form method=\"post\" \
                 action=\"/ui/queues/{n}/{verb}\"><p>{verb} queue {n}? {what}</p><button type=\"submit\">Yes, {verb}</button>\
                 </form></details></td>",
                n = escape(name.as_str()),
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

fn pool_sections(app: &Control) -> String {
    let view = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
    if view.pools.is_empty() {
        return "<p class=\"note\">No scheduling cycle on this server yet: shares come from the leader's latest \
                cycle, and only pools with nodes and active queues have them.</p>"
            .into();
    }
    let mut out = String::from(
        "<p class=\"legend\"><span class=\"key fair\"></span> fair share <span class=\"key adjusted\"></span> adjusted \
         fair share <span class=\"key actual\"></span> actual share (of the pool, by dominant resource)</p>",
    );
    for pool in &view.pools {
        let _ = write!(
            out,
            "<h2>Pool {}</h2><p>{} nodes, {}</p><table class=\"shares\"><thead><tr><th>Queue</th><th>Shares</th>\
             <th>Fair</th><th>Adjusted</th><th>Actual</th><th>Allocated</th><th>Demand</th></tr></thead><tbody>",
            escape(pool.pool.as_str()),
            pool.nodes,
            escape(&pool.total.to_string())
        );
        for q in &pool.queues {
            let svg = bars::svg(&[
                Bar { label: "fair share", share: q.fair_share, class: "fair" },
                Bar { label: "adjusted fair share", share: q.adjusted_fair_share, class: "adjusted" },
                Bar { label: "actual share", share: q.share_after, class: "actual" },
            ]);
            let _ = write!(
                out,
                "<tr data-queue=\"{n}\"><td>{n}</td><td>{svg}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{:.1}%</td>\
                 <td class=\"num\">{:.1}%</td><td>{}</td><td>{}</td></tr>",
                q.fair_share * 100.0,
                q.adjusted_fair_share * 100.0,
                q.share_after * 100.0,
                escape(&q.allocated.to_string()),
                escape(&q.demand.to_string()),
                n = escape(q.queue.as_str()),
            );
        }
        out.push_str("</tbody></table>");
    }
    out
}
