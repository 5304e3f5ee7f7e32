//! Limiters: ready-made [`Admit`](crate::admit::Admit) components.
//!
//! | limiter | what it bounds | waits? |
//! |---|---|---|
//! | [`ConcurrencyLimit`] | attempts in flight, fixed | in a bounded FIFO queue |
//! | [`RateLimit`] | attempts started per window, with a burst (GCRA) | never |
//!
//! Every limiter is cheap to clone, and clones share one state: give the same limiter to every
//! policy (or server layer) that must share the capacity. Every refusal names its limiter in
//! [`Refusal::by`](crate::admit::Refusal::by) and carries a retry-after; the executor reports
//! it as [`Event::AttemptRefused`](crate::Event::AttemptRefused). Time comes from the attempt's
//! [`AdmitContext::now`](crate::admit::AdmitContext::now), so a limiter runs on the policy's
//! clock: tokio's paused time and the manual clock both work.
//!
//! A limiter can also be asked directly, outside a policy (a server layer shedding inbound
//! requests): build an [`AdmitContext`](crate::admit::AdmitContext::new), call
//! [`acquire`](crate::admit::Admit::acquire), and give the permit back with
//! [`release`](crate::admit::Admit::release) (or drop it).

mod concurrency;
mod rate;

pub use concurrency::ConcurrencyLimit;
pub use rate::{RateLimit, RateLimitBuilder};

use std::sync::OnceLock;
use std::time::Duration;

use crate::clock::Instant;
use crate::latency::TypicalLatency;

/// The retry-after of a limiter whose room comes back as attempts end: the measured mean
/// time a permit is held, 10 ms until measured.
fn held_retry_after(held: &TypicalLatency) -> Duration {
    match held.get() {
        held if held.is_zero() => Duration::from_millis(10),
        held => held,
    }
}

/// Nanoseconds since the first instant a limiter was shown; an earlier instant counts as that
/// first one.
#[derive(Debug, Default)]
struct TimeBase(OnceLock<Instant>);

impl TimeBase {
    #[inline]
    fn nanos(&self, now: Instant) -> u64 {
        let base = *self.0.get_or_init(|| now);
        u64::try_from(now.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
    }
}
