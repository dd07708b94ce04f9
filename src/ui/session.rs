//! Who looks at the pages: with auth on, the bearer token given on the login page, kept in an
//! HttpOnly, SameSite=Strict cookie for the browser session and checked like the API's
//! `Authorization` header on every page; with auth off, everyone (as the API treats them).

use super::html::escape;
use crate::control::Control;
use crate::service::access::{Principal, authenticate};
use axum::Form;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::sync::Arc;

/// The cookie that holds the token.
pub(crate) const COOKIE: &str = "convoy_token";

/// The principal a page is for, from the request's cookie; a request without a valid one is
/// answered with the login page.
pub(crate) struct Viewer(pub Principal);

impl FromRequestParts<Arc<Control>> for Viewer {
    type Rejection = Redirect;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<Control>) -> Result<Self, Redirect> {
        viewer(app, &parts.headers).map(Viewer)
    }
}

/// The principal the request's cookie names, or the redirect to the login page to answer instead.
fn viewer(app: &Control, headers: &HeaderMap) -> Result<Principal, Redirect> {
    let token = cookie_token(headers);
    let authorization = token.map(|t| format!("Bearer {t}"));
    match authenticate(app, authorization.as_deref()) {
        Ok(p) => Ok(p),
        Err(_) => Err(Redirect::to("/ui/login")),
    }
}

/// Who is signed in, and the sign-out button; nothing with auth off.
pub(crate) fn signed_in_line(app: &Control, principal: &Principal) -> String {
    if !app.config.auth.enabled {
        return String::new();
    }
    format!(
        "<span class=\"who\">Signed in as {}</span> <form method=\"post\" action=\"/ui/logout\" class=\"inline\">\
         <button>Sign out</button></form>",
        escape(&principal.name)
    )
}

/// The token in the request's `Cookie` header, if any.
fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// The login form.
#[derive(serde::Deserialize)]
pub(crate) struct Login {
    token: String,
}

/// `GET /ui/login`.
pub(crate) async fn form() -> Html<String> {
    Html(login_page(None))
}

fn login_page(error: Option<&str>) -> String {
    let error = error.map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e))).unwrap_or_default();
    super::html::page_for(
        "Sign in",
        "<a href=\"/ui/login\">Sign in</a>",
        &format!(
            "{error}<form method=\"post\" action=\"/ui/login\" class=\"login\">\
             <label>Token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required autofocus></label> \
             <button type=\"submit\">Sign in</button></form>\
             <p>The same bearer token the API and the CLI take.</p>"
        ),
    )
}

/// `POST /ui/login`: checks the token, then keeps it in the session cookie.
pub(crate) async fn login(State(app): State<Arc<Control>>, Form(form): Form<Login>) -> Response {
    let token = form.token.trim();
    // A cookie value may hold visible ASCII but for these.
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_graphic() && !matches!(c, ';' | ',' | '"' | '\\')) {
        return (StatusCode::BAD_REQUEST, Html(login_page(Some("token: not a token this server hands out"))))
            .into_response();
    }
    if let Err(e) = authenticate(&app, Some(&format!("Bearer {token}"))) {
        return (StatusCode::UNAUTHORIZED, Html(login_page(Some(&e.detail)))).into_response();
    }
    let secure = if app.config.tls.is_some() { "; Secure" } else { "" };
    let cookie = format!("{COOKIE}={token}; Path=/ui; HttpOnly; SameSite=Strict{secure}");
    let mut r = Redirect::to("/ui/queues").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /ui/logout`: forgets the token.
pub(crate) async fn logout() -> Response {
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("convoy_token=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_any_cookie_header_and_pair() {
        let mut h = HeaderMap::new();
        assert_eq!(cookie_token(&h), None);
        h.append(header::COOKIE, HeaderValue::from_static("theme=dark; convoy_tokenx=no"));
        h.append(header::COOKIE, HeaderValue::from_static("a=1;  convoy_token=s3cret ; b=2"));
        assert_eq!(cookie_token(&h), Some("s3cret"));
    }
}
