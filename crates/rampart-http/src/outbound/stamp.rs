//! The headers the layer owns on each attempt (deadline, criticality, retry mark): read from
//! the request once ([`Stamp::prepare`]), written on every attempt ([`Stamp::write`]), and
//! the call held within the deadline its caller wrote ([`within`]).

use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue};
use rampart::{Attempt, Call, Criticality, Deadline, Policy};

use crate::header::{
    GRPC_TIMEOUT, Names, format_deadline_ms, format_grpc_timeout, is_grpc_content_type,
    parse_deadline_ms, parse_grpc_timeout,
};

/// How a request's attempts are stamped: read once per request, written once per attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    pub(crate) grpc: bool,
    /// Whether the headers written hold exactly one value of the deadline header in the
    /// request's encoding (the caller's): the deadline then replaces it where it lies, found
    /// in a pass over the headers, where `insert` would hash the name to find it. True of the
    /// prepared request when the caller wrote one; see [`copied`](Self::copied).
    held: bool,
}

/// When an attempt's time left is read for the deadline it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// From the reading the attempt began with: the time left is its ceiling's span, and
    /// the clock is not read again (a reading costs about 25 ns here, more than its
    /// instructions say). Only where nothing was awaited between that reading and the
    /// stamp: admission that always admits at once (`Admit::ALWAYS_ADMITS`: no queue), and
    /// a service ready on its first poll. What passes between them is then one synchronous
    /// stretch of the call's poll, the stretch rampart's executor itself counts as no time
    /// (an attempt that succeeds on its first poll ends at the instant it began); the
    /// deadline written is floored to whole milliseconds, so it says more than a fresh
    /// reading would only when a millisecond ends within that stretch, and then by no more
    /// than the stretch, the same order as the time between any reading and the request's
    /// bytes leaving.
    AtStart,
    /// A fresh reading of the attempt's clock: after a wait (a service that was not ready,
    /// an admission queue), whose length the attempt's start does not know.
    Now,
}

/// What a request's headers hold, found in one pass by [`Stamp::prepare`].
#[derive(Default)]
struct Held<'a> {
    content_type: Option<&'a HeaderValue>,
    retry: bool,
    /// The last value of each encoding of the deadline, and how many values each has.
    deadline: Option<&'a HeaderValue>,
    grpc_timeout: Option<&'a HeaderValue>,
    deadlines: u32,
    grpc_timeouts: u32,
}

/// Within this much of its ceiling, a gRPC attempt's transport error is taken for the
/// transport's own timer, armed from the `grpc-timeout` the attempt carried (written floored,
/// in units down to a millisecond): the attempt waits for rampart's timer, a moment away.
pub(crate) const TRANSPORT_TIMER_SLACK: Duration = Duration::from_millis(1);

impl Stamp {
    /// The stamp of a request not yet [`prepare`](Self::prepare)d: an HTTP request that holds
    /// no deadline.
    pub(crate) const UNPREPARED: Stamp = Stamp {
        grpc: false,
        held: false,
    };

    /// Reads whether the request is gRPC and the deadline its caller wrote (`grpc-timeout`
    /// on a gRPC request, else the deadline header; a malformed one is ignored), and takes
    /// out what the caller wrote that a first attempt must not carry (a retry mark, a
    /// deadline in the other encoding).
    ///
    /// The caller's deadline and criticality are left in place: every attempt's
    /// [`write`](Self::write) replaces them.
    pub(crate) fn prepare(names: &Names, headers: &mut HeaderMap) -> (Stamp, Option<Deadline>) {
        // One pass over the headers finds the content type, the caller's deadline and which
        // of the headers the stamp owns the caller wrote (most requests carry few or none of
        // them): a lookup or a removal hashes its name even when the map does not hold it,
        // and a pass over a small map costs less than the lookups it saves.
        let mut held = Held::default();
        for (name, value) in headers.iter() {
            if *name == CONTENT_TYPE {
                held.content_type = held.content_type.or(Some(value));
                continue;
            }
            if *name == GRPC_TIMEOUT {
                held.grpc_timeout = Some(value);
                held.grpc_timeouts += 1;
            }
            if *name == names.deadline {
                held.deadline = Some(value);
                held.deadlines += 1;
            }
            held.retry |= *name == names.retry;
        }
        let grpc = held.content_type.is_some_and(is_grpc_content_type);
        let caller = if grpc {
            held.grpc_timeout
                .and_then(|value| parse_grpc_timeout(value.as_bytes()))
        } else {
            held.deadline
                .and_then(|value| parse_deadline_ms(value.as_bytes()))
        };
        // A gRPC request's deadline is `grpc-timeout`: the other encoding is not carried.
        let other = grpc && held.deadline.is_some();
        // The deadline header every attempt writes is the one in the request's encoding
        // (the other encoding is removed below, or left alone on a plain request).
        let held_one = match grpc {
            true => held.grpc_timeouts == 1,
            false => held.deadlines == 1,
        };
        if held.retry {
            headers.remove(&names.retry);
        }
        if other {
            headers.remove(&names.deadline);
        }
        let stamp = Stamp {
            grpc,
            held: held_one,
        };
        (stamp, caller.map(Deadline::after))
    }

    /// The stamp of a copy of the prepared request that leaves the caller's deadline out.
    pub(crate) fn copied(self) -> Stamp {
        Stamp {
            held: false,
            ..self
        }
    }

    /// Writes an attempt's deadline, the ambient criticality and, on a retry or hedge, the
    /// retry mark, replacing what the caller wrote. `headers` are a prepared request's (or,
    /// with [`copied`](Self::copied)'s stamp, a copy of it), and `read` says when the time
    /// left is read.
    ///
    /// The deadline written is never later than the caller's own: the call runs within it
    /// (see [`within`]), so the attempt's time left already counts it.
    pub(crate) fn write(
        self,
        names: &Names,
        headers: &mut HeaderMap,
        attempt: &Attempt,
        read: Read,
    ) {
        let left = match read {
            Read::AtStart => attempt.timeout(),
            Read::Now => attempt.remaining(),
        };
        self.write_left(names, headers, attempt, left);
    }

    /// [`write`](Self::write) with the time `left` to write as the deadline.
    fn write_left(
        self,
        names: &Names,
        headers: &mut HeaderMap,
        attempt: &Attempt,
        left: Option<Duration>,
    ) {
        // A bounded attempt always says so, even in its last nanosecond.
        let left = left.map(|d| d.max(std::time::Duration::from_nanos(1)));
        // `insert` replaces every value the caller wrote; `remove` only where nothing is
        // written.
        let (name, value) = if self.grpc {
            (&GRPC_TIMEOUT, format_grpc_timeout(left))
        } else {
            (&names.deadline, format_deadline_ms(left))
        };
        match value {
            Some(value) if self.held => {
                if let Some(value) = replace_one(headers, name, value) {
                    headers.insert(name, value);
                }
            }
            Some(value) => {
                headers.insert(name, value);
            }
            None => {
                headers.remove(name);
            }
        }
        headers.insert(
            &names.criticality,
            criticality_value(Criticality::current()),
        );
        if attempt.resends() > 0 {
            const RETRY: HeaderValue = HeaderValue::from_static("1");
            headers.insert(&names.retry, RETRY);
        }
    }

    /// Whether every attempt's [`write`](Self::write) replaces the header `name`: the
    /// deadline in the encoding this request carries, and the criticality.
    #[inline]
    pub(crate) fn replaces(self, names: &Names, name: &HeaderName) -> bool {
        let deadline = match self.grpc {
            true => &GRPC_TIMEOUT,
            false => &names.deadline,
        };
        name == deadline || *name == names.criticality
    }

    /// Whether an attempt's transport error came when its ceiling was (all but) reached, on
    /// a gRPC request: then it is the transport's timer, armed from the header this attempt
    /// wrote, and rampart's own timer decides the outcome instead.
    pub(crate) fn is_transport_timer(self, attempt: &Attempt) -> bool {
        self.grpc
            && attempt
                .remaining()
                .is_some_and(|left| left <= TRANSPORT_TIMER_SLACK)
    }
}

/// Writes, for one attempt of a call made with any client, the headers that carry the call to
/// the next hop: its deadline (the smallest of the attempt's time left, the time left on the
/// ambient deadline, which [`InboundLayer`](crate::InboundLayer) sets to what the caller
/// upstream is still waiting for, and a deadline the caller already wrote in `headers`: a
/// caller's own deadline is never extended, whether or not the policy bounds its calls by
/// the ambient deadline itself), in the encoding the request uses (`grpc-timeout` on a gRPC
/// request, else `names.deadline`); the ambient [`Criticality`]; and, on a retry or a hedge,
/// the retry mark. What the caller wrote that an attempt must not carry (a retry mark on a
/// first attempt, the deadline in the other encoding) is taken out. The layers and the
/// reqwest client do this on every attempt; call it from the callback of a plain policy
/// around any other client.
///
/// ```
/// # async fn demo() {
/// use std::time::Duration;
/// use http::HeaderMap;
/// use rampart::Policy;
/// use rampart_http::header::Names;
/// use rampart_http::outbound::stamp;
///
/// let policy = Policy::builder()
///     .attempt_timeout(Duration::from_millis(300))
///     .build()
///     .expect("valid policy");
/// let names = Names::default();
/// let sent = policy
///     .run(async |attempt| {
///         let mut headers = HeaderMap::new();
///         stamp(&mut headers, &names, attempt);
///         // ... send a request with `headers` through any client ...
///         Ok::<_, std::io::Error>(headers)
///     })
///     .await
///     .expect("sent");
/// assert_eq!(sent["x-deadline-ms"], "300");
/// assert_eq!(sent["x-criticality"], "Critical");
/// assert!(sent.get("x-rampart-retry").is_none(), "a first attempt");
/// # }
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().expect("runtime").block_on(demo());
/// ```
pub fn stamp(headers: &mut HeaderMap, names: &Names, attempt: &Attempt) {
    let (stamp, written) = Stamp::prepare(names, headers);
    let ambient = Deadline::current();
    let left = [
        attempt.remaining(),
        written.map(Deadline::remaining),
        ambient.map(Deadline::remaining),
    ]
    .into_iter()
    .flatten()
    .min();
    stamp.write_left(names, headers, attempt, left);
}

/// Puts `value` in place of the first value of `name` in `headers`, found in a pass over
/// them (a small map's pass costs less than hashing the name), and says whether it was
/// there: `Some(value)` back when it was not. For a header that has one value, what
/// `insert` would do.
fn replace_one(
    headers: &mut HeaderMap,
    name: &HeaderName,
    value: HeaderValue,
) -> Option<HeaderValue> {
    match headers.iter_mut().find(|(held, _)| *held == name) {
        Some((_, held)) => {
            *held = value;
            None
        }
        None => Some(value),
    }
}

/// `level`'s wire name as a header value, made when the crate is compiled: `from_static`
/// called at run time checks every byte of its string again.
fn criticality_value(level: Criticality) -> HeaderValue {
    const SHEDDABLE: HeaderValue = HeaderValue::from_static(Criticality::Sheddable.as_str());
    const SHEDDABLE_PLUS: HeaderValue =
        HeaderValue::from_static(Criticality::SheddablePlus.as_str());
    const CRITICAL: HeaderValue = HeaderValue::from_static(Criticality::Critical.as_str());
    const CRITICAL_PLUS: HeaderValue = HeaderValue::from_static(Criticality::CriticalPlus.as_str());
    match level {
        Criticality::Sheddable => SHEDDABLE,
        Criticality::SheddablePlus => SHEDDABLE_PLUS,
        Criticality::Critical => CRITICAL,
        Criticality::CriticalPlus => CRITICAL_PLUS,
    }
}

/// A call of `policy` within the deadline its caller wrote, if any, so that the call's
/// deadline is never later than the caller's. Given to the call, not made ambient: a
/// task-local scope around the call would be one more future, moved with it.
pub(crate) fn within<C, A>(policy: &Policy<C, A>, caller: Option<Deadline>) -> Call<'_, C, A> {
    match caller {
        Some(deadline) => policy.call().deadline(deadline),
        None => policy.call(),
    }
}
