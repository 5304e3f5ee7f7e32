//! A rate limit: at most `permits` attempts started per window, with a burst.

use std::fmt;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, fence};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::TimeBase;
use crate::admit::{Admit, AdmitContext, Refusal};
use crate::clock::Instant;
use crate::error::{ConfigError, ConfigProblem};
use crate::swap::Swap;

/// The longest window: with it and [`MAX_TOLERANCE`], every TAT the limit computes fits
/// [`MAX_TAT`] for the first 190 years after its first permit (292 with a refill of seconds).
const MAX_PER: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest a full burst may take to refill: 100 years, in nanoseconds.
const MAX_TOLERANCE: u64 = 100 * 365 * 24 * 3600 * 1_000_000_000;

/// Set in a [`Tat`] cell's state once a later rate took the TAT from it (the rest of the state
/// is the TAT it had then); also set in [`UNSET`] and [`SKIPPED`].
const FROZEN: u64 = 1 << 63;
/// The state of a [`Tat`] cell no permit was asked for under yet: the TAT is still in an
/// earlier cell.
const UNSET: u64 = u64::MAX;
/// The state of a [`Tat`] cell that a later rate passed by before any permit was asked for
/// under its own: the TAT went from the cell before it to a later one.
const SKIPPED: u64 = u64::MAX - 1;
/// The latest TAT, in nanoseconds since the base (about 292 years): below every flag. Later
/// TATs are cut to it (so a limit still serving 292 years after its first permit admits every
/// attempt).
const MAX_TAT: u64 = FROZEN - 3;

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
/// fall short by less than a nanosecond per permit). How far the TAT runs ahead of now is the
/// permits taken, in intervals: a [`reconfigure`](RateLimit::reconfigure) that changes the
/// interval rescales it, so that what was taken counts at the new rate.
///
/// Time comes from the attempt's [`AdmitContext::now`]: the policy's clock, so tokio's paused
/// time and the [`ManualClock`](crate::ManualClock) both work.
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one rate, which can change while the limit
/// serves ([`reconfigure`](RateLimit::reconfigure)). The state is one `AtomicU64` (one per
/// interval the limit has had) updated by a lock-free compare-and-swap loop; a refusal only
/// reads it. No allocation and no lock; the first permit asked for after an update that
/// changed the interval moves the TAT to the new rate's word, with two compare-and-swaps more.
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
    base: TimeBase,
    /// The rate and where its TAT is, replaced whole by [`RateLimit::reconfigure`].
    rate: Swap<Version>,
    /// Serialises updates (a call never takes it).
    updating: Mutex<()>,
}

/// One version of the limit: its settings, and the cell its TAT is counted in.
struct Version {
    rate: Rate,
    /// Shared with the version before when the interval did not change and the burst was not
    /// lowered.
    tat: Arc<Tat>,
}

/// The theoretical arrival time of the next permit, counted in one interval.
///
/// An update that changes the interval (or lowers the burst) has no clock to rescale the TAT
/// with, so it starts a new cell, [`UNSET`], that points at the one it replaces. The first
/// permit asked for under it has the time: it freezes the cell the TAT is in (so no permit is
/// taken there any more), rescales the TAT's lead over now to the new interval, caps it at the
/// new burst window, and sets the new cell to it. A permit
/// asked for under a version whose cell is frozen (or skipped) loads the newer version, which
/// is already stored: its cell was made before it was published, and only a permit asked for
/// under a newer version freezes an older cell.
struct Tat {
    /// Nanoseconds since the base ([`MAX_TAT`] at most); or [`UNSET`], [`SKIPPED`], or a TAT
    /// with [`FROZEN`] set.
    state: AtomicU64,
    /// Nanoseconds between permits in this cell.
    interval: u64,
    /// The cell of the version this one replaced; `None` for the first.
    from: Option<Arc<Tat>>,
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
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `permits` or `per` is zero (each named with its value).
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
    ///
    /// # Errors
    ///
    /// The time until the next permit is due, when none is due at `now`; nothing is taken.
    pub fn try_acquire(&self, now: Instant) -> Result<(), Duration> {
        let inner = &*self.inner;
        let now = inner.base.nanos(now).min(MAX_TAT);
        loop {
            let version = inner.rate.load();
            if let Some(taken) = version.tat.take(now, version.rate.tolerance) {
                return taken;
            }
            // Replaced while it was read: the newer version is stored.
        }
    }

    /// Permits per window.
    pub fn permits(&self) -> u32 {
        self.inner.rate.load().rate.permits
    }

    /// The window.
    pub fn per(&self) -> Duration {
        self.inner.rate.load().rate.per
    }

    /// Permits that may be taken at once after a quiet spell.
    pub fn burst(&self) -> u32 {
        self.inner.rate.load().rate.burst
    }

    /// Changes the rate while the limit serves, for every clone: `update` is handed a builder
    /// holding the current `permits`, `per` and `burst` (change the first two with
    /// [`RateLimitBuilder::rate`]), and what it returns is checked exactly as
    /// [`build`](RateLimitBuilder::build) checks it. A rejected update changes nothing and names
    /// every field and value it refused.
    ///
    /// What was already taken stays taken, counted at the new rate: how far the limit has run
    /// ahead of the clock (the TAT less now, the permits taken in intervals) is rescaled by the
    /// new interval over the old one. An update has no clock, so this is done by the next
    /// permit asked for, at its own instant; until then the old rate refills. So a burst of 10
    /// at 10 a second, spent at once, is 1 s ahead: raised to 100 a second it is 100 ms ahead
    /// and admits again one new interval (10 ms) later, and lowered to 5 a second it is 2 s
    /// ahead and admits again 200 ms later. Several updates with no permit asked for between
    /// them rescale once, by the last one's interval over the interval before the first. The
    /// lead is capped at the new burst window (burst × interval): an update never refuses for
    /// longer than that, and what a larger old burst took beyond the new one is forgotten (the
    /// limit starts spent): 10 a second spent at once, changed to 1 an hour with a burst of 1,
    /// admits again in an hour, not ten; the burst alone lowered to 1 admits again after one
    /// interval. An update that keeps the interval and does not lower the burst moves
    /// nothing. Each update keeps the rate it
    /// replaced allocated until the limit is dropped; a permit taken never waits, locks or
    /// allocates.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::Instant;
    /// use rampart::limit::RateLimit;
    ///
    /// let limit = RateLimit::new(10, Duration::from_secs(1))?;
    /// let now = Instant::now();
    /// for _ in 0..10 {
    ///     assert!(limit.try_acquire(now).is_ok());
    /// }
    /// assert_eq!(limit.try_acquire(now), Err(Duration::from_millis(100)));
    /// limit.reconfigure(|b| b.rate(100, Duration::from_secs(1)))?;
    /// assert_eq!((limit.permits(), limit.burst()), (100, 10));
    /// // The 10 taken now count 10 ms each.
    /// assert_eq!(limit.try_acquire(now), Err(Duration::from_millis(10)));
    ///
    /// let refused = limit.reconfigure(|b| b.burst(0)).unwrap_err();
    /// assert_eq!(refused.to_string(), "rate_limit.burst must be at least 1 (was 0)");
    /// assert_eq!(limit.burst(), 10);
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting of the update (the limit keeps its
    /// settings), or `reconfigure` after the most updates a limit keeps.
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
            permits: current.rate.permits,
            per: current.rate.per,
            burst: Some(current.rate.burst),
        };
        let rate = update(builder).checked()?;
        // The same interval and no smaller a burst: what was taken counts as it is. Else a new
        // cell, which the next permit moves the TAT into, rescaled and capped.
        let tat =
            if rate.interval == current.tat.interval && rate.tolerance >= current.rate.tolerance {
                Arc::clone(&current.tat)
            } else {
                Arc::new(Tat {
                    state: AtomicU64::new(UNSET),
                    interval: rate.interval,
                    from: Some(Arc::clone(&current.tat)),
                })
            };
        inner
            .rate
            .store(Version { rate, tat })
            .map_err(|_| ConfigError::new(vec![crate::swap::too_many_updates()]))
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
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once, each naming its field and value.
    pub fn build(self) -> Result<RateLimit, ConfigError> {
        let rate = self.checked()?;
        let tat = Arc::new(Tat {
            state: AtomicU64::new(0),
            interval: rate.interval,
            from: None,
        });
        Ok(RateLimit {
            inner: Arc::new(Inner {
                base: TimeBase::default(),
                rate: Swap::new(Version { rate, tat }),
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

impl Tat {
    /// Takes a permit at `now` (nanoseconds since the base) under a burst of `tolerance`
    /// nanoseconds, or says how long until the next one is due; `None` when a later version
    /// took the TAT from this cell.
    #[inline]
    fn take(&self, now: u64, tolerance: u64) -> Option<Result<(), Duration>> {
        let limit = now.saturating_add(tolerance);
        let mut tat = self.state.load(Relaxed);
        loop {
            if tat & FROZEN != 0 {
                if tat != UNSET {
                    // Frozen or skipped by a permit asked for under a later version: the
                    // acquire fence pairs with the release of that compare-and-swap, so the
                    // load of the version that follows finds that later one.
                    fence(Acquire);
                    return None;
                }
                tat = self.settle(now, tolerance);
                continue;
            }
            let next = tat.max(now).saturating_add(self.interval).min(MAX_TAT);
            if next > limit {
                return Some(Err(Duration::from_nanos(next - limit)));
            }
            match self
                .state
                .compare_exchange_weak(tat, next, Relaxed, Relaxed)
            {
                Ok(_) => return Some(Ok(())),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Moves the TAT into this cell, [`UNSET`] until now, from the newest earlier cell that
    /// has it, rescaled at `now` to this cell's interval and never more than this version's
    /// `tolerance` ahead of `now` (at worst, the new burst starts spent); the cell's state
    /// afterwards (set by this call or by another that got there first, or skipped by a later
    /// version).
    #[cold]
    #[inline(never)]
    fn settle(&self, now: u64, tolerance: u64) -> u64 {
        let mut from = self.from.as_deref();
        let (tat, interval) = loop {
            // The first cell starts set, so every unset cell has one before it.
            let Some(cell) = from else {
                break (0, self.interval);
            };
            match cell.state.load(Acquire) {
                SKIPPED => from = cell.from.as_deref(),
                // No permit was asked for under that version: pass it by for good (a permit
                // asked for under it now finds it skipped and loads the newer version).
                UNSET => {
                    if cell
                        .state
                        .compare_exchange(UNSET, SKIPPED, AcqRel, Acquire)
                        .is_ok()
                    {
                        from = cell.from.as_deref();
                    }
                }
                frozen if frozen & FROZEN != 0 => break (frozen & !FROZEN, cell.interval),
                // Freeze it, so that no permit is taken there once its TAT was read.
                live => {
                    if cell
                        .state
                        .compare_exchange(live, live | FROZEN, AcqRel, Acquire)
                        .is_ok()
                    {
                        break (live, cell.interval);
                    }
                }
            }
        };
        // Capped at the new tolerance: what a larger old burst took beyond the new one is
        // forgotten, so an update never refuses for longer than its own burst window.
        let moved = rescale(tat, now, interval, self.interval).min(now.saturating_add(tolerance));
        match self.state.compare_exchange(UNSET, moved, AcqRel, Acquire) {
            Ok(_) => moved,
            Err(actual) => actual,
        }
    }
}

impl Drop for Tat {
    /// Unlinks the cells before this one one at a time: a limit updated a million times would
    /// otherwise drop a chain a million calls deep.
    fn drop(&mut self) {
        let mut from = self.from.take();
        while let Some(cell) = from {
            from = Arc::into_inner(cell).and_then(|mut cell| cell.from.take());
        }
    }
}

/// `tat`, counted in intervals of `from` nanoseconds, counted in intervals of `to`: its lead
/// over `now` times `to / from`, rounded up (a permit is never due earlier than the new rate
/// allows). A TAT not ahead of `now` is left as it is.
fn rescale(tat: u64, now: u64, from: u64, to: u64) -> u64 {
    let lead = tat.saturating_sub(now);
    if lead == 0 || from == to {
        return tat;
    }
    let scaled = (u128::from(lead) * u128::from(to)).div_ceil(u128::from(from.max(1)));
    now.saturating_add(u64::try_from(scaled).unwrap_or(u64::MAX))
        .min(MAX_TAT)
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
#[path = "rate_tests.rs"]
mod tests;
