//! Go-style durations (decisions §3): accepted as `300ms`, `1h30m`, `1.5h`, rendered in Go's
//! canonical form (`30m0s`, `2h0m0s`, `1.5s`, `250ms`). Durations are never negative and, like
//! Go's, never exceed `i64::MAX` nanoseconds, so every value renders and parses back unchanged.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The largest representable duration: Go's `time.Duration` is a signed 64-bit nanosecond count.
const MAX_NANOS: u128 = i64::MAX as u128;

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;

/// A non-negative duration with Go's syntax on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(Duration);

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("duration is empty")]
    Empty,
    /// A leading minus sign.
    #[error("invalid duration {}: negative durations are not allowed", crate::error::echo(.0))]
    Negative(String),
    /// Not Go duration syntax.
    #[error(
        "invalid duration {}: expected a number with a unit such as 300ms, 30s, 5m or 1h30m", crate::error::echo(.0)
    )]
    Syntax(String),
    /// A unit that Go does not know.
    #[error(
        "invalid duration {}: unknown unit {} (allowed: ns, us, ms, s, m, h)",
        crate::error::echo(input),
        crate::error::echo(unit)
    )]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The offending unit.
        unit: String,
    },
    /// Larger than about 292 years.
    #[error("invalid duration {}: too large", crate::error::echo(.0))]
    Overflow(String),
}

impl GoDuration {
    /// The zero duration.
    pub const ZERO: GoDuration = GoDuration(Duration::ZERO);

    /// Wraps a std duration, saturating at the largest Go duration.
    pub fn new(duration: Duration) -> Self {
        if duration.as_nanos() > MAX_NANOS {
            Self::from_nanos(MAX_NANOS)
        } else {
            GoDuration(duration)
        }
    }

    /// A duration of whole seconds.
    pub const fn from_secs(secs: u64) -> Self {
        GoDuration(Duration::from_secs(secs))
    }

    /// A duration of whole milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        GoDuration(Duration::from_millis(millis))
    }

    fn from_nanos(nanos: u128) -> Self {
        let secs = u64::try_from(nanos / NANOS_PER_SECOND).unwrap_or(u64::MAX);
        // The remainder of a division by 10^9 always fits in u32.
        let sub = u32::try_from(nanos % NANOS_PER_SECOND).unwrap_or(0);
        GoDuration(Duration::new(secs, sub))
    }

    /// The std duration.
    pub const fn as_std(self) -> Duration {
        self.0
    }

    /// True for zero.
    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    /// True when there is no fractional second (quota durations must be whole seconds).
    pub fn is_whole_seconds(self) -> bool {
        self.0.subsec_nanos() == 0
    }

    /// Parses Go duration syntax.
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let mut rest = input;
        if rest.is_empty() {
            return Err(DurationError::Empty);
        }
        if let Some(stripped) = rest.strip_prefix('-') {
            let _ = stripped;
            return Err(DurationError::Negative(input.to_owned()));
        }
        if let Some(stripped) = rest.strip_prefix('+') {
            rest = stripped;
        }
        if rest == "0" {
            return Ok(GoDuration::ZERO);
        }
        if rest.is_empty() {
            return Err(DurationError::Syntax(input.to_owned()));
        }
        let overflow = || DurationError::Overflow(input.to_owned());
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let (int_digits, after_int) = rest.split_at(int_len);
            let (frac_digits, after_number) = match after_int.strip_prefix('.') {
                Some(after_dot) => {
                    let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                    after_dot.split_at(frac_len)
                }
                None => ("", after_int),
            };
            if int_digits.is_empty() && frac_digits.is_empty() {
                return Err(DurationError::Syntax(input.to_owned()));
            }
            let unit_len = after_number
                .find(|c: char| c == '.' || c.is_ascii_digit())
                .unwrap_or(after_number.len());
            let (unit, after_unit) = after_number.split_at(unit_len);
            let scale = match unit {
                "ns" => 1,
                "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_MICRO,
                "ms" => NANOS_PER_MILLI,
                "s" => NANOS_PER_SECOND,
                "m" => NANOS_PER_MINUTE,
                "h" => NANOS_PER_HOUR,
                "" => return Err(DurationError::Syntax(input.to_owned())),
                other => {
                    return Err(DurationError::UnknownUnit {
                        input: input.to_owned(),
                        unit: other.to_owned(),
                    })
                }
            };
            let mut int_value: u128 = 0;
            for digit in int_digits.bytes() {
                int_value = int_value
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u128::from(digit - b'0')))
                    .filter(|v| *v <= MAX_NANOS)
                    .ok_or_else(overflow)?;
            }
            let mut component = int_value.checked_mul(scale).ok_or_else(overflow)?;
            // Fractions are truncated at nanosecond precision, as Go does.
            let mut frac_scale = scale;
            for digit in frac_digits.bytes() {
                frac_scale /= 10;
                if frac_scale == 0 {
                    break;
                }
                component += u128::from(digit - b'0') * frac_scale;
            }
            total = total.checked_add(component).ok_or_else(overflow)?;
            if total > MAX_NANOS {
                return Err(overflow());
            }
            rest = after_unit;
        }
        Ok(Self::from_nanos(total))
    }
}

impl From<Duration> for GoDuration {
    fn from(duration: Duration) -> Self {
        GoDuration::new(duration)
    }
}

impl From<GoDuration> for Duration {
    fn from(duration: GoDuration) -> Self {
        duration.0
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

/// Writes `value` followed by up to `digits` fractional digits of `frac`, trailing zeros trimmed.
fn write_with_fraction(
    f: &mut fmt::Formatter<'_>,
    value: u128,
    frac: u128,
    digits: usize,
) -> fmt::Result {
    write!(f, "{value}")?;
    if frac != 0 {
        let padded = format!("{frac:0digits$}");
        write!(f, ".{}", padded.trim_end_matches('0'))?;
    }
    Ok(())
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < NANOS_PER_MICRO {
            return write!(f, "{nanos}ns");
        }
        if nanos < NANOS_PER_MILLI {
            write_with_fraction(f, nanos / NANOS_PER_MICRO, nanos % NANOS_PER_MICRO, 3)?;
            return f.write_str("\u{b5}s");
        }
        if nanos < NANOS_PER_SECOND {
            write_with_fraction(f, nanos / NANOS_PER_MILLI, nanos % NANOS_PER_MILLI, 6)?;
            return f.write_str("ms");
        }
        let hours = nanos / NANOS_PER_HOUR;
        let minutes = (nanos % NANOS_PER_HOUR) / NANOS_PER_MINUTE;
        if hours > 0 {
            write!(f, "{hours}h{minutes}m")?;
        } else if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        let in_minute = nanos % NANOS_PER_MINUTE;
        write_with_fraction(
            f,
            in_minute / NANOS_PER_SECOND,
            in_minute % NANOS_PER_SECOND,
            9,
        )?;
        f.write_str("s")
    }
}

impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as 30s, 5m or 1h30m")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GoDuration, E> {
                GoDuration::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl utoipa::PartialSchema for GoDuration {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "Go-style duration such as `30s`, `5m`, `1h30m`; rendered canonically (`30m0s`)",
            ))
            .examples([serde_json::json!("30m0s")])
            .into()
    }
}

impl utoipa::ToSchema for GoDuration {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_go_syntax() {
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("300ms", Duration::from_millis(300)),
            ("30s", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1h30m", Duration::from_secs(5400)),
            ("2h0m0s", Duration::from_secs(7200)),
            ("1.5h", Duration::from_secs(5400)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("10us", Duration::from_micros(10)),
            ("10\u{b5}s", Duration::from_micros(10)),
            ("10\u{3bc}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("1h1m1s1ms1us1ns", Duration::from_nanos(3_661_001_001_001)),
        ];
        for (input, expected) in cases {
            assert_eq!(
                GoDuration::parse(input).map(GoDuration::as_std),
                Ok(*expected),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_bad_input() {
        for input in [
            "", "-1s", "-0s", "1", "s", "1x", "1.5", "1s2", "abc", " 1s", "1 s", "..5s", "+",
        ] {
            assert!(GoDuration::parse(input).is_err(), "{input:?} was accepted");
        }
        assert!(matches!(
            GoDuration::parse("-5m"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            GoDuration::parse("3d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            GoDuration::parse("2562048h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            GoDuration::parse("99999999999999999999999999999s"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn renders_canonically() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_nanos(1_500), "1.5\u{b5}s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(1800), "30m0s"),
            (Duration::from_secs(7200), "2h0m0s"),
            (Duration::from_secs(5400), "1h30m0s"),
            (Duration::from_secs(86_400), "24h0m0s"),
        ];
        for (duration, expected) in cases {
            assert_eq!(GoDuration::new(*duration).to_string(), *expected);
        }
    }

    #[test]
    fn serde_round_trip_and_errors() {
        let d: GoDuration = serde_json::from_str("\"1h30m\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h30m0s\"");
        let err = serde_json::from_str::<GoDuration>("\"-1s\"").unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
        assert!(serde_json::from_str::<GoDuration>("30").is_err());
    }

    proptest! {
        #[test]
        fn parse_render_round_trip(nanos in 0u64..=(i64::MAX as u64)) {
            let d = GoDuration::new(Duration::from_nanos(nanos));
            prop_assert_eq!(GoDuration::parse(&d.to_string()), Ok(d));
        }

        #[test]
        fn negatives_are_rejected(nanos in 1u64..=(i64::MAX as u64)) {
            let rendered = format!("-{}", GoDuration::new(Duration::from_nanos(nanos)));
            prop_assert!(matches!(GoDuration::parse(&rendered), Err(DurationError::Negative(_))));
        }

        #[test]
        fn garbage_never_panics(input in "\\PC{0,24}") {
            let _ = GoDuration::parse(&input);
        }
    }
}
