//! How client verbs print: tables and summaries for people, `-o json` for scripts; times and
//! durations as people read them.

use std::time::{Duration, SystemTime};

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
    match t {
        Some(t) if t.len() >= 19 => t[..19].replace('T', " "),
        Some(t) => t.to_string(),
        None => "-".to_string(),
    }
}

/// Time from `started` to `ended` (or to `now` while running): `3.2s`, `4m05s`, `1h02m03s`; `-`
/// for a run that never started.
pub(super) fn elapsed(started: Option<&str>, ended: Option<&str>, now: SystemTime) -> String {
    let parse = |t: &str| humantime::parse_rfc3339_weak(t).ok();
    let Some(from) = started.and_then(parse) else { return "-".to_string() };
    let to = ended.and_then(parse).unwrap_or(now);
    duration(to.duration_since(from).unwrap_or_default())
}

/// `3.2s`, `4m05s`, `1h02m03s`, `2d03h`.
pub(super) fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m{:02}s", s / 3600, s % 3600 / 60, s % 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_well() {
        assert_eq!(short_time(Some("2026-11-26T07:00:02.123Z")), "2026-11-26 07:00:02");
        assert_eq!(short_time(None), "-");
        assert_eq!(duration(Duration::from_millis(3200)), "3.2s");
        assert_eq!(duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(duration(Duration::from_secs(3723)), "1h02m03s");
        assert_eq!(duration(Duration::from_secs(2 * 86400 + 3 * 3600)), "2d03h");
        let now = humantime::parse_rfc3339("2026-11-26T07:00:10Z").unwrap();
        assert_eq!(elapsed(Some("2026-11-26T07:00:00Z"), None, now), "10.0s");
        assert_eq!(elapsed(None, None, now), "-");
    }
}
