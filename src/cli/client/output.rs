//! How client verbs print: tables and summaries for people, `-o json` for scripts; times and
//! durations as people read them.

use convoy::model::human;
use std::time::SystemTime;

/// `-o table|json`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Format {
    /// Columns and summaries.
    #[default]
    Table,
    /// The API's JSON, indented.
    Json,
}

/// `2026-11-26 07:00:02` (UTC, to the second) from an RFC 3339 time; `-` for none.
pub(super) fn short_time(t: Option<&str>) -> String {
    t.map_or_else(|| "-".to_string(), human::time)
}

/// Time from `started` to `ended` (or to `now` while running); `-` for a run that never started.
pub(super) fn elapsed(started: Option<&str>, ended: Option<&str>, now: SystemTime) -> String {
    human::elapsed(started, ended, now).unwrap_or_else(|| "-".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_well() {
        assert_eq!(short_time(Some("2026-11-26T07:00:02.123Z")), "2026-11-26 07:00:02");
        assert_eq!(short_time(None), "-");
        let now = humantime::parse_rfc3339("2026-11-26T07:00:10Z").unwrap();
        assert_eq!(elapsed(Some("2026-11-26T07:00:00Z"), None, now), "10.0s");
        assert_eq!(elapsed(None, None, now), "-");
    }
}
