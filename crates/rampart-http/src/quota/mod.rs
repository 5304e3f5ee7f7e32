//! Quota headers: what a server says about its rate limit, and a request to a host whose
//! quota is spent refused locally, instead of sent to get 429.
//!
//! Servers advertise their quota in response headers. [`parse`] reads the four common forms
//! into one [`Reading`]; with [`OutboundBuilder::quota`](crate::OutboundBuilder::quota) on,
//! the outbound layer reads every response this way and keeps, per host, when a spent quota
//! resets. Until then a new request to that host is refused before anything is sent, with
//! [`ClientError::QuotaSpent`] (naming the host, no attempt made)
//! whose `retry_after` is the time left to the reset: a handler answers it as 503 with
//! `Retry-After` (see [`crate::problem`]), a gRPC caller gets `RESOURCE_EXHAUSTED` with the
//! pushback.
//!
//! | header fields | form | read as |
//! |---|---|---|
//! | `RateLimit` (`"default";r=0;t=30`) with `RateLimit-Policy` (`"default";q=100;w=60`) | current draft (draft-ietf-httpapi-ratelimit-headers), structured-field lists | `r` remaining, `t` reset; `q` limit and `w` window from the policy of the same name |
//! | `RateLimit` (`limit=100, remaining=0, reset=30`) | the draft before it (draft 07), a structured-field dictionary | `remaining`, `reset`, `limit` |
//! | `RateLimit-Remaining`, `RateLimit-Reset`, `RateLimit-Limit` | older drafts, integers | remaining, reset, limit |
//! | `X-RateLimit-Remaining`, `X-RateLimit-Reset`, `X-RateLimit-Limit` | common practice, integers | remaining, reset, limit |
//!
//! Of the forms a response carries, the first in the order of the table that is well formed
//! is the one read. When `RateLimit` lists several policies, the binding one is read: the
//! fewest remaining, and of those the latest reset.
//!
//! A reset is delta seconds. A reset of 1,000,000,000 or more (more than 31 years away) is
//! taken for a Unix timestamp in seconds, as some servers send in `X-RateLimit-Reset`: it is
//! made a delta against the system's wall clock once, when the response arrives (the
//! policy's clock is monotonic and knows no calendar date), and from then on the reset is an
//! instant on the policy's clock, so a test on paused or manual time sees it pass exactly. A
//! reset more than a day away (a timestamp in milliseconds, say) is implausible and read as
//! unknown.
//!
//! A malformed field is ignored, whole (a structured field that does not parse, a negative
//! or non-numeric integer, an integer field given twice); numbers saturate, never overflow;
//! nothing panics.
//!
//! ```
//! use std::time::Duration;
//! use http::HeaderMap;
//! use rampart_http::quota;
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("ratelimit", "\"default\";r=0;t=30".parse().unwrap());
//! headers.insert("ratelimit-policy", "\"default\";q=100;w=60".parse().unwrap());
//! let reading = quota::parse(&headers, Duration::ZERO).expect("a quota");
//! assert_eq!(reading.remaining, 0);
//! assert_eq!(reading.reset, Some(Duration::from_secs(30)));
//! assert_eq!(reading.limit, Some(100));
//! assert_eq!(reading.window, Some(Duration::from_secs(60)));
//! assert!(reading.is_spent());
//! ```
//!
//! # In the outbound layer
//!
//! | rule | value |
//! |---|---|
//! | default | off: turn it on with [`quota(true)`](crate::OutboundBuilder::quota), or for one host with [`host_quota`](crate::OutboundBuilder::host_quota) |
//! | state | one atomic word per host entry: when its spent quota resets, or none (a host the table evicts forgets it) |
//! | spent | a response said remaining 0 with a reset in the future |
//! | cleared | a response says remaining above 0, or says remaining 0 with a reset now or past; a response without quota headers (or with a reset unknown) changes nothing |
//! | refused | a new request to a host whose reset is still ahead: [`ClientError::QuotaSpent`], `retry_after` the time to the reset, [`EdgeEvent::QuotaRefused`] |
//! | after the reset | requests are sent again, with no response needed to clear it |
//! | concurrent responses | the last to arrive decides |
//!
//! Off by default, because the client cannot know what a server's quota counts: rampart
//! keeps one entry per `host:port`, and many APIs count per credential (per token, per user).
//! A client that calls one host with several credentials (a proxy, a multi-tenant worker)
//! would refuse every tenant's request once one tenant's quota is spent. Turn it on for hosts
//! whose quota is the client's own.
//!
//! The check is made once per request, before its first attempt. A retry within a request
//! already running is governed by the policy: a 429 or 503 answer is retried after its
//! `Retry-After`, or, without one, at the reset of the spent quota its own headers state,
//! whether or not this switch is on (see [`crate::classify`]); and its quota headers are read
//! as any response's.
//! The `reqwest` client and `OutboundLayer::grpc` use the layer's hosts, and so its quota.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};
use rampart::Instant;
use rampart::clock::Clock;

use crate::error::ClientError;

use crate::event::{EdgeEvent, Listeners};

mod list;

use list::List;

/// `RateLimit`: the current draft's remaining quota of each policy.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy`: the current draft's quota policies.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit-Limit`: the older drafts' quota.
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining`: the older drafts' remaining quota.
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset`: the older drafts' seconds to the reset.
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// `X-RateLimit-Limit`: the common quota.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`: the common remaining quota.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: the common reset, seconds or a Unix timestamp.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// A reset at least this large is a Unix timestamp in seconds (2001-09-09), not a delta.
pub const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// A reset further away than this (one day) is read as unknown.
pub const MAX_RESET: Duration = Duration::from_secs(24 * 60 * 60);

/// What one response said about the server's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reading {
    /// Requests (or quota units) left in the current window.
    pub remaining: u64,
    /// Time until the quota resets, if the response said (and it is at most [`MAX_RESET`]
    /// away).
    pub reset: Option<Duration>,
    /// The quota of the window, if the response said.
    pub limit: Option<u64>,
    /// The window's length, if the response said (current draft only: `w`).
    pub window: Option<Duration>,
}

impl Reading {
    /// Whether the quota is spent and known to reset later: what makes the outbound layer
    /// refuse.
    pub fn is_spent(&self) -> bool {
        self.remaining == 0 && self.reset.is_some_and(|reset| !reset.is_zero())
    }
}

/// The quota a response's headers state, if they state one in a form of the
/// [module table](self); `unix_now` is the wall-clock time since the Unix epoch (used only
/// for a reset given as a timestamp: pass `SystemTime::now()`'s).
pub fn parse(headers: &HeaderMap, unix_now: Duration) -> Option<Reading> {
    if let Some(reading) = current(headers, unix_now).or_else(|| dictionary(headers, unix_now)) {
        return Some(reading);
    }
    integers(
        headers,
        unix_now,
        [&RATELIMIT_REMAINING, &RATELIMIT_RESET, &RATELIMIT_LIMIT],
    )
    .or_else(|| {
        integers(
            headers,
            unix_now,
            [
                &X_RATELIMIT_REMAINING,
                &X_RATELIMIT_RESET,
                &X_RATELIMIT_LIMIT,
            ],
        )
    })
}

/// The older drafts' and the common form: three integer fields, `remaining` required.
fn integers(headers: &HeaderMap, unix_now: Duration, names: [&HeaderName; 3]) -> Option<Reading> {
    let [remaining, reset, limit] = names;
    let remaining = single(headers, remaining).and_then(integer)?;
    let reset = single(headers, reset)
        .and_then(integer)
        .and_then(|secs| reset_after(secs, unix_now));
    // The older drafts allowed a policy after the limit (`100, 100;w=60`): the number first.
    let limit = single(headers, limit).and_then(|v| {
        let end = v
            .iter()
            .position(|&b| b == b',' || b == b';')
            .unwrap_or(v.len());
        integer(&v[..end])
    });
    Some(Reading {
        remaining,
        reset,
        limit,
        window: None,
    })
}

/// The value of `name` when the response has exactly one.
fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h [u8]> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then_some(first.as_bytes())
}

/// A non-negative integer, optional whitespace around it; saturating.
fn integer(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |n, &b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// A reset of `secs` (a delta, or a Unix timestamp past [`EPOCH_THRESHOLD`]) as the time from
/// now; `None` when further than [`MAX_RESET`].
fn reset_after(secs: u64, unix_now: Duration) -> Option<Duration> {
    let reset = if secs >= EPOCH_THRESHOLD {
        Duration::from_secs(secs).saturating_sub(unix_now)
    } else {
        Duration::from_secs(secs)
    };
    (reset <= MAX_RESET).then_some(reset)
}

/// The current draft's form: the binding item of `RateLimit`, its policy's quota and window.
fn current(headers: &HeaderMap, unix_now: Duration) -> Option<Reading> {
    let mut binding: Option<(&[u8], u64, Option<u64>)> = None;
    let fields = headers.get_all(&RATELIMIT);
    let parsed = fields.iter().all(|value| {
        List::new(value.as_bytes()).each(|item| {
            let Some(remaining) = item.r else { return };
            let reset = item.t;
            let tighter = match binding {
                None => true,
                Some((_, r, t)) => {
                    remaining < r || (remaining == r && reset.unwrap_or(0) > t.unwrap_or(0))
                }
            };
            if tighter {
                binding = Some((item.name, remaining, reset));
            }
        })
    });
    let (name, remaining, reset) = binding.filter(|_| parsed)?;
    let mut policy = (None, None);
    let policies = headers.get_all(&RATELIMIT_POLICY);
    let parsed = policies.iter().all(|value| {
        List::new(value.as_bytes()).each(|item| {
            if item.name == name && policy.0.is_none() {
                policy = (item.q, item.w);
            }
        })
    });
    let (limit, window) = if parsed { policy } else { (None, None) };
    Some(Reading {
        remaining,
        reset: reset.and_then(|secs| reset_after(secs, unix_now)),
        limit,
        window: window.map(Duration::from_secs),
    })
}

/// Draft 07's form: `RateLimit` as one dictionary of `limit`, `remaining` (required) and
/// `reset`, each a non-negative integer (any other value of these keys makes the field
/// malformed). Several field lines are one dictionary, a later key overriding, as RFC 9651
/// says; other keys and parameters are skipped.
fn dictionary(headers: &HeaderMap, unix_now: Duration) -> Option<Reading> {
    // Each key's last value: `Some(None)` when it was not a non-negative integer.
    let (mut remaining, mut reset, mut limit) = (None, None, None);
    let parsed = headers.get_all(&RATELIMIT).iter().all(|value| {
        List::new(value.as_bytes()).each_member(|key, value| {
            let slot = match key {
                b"remaining" => &mut remaining,
                b"reset" => &mut reset,
                b"limit" => &mut limit,
                _ => return,
            };
            *slot = Some(value);
        })
    });
    // An optional key read: absent is no value (`Some(None)`), a value that is not a
    // non-negative integer makes the field malformed (`None`).
    let read = |value: Option<Option<u64>>| value.map_or(Some(None), |n| n.map(Some));
    let (Some(remaining), Some(reset), Some(limit)) =
        (remaining.flatten(), read(reset), read(limit))
    else {
        return None;
    };
    parsed.then(|| Reading {
        remaining,
        reset: reset.and_then(|secs| reset_after(secs, unix_now)),
        limit,
        window: None,
    })
}

/// A host's quota: when its spent quota resets, as nanoseconds past `base` on the policy's
/// clock (0: not spent). One atomic word; reading and writing it allocates nothing.
pub(crate) struct QuotaState {
    clock: Clock,
    base: Instant,
    until: AtomicU64,
}

impl QuotaState {
    /// The quota of a host whose policies run on `clock`: nothing known yet.
    pub(crate) fn new(clock: Clock) -> Self {
        let base = clock.now();
        QuotaState {
            clock,
            base,
            until: AtomicU64::new(0),
        }
    }

    /// Reads a response's headers: a spent quota is kept until its reset, a remaining one
    /// clears what was kept; headers without a quota change nothing.
    pub(crate) fn observe(&self, headers: &HeaderMap) {
        let unix_now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let Some(reading) = parse(headers, unix_now) else {
            return;
        };
        let until = match reading.reset {
            Some(reset) if reading.is_spent() => {
                let at = (self.clock.now() + reset).saturating_duration_since(self.base);
                u64::try_from(at.as_nanos()).unwrap_or(u64::MAX).max(1)
            }
            // Quota left, or spent and reset already.
            _ if reading.remaining > 0 || reading.reset.is_some() => 0,
            // Spent, but the reset is unknown: nothing to refuse until.
            _ => return,
        };
        self.until.store(until, Ordering::Relaxed);
    }

    /// The time left until the spent quota resets, if it is spent now.
    pub(crate) fn refusal(&self) -> Option<Duration> {
        let until = self.until.load(Ordering::Relaxed);
        if until == 0 {
            return None;
        }
        let until = self.base + Duration::from_nanos(until);
        let left = until.saturating_duration_since(self.clock.now());
        (!left.is_zero()).then_some(left)
    }
}

/// Refuses a request to `host` whose quota is spent with [`ClientError::QuotaSpent`]
/// (reported as [`EdgeEvent::QuotaRefused`]), or `Ok` to send it.
pub(crate) fn check<E>(
    quota: Option<&QuotaState>,
    host: &str,
    listeners: &Listeners,
) -> Result<(), ClientError<E>> {
    let Some(retry_after) = quota.and_then(QuotaState::refusal) else {
        return Ok(());
    };
    listeners.emit(EdgeEvent::QuotaRefused { host, retry_after });
    Err(ClientError::QuotaSpent {
        host: host.into(),
        retry_after,
    })
}
