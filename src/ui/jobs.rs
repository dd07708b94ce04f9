//! The jobs pages: a table of jobs filtered by queue, job set and state, a page at a time and
//! refreshed while it is open; and a job's page with why it is where it is, its runs, events,
//! output and pod spec.

use super::html::{encode, escape, page, page_for, status_of};
use super::session::{Viewer, signed_in_line};
use crate::api::problem::ApiError;
use crate::control::Control;
use crate::model::api::JobView;
use crate::model::human;
use crate::model::{JobId, JobState};
use crate::service::jobs::{ListParams, job_details, list_jobs};
use crate::service::output::{OutputParams, job_output, split_tail};
use crate::service::why::{WhyView, why};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;
use std::time::SystemTime;

/// Rows per page.
const PAGE: usize = 50;

/// How the jobs table is laid out (beside the API's filters).
#[derive(serde::Deserialize, Default)]
pub(crate) struct TableView {
    /// `job_set`: rows grouped under their job set.
    group: Option<String>,
    /// The outcome of an action, shown above the table.
    notice: Option<String>,
}

/// `GET /ui/jobs?queue=&job_set=&state=&after=&group=`.
pub(crate) async fn list_handler(
    State(app): State<Arc<Control>>,
    Viewer(principal): Viewer,
    Query(mut q): Query<ListParams>,
    Query(view): Query<TableView>,
) -> Response {
    // Empty form fields mean "any".
    for f in [&mut q.queue, &mut q.job_set, &mut q.state, &mut q.after, &mut q.text, &mut q.order] {
        if f.as_deref().is_some_and(|v| v.trim().is_empty()) {
            *f = None;
        }
    }
    // People look for what happened last: newest first unless asked otherwise.
    q.order = Some(q.order.take().unwrap_or_else(|| "newest".into()));
    q.limit = Some(q.limit.unwrap_or(PAGE));
    let user = signed_in_line(&app, &principal);
    let mut body = String::new();
    body.push_str(&notice_line(&Notice { notice: view.notice.clone() }));
    let grouped = view.group.as_deref() == Some("job_set");
    body.push_str(&filter_form(&q, grouped));
    let status = match list_jobs(&app, &q).await {
        Ok(list) => {
            let selectable =
                |j: &JobView| !j.state.is_terminal() && super::actions::may_act_on(&app, &principal, &j.queue);
            let any_selectable = list.jobs.iter().any(selectable);
            let filter = [("queue", &q.queue), ("job_set", &q.job_set)]
                .iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
                .collect::<Vec<_>>()
                .join("&");
            let _ = write!(body, "<div id=\"jobs\" data-live=\"{}\">", escape(&filter));
            if any_selectable {
                body.push_str(
                    "<form method=\"post\" action=\"/ui/jobs/cancel\" class=\"selection\">\
                     <details class=\"action\"><summary>Cancel the selected jobs…</summary><p>Cancel the jobs \
                     ticked below? Running ones get their grace period.</p>\
                     <button type=\"submit\" class=\"danger\">Yes, cancel them</button></details>",
                );
            }
            body.push_str(&table(&list.jobs, &q, grouped, &selectable, SystemTime::now()));
            if any_selectable {
                body.push_str("</form>");
            }
            if let Some(next) = list.next {
                let mut params: Vec<(&str, String)> = Vec::new();
                for (k, v) in [
                    ("queue", &q.queue),
                    ("job_set", &q.job_set),
                    ("state", &q.state),
                    ("text", &q.text),
                    ("order", &q.order),
                ] {
                    if let Some(v) = v {
                        params.push((k, v.clone()));
                    }
                }
                params.push(("after", next.to_string()));
                let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
                let _ = write!(
                    body,
                    "<p><a class=\"next\" href=\"/ui/jobs?{}\">Next page</a></p>",
                    escape(&query.join("&"))
                );
            }
            body.push_str("</div>");
            StatusCode::OK
        }
        Err(e) => {
            let field = e.field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default();
            let _ = write!(body, "<p class=\"error\" role=\"alert\">{}{}</p>", escape(&field), escape(&e.detail));
            status_of(&e)
        }
    };
    body.push_str("<script src=\"/ui/app.js\"></script>");
    (status, Html(page_for("Jobs", &user, &body))).into_response()
}

fn filter_form(q: &ListParams, grouped: bool) -> String {
    let v = |o: &Option<String>| escape(o.as_deref().unwrap_or(""));
    let newest = q.order.as_deref() != Some("oldest");
    format!(
        "<form method=\"get\" action=\"/ui/jobs\" class=\"filters\">\
         <label>Queue <input name=\"queue\" value=\"{}\"></label> \
         <label>Job set <input name=\"job_set\" value=\"{}\"></label> \
         <label>States <input name=\"state\" value=\"{}\" placeholder=\"queued,running\"></label> \
         <label>Text <input name=\"text\" value=\"{}\" placeholder=\"id, name, label, reason\"></label> \
         <label>Order <select name=\"order\"><option value=\"newest\"{}>newest first</option>\
         <option value=\"oldest\"{}>oldest first</option></select></label> \
         <label><input type=\"checkbox\" name=\"group\" value=\"job_set\"{}> by job set</label> \
         <button type=\"submit\">Filter</button></form>",
        v(&q.queue),
        v(&q.job_set),
        v(&q.state),
        v(&q.text),
        if newest { " selected" } else { "" },
        if newest { "" } else { " selected" },
        if grouped { " checked" } else { "" },
    )
}

/// The jobs as rows: state (coloured by the style sheet), times, node, run time and exit code of
/// the last run; a box to tick on the jobs `selectable` says may be cancelled; grouped under
/// their job set when `grouped` (in the order of each set's first job).
fn table(
    jobs: &[JobView],
    q: &ListParams,
    grouped: bool,
    selectable: &dyn Fn(&JobView) -> bool,
    now: SystemTime,
) -> String {
    // The submission column's heading turns the order around (the filters kept).
    let newest = q.order.as_deref() != Some("oldest");
    let mut params: Vec<String> =
        [("queue", &q.queue), ("job_set", &q.job_set), ("state", &q.state), ("text", &q.text)]
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
            .collect();
    params.push(format!("order={}", if newest { "oldest" } else { "newest" }));
    if grouped {
        params.push("group=job_set".into());
    }
    let mut out = format!(
        "<table class=\"jobs\"><thead><tr><th></th><th>Job</th><th>Queue</th><th>Job set</th><th>State</th>\
         <th>Priority</th><th><a class=\"order\" href=\"/ui/jobs?{}\" title=\"turn the order around\">Submitted {}</a></th>\
         <th>Node</th><th>Started</th><th>Ran</th><th>Exit</th><th>Why</th></tr></thead><tbody>",
        escape(&params.join("&")),
        if newest { "↓" } else { "↑" },
    );
    let mut order: Vec<&JobView> = jobs.iter().collect();
    if grouped {
        let first: std::collections::HashMap<(&str, &str), usize> =
            jobs.iter().enumerate().rev().map(|(i, j)| ((j.queue.as_str(), j.job_set.as_str()), i)).collect();
        order.sort_by_key(|j| first[&(j.queue.as_str(), j.job_set.as_str())]);
    }
    let mut current: Option<(&str, &str)> = None;
    for j in order {
        let set = (j.queue.as_str(), j.job_set.as_str());
        if grouped && current != Some(set) {
            current = Some(set);
            let n = jobs.iter().filter(|o| (o.queue.as_str(), o.job_set.as_str()) == set).count();
            let _ = write!(
                out,
                "<tr class=\"group\"><th colspan=\"12\"><a href=\"/ui/jobs?queue={qe}&amp;job_set={se}\">{q} / {s}</a> \
                 <span class=\"note\">{n} on this page</span></th></tr>",
                qe = escape(&encode(set.0)),
                se = escape(&encode(set.1)),
                q = escape(set.0),
                s = escape(set.1),
            );
        }
        let run = j.runs.last();
        let started = run.and_then(|r| r.running_at.as_deref());
        let ended = run.and_then(|r| r.finished_at.as_deref());
        let tick = if selectable(j) {
            format!("<input type=\"checkbox\" name=\"job\" value=\"{}\" aria-label=\"select {}\">", j.id, j.id)
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<tr data-job=\"{id}\"><td>{tick}</td><td><a href=\"/ui/jobs/{id}\">{id}</a></td><td>{}</td><td>{}</td>\
             <td class=\"state {s}\">{s}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(j.queue.as_str()),
            escape(j.job_set.as_str()),
            j.priority,
            escape(&human::time(&j.submitted_at)),
            escape(run.map_or("", |r| r.node.as_str())),
            escape(&started.map(human::time).unwrap_or_default()),
            human::elapsed(started, ended, now).unwrap_or_default(),
            run.and_then(|r| r.exit_code).map(|c| c.to_string()).unwrap_or_default(),
            escape(j.reason.as_deref().unwrap_or("")),
            id = j.id,
            s = j.state.as_str(),
        );
    }
    if jobs.is_empty() {
        out.push_str("<tr><td colspan=\"12\">No jobs.</td></tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// The outcome of an action, shown on the page it returns to.
#[derive(serde::Deserialize)]
pub(crate) struct Notice {
    notice: Option<String>,
}

/// The outcome of an action, if the page was reached from one.
pub(crate) fn notice_line(n: &Notice) -> String {
    n.notice.as_deref().map(|t| format!("<p class=\"notice\" role=\"status\">{}</p>", escape(t))).unwrap_or_default()
}

/// Which output stream the job's page shows.
#[derive(serde::Deserialize)]
pub(crate) struct StreamChoice {
    stream: Option<String>,
}

/// `GET /ui/jobs/{id}/output`: the API's output page (JSON), for the job page's script.
pub(crate) async fn output_handler(
    State(app): State<Arc<Control>>,
    Viewer(_): Viewer,
    Path(id): Path<String>,
    Query(q): Query<OutputParams>,
) -> Response {
    let result = match id.parse::<JobId>() {
        Ok(id) => job_output(&app, id, &q).await.map_err(ApiError::from),
        Err(e) => Err(ApiError::bad_request("id", e.to_string())),
    };
    match result {
        Ok(page) => axum::Json(page).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The output section. For a live job, a pane the page's script fills and follows; for an ended
/// one, the end of the stream the server kept, which the script replaces with the whole output
/// while the run's agent keeps it.
fn output_section(j: &JobView, tail: Option<&str>, stream: &str) -> String {
    let mut out = String::from("<h2>Output</h2><p class=\"streams\">");
    for s in ["stdout", "stderr"] {
        if s == stream {
            let _ = write!(out, "<strong>{s}</strong> ");
        } else {
            let _ = write!(out, "<a href=\"/ui/jobs/{}?stream={s}#output\">{s}</a> ", j.id);
        }
    }
    if j.state.is_terminal() {
        let (stdout, stderr) = split_tail(tail.unwrap_or_default());
        let kept = if stream == "stderr" { stderr } else { stdout };
        if j.runs.is_empty() {
            out.push_str("</p><p class=\"note\" id=\"output\">The job ended without running.</p>");
        } else {
            let _ = write!(
                out,
                "<span id=\"output-state\" class=\"note\">the end of its {stream} as the server kept it</span></p>\
                 <pre class=\"output\" id=\"output\" data-replace=\"true\" \
                 data-output=\"/ui/jobs/{}/output?stream={stream}\">{}</pre>",
                j.id,
                escape(kept)
            );
        }
    } else {
        let _ = write!(
            out,
            "<span id=\"output-state\" class=\"note\">waiting for output…</span></p>\
             <pre class=\"output\" id=\"output\" data-output=\"/ui/jobs/{}/output?stream={stream}\"></pre>",
            j.id
        );
    }
    out
}

/// A queued job's place in its queue, what would start it and when ([`why`]).
fn what_would_start_it(a: &WhyView) -> String {
    let mut out = String::from("<section class=\"would-start\"><h2>What would start it</h2>");
    if let Some(p) = a.queue_position {
        let _ = write!(
            out,
            "<p class=\"place\">Place in queue {}: <strong>{p}</strong>, {} ahead of it in its pools</p>",
            escape(a.queue.as_str()),
            a.jobs_ahead.unwrap_or(0)
        );
    }
    if a.would_start_if.is_empty() {
        out.push_str("<p class=\"note\">No single change the scheduler could confirm.</p>");
    } else {
        out.push_str(
            "<p>Any one of these, each checked by running the scheduler with it met:</p><ul class=\"conditions\">",
        );
        for c in &a.would_start_if {
            let kind =
                serde_json::to_value(c.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            let _ = write!(out, "<li data-kind=\"{}\">{}</li>", escape(&kind), escape(&c.detail));
        }
        out.push_str("</ul>");
    }
    match &a.estimated_start {
        Some(e) => {
            let _ = write!(
                out,
                "<p class=\"estimate\">Estimated start: <time>{}</time> ({})</p>",
                escape(&e.at),
                escape(&e.method)
            );
        }
        None => out.push_str(
            "<p class=\"estimate note\">Estimated start: unknown (no deadline or recorded runtime of the running jobs \
             gets there).</p>",
        ),
    }
    out.push_str("</section>");
    out
}

/// `GET /ui/jobs/{id}`.
pub(crate) async fn job_handler(
    State(app): State<Arc<Control>>,
    Viewer(principal): Viewer,
    Path(id): Path<String>,
    Query(notice): Query<Notice>,
    Query(choice): Query<StreamChoice>,
) -> Response {
    let stream = if choice.stream.as_deref() == Some("stderr") { "stderr" } else { "stdout" };
    let Ok(id) = id.parse::<JobId>() else {
        let body = format!("<p class=\"error\">{} is not a job id (a ULID)</p>", escape(&id));
        return (StatusCode::BAD_REQUEST, Html(page("Job", &body))).into_response();
    };
    let j = match job_details(&app, id).await {
        Ok(j) => j,
        Err(e) => {
            let body = format!("<p class=\"error\" role=\"alert\">{}</p>", escape(&e.detail));
            return (status_of(&e), Html(page("Job", &body))).into_response();
        }
    };
    let user = signed_in_line(&app, &principal);
    let mut body = String::new();
    body.push_str(&notice_line(&notice));
    let _ = write!(
        body,
        "<div id=\"job\" data-live=\"queue={}&amp;job_set={}\">",
        escape(&encode(j.queue.as_str())),
        escape(&encode(j.job_set.as_str()))
    );
    let _ = write!(
        body,
        "<dl class=\"job\"><dt>State</dt><dd class=\"state {s}\">{s}</dd><dt>Why</dt><dd class=\"why\">{}</dd>\
         <dt>Queue</dt><dd><a href=\"/ui/queues/{qe}\">{}</a></dd><dt>Job set</dt><dd><a href=\"/ui/jobs?queue={qe}&amp;job_set={se}\">{}</a></dd><dt>Priority</dt><dd>{} ({})</dd><dt>Submitted</dt><dd>{} by {}</dd>\
         <dt>Requests</dt><dd>{}</dd></dl>",
        escape(j.reason.as_deref().unwrap_or("—")),
        escape(j.queue.as_str()),
        escape(j.job_set.as_str()),
        j.priority,
        escape(j.priority_class.as_str()),
        escape(&j.submitted_at),
        escape(j.owner.as_deref().unwrap_or("(not recorded)")),
        escape(&human::resources(&j.requests)),
        s = j.state.as_str(),
        qe = escape(&encode(j.queue.as_str())),
        se = escape(&encode(j.job_set.as_str())),
    );
    if j.state == JobState::Queued
        && let Ok(answer) = why(&app, j.id).await
    {
        body.push_str(&what_would_start_it(&answer));
    }
    if super::actions::may_act_on(&app, &principal, &j.queue) {
        body.push_str(&job_actions(&j));
    }
    body.push_str(
        "<h2>Runs</h2><table class=\"runs\"><thead><tr><th>Attempt</th><th>Run</th><th>Executor</th><th>Node</th><th>State</th>\
                   <th>Leased</th><th>Finished</th><th>Exit</th><th>CPU time</th><th>Peak memory</th><th>Reason</th>\
                   </tr></thead><tbody>",
    );
    for r in &j.runs {
        let state = serde_json::to_value(r.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let used = r.usage.as_ref().map(human::usage).unwrap_or_default();
        let _ = write!(
            body,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            r.attempt,
            r.run_id,
            escape(&r.executor),
            escape(r.node.as_str()),
            escape(&state),
            escape(&r.leased_at),
            escape(r.finished_at.as_deref().unwrap_or("")),
            r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            used.0,
            used.1,
            escape(&[r.reason.as_deref(), r.message.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": ")),
        );
    }
    body.push_str("</tbody></table>");
    if !j.runs.is_empty() {
        let _ = write!(
            body,
            "<p class=\"replay\"><a href=\"/ui/jobs/{}/replay\">Its scheduling decisions, run again from the log</a> \
             (admins)</p>",
            j.id
        );
    }
    body.push_str("<h2>Events</h2><ol class=\"events\">");
    for e in j.events.as_deref().unwrap_or(&[]) {
        let kind = serde_json::to_value(e.kind).map(|v| v.to_string()).unwrap_or_default();
        let _ = write!(body, "<li><time>{}</time> <code>{}</code></li>", escape(&e.at), escape(&kind));
    }
    body.push_str("</ol>");
    body.push_str("</div>");
    let tail = if j.state.is_terminal() {
        app.store.job(j.id).ok().flatten().and_then(|r| r.runs.iter().rev().find_map(|run| run.log_tail.clone()))
    } else {
        None
    };
    body.push_str(&output_section(&j, tail.as_deref(), stream));
    if let Some(spec) = &j.pod_spec {
        let text = serde_json::to_string_pretty(spec).unwrap_or_default();
        let _ = write!(body, "<h2>Pod spec</h2><pre class=\"spec\">{}</pre>", escape(&text));
    }
    body.push_str("<script src=\"/ui/app.js\"></script>");
    (StatusCode::OK, Html(page_for(&format!("Job {}", j.id), &user, &body))).into_response()
}

/// The actions on a job, each behind a confirmation step.
fn job_actions(j: &JobView) -> String {
    let id = j.id;
    let mut out = String::from("<h2>Actions</h2>");
    if !j.state.is_terminal() {
        let _ = write!(
            out,
            "<details class=\"action\" id=\"cancel\"><summary>Cancel this job…</summary>\
             <form method=\"post\" action=\"/ui/jobs/{id}/cancel\"><p>Cancel job {id}? A running job is stopped.</p>\
             <button class=\"danger\" type=\"submit\">Yes, cancel the job</button></form></details>\
             <details class=\"action\" id=\"priority\"><summary>Change its priority…</summary>\
             <form method=\"post\" action=\"/ui/jobs/{id}/priority\"><label>Priority (0 first) \
             <input name=\"priority\" value=\"{}\" inputmode=\"numeric\" required></label> \
             <button type=\"submit\">Set the priority</button></form></details>",
            j.priority
        );
    }
    let _ = write!(
        out,
        "<details class=\"action\" id=\"cancel-set\"><summary>Cancel its job set…</summary>\
         <form method=\"post\" action=\"/ui/jobs/{id}/cancel-set\"><p>Cancel every job of job set {} in queue {}?</p>\
         <button class=\"danger\" type=\"submit\">Yes, cancel the job set</button></form></details>",
        escape(j.job_set.as_str()),
        escape(j.queue.as_str())
    );
    out
}
