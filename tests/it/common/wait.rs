//! Waiting for conditions outside the test's control, with a deadline.

use std::time::Duration;

/// Polls `check` every 20 ms until it yields a value; panics after `within` naming `what`.
pub(crate) async fn wait_for<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `f` until it holds; panics after `within` naming `what`.
pub(crate) async fn until(within: Duration, what: &str, f: impl Fn() -> bool) {
    wait_for(within, what, || f().then_some(())).await
}

/// Waits until the file at `path` holds `text` (a job got that far).
pub(crate) async fn file_contains(within: Duration, path: &std::path::Path, text: &str) {
    until(within, &format!("{text:?} in {}", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|s| s.contains(text))
    })
    .await
}
