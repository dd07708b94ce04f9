//! The queues page: every queue with its weight, cordon and jobs by state, and per pool the
//! shares of the leader's latest scheduling cycle as bars; and a queue's own page with its
//! settings, shares and job sets.

use super::bars::{self, Bar};
use super::html::{escape, page, page_for};
use super::session::{Viewer, signed_in_line};
use crate::control::Control;
use crate::model::JobState;
use crate::model::QueueName;
use crate::model::human;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
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
pub(crate) async fn page_handler(
    State(app): State<Arc<Control>>,
    Viewer(principal): Viewer,
    Query(notice): Query<super::jobs::Notice>,
) -> Response {
    let user = signed_in_line(&app, &principal);
    let mut body = String::new();
    body.push_str(&super::jobs::notice_line(&notice));
    body.push_str("<div id=\"queues\" data-live=\"\">");
    body.push_str(&queue_table(&app, super::actions::may_cordon(&principal)));
    body.push_str(&pool_sections(&app, None));
    body.push_str("</div><script src=\"/ui/app.js\"></script>");
    Html(page_for("Queues", &user, &body)).into_response()
}

/// `GET /ui/queues/{name}`: the queue's settings, its live jobs by state, its shares in each pool
/// and its job sets (with live jobs by state and how many are stored in all).
pub(crate) async fn queue_handler(
    State(app): State<Arc<Control>>,
    Viewer(principal): Viewer,
    Path(name): Path<String>,
) -> Response {
    let Ok(name) = name.parse::<QueueName>() else {
        let body = format!("<p class=\"error\" role=\"alert\">{} is not a queue name</p>", escape(&name));
        return (StatusCode::BAD_REQUEST, Html(page("Queue", &body))).into_response();
    };
    let user = signed_in_line(&app, &principal);
    let mut body = String::new();
    {
        let st = app.state();
        let Some(q) = st.queue(&name) else {
            let body = format!("<p class=\"error\" role=\"alert\">queue {} does not exist</p>", escape(name.as_str()));
            return (StatusCode::NOT_FOUND, Html(page("Queue", &body))).into_response();
        };
        let list = |v: &[String]| if v.is_empty() { "—".to_string() } else { escape(&v.join(", ")) };
        let item = |label: &str, value: String| {
            format!("<div><span class=\"label\">{label}</span><span class=\"value\">{value}</span></div>")
        };
        body.push_str("<section class=\"summary settings\">");
        for (label, value) in [
            ("Weight", format!("{:.3}", 1.0 / q.queue.priority_factor)),
            ("Priority factor", q.queue.priority_factor.to_string()),
            ("Cordoned", if q.queue.cordoned { "<span class=\"badge\">yes</span>".to_string() } else { "no".into() }),
            ("Parent", q.queue.parent.as_ref().map_or("—".to_string(), |p| escape(p.as_str()))),
            ("Owners", list(&q.queue.owners)),
            ("Groups", list(&q.queue.groups)),
        ] {
            body.push_str(&item(label, value));
        }
        // The policies are listed only when set, as the queue API leaves them out then.
        if !q.queue.guaranteed.is_zero() {
            body.push_str(&item("Guaranteed", escape(&human::resources(&q.queue.guaranteed))));
        }
        if q.queue.preemption_policy == crate::model::PreemptionPolicy::Fence {
            body.push_str(&item("Preemption policy", "fence".into()));
        }
        if let Some(r) = &q.queue.retry {
            body.push_str(&item("Retry", escape(&r.summary())));
        }
        body.push_str("</section>");
        let _ = write!(body, "<div id=\"queue\" data-live=\"queue={}\">", escape(&super::html::encode(name.as_str())));
        body.push_str("<h2>Jobs</h2><section class=\"summary counts\">");
        for (state, s) in STATES {
            let n = q.counts.get(&state).copied().unwrap_or(0);
            let link = format!(
                "<a class=\"state {s}\" href=\"/ui/jobs?queue={}&amp;state={s}\">{n}</a>",
                super::html::encode(name.as_str())
            );
            body.push_str(&item(s, link));
        }
        body.push_str("</section>");
        body.push_str(&job_sets(&st, &name));
    }
    body.push_str(&pool_sections(&app, Some(&name)));
    body.push_str("</div><script src=\"/ui/app.js\"></script>");
    Html(page_for(&format!("Queue {name}"), &user, &body)).into_response()
}

/// The queue's job sets, by name: live jobs by state, and jobs stored (live or finished).
fn job_sets(st: &crate::state::State, queue: &QueueName) -> String {
    let mut sets: Vec<_> = st.stored_job_sets(queue).collect();
    sets.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("<h2>Job sets</h2>");
    if sets.is_empty() {
        out.push_str("<p>No job sets: no jobs are stored for this queue.</p>");
        return out;
    }
    out.push_str("<table class=\"job-sets\"><thead><tr><th>Job set</th>");
    for (_, s) in STATES {
        let _ = write!(out, "<th>{s}</th>");
    }
    out.push_str("<th>Ended</th><th>Stored</th></tr></thead><tbody>");
    for (set, stored) in sets {
        let (mut counts, mut live_n) = ([0u64; STATES.len()], 0u64);
        for j in st.job_set_jobs(queue, set) {
            live_n += 1;
            if let Some(i) = STATES.iter().position(|(s, _)| *s == j.record.state) {
                counts[i] += 1;
            }
        }
        let _ = write!(
            out,
            "<tr data-job-set=\"{n}\"><td><a href=\"/ui/jobs?queue={qe}&amp;job_set={se}\">{n}</a></td>",
            n = escape(set.as_str()),
            qe = super::html::encode(queue.as_str()),
            se = super::html::encode(set.as_str()),
        );
        for c in counts {
            let _ = write!(out, "<td class=\"num\">{c}</td>");
        }
        let _ =
            write!(out, "<td class=\"num\">{}</td><td class=\"num\">{stored}</td></tr>", stored.saturating_sub(live_n));
    }
    out.push_str("</tbody></table>");
    out
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
    for q in st.queues() {
        let name = &q.queue.name;
        let factor = q.queue.priority_factor;
        let _ = write!(
            out,
            "<tr data-queue=\"{n}\"><td><a href=\"/ui/queues/{e}\">{n}</a></td><td>{w:.3}</td><td>{factor}</td><td>{c}</td>",
            n = escape(name.as_str()),
            e = super::html::encode(name.as_str()),
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

/// Per pool, the shares of every active queue (or of `only`).
fn pool_sections(app: &Control, only: Option<&QueueName>) -> String {
    let drf = &app.config.scheduler.dominant_resource_fairness_resources;
    let view = app.scheduling.read().unwrap_or_else(|p| p.into_inner());
    if view.pools.is_empty() {
        return "<p class=\"note\">No scheduling cycle on this server yet: shares come from the leader's latest \
                cycle, and only pools with nodes and active queues have them.</p>"
            .into();
    }
    let mut out = String::from(
        "<p class=\"legend\"><span class=\"key fair\"></span> fair share <span class=\"key adjusted\"></span> adjusted \
         fair share <span class=\"key actual\"></span> actual share <span class=\"key demand\"></span> demand (held and \
         queued; of the pool, by dominant resource; a bar stops at the whole pool)</p>",
    );
    for pool in &view.pools {
        let _ = write!(
            out,
            "<h2>Pool {}</h2><p>{} nodes, {}</p><table class=\"shares\"><thead><tr><th>Queue</th><th>Shares</th>\
             <th>Fair</th><th>Adjusted</th><th>Actual</th><th>Demand</th><th>Allocated</th><th>Demanded</th></tr></thead><tbody>",
            escape(pool.pool.as_str()),
            pool.nodes,
            escape(&human::resources(&pool.total))
        );
        for q in pool.queues.iter().filter(|q| only.is_none_or(|o| *o == q.queue)) {
            let demand = q.demand.dominant_share(&pool.total, drf);
            let svg = bars::svg(&[
                Bar { label: "fair share", share: q.fair_share, class: "fair" },
                Bar { label: "adjusted fair share", share: q.adjusted_fair_share, class: "adjusted" },
                Bar { label: "actual share", share: q.share_after, class: "actual" },
                Bar { label: "demand", share: demand, class: "demand" },
            ]);
            let _ = write!(
                out,
                "<tr data-queue=\"{n}\"><td>{n}</td><td>{svg}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{:.1}%</td>\
                 <td class=\"num\">{:.1}%</td><td class=\"num\">{:.1}%</td><td>{}</td><td>{}</td></tr>",
                q.fair_share * 100.0,
                q.adjusted_fair_share * 100.0,
                q.share_after * 100.0,
                demand * 100.0,
                escape(&human::resources(&q.allocated)),
                escape(&human::resources(&q.demand)),
                n = escape(q.queue.as_str()),
            );
            if let Some(g) = q.guaranteed_share {
                let scaled =
                    if q.guarantee_scaled { ", scaled down: the guarantees add up to more than the pool" } else { "" };
                let _ = write!(
                    out,
                    "<tr class=\"guarantee\" data-queue=\"{n}\"><td></td><td colspan=\"7\">guaranteed {:.1}% of the pool{scaled}</td></tr>",
                    g * 100.0,
                    n = escape(q.queue.as_str()),
                );
            }
        }
        out.push_str("</tbody></table>");
    }
    out
}
