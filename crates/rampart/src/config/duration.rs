//! Durations as people write them in configuration files: `"250ms"`, `"2s"`, `"1.5s"`, `"1m"`.
//!
//! A number (whole or decimal, never negative) followed by its unit, with nothing between or
//! around them: `ns`, `us` (or `µs`), `ms`, `s`, `m` (minutes) or `h`. Written back in the
//! largest unit that is exact (`"2m"`, `"90s"`), or as [`Duration`]'s own `Debug` form (`"1.5s"`,
//! `"250ms"`, the form [`Policy::explain`](crate::Policy::explain) prints) with `us` for `µs`;
//! parsing what was written gives the same duration back.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The units, longest name first where one is a prefix of another (`ms` before `m`, `ns`...).
const UNITS: [(&str, u128); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("h", 3600 * NANOS_PER_SEC),
];

/// Reads a duration written as a number and a unit: `"250ms"`, `"2s"`, `"1.5s"`, `"1m"`, `"1h"`.
///
/// ```
/// use std::time::Duration;
/// use rampart::config::parse_duration;
///
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
/// assert_eq!(
///     parse_duration("250").unwrap_err().to_string(),
///     r#"invalid duration "250": no unit (write ns, us, ms, s, m or h after the number)"#
/// );
/// ```
///
/// # Errors
///
/// A [`DurationError`] naming the text and what is wrong with it: empty, negative, no number,
/// no unit or an unknown one, a fraction finer than a nanosecond, or longer than
/// [`Duration::MAX`].
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let fail = |reason| Err(DurationError::new(text, reason));
    if text.is_empty() {
        return fail(Reason::Empty);
    }
    if text.starts_with('-') {
        return fail(Reason::Negative);
    }
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return fail(if unit.is_empty() {
            Reason::NoUnit
        } else {
            Reason::UnknownUnit
        });
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return fail(Reason::NoNumber);
    }
    let Some(nanos) = nanos_of(whole, fraction, scale) else {
        return fail(Reason::Overflow);
    };
    let Some(nanos) = nanos else {
        return fail(Reason::FinerThanNanos);
    };
    let secs = u64::try_from(nanos / NANOS_PER_SEC);
    match secs {
        Ok(secs) => Ok(Duration::new(secs, (nanos % NANOS_PER_SEC) as u32)),
        Err(_) => fail(Reason::Overflow),
    }
}

/// `whole.fraction` units of `scale` nanoseconds, exactly: `None` on overflow, `Some(None)` when
/// the fraction does not come to a whole number of nanoseconds.
fn nanos_of(whole: &str, fraction: &str, scale: u128) -> Option<Option<u128>> {
    let digits = |text: &str| {
        text.bytes().try_fold(0u128, |n, b| {
            n.checked_mul(10)?.checked_add(u128::from(b - b'0'))
        })
    };
    let whole_nanos = digits(whole)?.checked_mul(scale)?;
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        return Some(Some(whole_nanos));
    }
    // A unit is at most 3.6e12 ns, so a fraction of more than 13 significant digits cannot
    // come to whole nanoseconds.
    if fraction.len() > 13 {
        return Some(None);
    }
    let denominator = 10u128.pow(fraction.len() as u32);
    let numerator = digits(fraction)? * scale;
    if !numerator.is_multiple_of(denominator) {
        return Some(None);
    }
    Some(whole_nanos.checked_add(numerator / denominator))
}

/// Writes a duration so that [`parse_duration`] reads it back exactly: in whole hours or
/// minutes when it is one (`"2h"`, `"1m"`), else as [`Duration`]'s `Debug` form with `us` for
/// `µs` (`"90s"`, `"1.5s"`, `"250ms"`, `"0ns"`).
///
/// ```
/// use std::time::Duration;
/// use rampart::config::format_duration;
///
/// assert_eq!(format_duration(Duration::from_secs(120)), "2m");
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
/// assert_eq!(format_duration(Duration::from_micros(3)), "3us");
/// ```
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos != 0 {
        for (unit, scale) in [("h", 3600 * NANOS_PER_SEC), ("m", 60 * NANOS_PER_SEC)] {
            if nanos.is_multiple_of(scale) {
                return format!("{}{unit}", nanos / scale);
            }
        }
    }
    format!("{duration:?}").replace('µ', "u")
}

/// Why a duration could not be read; its message quotes the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    text: String,
    reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Empty,
    Negative,
    NoNumber,
    NoUnit,
    UnknownUnit,
    FinerThanNanos,
    Overflow,
}

impl DurationError {
    #[cold]
    fn new(text: &str, reason: Reason) -> Self {
        DurationError {
            text: text.to_owned(),
            reason,
        }
    }

    /// The text that was not a duration.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid duration {:?}: ", self.text)?;
        f.write_str(match self.reason {
            Reason::Empty => "empty (write a number and a unit, e.g. \"250ms\")",
            Reason::Negative => "must not be negative",
            Reason::NoNumber => "no number before the unit (write e.g. \"250ms\" or \"1.5s\")",
            Reason::NoUnit => "no unit (write ns, us, ms, s, m or h after the number)",
            Reason::UnknownUnit => "unknown unit (write ns, us, ms, s, m or h after the number)",
            Reason::FinerThanNanos => "finer than a nanosecond",
            Reason::Overflow => "too long (longer than 2^64 seconds)",
        })
    }
}

impl StdError for DurationError {}

/// An `Option<Duration>` written as text (`"250ms"`), absent when `None`: re-exported as
/// [`with::duration`](super::with::duration).
pub mod optional {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    /// Writes the duration as [`format_duration`](super::format_duration) does; `None` as
    /// nothing (skip it with `skip_serializing_if = "Option::is_none"`).
    ///
    /// # Errors
    ///
    /// The serializer's.
    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_str(&super::format_duration(*duration)),
            None => serializer.serialize_none(),
        }
    }

    /// Reads a duration's text as [`parse_duration`](super::parse_duration) does (use with
    /// `#[serde(default)]` so that a missing key is `None`).
    ///
    /// # Errors
    ///
    /// A value that is not a string, or a malformed duration, in the format's words.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        deserializer.deserialize_str(Text).map(Some)
    }

    /// A duration's text.
    pub(super) struct Text;

    impl Visitor<'_> for Text {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"250ms\", \"2s\", \"1.5s\" or \"1m\"")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            super::parse_duration(text).map_err(E::custom)
        }
    }
}

/// An `Option<Option<Duration>>` bound: absent when the outer is `None`, the text `"none"` when
/// the inner is (no bound), else the duration's text: re-exported as
/// [`with::bound`](super::with::bound).
pub mod bound {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    /// Writes the bound: its duration's text, or `"none"`.
    ///
    /// # Errors
    ///
    /// The serializer's.
    pub fn serialize<S: Serializer>(
        value: &Option<Option<Duration>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(Some(duration)) => serializer.serialize_str(&super::format_duration(*duration)),
            Some(None) => serializer.serialize_str(super::super::NONE),
            None => serializer.serialize_none(),
        }
    }

    /// Reads a duration's text, or `"none"` for no bound (use with `#[serde(default)]`).
    ///
    /// # Errors
    ///
    /// A value that is not a string, or a malformed duration, in the format's words.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Option<Duration>>, D::Error> {
        deserializer.deserialize_str(Bound).map(Some)
    }

    struct Bound;

    impl Visitor<'_> for Bound {
        type Value = Option<Duration>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"250ms\" or \"2s\", or \"none\" for no bound")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Option<Duration>, E> {
            if text == super::super::NONE {
                return Ok(None);
            }
            super::optional::Text.visit_str(text).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_decimal_form_reads_exactly() {
        let cases = [
            ("0ns", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("7ns", Duration::from_nanos(7)),
            ("3us", Duration::from_micros(3)),
            ("3µs", Duration::from_micros(3)),
            ("250ms", Duration::from_millis(250)),
            ("2s", Duration::from_secs(2)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25s", Duration::from_millis(250)),
            (".5s", Duration::from_millis(500)),
            ("5.s", Duration::from_secs(5)),
            ("1.000000001s", Duration::new(1, 1)),
            ("1.50000000000000000000s", Duration::from_millis(1500)),
            ("1m", Duration::from_secs(60)),
            ("1.5m", Duration::from_secs(90)),
            ("2h", Duration::from_secs(7200)),
            ("18446744073709551615s", Duration::new(u64::MAX, 0)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_malformed_duration_names_its_text_and_the_fault() {
        let cases = [
            ("", "empty"),
            ("-1s", "must not be negative"),
            ("250", "no unit"),
            ("s", "no number"),
            (".s", "no number"),
            ("1.2.3s", "no number"),
            ("5 s", "unknown unit"),
            (" 5s", "unknown unit"),
            ("5sec", "unknown unit"),
            ("5d", "unknown unit"),
            ("1.5ns", "finer than a nanosecond"),
            ("0.0000000001s", "finer than a nanosecond"),
            ("18446744073709551616s", "too long"),
            ("99999999999999999999999999999999999999999h", "too long"),
        ];
        for (text, fault) in cases {
            let message = parse_duration(text).expect_err(text).to_string();
            assert!(
                message.starts_with(&format!("invalid duration {text:?}: {fault}")),
                "{message}"
            );
        }
    }

    #[test]
    fn durations_are_written_in_the_largest_exact_unit_or_as_debug_prints_them() {
        let cases = [
            (Duration::ZERO, "0ns"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(5400), "90m"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_nanos(1500), "1.5us"),
            (Duration::new(1, 1), "1.000000001s"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration));
        }
    }
}
