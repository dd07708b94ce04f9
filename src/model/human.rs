//! Amounts as people read them (on the web UI's pages and in the CLI's tables): memory in binary
//! units with one decimal (`23.5 GiB`, not `24684084Ki`), CPUs and devices as numbers, times to
//! the second, durations.

use super::Resources;
use super::quantity::Unit;
use std::time::{Duration, SystemTime};

/// One amount of resource `name` (stored as [`Unit::for_resource`] says).
pub fn amount(name: &str, value: i64) -> String {
    match Unit::for_resource(name) {
        Unit::Whole => bytes(value),
        Unit::Milli if value % 1000 == 0 => (value / 1000).to_string(),
        Unit::Milli => format!("{}", value as f64 / 1000.0),
    }
}

/// `cpu 8, memory 23.5 GiB, nvidia.com/gpu 2`; `—` for nothing.
pub fn resources(r: &Resources) -> String {
    let parts: Vec<String> = r.iter().map(|(n, v)| format!("{n} {}", amount(n.as_str(), v))).collect();
    if parts.is_empty() { "—".to_string() } else { parts.join(", ") }
}

/// `512 MiB`, `1.5 GiB`, `300 KiB`, `100 B`.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let rounded = (v * 10.0).round() / 10.0;
    if unit == 0 || rounded.fract() == 0.0 {
        format!("{rounded:.0} {}", UNITS[unit])
    } else {
        format!("{rounded:.1} {}", UNITS[unit])
    }
}

/// `2026-11-26 07:00:02` from an RFC 3339 time (UTC, to the second).
pub fn time(t: &str) -> String {
    if t.len() >= 19 && t.is_char_boundary(19) { t[..19].replace('T', " ") } else { t.to_string() }
}

/// How long a run ran: from `started` to `ended` (or to `now` while it runs); none if it never
/// started.
pub fn elapsed(started: Option<&str>, ended: Option<&str>, now: SystemTime) -> Option<String> {
    let parse = |t: &str| humantime::parse_rfc3339_weak(t).ok();
    let from = started.and_then(parse)?;
    let to = ended.and_then(parse).unwrap_or(now);
    Some(duration(to.duration_since(from).unwrap_or_default()))
}

/// A run's CPU time and peak memory: (`1m01s`, `3 GiB`).
pub fn usage(u: &super::RunUsage) -> (String, String) {
    (duration(Duration::from_millis(u.cpu_ms)), bytes(i64::try_from(u.peak_memory_bytes).unwrap_or(i64::MAX)))
}

/// `3.2s`, `4m05s`, `1h02m03s`, `2d03h`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m{:02}s", s / 3600, s % 3600 / 60, s % 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z): later times, such as a
/// deadline far in the future, are written as it rather than failing to format.
pub const LATEST_RFC3339_MS: i64 = 253_402_300_799_999;

/// A time (ms since the epoch) as RFC 3339 in UTC, to the second; clamped to 1970..=9999.
pub fn rfc3339_seconds(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.clamp(0, LATEST_RFC3339_MS) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A time (ms since the epoch) as RFC 3339 in UTC, to the millisecond; clamped to 1970..=9999.
pub fn rfc3339_millis(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.clamp(0, LATEST_RFC3339_MS) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_reads_in_binary_units_and_cpus_as_numbers() {
        assert_eq!(amount("memory", 24_684_084 * 1024), "23.5 GiB");
        assert_eq!(amount("memory", 512 << 20), "512 MiB");
        assert_eq!(amount("ephemeral-storage", 100), "100 B");
        assert_eq!(amount("cpu", 8000), "8");
        assert_eq!(amount("cpu", 1500), "1.5");
        assert_eq!(amount("nvidia.com/gpu", 2000), "2");
        let r = Resources::parse([("cpu", "8"), ("memory", "24684084Ki")]).unwrap();
        assert_eq!(resources(&r), "cpu 8, memory 23.5 GiB");
        assert_eq!(resources(&Resources::new()), "—");
    }

    #[test]
    fn times_and_durations() {
        assert_eq!(time("2026-11-26T07:00:02.123Z"), "2026-11-26 07:00:02");
        assert_eq!(duration(Duration::from_secs(3723)), "1h02m03s");
        let now = humantime::parse_rfc3339("2026-11-26T07:00:10Z").unwrap();
        assert_eq!(elapsed(Some("2026-11-26T07:00:00Z"), None, now).as_deref(), Some("10.0s"));
        assert_eq!(elapsed(Some("2026-11-26T07:00:00Z"), Some("2026-11-26T07:04:05Z"), now).as_deref(), Some("4m05s"));
        assert_eq!(elapsed(None, None, now), None);
    }
}
