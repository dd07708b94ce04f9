//! HTML text: escaping, and the layout every page shares.

use crate::service::ServiceError;
use axum::http::StatusCode;
use std::fmt::Write;

/// `text` with the five characters that mean something in HTML escaped, for element content
/// and quoted attribute values alike.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page: `title` (escaped here) and `body` (HTML, escaped by whoever made it), with
/// nothing on the navigation bar's right.
pub(crate) fn page(title: &str, body: &str) -> String {
    page_for(title, "", body)
}

/// A whole page whose navigation bar ends with `user` (HTML: who is signed in, and signing out).
pub(crate) fn page_for(title: &str, user: &str, body: &str) -> String {
    let title = escape(title);
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · Convoy</title><link rel=\"stylesheet\" href=\"/ui/app.css\"></head>\
         <body><nav><a class=\"brand\" href=\"/ui/queues\">Convoy</a> <a href=\"/ui/queues\">Queues</a> <a href=\"/ui/jobs\">Jobs</a> <a href=\"/ui/nodes\">Nodes</a> <a href=\"/ui/cluster\">Cluster</a>\
         <span class=\"user\">{user}</span></nav>\
         <main><h1>{title}</h1>\n{body}</main></body></html>\n"
    )
}

/// The HTTP status of a page that shows `e`: the service's one table of them.
pub(crate) fn status_of(e: &ServiceError) -> StatusCode {
    StatusCode::from_u16(e.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Percent-encodes a query value.
pub(crate) fn encode(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b',') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_shown_not_run() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(escape("plain-name_1"), "plain-name_1");
        let p = page("a<b", "<p>x</p>");
        assert!(
            p.contains("<title>a&lt;b · Convoy</title>") && p.contains("<h1>a&lt;b</h1>") && p.contains("<p>x</p>")
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            super::encode("scheduled__2026-11-23T10:00:00+00:00 a&b"),
            "scheduled__2026-11-23T10%3A00%3A00%2B00%3A00%20a%26b"
        );
        assert_eq!(super::encode("queued,running"), "queued,running");
    }
}
