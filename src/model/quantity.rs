//! Kubernetes quantity strings (`100m`, `1.5`, `4Gi`, `2G`, `1e3`) parsed into exact fixed-point
//! integers, and formatted back.
//!
//! A quantity is parsed into an exact rational (`mantissa × 10^e10 × 2^e2`) and only then scaled
//! to the integer unit of its resource, so `0.1 + 0.2` style drift never happens. Values that do
//! not land on a whole unit are rounded up, as Kubernetes does for requests.

use std::fmt;

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is blank.
    #[error("quantity {0:?} is empty")]
    Empty(String),
    /// The text is not a number with an optional suffix (also used for an invalid resource name).
    #[error("quantity {0:?} is not a number with an optional suffix (e.g. 500m, 2, 1.5, 4Gi, 1e3)")]
    Malformed(String),
    /// The suffix (second field) is neither a known one nor an exponent.
    #[error(
        "quantity {0:?} has an unknown suffix {1:?} (use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent)"
    )]
    UnknownSuffix(String, String),
    /// The value is below zero.
    #[error("quantity {0:?} is negative")]
    Negative(String),
    /// The value does not fit the stored integer, has more than 30 digits, or its exponent is
    /// beyond ±30.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

/// The integer unit a resource is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Stored in thousandths (cpu in millicores, GPUs and other devices in milli-units).
    Milli,
    /// Stored in whole units (memory and storage in bytes).
    Whole,
}

impl Unit {
    /// The unit for a resource name: bytes for memory-like resources, milli-units otherwise.
    pub(crate) fn for_resource(name: &str) -> Unit {
        if name == "memory" || name == "ephemeral-storage" || name == "storage" || name.starts_with("hugepages-") {
            Unit::Whole
        } else {
            Unit::Milli
        }
    }

    fn scale_exp10(self) -> i32 {
        match self {
            Unit::Milli => 3,
            Unit::Whole => 0,
        }
    }
}

/// Parses a Kubernetes quantity into an integer count of `unit`, rounding up.
pub(crate) fn parse_quantity(s: &str, unit: Unit) -> Result<i64, QuantityError> {
    let orig = s;
    let s = s.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty(orig.to_string()));
    }
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Split the numeric part (digits with at most one '.') from the suffix.
    let num_end =
        body.char_indices().find(|&(_, c)| !(c.is_ascii_digit() || c == '.')).map(|(i, _)| i).unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(QuantityError::Malformed(orig.to_string()));
    }
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(QuantityError::TooLarge(orig.to_string()));
    }
    let mantissa: i128 =
        if digits.is_empty() { 0 } else { digits.parse().map_err(|_| QuantityError::Malformed(orig.to_string()))? };
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut exp2: i32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 += 10,
        "Mi" => exp2 += 20,
        "Gi" => exp2 += 30,
        "Ti" => exp2 += 40,
        "Pi" => exp2 += 50,
        "Ei" => exp2 += 60,
        other => {
            if let Some(rest) = other.strip_prefix(['e', 'E']) {
                let e: i32 =
                    rest.parse().map_err(|_| QuantityError::UnknownSuffix(orig.to_string(), other.to_string()))?;
                if !(-30..=30).contains(&e) {
                    return Err(QuantityError::TooLarge(orig.to_string()));
                }
                exp10 += e;
            } else {
                return Err(QuantityError::UnknownSuffix(orig.to_string(), other.to_string()));
            }
        }
    }
    if negative && mantissa != 0 {
        return Err(QuantityError::Negative(orig.to_string()));
    }
    exp10 += unit.scale_exp10();
    let too_large = || QuantityError::TooLarge(orig.to_string());
    // value = mantissa * 10^exp10 * 2^exp2, rounded up to an integer.
    let mut numer: i128 = mantissa;
    let mut denom: i128 = 1;
    let pow10 = |e: i32| -> Option<i128> { 10i128.checked_pow(e as u32) };
    if exp10 >= 0 {
        numer = numer.checked_mul(pow10(exp10).ok_or_else(too_large)?).ok_or_else(too_large)?;
    } else {
        denom = pow10(-exp10).ok_or_else(too_large)?;
    }
    numer = numer.checked_mul(1i128 << exp2).ok_or_else(too_large)?;
    let value = (numer + denom - 1) / denom;
    i64::try_from(value).map_err(|_| too_large())
}

/// Formats an integer amount of `unit` as the shortest exact Kubernetes quantity.
pub(crate) fn format_quantity(value: i64, unit: Unit) -> String {
    struct Q(i64, Unit);
    impl fmt::Display for Q {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let (v, unit) = (self.0, self.1);
            match unit {
                Unit::Milli => {
                    if v % 1000 == 0 {
                        write!(f, "{}", v / 1000)
                    } else {
                        write!(f, "{v}m")
                    }
                }
                Unit::Whole => {
                    if v == 0 {
                        return write!(f, "0");
                    }
                    for (shift, suffix) in [(60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
                        let d = 1i64 << shift;
                        if v % d == 0 {
                            return write!(f, "{}{suffix}", v / d);
                        }
                    }
                    write!(f, "{v}")
                }
            }
        }
    }
    Q(value, unit).to_string()
}

/// Serde adapter for a number of bytes written as a plain integer or a quantity (`256Mi`, `1Gi`):
/// `#[serde(with = "crate::model::quantity::serde_bytes")]`.
pub(crate) mod serde_bytes {
    use super::{Unit, format_quantity, parse_quantity};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the size as a quantity (`256Mi`).
    pub(crate) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_quantity(i64::try_from(*v).unwrap_or(i64::MAX), Unit::Whole))
    }

    /// Reads an integer number of bytes or a quantity.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(n),
            Raw::Text(t) => parse_quantity(&t, Unit::Whole)
                .map(|v| v.max(0) as u64)
                .map_err(|e| serde::de::Error::custom(format!("{e}; give bytes or a quantity such as 256Mi"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_forms() {
        assert_eq!(parse_quantity("100m", Unit::Milli), Ok(100));
        assert_eq!(parse_quantity("1", Unit::Milli), Ok(1000));
        assert_eq!(parse_quantity("1.5", Unit::Milli), Ok(1500));
        assert_eq!(parse_quantity("0.1", Unit::Milli), Ok(100));
        assert_eq!(parse_quantity("1e3", Unit::Milli), Ok(1_000_000));
        assert_eq!(parse_quantity("2k", Unit::Milli), Ok(2_000_000));
        assert_eq!(parse_quantity(".5", Unit::Milli), Ok(500));
        assert_eq!(parse_quantity("+2", Unit::Milli), Ok(2000));
        // Sub-millicore rounds up, as Kubernetes does.
        assert_eq!(parse_quantity("100u", Unit::Milli), Ok(1));
        assert_eq!(parse_quantity("0", Unit::Milli), Ok(0));
        assert_eq!(parse_quantity("-0", Unit::Milli), Ok(0));
    }

    #[test]
    fn parses_memory_forms() {
        assert_eq!(parse_quantity("4Gi", Unit::Whole), Ok(4 << 30));
        assert_eq!(parse_quantity("500Mi", Unit::Whole), Ok(500 << 20));
        assert_eq!(parse_quantity("2G", Unit::Whole), Ok(2_000_000_000));
        assert_eq!(parse_quantity("1.5Gi", Unit::Whole), Ok(3 << 29));
        assert_eq!(parse_quantity("128974848", Unit::Whole), Ok(128_974_848));
        assert_eq!(parse_quantity("129e6", Unit::Whole), Ok(129_000_000));
        assert_eq!(parse_quantity("123E6", Unit::Whole), Ok(123_000_000));
        assert_eq!(parse_quantity("100m", Unit::Whole), Ok(1));
    }

    #[test]
    fn rejects_malformed_and_names_the_value() {
        for bad in ["", "abc", "1.2.3", "4GB", "1x", "--1", "1e", "Gi", ".", "1 Gi"] {
            let err = parse_quantity(bad, Unit::Whole).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err} should name {bad:?}");
        }
        assert!(matches!(parse_quantity("-1", Unit::Milli), Err(QuantityError::Negative(_))));
        assert!(matches!(parse_quantity("1e40", Unit::Milli), Err(QuantityError::TooLarge(_))));
        assert!(matches!(parse_quantity("99999999999999999999Ei", Unit::Whole), Err(QuantityError::TooLarge(_))));
    }

    #[test]
    fn formats_round_trip() {
        for (v, unit) in [
            (1500, Unit::Milli),
            (2000, Unit::Milli),
            (4i64 << 30, Unit::Whole),
            (1000, Unit::Whole),
            (0, Unit::Whole),
            (3 << 29, Unit::Whole),
        ] {
            let s = format_quantity(v, unit);
            assert_eq!(parse_quantity(&s, unit), Ok(v), "{s}");
        }
        assert_eq!(format_quantity(4 << 30, Unit::Whole), "4Gi");
        assert_eq!(format_quantity(64_000, Unit::Milli), "64");
        assert_eq!(format_quantity(250, Unit::Milli), "250m");
    }
}
