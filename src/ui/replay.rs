//! `GET /ui/jobs/{id}/replay`: the recorded scheduling cycles that decided something about a job,
//! run again from the log (admins: a cycle names every queue's jobs), each saying whether the
//! scheduler decides the same, where the job stood, what the cycle did with it and, for a queued
//! job, each node's verdict.

use super::html::{escape, page, page_for, status_of};
use super::session::{Viewer, signed_in_line};
use crate::control::Control;
use crate::model::JobId;
use crate::service::replay::api::{ReplayQuery, ReplayedCycleView, replay_here};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;

/// The page.
pub(crate) async fn replay_handler(
    State(app): State<Arc<Control>>,
    Viewer(principal): Viewer,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = id.parse::<JobId>() else {
        let body = format!("<p class=\"error\">{} is not a job id (a ULID)</p>", escape(&id));
        return (StatusCode::BAD_REQUEST, Html(page("Replay", &body))).into_response();
    };
    let q = ReplayQuery { job: Some(id.to_string()), ..Default::default() };
    let answer = match replay_here(&app, &principal, &q).await {
        Ok(a) => a,
        Err(e) => {
            let body = format!("<p class=\"error\" role=\"alert\">{}</p>", escape(&e.detail));
            return (status_of(&e), Html(page("Replay", &body))).into_response();
        }
    };
    let mut body = format!(
        "<p><a href=\"/ui/jobs/{id}\">Job {id}</a>: the recorded scheduling cycles that decided something about \
         it, run again from the log.</p>"
    );
    if answer.cycles.is_empty() {
        body.push_str(
            "<p class=\"note\">No cycle the log still holds decided anything about it (a cycle that decides \
             nothing is not recorded; older ones go with the log's retention).</p>",
        );
    }
    for c in &answer.cycles {
        body.push_str(&cycle(c));
    }
    let _ = write!(
        body,
        "<p class=\"note\">{} identical, {} differ, {} not replayable.</p>",
        answer.identical, answer.differ, answer.not_replayable
    );
    let user = signed_in_line(&app, &principal);
    (StatusCode::OK, Html(page_for(&format!("Replay of job {id}"), &user, &body))).into_response()
}

fn cycle(c: &ReplayedCycleView) -> String {
    let number = c.cycle.map_or("?".to_string(), |n| n.to_string());
    let mut out = format!(
        "<section class=\"cycle\" data-verdict=\"{}\"><h2>Cycle {number} <small>{} · log index {} · term {}</small></h2>\
         <p class=\"verdict\">{}{}</p>",
        c.verdict,
        escape(&c.at),
        c.index,
        c.term,
        c.verdict.replace('_', " "),
        c.detail.as_deref().map(|d| format!(": {}", escape(d))).unwrap_or_default(),
    );
    if let Some(f) = &c.job {
        let _ = write!(
            out,
            "<dl class=\"fate\"><dt>Before</dt><dd>{}</dd><dt>Outcome</dt><dd class=\"outcome\">{}</dd></dl>",
            escape(&f.before),
            escape(&f.outcome)
        );
        if !f.nodes.is_empty() {
            out.push_str(
                "<table class=\"nodes\"><thead><tr><th>Node</th><th>Pool</th><th>Verdict</th></tr></thead><tbody>",
            );
            for n in &f.nodes {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&n.node),
                    escape(&n.pool),
                    escape(&n.verdict)
                );
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str("</section>");
    out
}
