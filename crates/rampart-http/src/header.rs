//! Header codecs: the deadline, the criticality and the retry mark on the wire, and
//! `Retry-After`.
//!
//! A deadline crosses a process edge as a span, because two machines do not share a clock:
//! the caller writes how long it is still waiting, and the receiver turns that back into an
//! instant on its own clock when the request arrives. Two encodings exist:
//!
//! | header | format | example |
//! |---|---|---|
//! | `X-Deadline-Ms` | a positive whole number of milliseconds that fits in 31 bits | `2500` |
//! | `grpc-timeout` | 1 to 8 digits and a unit: `H`ours, `M`inutes, `S`econds, `m`illis, `u`micros, `n`anos | `2500m` |
//! | `X-Criticality` | `Sheddable`, `SheddablePlus`, `Critical` or `CriticalPlus`, any case | `Sheddable` |
//! | `X-Rampart-Retry` | `1` on a retry or hedge of an earlier request | `1` |
//!
//! Everything received is untrusted: a value that is not exactly in the format is ignored, never
//! guessed at (`"0"`, `"-5"`, `"200ms"`, `"2.5"`, `" 200"` and numbers past 31 bits are not
//! deadlines), and a received `CriticalPlus` is read as `Critical`
//! ([`Criticality::parse_inbound`]). When a request carries a header more than once, the last
//! value counts.
//!
//! ```
//! use std::time::Duration;
//! use rampart_http::header;
//!
//! assert_eq!(header::parse_deadline_ms(b"2500"), Some(Duration::from_millis(2500)));
//! assert_eq!(header::parse_deadline_ms(b"200ms"), None);
//! assert_eq!(header::parse_grpc_timeout(b"3S"), Some(Duration::from_secs(3)));
//!
//! // Formatting floors to whole milliseconds, never below 1, and writes nothing for no bound.
//! let v = header::format_deadline_ms(Some(Duration::from_micros(2_999_999)));
//! assert_eq!(v.unwrap(), "2999");
//! assert_eq!(header::format_deadline_ms(Some(Duration::from_micros(10))).unwrap(), "1");
//! assert!(header::format_deadline_ms(None).is_none());
//! assert_eq!(header::format_grpc_timeout(Some(Duration::from_millis(250))).unwrap(), "250000u");
//! ```

use std::time::{Duration, SystemTime};

use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use rampart::Criticality;

/// `x-deadline-ms`: the time the caller is still waiting, in milliseconds.
pub const X_DEADLINE_MS: HeaderName = HeaderName::from_static("x-deadline-ms");
/// `x-criticality`: how much the request matters.
pub const X_CRITICALITY: HeaderName = HeaderName::from_static("x-criticality");
/// `x-rampart-retry`: `1` when the request is a retry (or hedge) of an earlier one.
pub const X_RAMPART_RETRY: HeaderName = HeaderName::from_static("x-rampart-retry");
/// `grpc-timeout`: gRPC's deadline header.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The largest `X-Deadline-Ms`: 2^31 − 1 ms, about 24.8 days.
pub const MAX_DEADLINE_MS: u64 = (1 << 31) - 1;

/// The largest `grpc-timeout` value: eight digits.
const MAX_GRPC_VALUE: u64 = 99_999_999;

/// The header names an edge layer reads and writes; the defaults are the constants above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The deadline in milliseconds (default `x-deadline-ms`).
    pub deadline: HeaderName,
    /// The criticality (default `x-criticality`).
    pub criticality: HeaderName,
    /// The retry mark (default `x-rampart-retry`).
    pub retry: HeaderName,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            deadline: X_DEADLINE_MS,
            criticality: X_CRITICALITY,
            retry: X_RAMPART_RETRY,
        }
    }
}

/// The last value of `name`, the one that counts when a request repeats a header.
pub fn last<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    headers.get_all(name).iter().next_back()
}

/// Parses an `X-Deadline-Ms` value: ASCII digits only (no sign, no space, no unit, no
/// fraction), at least 1 and at most [`MAX_DEADLINE_MS`]. Anything else is `None`.
pub fn parse_deadline_ms(value: &[u8]) -> Option<Duration> {
    let ms = parse_digits(value, 10)?;
    (1..=MAX_DEADLINE_MS)
        .contains(&ms)
        .then(|| Duration::from_millis(ms))
}

/// Formats the time left as `X-Deadline-Ms`: floored to whole milliseconds, at least `1`,
/// at most [`MAX_DEADLINE_MS`]; `None` (write nothing) for no bound or zero.
pub fn format_deadline_ms(left: Option<Duration>) -> Option<HeaderValue> {
    let left = left.filter(|d| !d.is_zero())?;
    let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    Some(number(ms.clamp(1, MAX_DEADLINE_MS), ""))
}

/// Parses a `grpc-timeout` value: 1 to 8 ASCII digits, then one unit letter (`H`, `M`, `S`,
/// `m`, `u`, `n`). Zero is not a timeout. Anything else is `None`.
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    let n = parse_digits(digits, 8)?;
    if n == 0 {
        return None;
    }
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Formats the time left as `grpc-timeout`, in the finest unit that fits in eight digits,
/// floored (never more time than is left); `None` for no bound or zero.
pub fn format_grpc_timeout(left: Option<Duration>) -> Option<HeaderValue> {
    let left = left.filter(|d| !d.is_zero())?;
    let nanos = left.as_nanos();
    const UNITS: [(u128, &str); 6] = [
        (1, "n"),
        (1_000, "u"),
        (1_000_000, "m"),
        (1_000_000_000, "S"),
        (60_000_000_000, "M"),
        (3_600_000_000_000, "H"),
    ];
    let (value, unit) = UNITS
        .iter()
        .find_map(|&(size, unit)| {
            let value = nanos / size;
            (value <= u128::from(MAX_GRPC_VALUE)).then_some((value, unit))
        })
        .unwrap_or((u128::from(MAX_GRPC_VALUE), "H"));
    Some(number(u64::try_from(value).unwrap_or(MAX_GRPC_VALUE), unit))
}

/// `n` in decimal followed by `unit`, as a header value: one allocation (`HeaderValue::from`
/// an integer makes two).
fn number(n: u64, unit: &str) -> HeaderValue {
    let mut buf = [0u8; 24];
    let mut start = 20;
    let mut n = n;
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let end = 20 + unit.len().min(4);
    buf[20..end].copy_from_slice(&unit.as_bytes()[..end - 20]);
    HeaderValue::from_bytes(&buf[start..end])
        .unwrap_or_else(|_| unreachable!("digits and a unit letter are a valid header value"))
}

/// Parses a received criticality: see [`Criticality::parse_inbound`] (never `CriticalPlus`).
pub fn parse_criticality(value: &[u8]) -> Option<Criticality> {
    std::str::from_utf8(value)
        .ok()
        .and_then(Criticality::parse_inbound)
}

/// Whether the request is gRPC (its content type is `application/grpc`, with or without a
/// `+proto`-style suffix), and so carries its deadline in `grpc-timeout`.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// What a request says about its deadline, criticality and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Received {
    /// The time the caller is still waiting: the earlier of `X-Deadline-Ms` and
    /// `grpc-timeout`, each ignored when malformed or above the maximum.
    pub deadline: Option<Duration>,
    /// The level, when the header held one (never `CriticalPlus`).
    pub criticality: Option<Criticality>,
    /// Whether the request is marked as a retry (the retry header's last value is `1`).
    pub retry: bool,
}

impl Received {
    /// Reads a request's headers. A deadline above `maximum` is ignored entirely (not
    /// clamped): a caller claiming more patience than the service allows is not believed.
    pub fn read(headers: &HeaderMap, names: &Names, maximum: Option<Duration>) -> Received {
        let within = |d: &Duration| maximum.is_none_or(|max| *d <= max);
        let ms = last(headers, &names.deadline)
            .and_then(|v| parse_deadline_ms(v.as_bytes()))
            .filter(within);
        let grpc = last(headers, &GRPC_TIMEOUT)
            .and_then(|v| parse_grpc_timeout(v.as_bytes()))
            .filter(within);
        let deadline = match (ms, grpc) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Received {
            deadline,
            criticality: last(headers, &names.criticality)
                .and_then(|v| parse_criticality(v.as_bytes())),
            retry: last(headers, &names.retry).is_some_and(|v| v.as_bytes() == b"1"),
        }
    }
}

/// Parses `Retry-After`: whole seconds, or an HTTP date (a date in the past is zero).
pub fn parse_retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    if let Some(secs) = parse_digits(value, 19) {
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(std::str::from_utf8(value).ok()?).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The `Retry-After` of a response, if it has a valid one.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| parse_retry_after(v.as_bytes(), SystemTime::now()))
}

/// Formats a `Retry-After` in whole seconds, rounded up, at least 1 (also when the refusing
/// component did not say).
pub fn format_retry_after(after: Option<Duration>) -> HeaderValue {
    let after = after.unwrap_or(Duration::ZERO);
    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    number(secs.max(1), "")
}

/// `value` as a number when it is 1 to `max_digits` ASCII digits.
fn parse_digits(value: &[u8], max_digits: usize) -> Option<u64> {
    if value.is_empty() || value.len() > max_digits {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn deadline_ms_accepts_only_positive_whole_milliseconds_within_31_bits() {
        assert_eq!(parse_deadline_ms(b"1"), Some(ms(1)));
        assert_eq!(parse_deadline_ms(b"2147483647"), Some(ms(MAX_DEADLINE_MS)));
        for bad in [
            &b"0"[..],
            b"-5",
            b"+5",
            b"200ms",
            b"2.5",
            b" 200",
            b"200 ",
            b"",
            b"2147483648",
            b"99999999999999999999999",
            b"1e3",
            b"\xff",
        ] {
            assert_eq!(parse_deadline_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn deadline_ms_formatting_floors_keeps_one_and_writes_nothing_for_zero_or_unbounded() {
        let f = |d| format_deadline_ms(d).map(|v| v.to_str().expect("ascii").to_owned());
        assert_eq!(f(Some(ms(300))), Some("300".into()));
        assert_eq!(f(Some(Duration::from_micros(1999))), Some("1".into()));
        assert_eq!(f(Some(Duration::from_nanos(1))), Some("1".into()));
        assert_eq!(f(Some(Duration::ZERO)), None);
        assert_eq!(f(None), None);
        assert_eq!(
            f(Some(Duration::from_secs(100 * 86_400))),
            Some(MAX_DEADLINE_MS.to_string())
        );
    }

    #[test]
    fn grpc_timeout_parses_every_unit_and_rejects_the_rest() {
        assert_eq!(parse_grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout(b"2m"), Some(ms(2)));
        assert_eq!(parse_grpc_timeout(b"2u"), Some(Duration::from_micros(2)));
        assert_eq!(
            parse_grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [
            &b"0m"[..],
            b"123456789m",
            b"m",
            b"",
            b"5",
            b"5s",
            b"5x",
            b" 5m",
            b"-5m",
            b"5.0S",
        ] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn grpc_timeout_formatting_picks_the_finest_unit_that_fits_and_round_trips_down() {
        let f = |d| format_grpc_timeout(Some(d)).map(|v| v.to_str().expect("ascii").to_owned());
        assert_eq!(f(Duration::from_nanos(5)), Some("5n".into()));
        assert_eq!(f(ms(50)), Some("50000000n".into()));
        assert_eq!(f(ms(250)), Some("250000u".into()));
        assert_eq!(f(Duration::from_secs(300)), Some("300000m".into()));
        assert_eq!(
            f(Duration::from_secs(86_400 * 1000)),
            Some("86400000S".into())
        );
        assert_eq!(
            f(Duration::from_secs(86_400 * 2000)),
            Some("2880000M".into())
        );
        assert_eq!(f(Duration::MAX), Some("99999999H".into()));
        assert_eq!(format_grpc_timeout(Some(Duration::ZERO)), None);
        for d in [ms(1), ms(1234), Duration::from_secs(7 * 86_400)] {
            let v = format_grpc_timeout(Some(d)).expect("bounded");
            let back = parse_grpc_timeout(v.as_bytes()).expect("parses");
            assert!(back <= d && d - back < d / 10_000_000 + Duration::from_nanos(1));
        }
    }

    #[test]
    fn the_last_value_of_a_repeated_header_counts() {
        let mut headers = HeaderMap::new();
        headers.append(X_DEADLINE_MS, HeaderValue::from_static("5000"));
        headers.append(X_DEADLINE_MS, HeaderValue::from_static("200"));
        headers.append(X_CRITICALITY, HeaderValue::from_static("Critical"));
        headers.append(X_CRITICALITY, HeaderValue::from_static("sheddable"));
        let got = Received::read(&headers, &Names::default(), None);
        assert_eq!(got.deadline, Some(ms(200)));
        assert_eq!(got.criticality, Some(Criticality::Sheddable));
        assert!(!got.retry);
    }

    #[test]
    fn a_deadline_above_the_maximum_is_ignored_and_the_earlier_of_two_encodings_wins() {
        let mut headers = HeaderMap::new();
        headers.insert(X_DEADLINE_MS, HeaderValue::from_static("3600000"));
        let max = Some(Duration::from_secs(5));
        assert_eq!(
            Received::read(&headers, &Names::default(), max).deadline,
            None
        );
        headers.insert(GRPC_TIMEOUT, HeaderValue::from_static("2S"));
        assert_eq!(
            Received::read(&headers, &Names::default(), max).deadline,
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            Received::read(&headers, &Names::default(), None).deadline,
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn received_critical_plus_is_critical_and_the_retry_mark_is_exactly_one() {
        let mut headers = HeaderMap::new();
        headers.insert(X_CRITICALITY, HeaderValue::from_static("CriticalPlus"));
        headers.insert(X_RAMPART_RETRY, HeaderValue::from_static("1"));
        let got = Received::read(&headers, &Names::default(), None);
        assert_eq!(got.criticality, Some(Criticality::Critical));
        assert!(got.retry);
        headers.insert(X_RAMPART_RETRY, HeaderValue::from_static("yes"));
        assert!(!Received::read(&headers, &Names::default(), None).retry);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(b"1", now), Some(Duration::from_secs(1)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(later.as_bytes(), now),
            Some(Duration::from_secs(30))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(earlier.as_bytes(), now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after(b"soon", now), None);
        assert_eq!(parse_retry_after(b"-1", now), None);
    }

    #[test]
    fn retry_after_is_written_in_whole_seconds_rounded_up_and_at_least_one() {
        assert_eq!(format_retry_after(None), "1");
        assert_eq!(format_retry_after(Some(ms(10))), "1");
        assert_eq!(format_retry_after(Some(ms(14_000))), "14");
        assert_eq!(format_retry_after(Some(ms(14_001))), "15");
    }

    #[test]
    fn grpc_requests_are_recognised_by_content_type() {
        let mut headers = HeaderMap::new();
        assert!(!is_grpc(&headers));
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        assert!(is_grpc(&headers));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&headers));
    }
}
