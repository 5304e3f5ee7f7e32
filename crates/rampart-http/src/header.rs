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
//! Read on arrival besides those (the smallest deadline counts):
//!
//! | header | who writes it | format | example |
//! |---|---|---|---|
//! | `x-envoy-expected-rq-timeout-ms` | Envoy, the time it will wait for this request | as `X-Deadline-Ms` | `1500` |
//! | `Connect-Timeout-Ms` | Connect clients | 1 to 10 digits, at least 1 | `1500` |
//! | `grpc-previous-rpc-attempts` | gRPC's own retries, on a retry | a whole number; 1 or more marks a retry | `2` |
//!
//! And in gRPC responses: `grpc-status` (a whole number, the status code) and
//! `grpc-retry-pushback-ms` (when to try again, in milliseconds; negative means do not).
//!
//! Everything received is untrusted: a value that is not exactly in the format is ignored, never
//! guessed at (`"0"`, `"-5"`, `"200ms"`, `"2.5"`, `" 200"` are not deadlines, nor are
//! millisecond numbers past 31 bits, except in `Connect-Timeout-Ms`, whose 10 digits Connect
//! allows), and a received `CriticalPlus` is read as `Critical`
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

use bytes::{Bytes, BytesMut};
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

/// `x-envoy-expected-rq-timeout-ms`: the time Envoy will wait for the request, in milliseconds.
pub const X_ENVOY_EXPECTED_RQ_TIMEOUT_MS: HeaderName =
    HeaderName::from_static("x-envoy-expected-rq-timeout-ms");
/// `connect-timeout-ms`: the Connect protocol's deadline header, in milliseconds.
pub const CONNECT_TIMEOUT_MS: HeaderName = HeaderName::from_static("connect-timeout-ms");
/// `connect-protocol-version`: sent by Connect clients on unary requests.
pub const CONNECT_PROTOCOL_VERSION: HeaderName =
    HeaderName::from_static("connect-protocol-version");
/// `grpc-previous-rpc-attempts`: how many earlier attempts gRPC's own retry made for this call.
pub const GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
/// `grpc-status`: a gRPC response's status code (in the headers of a trailers-only response,
/// else in the trailers).
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: a gRPC response's status message, percent-encoded.
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-retry-pushback-ms`: when a gRPC client may try again, in milliseconds; a negative
/// value asks it not to retry.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

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

/// Parses a `Connect-Timeout-Ms` value: 1 to 10 ASCII digits, at least 1 (Connect's format).
pub fn parse_connect_timeout_ms(value: &[u8]) -> Option<Duration> {
    parse_digits(value, 10)
        .filter(|ms| *ms >= 1)
        .map(Duration::from_millis)
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

/// `n` in decimal followed by `unit`, as a header value, without an allocation of its own:
/// the bytes are cut from a per-thread buffer (`ARENA`) that the values share, so a value
/// costs a reference count where `HeaderValue::from_bytes` would allocate a copy.
///
/// The thread's last value is kept and handed out again while the same number is asked
/// for: a deadline header repeats its value from one request to the next (every request
/// whose attempt timeout is the bound writes the same number, and a millisecond holds many
/// requests). Handing it out again costs a reference count (about 100 instructions with the
/// thread-local's access, counted by `examples/profile_outbound.rs`), where formatting,
/// cutting and checking the bytes cost about 370; a number that differs from the last one
/// pays that and about 50 more to keep its value.
fn number(n: u64, unit: &'static str) -> HeaderValue {
    ARENA.with(|arena| {
        let mut arena = arena.borrow_mut();
        // The unit's first byte tells the units apart (`""` has none): comparing the strings
        // would call `memcmp`, which a profile of the time (`perf`) showed taking a tenth of
        // a request's.
        let unit_key = unit.as_bytes().first().copied().unwrap_or(0);
        if let Some(last) = &arena.last
            && last.n == n
            && last.unit == unit_key
        {
            return last.value.clone();
        }
        let mut buf = [0u8; 24];
        let mut start = 20;
        let mut rest = n;
        loop {
            start -= 1;
            buf[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let end = 20 + unit.len().min(4);
        buf[20..end].copy_from_slice(&unit.as_bytes()[..end - 20]);
        let bytes = arena.cut(&buf[start..end]);
        let value = HeaderValue::from_maybe_shared(bytes)
            .unwrap_or_else(|_| unreachable!("digits and a unit letter are a valid header value"));
        arena.last = Some(Last {
            n,
            unit: unit_key,
            value: value.clone(),
        });
        value
    })
}

/// The bytes of each thread's formatted header values (`number`): a value is a slice of it.
/// When it is full, `reserve` takes the whole buffer back if no value cut from it is alive any
/// more (no allocation), else starts a new one (two: the buffer and its shared count), so a
/// value costs at most `2 / (ARENA_BYTES / its length)` allocations, about one per 200
/// deadlines, and none while values do not outlive their requests for long. A value alive
/// keeps at most one buffer of `ARENA_BYTES` alive.
const ARENA_BYTES: usize = 1024;

/// A thread's buffer of formatted values, and the last value cut from it.
struct Arena {
    bytes: BytesMut,
    last: Option<Last>,
}

/// The last value `number` made on a thread, and the number and unit it was made from (the
/// unit's first byte, 0 for none).
struct Last {
    n: u64,
    unit: u8,
    value: HeaderValue,
}

thread_local! {
    static ARENA: std::cell::RefCell<Arena> = std::cell::RefCell::new(Arena {
        bytes: BytesMut::new(),
        last: None,
    });
}

impl Arena {
    /// `bytes` copied into the buffer and split off it, sharing it.
    fn cut(&mut self, bytes: &[u8]) -> Bytes {
        if self.bytes.capacity() - self.bytes.len() < bytes.len() {
            // The kept value would hold the full buffer alive, and `reserve` could not take
            // it back.
            self.last = None;
            self.bytes.reserve(ARENA_BYTES.max(bytes.len()));
        }
        self.bytes.extend_from_slice(bytes);
        self.bytes.split().freeze()
    }
}

/// Parses a received criticality: see [`Criticality::parse_inbound`] (never `CriticalPlus`).
pub fn parse_criticality(value: &[u8]) -> Option<Criticality> {
    std::str::from_utf8(value)
        .ok()
        .and_then(Criticality::parse_inbound)
}

/// Whether the request is Connect's (it carries `Connect-Protocol-Version` or
/// `Connect-Timeout-Ms`, or its content type is `application/connect+...`), and so wants its
/// errors as Connect's JSON.
pub fn is_connect(headers: &HeaderMap) -> bool {
    headers.contains_key(CONNECT_PROTOCOL_VERSION)
        || headers.contains_key(CONNECT_TIMEOUT_MS)
        || headers
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/connect+"))
}

/// What a `grpc-retry-pushback-ms` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Try again after this long.
    After(Duration),
    /// Do not try again: the value was negative, or not a number (as gRPC's retry design
    /// reads it).
    DoNotRetry,
}

/// Parses a `grpc-retry-pushback-ms` value: a whole number of milliseconds is
/// [`Pushback::After`]; anything else (a negative number included) is
/// [`Pushback::DoNotRetry`].
pub fn parse_pushback(value: &[u8]) -> Pushback {
    match parse_digits(value, 19) {
        Some(ms) => Pushback::After(Duration::from_millis(ms)),
        None => Pushback::DoNotRetry,
    }
}

/// The pushback of a gRPC response's headers or trailers, if it has one.
pub fn pushback(headers: &HeaderMap) -> Option<Pushback> {
    last(headers, &GRPC_RETRY_PUSHBACK_MS).map(|v| parse_pushback(v.as_bytes()))
}

/// Formats a `grpc-retry-pushback-ms`: whole milliseconds rounded up, at least 1 (also when
/// the refusing component did not say: then 1000, as `Retry-After` says 1 s).
pub fn format_pushback(after: Option<Duration>) -> HeaderValue {
    rounded_up(after, Duration::from_millis(1))
}

/// Parses a `grpc-status` value: the code as a whole number.
pub fn parse_grpc_status(value: &[u8]) -> Option<u32> {
    parse_digits(value, 10).and_then(|n| u32::try_from(n).ok())
}

/// Whether the request is gRPC (its content type is `application/grpc`, with or without a
/// `+proto`-style suffix), and so carries its deadline in `grpc-timeout`.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(is_grpc_content_type)
}

/// Whether a content type is gRPC's (`application/grpc`, with or without a suffix).
pub(crate) fn is_grpc_content_type(value: &HeaderValue) -> bool {
    value.as_bytes().starts_with(b"application/grpc")
}

/// What a request says about its deadline, criticality and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Received {
    /// The caller's deadline, as a timeout: the time the caller is still waiting, the
    /// smallest of `X-Deadline-Ms` (or the configured header), `grpc-timeout`,
    /// `x-envoy-expected-rq-timeout-ms` and `Connect-Timeout-Ms`, each ignored when malformed
    /// or above the maximum.
    pub timeout: Option<Duration>,
    /// The level, when the header held one (never `CriticalPlus`).
    pub criticality: Option<Criticality>,
    /// Whether the request is marked as a retry: the retry header's last value is `1`, or
    /// `grpc-previous-rpc-attempts` is 1 or more.
    pub retry: bool,
}

impl Received {
    /// Reads a request's headers. A deadline above `maximum` is ignored entirely (not
    /// clamped): a caller claiming more patience than the service allows is not believed.
    pub fn read(headers: &HeaderMap, names: &Names, maximum: Option<Duration>) -> Received {
        let within = |d: &Duration| maximum.is_none_or(|max| *d <= max);
        let read = |name: &HeaderName, parse: fn(&[u8]) -> Option<Duration>| {
            last(headers, name)
                .and_then(|v| parse(v.as_bytes()))
                .filter(within)
        };
        let timeout = [
            read(&names.deadline, parse_deadline_ms),
            read(&GRPC_TIMEOUT, parse_grpc_timeout),
            read(&X_ENVOY_EXPECTED_RQ_TIMEOUT_MS, parse_deadline_ms),
            read(&CONNECT_TIMEOUT_MS, parse_connect_timeout_ms),
        ]
        .into_iter()
        .flatten()
        .min();
        let grpc_retry = last(headers, &GRPC_PREVIOUS_RPC_ATTEMPTS)
            .and_then(|v| parse_digits(v.as_bytes(), 19))
            .is_some_and(|n| n >= 1);
        Received {
            timeout,
            criticality: last(headers, &names.criticality)
                .and_then(|v| parse_criticality(v.as_bytes())),
            retry: grpc_retry || last(headers, &names.retry).is_some_and(|v| v.as_bytes() == b"1"),
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
    rounded_up(after, Duration::from_secs(1))
}

/// When to try again, in whole `unit`s rounded up (never sooner than the refusal said), at
/// least one, and 1 s when the refusing component did not say; saturating at `u64::MAX`
/// units. `Retry-After` and `grpc-retry-pushback-ms` are this in seconds and milliseconds.
fn rounded_up(after: Option<Duration>, unit: Duration) -> HeaderValue {
    let after = after.unwrap_or(Duration::from_secs(1));
    let units = after.as_nanos().div_ceil(unit.as_nanos());
    number(u64::try_from(units).unwrap_or(u64::MAX).max(1), "")
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
#[path = "header_tests.rs"]
mod tests;
