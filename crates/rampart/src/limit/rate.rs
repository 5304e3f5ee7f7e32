//! A rate limit: at most `permits` attempts started per window, with a burst.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::TimeBase;
use crate::admit::{Admit, AdmitContext, Refusal};
use crate::clock::Instant;
use crate::error::{ConfigError, ConfigProblem};
use crate::swap::Swap;

/// The longest window: with it and [`MAX_TOLERANCE`], every instant the limit computes fits a
/// `u64` of nanoseconds for centuries.
const MAX_PER: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest a full burst may take to refill: 100 years, in nanoseconds.
const MAX_TOLERANCE: u64 = 100 * 365 * 24 * 3600 * 1_000_000_000;

/// A rate limit: at most `permits` attempts started per window, with a burst.
///
/// A concurrency limit bounds how much work is in flight; some dependencies are sold by the
/// request instead (a quota of 100 calls a second, a paid API). [`RateLimit`] starts at most
/// `permits` attempts per `per`, evenly: one every `per / permits`, with up to `burst` of them
/// at once after a quiet spell. It never waits: an attempt over the rate is refused at once,
/// with a retry-after of exactly the time until the next permit is due, which the executor
/// honours like any refusal.
///
/// ```
/// use std::time::Duration;
/// use rampart::Instant;
/// use rampart::limit::RateLimit;
///
/// let limit = RateLimit::new(2, Duration::from_secs(1))?;
/// let now = Instant::now();
/// assert!(limit.try_acquire(now).is_ok());
/// assert!(limit.try_acquire(now).is_ok());
/// // The third in the same instant: the next permit is due in 500 ms.
/// assert_eq!(limit.try_acquire(now), Err(Duration::from_millis(500)));
/// assert!(limit.try_acquire(now + Duration::from_millis(500)).is_ok());
/// # Ok::<(), rampart::ConfigError>(())
/// ```
///
/// | knob | default | meaning |
/// |---|---|---|
/// | `permits`, `per` | given | the sustained rate: `permits` every `per` (at most 10⁹ a second) |
/// | `burst` | `permits` | attempts that may start at once after a quiet spell (at least 1) |
///
/// The algorithm is GCRA, the generic cell rate algorithm: the state is one instant, the
/// *theoretical arrival time* (TAT) of the next permit. An attempt at `now` is admitted when
/// `max(TAT, now) + interval ≤ now + burst × interval`, and moves the TAT there. It is a token
/// bucket of `burst` tokens refilled one per `interval`, kept in one word. The interval is
/// `per / permits` rounded up to a whole nanosecond, so the rate is never exceeded (it may
/// fall short by less than a nanosecond per permit).
///
/// Time comes from the attempt's [`AdmitContext::now`]: the policy's clock, so tokio's paused
/// time and the [`ManualClock`](crate::ManualClock) both work.
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one rate, which can change while the limit
/// serves ([`reconfigure`](RateLimit::reconfigure)). The state is one `AtomicU64` updated
/// by a lock-free compare-and-swap loop; a refusal only reads it. No allocation.
///
/// # Events
///
/// A refusal is reported by the executor as `Event::AttemptRefused { by: "rate limit",
/// retry_after }`, and a call refused on every attempt fails with
/// `Error::Rejected { reason: Overloaded, .. }`.
#[derive(Clone)]
pub struct RateLimit {
    inner: Arc<Inner>,
}

struct Inner {
    /// The theoretical arrival time of the next permit, in nanoseconds since `base`.
    tat: AtomicU64,
    base: TimeBase,
    /// The rate, replaced whole by [`RateLimit::reconfigure`].
    rate: Swap<Rate>,
    /// Serialises updates (a call never takes it).
    updating: Mutex<()>,
}

/// One version of the settings.
struct Rate {
    /// Nanoseconds between permits.
    interval: u64,
    /// How far the TAT may run ahead of now: `burst × interval`.
    tolerance: u64,
    permits: u32,
    per: Duration,
    burst: u32,
}

/// Builds a [`RateLimit`]; see [`RateLimit`] for the defaults.
#[must_use]
#[derive(Debug, Clone)]
pub struct RateLimitBuilder {
    permits: u32,
    per: Duration,
    burst: Option<u32>,
}

impl RateLimit {
    /// `permits` every `per`, with a burst of `permits`.
    pub fn new(permits: u32, per: Duration) -> Result<RateLimit, ConfigError> {
        RateLimit::builder(permits, per).build()
    }

    /// A builder for `permits` every `per`.
    pub fn builder(permits: u32, per: Duration) -> RateLimitBuilder {
        RateLimitBuilder {
            permits,
            per,
            burst: None,
        }
    }

    /// Takes a permit at `now`, or says how long until the next one is due.
    pub fn try_acquire(&self, now: Instant) -> Result<(), Duration> {
        let inner = &*self.inner;
        let rate = inner.rate.load();
        let now = inner.base.nanos(now);
        let limit = now.saturating_add(rate.tolerance);
        let mut tat = inner.tat.load(Relaxed);
        loop {
            let next = tat.max(now).saturating_add(rate.interval);
            if next > limit {
                return Err(Duration::from_nanos(next - limit));
            }
            match inner.tat.compare_exchange_weak(tat, next, Relaxed, Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Permits per window.
    pub fn permits(&self) -> u32 {
        self.inner.rate.load().permits
    }

    /// The window.
    pub fn per(&self) -> Duration {
        self.inner.rate.load().per
    }

    /// Permits that may be taken at once after a quiet spell.
    pub fn burst(&self) -> u32 {
        self.inner.rate.load().burst
    }

    /// Changes the rate while the limit serves, for every clone: `update` is handed a builder
    /// holding the current `permits`, `per` and `burst` (change the first two with
    /// [`RateLimitBuilder::rate`]), and what it returns is checked exactly as
    /// [`build`](RateLimitBuilder::build) checks it. A rejected update changes nothing and names
    /// every field and value it refused. What was already taken stays taken, in time: the
    /// next permit is due where the old rate left it, and only the ones after it are spaced by
    /// the new interval. So a lower rate slows admissions at once, but a higher rate starts to
    /// count only once the permits taken under the old one have come due, and, because the
    /// burst window shrinks with the interval, a limit whose burst was spent can refuse for up
    /// to the old window (a spent burst of 10 at 10/s raised to 100/s admits again about 0.9 s
    /// later, where the old rate would have admitted after 0.1 s). Each update keeps the rate it
    /// replaced allocated until the limit is dropped; a permit taken never waits or locks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::limit::RateLimit;
    ///
    /// let limit = RateLimit::new(100, Duration::from_secs(1))?;
    /// limit.reconfigure(|b| b.rate(50, Duration::from_secs(1)).burst(10))?;
    /// assert_eq!((limit.permits(), limit.burst()), (50, 10));
    /// let refused = limit.reconfigure(|b| b.burst(0)).unwrap_err();
    /// assert_eq!(refused.to_string(), "rate_limit.burst must be at least 1 (was 0)");
    /// assert_eq!(limit.burst(), 10);
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    pub fn reconfigure(
        &self,
        update: impl FnOnce(RateLimitBuilder) -> RateLimitBuilder,
    ) -> Result<(), ConfigError> {
        let inner = &*self.inner;
        let _one_at_a_time = inner
            .updating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = inner.rate.load();
        let builder = RateLimitBuilder {
            permits: current.permits,
            per: current.per,
            burst: Some(current.burst),
        };
        let rate = update(builder).checked()?;
        inner
            .rate
            .store(rate)
            .map_err(|_| ConfigError::new(vec![crate::policy::live::too_many_updates()]))
    }
}

impl RateLimitBuilder {
    /// `permits` every `per` (what [`RateLimit::builder`] was given), for an update
    /// ([`RateLimit::reconfigure`]). The burst is kept (an update's builder holds the running
    /// one): set it with [`burst`](Self::burst).
    pub fn rate(self, permits: u32, per: Duration) -> Self {
        RateLimitBuilder {
            permits,
            per,
            ..self
        }
    }

    /// Permits that may be taken at once after a quiet spell: at least 1. Default `permits`.
    pub fn burst(self, burst: u32) -> Self {
        RateLimitBuilder {
            burst: Some(burst),
            ..self
        }
    }

    /// The limit; or every invalid setting at once.
    pub fn build(self) -> Result<RateLimit, ConfigError> {
        Ok(RateLimit {
            inner: Arc::new(Inner {
                tat: AtomicU64::new(0),
                base: TimeBase::default(),
                rate: Swap::new(self.checked()?),
                updating: Mutex::new(()),
            }),
        })
    }

    /// The checked settings; what [`build`](Self::build) and [`RateLimit::reconfigure`] run.
    fn checked(self) -> Result<Rate, ConfigError> {
        let RateLimitBuilder {
            permits,
            per,
            burst,
        } = self;
        let burst = burst.unwrap_or(permits);
        let per_nanos = u64::try_from(per.as_nanos()).unwrap_or(u64::MAX);
        let mut problems = Vec::new();
        if permits == 0 {
            problems.push(ConfigProblem::new(
                "rate_limit.permits",
                "must be at least 1 (was 0)",
            ));
        }
        if per.is_zero() {
            problems.push(ConfigProblem::new(
                "rate_limit.per",
                "must be positive (was 0ns)",
            ));
        } else if permits > 0 && per_nanos < u64::from(permits) {
            problems.push(ConfigProblem::new(
                "rate_limit.per",
                format!(
                    "must give each permit at least 1ns: at most 1e9 permits a second (was {permits} per {per:?})"
                ),
            ));
        }
        if per > MAX_PER {
            problems.push(ConfigProblem::new(
                "rate_limit.per",
                format!("must be at most 365 days (was {per:?})"),
            ));
        }
        let interval = per_nanos.div_ceil(u64::from(permits.max(1)));
        if burst == 0 {
            problems.push(ConfigProblem::new(
                "rate_limit.burst",
                "must be at least 1 (was 0)",
            ));
        } else if interval.saturating_mul(u64::from(burst)) > MAX_TOLERANCE {
            problems.push(ConfigProblem::new(
                "rate_limit.burst",
                format!(
                    "must take at most 100 years to refill (was {burst} at one per {:?})",
                    Duration::from_nanos(interval)
                ),
            ));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        Ok(Rate {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst)),
            permits,
            per,
            burst,
        })
    }
}

/// What a rate limit's refusal is reported as (`Event::AttemptRefused { by, .. }`).
pub(crate) const BY: &str = "rate limit";

impl Admit for RateLimit {
    type Permit = ();

    #[inline]
    fn acquire(
        &self,
        cx: &AdmitContext<'_>,
    ) -> impl std::future::Future<Output = Result<(), Refusal>> + Send {
        std::future::ready(self.try_acquire(cx.now).map_err(|after| Refusal {
            retry_after: Some(after),
            by: BY,
        }))
    }
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("permits", &self.permits())
            .field("per", &self.per())
            .field("burst", &self.burst())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_full_burst_is_admitted_at_once_then_permits_come_one_interval_apart() {
        let limit = RateLimit::builder(10, Duration::from_secs(1))
            .burst(3)
            .build()
            .expect("valid");
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limit.try_acquire(t0), Ok(()));
        }
        assert_eq!(limit.try_acquire(t0), Err(100 * MS));
        assert_eq!(limit.try_acquire(t0 + 99 * MS), Err(MS));
        assert_eq!(limit.try_acquire(t0 + 100 * MS), Ok(()));
        assert_eq!(limit.try_acquire(t0 + 100 * MS), Err(100 * MS));
    }

    #[test]
    fn a_quiet_spell_refills_no_more_than_the_burst() {
        let limit = RateLimit::new(2, Duration::from_secs(1)).expect("valid");
        let t0 = Instant::now();
        assert_eq!(limit.try_acquire(t0), Ok(()));
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(limit.try_acquire(later), Ok(()));
        assert_eq!(limit.try_acquire(later), Ok(()));
        assert_eq!(limit.try_acquire(later), Err(500 * MS));
    }

    #[test]
    fn the_sustained_rate_is_never_exceeded_when_the_interval_is_rounded() {
        // 3 a second: 333_333_333.3 ns between permits, rounded up.
        let limit = RateLimit::builder(3, Duration::from_secs(1))
            .burst(1)
            .build()
            .expect("valid");
        let t0 = Instant::now();
        let mut admitted = 0;
        for ms in 0..=10_000u32 {
            if limit.try_acquire(t0 + ms * MS).is_ok() {
                admitted += 1;
            }
        }
        // Over 10 s at 3 a second, the first at t0: at most 31 (on this 1 ms grid, 30).
        assert!((29..=31).contains(&admitted), "{admitted}");
    }

    #[test]
    fn an_instant_before_the_first_is_treated_as_the_first() {
        let limit = RateLimit::new(1, Duration::from_secs(1)).expect("valid");
        let t0 = Instant::now() + Duration::from_secs(10);
        assert_eq!(limit.try_acquire(t0), Ok(()));
        let earlier = t0 - Duration::from_secs(5);
        assert_eq!(limit.try_acquire(earlier), Err(Duration::from_secs(1)));
    }

    #[test]
    fn invalid_settings_are_all_reported_with_their_values() {
        let err = RateLimit::builder(0, Duration::ZERO)
            .burst(0)
            .build()
            .expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "rate_limit.permits must be at least 1 (was 0); rate_limit.per must be positive (was 0ns); rate_limit.burst must be at least 1 (was 0)"
        );
        let err = RateLimit::new(2_000, Duration::from_micros(1)).expect_err("too fast");
        assert_eq!(
            err.to_string(),
            "rate_limit.per must give each permit at least 1ns: at most 1e9 permits a second (was 2000 per 1µs)"
        );
    }

    #[test]
    fn extreme_settings_are_refused_or_work_without_overflow() {
        let err = RateLimit::builder(1, Duration::MAX)
            .burst(u32::MAX)
            .build()
            .expect_err("too long");
        assert_eq!(err.problems().len(), 2, "{err}");
        let slow = RateLimit::builder(1, MAX_PER)
            .burst(100)
            .build()
            .expect("valid");
        let t0 = Instant::now();
        assert_eq!(slow.try_acquire(t0), Ok(()));
        let far = t0 + Duration::from_secs(300 * 365 * 24 * 3600);
        for _ in 0..100 {
            assert_eq!(slow.try_acquire(far), Ok(()));
        }
        assert_eq!(slow.try_acquire(far), Err(MAX_PER));
        let fast = RateLimit::builder(u32::MAX, Duration::from_secs(10))
            .burst(u32::MAX)
            .build()
            .expect("valid");
        for _ in 0..1_000 {
            assert_eq!(fast.try_acquire(t0), Ok(()));
        }
    }
}
