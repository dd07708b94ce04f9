//! Durations in configuration and scenarios: `"100ms"`, `"5s"`, `"3d"`, or a number of seconds.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Parses `"100ms"`, `"1m 30s"`, `"3d"` or a plain number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("duration {s:?} must be a non-negative number of seconds"));
    }
    humantime::parse_duration(t).map_err(|e| format!("duration {s:?} is invalid ({e}); use e.g. 100ms, 5s, 10m, 3d"))
}

/// Formats a duration as humantime text.
pub(crate) fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Serde adapter: `#[serde(with = "crate::model::duration::serde_text")]`.
pub(crate) mod serde_text {
    use super::*;

    /// Writes the duration as humantime text, e.g. `1m 30s`.
    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Reads humantime text or a non-negative number of seconds.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Raw::deserialize(d)?.duration().map_err(serde::de::Error::custom)
    }
}

/// A duration as written: a number of seconds or text.
#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Num(f64),
    Text(String),
}

impl Raw {
    fn duration(self) -> Result<Duration, String> {
        match self {
            Raw::Num(n) => Duration::try_from_secs_f64(n)
                .map_err(|_| format!("duration {n} must be a non-negative number of seconds")),
            Raw::Text(t) => parse_duration(&t),
        }
    }
}

/// Serde adapter for an optional duration: `#[serde(with = "crate::model::duration::serde_text_opt")]`
/// (absent or text, as [`serde_text`]).
pub(crate) mod serde_text_opt {
    use super::*;

    /// Writes the duration as humantime text (the field is skipped when `None`).
    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serde_text::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Reads what [`serde_text`] reads.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::serde_text::deserialize(d).map(Some)
    }
}

/// Serde adapter for a duration that may be turned off: `"off"` is `None`, anything else reads as
/// [`serde_text`] (`#[serde(with = "crate::model::duration::serde_text_or_off")]`).
pub(crate) mod serde_text_or_off {
    use super::*;

    /// Writes `off` or the duration as humantime text.
    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serde_text::serialize(d, s),
            None => s.serialize_str("off"),
        }
    }

    /// Reads `off`, humantime text or a number of seconds.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Text(t) if t.trim() == "off" => Ok(None),
            raw => raw
                .duration()
                .map(Some)
                .map_err(|e| serde::de::Error::custom(format!("{e} (a duration such as \"1h\", or \"off\")"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("3d"), Ok(Duration::from_secs(3 * 86400)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").unwrap_err().contains("\"soon\""));
    }
}
