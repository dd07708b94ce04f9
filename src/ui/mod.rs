//! The web UI, served by the binary itself at `/` and `/ui/`: server-rendered HTML over the same
//! state and auth as the API. See `docs/web-ui.md`.

pub(crate) mod actions;
pub(crate) mod bars;
pub(crate) mod html;
pub(crate) mod jobs;
pub(crate) mod live;
pub(crate) mod nodes;
pub(crate) mod queues;
pub(crate) mod replay;
pub(crate) mod session;

use crate::control::Control;
use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use std::sync::Arc;

/// The UI's routes.
pub(crate) fn router() -> Router<Arc<Control>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/queues") }))
        .route("/ui", get(|| async { Redirect::to("/ui/queues") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/queues") }))
        .route("/ui/queues", get(queues::page_handler))
        .route("/ui/queues/{name}", get(queues::queue_handler))
        .route("/ui/jobs", get(jobs::list_handler))
        .route("/ui/jobs/{id}", get(jobs::job_handler))
        .route("/ui/jobs/{id}/output", get(jobs::output_handler))
        .route("/ui/jobs/{id}/replay", get(replay::replay_handler))
        .route("/ui/jobs/cancel", post(actions::cancel_selected))
        .route("/ui/jobs/{id}/cancel", post(actions::cancel_job))
        .route("/ui/jobs/{id}/cancel-set", post(actions::cancel_set))
        .route("/ui/jobs/{id}/priority", post(actions::reprioritize))
        .route("/ui/queues/{name}/{verb}", post(actions::cordon))
        .route("/ui/live", get(live::stream))
        .route("/ui/nodes", get(nodes::nodes_handler))
        .route("/ui/cluster", get(nodes::cluster_handler))
        .route("/ui/scenario.yaml", get(nodes::scenario_handler))
        .route("/ui/login", get(session::form).post(session::login))
        .route("/ui/logout", post(session::logout))
        .route(
            "/ui/app.js",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("app.js")).into_response()
            }),
        )
        .route(
            "/ui/app.css",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("app.css")).into_response()
            }),
        )
}
