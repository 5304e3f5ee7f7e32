//! Gradient: a concurrency limit that follows the dependency's latency.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::aimd::bounds_problems;
use super::{Bounds, InFlight, held_retry_after};
use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::error::{ConfigError, ConfigProblem};
use crate::latency::TypicalLatency;
use crate::outcome::AttemptOutcome;

/// Round trips the long-term latency averages over.
const LONG_TRIPS: f64 = 600.0;
/// Samples averaged plainly before the long-term average starts.
const WARMUP: u64 = 10;

/// Gradient: a concurrency limit that follows the dependency's latency.
///
/// [`Aimd`](super::Aimd) waits for the dependency to fail (time out, throttle) before it backs
/// off. A dependency usually says it is full earlier, by slowing down: requests queue inside it
/// and latency rises before anything fails. [`Gradient`] watches that: it compares the recent
/// latency with the long-term one and moves the limit by their ratio, the *gradient*. While
/// latency holds steady the limit grows by a small queue allowance; when recent latency rises
/// above the long-term one (by more than a tolerance), the limit shrinks in proportion. This is
/// the gradient algorithm of Netflix's concurrency-limits (`Gradient2Limit`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use rampart::Policy;
/// use rampart::limit::Gradient;
///
/// let limit = Gradient::new();
/// let policy = Policy::builder()
///     .admit(limit.clone())
///     .build()
///     .expect("valid policy");
/// let v = policy.run(async |_attempt| Ok::<_, std::io::Error>(7)).await;
/// assert_eq!(v.ok(), Some(7));
/// assert_eq!(limit.limit(), 20);
/// # }
/// ```
///
/// | knob | default | meaning |
/// |---|---|---|
/// | `initial` | 20 | the limit before anything is learned |
/// | `min` | 4 | the limit never falls below this |
/// | `max` | 200 | the limit never grows above this (at most 1 000 000) |
/// | `smoothing` | 0.2 | how far one round trip moves the limit toward its target, in `(0, 1]` |
/// | `tolerance` | 1.5 | how much slower than long-term recent latency may be before the limit shrinks, at least 1 |
/// | `queue` | 4 | the allowance added to the limit each round trip: how many may queue in the dependency |
/// | short window | 1 round trip | recent latency: an average with weight 1/limit per sample |
/// | long window | 600 round trips | long-term latency: an average with weight 1/(600 × limit) per sample (a plain mean of the first 10) |
///
/// # The update
///
/// On each latency sample (a permit given back), with `short` and `long` the two averages:
///
/// ```text
/// gradient = clamp(tolerance × long / short, 0.5, 1)
/// target   = limit × gradient + queue
/// limit   += (target − limit) × smoothing / limit     clamped to [min, max]
/// ```
///
/// Time is counted in round trips: one limit's worth of samples (what a round trip brings at
/// full use), whatever the request rate. Netflix applies each step once per window of samples
/// and keeps the averages over windows; here every sample moves the limit and the averages by
/// one limit-th of that, which comes to the same per round trip without a shared window to
/// close. The gradient never goes below 0.5, so a spike cannot more than halve the target; it
/// is 1 while recent latency is within `tolerance` of the long-term one, so the limit then
/// grows by `queue × smoothing` per round trip. While less than half the limit is in use the
/// limit does not move (the dependency is not being tested). After a long overload the
/// long-term average has crept up; when it is more than twice the recent one it is cut by 5 %
/// per sample, so the limit recovers without waiting 600 round trips.
///
/// | feedback outcome | sample |
/// |---|---|
/// | `Ok`, `Permanent` | its duration |
/// | `TimedOut` | its duration (the ceiling: a lower bound of the real latency) |
/// | `Throttled` | no latency (it came back fast); the gradient is taken as 0.5 and the queue allowance as 0 |
/// | `Transient`, `Refused`, `Cancelled`, a dropped permit | none |
///
/// An attempt is refused at once when the limit is reached: no queue. The refusal's
/// retry-after is the measured mean time a permit is held (10 ms until measured).
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one limit. In flight is one atomic counter; the
/// limit and the two averages are atomics read and written without a lock. Two releases at the
/// same instant may each update from the same reading, and one of their samples is then lost:
/// an average loses a sample, never gains a wrong one. No lock, no allocation.
///
/// # Events
///
/// A refusal is reported by the executor as `Event::AttemptRefused { by: "gradient limit", .. }`.
/// [`Gradient::limit`] reads the current limit, for a gauge.
#[derive(Clone)]
pub struct Gradient {
    inner: Arc<Inner>,
}

struct Inner {
    in_flight: InFlight,
    /// The limit, as `f64` bits.
    limit: AtomicU64,
    /// Recent latency in nanoseconds, as `f64` bits.
    short: AtomicU64,
    /// Long-term latency in nanoseconds, as `f64` bits.
    long: AtomicU64,
    samples: AtomicU64,
    bounds: Bounds,
    smoothing: f64,
    tolerance: f64,
    queue: f64,
    held: TypicalLatency,
}

/// Held while an attempt admitted by a [`Gradient`] limit runs; dropping it frees the slot.
#[must_use = "dropping the permit frees its slot at once"]
pub struct GradientPermit {
    inner: Arc<Inner>,
}

impl Drop for GradientPermit {
    fn drop(&mut self) {
        self.inner.in_flight.leave();
    }
}

impl fmt::Debug for GradientPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GradientPermit").finish_non_exhaustive()
    }
}

/// Builds a [`Gradient`] limit; see [`Gradient`] for the defaults.
#[must_use]
#[derive(Debug, Clone)]
pub struct GradientBuilder {
    initial: usize,
    min: usize,
    max: usize,
    smoothing: f64,
    tolerance: f64,
    queue: usize,
}

impl Gradient {
    /// The defaults: initial 20, min 4, max 200, smoothing 0.2, tolerance 1.5, queue 4.
    pub fn new() -> Gradient {
        Gradient::from_valid(&Gradient::builder())
    }

    /// A builder with the defaults.
    pub fn builder() -> GradientBuilder {
        GradientBuilder {
            initial: 20,
            min: 4,
            max: 200,
            smoothing: 0.2,
            tolerance: 1.5,
            queue: 4,
        }
    }

    fn from_valid(b: &GradientBuilder) -> Gradient {
        Gradient {
            inner: Arc::new(Inner {
                in_flight: InFlight::default(),
                limit: AtomicU64::new((b.initial as f64).to_bits()),
                short: AtomicU64::new(0),
                long: AtomicU64::new(0),
                samples: AtomicU64::new(0),
                bounds: Bounds::new(b.min, b.max),
                smoothing: b.smoothing,
                tolerance: b.tolerance,
                queue: b.queue as f64,
                held: TypicalLatency::default(),
            }),
        }
    }

    /// The current limit: attempts in flight beyond it are refused.
    pub fn limit(&self) -> usize {
        self.inner.limit() as usize
    }

    /// The range the limit moves in: `(min, max)`.
    pub fn bounds(&self) -> (usize, usize) {
        self.inner.bounds.get()
    }

    /// Changes the range the limit moves in while it serves, for every clone (to cap it during
    /// an incident, say). The current limit is brought into the new range at once; attempts in
    /// flight above a lower `max` finish, and no attempt is admitted until fewer than the limit
    /// are in flight. What it learns from then on stays in the range (a latency sample taken
    /// as the range changes may move the limit once by the old one; the next sample clamps
    /// it). A range the builder would refuse (`min` 0, `max` above 1 000 000 or below `min`)
    /// is refused with a [`ConfigError`] naming `gradient.min` / `gradient.max` and the
    /// values, and changes nothing.
    ///
    /// ```
    /// use rampart::limit::Gradient;
    ///
    /// let limit = Gradient::new(); // starts at 20, within 4..=200
    /// limit.set_bounds(30, 100)?;
    /// assert_eq!((limit.bounds(), limit.limit()), ((30, 100), 30));
    /// let refused = limit.set_bounds(0, 100).unwrap_err();
    /// assert_eq!(refused.to_string(), "gradient.min must be at least 1 (was 0)");
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field and value when `min` is 0 or `max` is below `min`; the
    /// limit keeps its range.
    pub fn set_bounds(&self, min: usize, max: usize) -> Result<(), ConfigError> {
        let inner = &*self.inner;
        inner
            .bounds
            .set(["gradient.min", "gradient.max"], min, max)?;
        let limit = inner.limit();
        let clamped = limit.clamp(min as f64, max as f64);
        if clamped != limit {
            store(&inner.limit, clamped);
        }
        Ok(())
    }

    /// Attempts in flight right now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.get()
    }

    fn refusal(&self) -> Refusal {
        Refusal {
            retry_after: Some(held_retry_after(&self.inner.held)),
            by: "gradient limit",
        }
    }
}

impl Default for Gradient {
    fn default() -> Self {
        Gradient::new()
    }
}

fn load(value: &AtomicU64) -> f64 {
    f64::from_bits(value.load(Relaxed))
}

fn store(value: &AtomicU64, to: f64) {
    value.store(to.to_bits(), Relaxed);
}

impl Inner {
    fn limit(&self) -> f64 {
        load(&self.limit)
    }

    /// Folds in one latency sample (`None` for a throttled attempt) taken with `in_use`
    /// permits held, and moves the limit.
    fn sample(&self, latency_nanos: Option<f64>, in_use: usize) {
        let limit = self.limit();
        // A round trip at full use brings one limit's worth of samples.
        let trip = limit.max(1.0);
        let (gradient, queue) = match latency_nanos {
            Some(rtt) => {
                let n = self.samples.fetch_add(1, Relaxed);
                let (short, long) = if n == 0 {
                    (rtt, rtt)
                } else {
                    let short = load(&self.short);
                    let long = load(&self.long);
                    let weight = if n < WARMUP {
                        1.0 / (n + 1) as f64
                    } else {
                        1.0 / (LONG_TRIPS * trip)
                    };
                    (short + (rtt - short) / trip, long + (rtt - long) * weight)
                };
                // After a long overload the long-term average has crept up: let it recover.
                let long = if long > 2.0 * short {
                    long * 0.95
                } else {
                    long
                };
                store(&self.short, short);
                store(&self.long, long);
                ((self.tolerance * long / short).clamp(0.5, 1.0), self.queue)
            }
            // Told to slow down: the lowest gradient, and no allowance for queueing.
            None => (0.5, 0.0),
        };
        if (in_use as f64) * 2.0 < limit {
            return;
        }
        let target = limit * gradient + queue;
        let (min, max) = self.bounds.get();
        let next = (limit + (target - limit) * self.smoothing / trip).clamp(min as f64, max as f64);
        if next.is_finite() && next != limit {
            store(&self.limit, next);
        }
    }
}

impl GradientBuilder {
    /// The limit before anything is learned: within `[min, max]`. Default 20.
    pub fn initial(self, initial: usize) -> Self {
        GradientBuilder { initial, ..self }
    }

    /// The lowest the limit goes: at least 1. Default 4.
    pub fn min(self, min: usize) -> Self {
        GradientBuilder { min, ..self }
    }

    /// The highest the limit goes: at least `min`, at most 1 000 000. Default 200.
    pub fn max(self, max: usize) -> Self {
        GradientBuilder { max, ..self }
    }

    /// How far one round trip moves the limit toward its target: in `(0, 1]`. Default 0.2.
    pub fn smoothing(self, smoothing: f64) -> Self {
        GradientBuilder { smoothing, ..self }
    }

    /// How much slower than long-term recent latency may be before the limit shrinks: finite,
    /// at least 1. Default 1.5.
    pub fn tolerance(self, tolerance: f64) -> Self {
        GradientBuilder { tolerance, ..self }
    }

    /// The allowance added to the limit each round trip (requests allowed to queue inside
    /// the dependency): at most 1 000. Default 4.
    pub fn queue(self, queue: usize) -> Self {
        GradientBuilder { queue, ..self }
    }

    /// The limit; or every invalid setting at once.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once, each naming its field and value.
    pub fn build(self) -> Result<Gradient, ConfigError> {
        let mut problems = Vec::new();
        let fields = ["gradient.initial", "gradient.min", "gradient.max"];
        bounds_problems(fields, self.initial, self.min, self.max, &mut problems);
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            let message = format!("must be above 0 and at most 1 (was {})", self.smoothing);
            problems.push(ConfigProblem::new("gradient.smoothing", message));
        }
        if !(self.tolerance >= 1.0 && self.tolerance.is_finite()) {
            let message = format!("must be finite and at least 1 (was {})", self.tolerance);
            problems.push(ConfigProblem::new("gradient.tolerance", message));
        }
        if self.queue > 1_000 {
            let message = format!("must be at most 1000 (was {})", self.queue);
            problems.push(ConfigProblem::new("gradient.queue", message));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        Ok(Gradient::from_valid(&self))
    }
}

impl Admit for Gradient {
    type Permit = GradientPermit;

    fn load(&self) -> crate::admit::Load {
        crate::admit::Load::new(Some(self.in_flight()), None)
    }

    #[inline]
    fn acquire(
        &self,
        _: &AdmitContext<'_>,
    ) -> impl std::future::Future<Output = Result<GradientPermit, Refusal>> + Send {
        let inner = &self.inner;
        std::future::ready(if inner.in_flight.try_enter(inner.limit() as usize) {
            Ok(GradientPermit {
                inner: Arc::clone(inner),
            })
        } else {
            Err(self.refusal())
        })
    }

    fn release(&self, permit: GradientPermit, feedback: Feedback) {
        let inner = &*permit.inner;
        let in_use = inner.in_flight.get();
        let nanos = feedback.elapsed.as_nanos() as f64;
        match feedback.outcome {
            AttemptOutcome::Ok | AttemptOutcome::Permanent | AttemptOutcome::TimedOut
                if nanos > 0.0 =>
            {
                inner.held.record(feedback.elapsed);
                inner.sample(Some(nanos), in_use);
            }
            AttemptOutcome::Throttled => inner.sample(None, in_use),
            _ => {}
        }
        drop(permit);
    }
}

impl fmt::Debug for Gradient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Gradient")
            .field("limit", &inner.limit())
            .field("in_flight", &self.in_flight())
            .field("short_rtt_ns", &load(&inner.short))
            .field("long_rtt_ns", &load(&inner.long))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use super::*;
    use crate::Criticality;
    use crate::clock::Instant;

    const MS: Duration = Duration::from_millis(1);

    fn take(limit: &Gradient) -> Result<GradientPermit, Refusal> {
        let cx = AdmitContext::new("test", Criticality::Critical, Instant::now());
        let mut future = std::pin::pin!(limit.acquire(&cx));
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("a gradient limit never waits"),
        }
    }

    /// `rounds` round trips at full use: every permit is released with `latency` and replaced.
    fn run(limit: &Gradient, rounds: usize, outcome: AttemptOutcome, latency: Duration) {
        let mut held: Vec<_> = (0..limit.limit())
            .map(|_| take(limit).expect("room"))
            .collect();
        for _ in 0..rounds {
            for _ in 0..held.len() {
                let permit = held.remove(0);
                limit.release(permit, Feedback::new(outcome, latency));
                if let Ok(permit) = take(limit) {
                    held.push(permit);
                }
            }
            while let Ok(permit) = take(limit) {
                held.push(permit);
            }
        }
    }

    #[test]
    fn set_bounds_brings_the_limit_into_the_range_and_what_it_learns_stays_there() {
        let limit = Gradient::builder().initial(20).build().expect("valid");
        limit.set_bounds(30, 40).expect("a valid range");
        assert_eq!((limit.bounds(), limit.limit()), ((30, 40), 30));
        // Latency far above the long-term one would shrink it; the new min holds it.
        run(&limit, 5, AttemptOutcome::Ok, MS);
        run(&limit, 50, AttemptOutcome::Ok, 100 * MS);
        assert_eq!(limit.limit(), 30);
        limit.set_bounds(4, 10).expect("a valid range");
        assert_eq!(limit.limit(), 10, "brought down to the new max at once");
        run(&limit, 50, AttemptOutcome::Ok, MS);
        assert!(limit.limit() <= 10, "{}", limit.limit());
    }

    #[test]
    fn set_bounds_refuses_a_range_the_builder_refuses_and_changes_nothing() {
        let limit = Gradient::new();
        let refused = limit.set_bounds(10, 5).expect_err("invalid");
        assert_eq!(
            refused.to_string(),
            "gradient.max must be at least min 10 (was 5)"
        );
        assert_eq!((limit.bounds(), limit.limit()), ((4, 200), 20));
    }

    #[test]
    fn steady_latency_at_full_use_grows_the_limit_by_the_queue_allowance() {
        let limit = Gradient::new();
        run(&limit, 10, AttemptOutcome::Ok, 20 * MS);
        // About queue × smoothing = 0.8 per round trip.
        let grown = limit.inner.limit();
        assert!((26.0..30.0).contains(&grown), "{grown}");
    }

    #[test]
    fn a_rise_in_latency_shrinks_the_limit_by_up_to_half_per_step() {
        let limit = Gradient::builder().initial(100).build().expect("valid");
        run(&limit, 20, AttemptOutcome::Ok, 20 * MS);
        let before = limit.limit();
        run(&limit, 10, AttemptOutcome::Ok, 60 * MS);
        let after = limit.limit();
        // 0.9 × limit + 0.8 per round trip while the gradient is at its floor of 0.5.
        assert!(after < before / 2, "{before} -> {after}");
        assert!(after >= 4);
    }

    #[test]
    fn latency_within_the_tolerance_does_not_shrink_the_limit() {
        let limit = Gradient::new();
        run(&limit, 20, AttemptOutcome::Ok, 20 * MS);
        let before = limit.limit();
        run(&limit, 5, AttemptOutcome::Ok, 28 * MS);
        assert!(limit.limit() >= before, "{before} -> {}", limit.limit());
    }

    #[test]
    fn use_below_half_the_limit_never_moves_it() {
        let limit = Gradient::new();
        for latency in [10, 500, 5, 1_000] {
            for _ in 0..100 {
                let permit = take(&limit).expect("room");
                limit.release(permit, Feedback::new(AttemptOutcome::Ok, latency * MS));
            }
        }
        assert_eq!(limit.inner.limit(), 20.0);
    }

    #[test]
    fn throttling_shrinks_the_limit_and_errors_do_not_count() {
        let limit = Gradient::new();
        run(&limit, 5, AttemptOutcome::Transient, MS);
        run(&limit, 5, AttemptOutcome::Cancelled, MS);
        assert_eq!(limit.inner.limit(), 20.0);
        assert_eq!(limit.inner.samples.load(Relaxed), 0);
        run(&limit, 5, AttemptOutcome::Throttled, MS);
        assert!(limit.limit() < 17, "{}", limit.limit());
    }

    #[test]
    fn the_limit_stays_within_min_and_max() {
        let limit = Gradient::builder()
            .initial(8)
            .min(5)
            .max(10)
            .build()
            .expect("valid");
        run(&limit, 200, AttemptOutcome::Ok, 10 * MS);
        assert_eq!(limit.limit(), 10);
        run(&limit, 200, AttemptOutcome::Throttled, 10 * MS);
        assert_eq!(limit.limit(), 5);
        let refusal = {
            let _held: Vec<_> = (0..5).map(|_| take(&limit).expect("room")).collect();
            take(&limit).expect_err("full")
        };
        assert_eq!(refusal.by, "gradient limit");
        assert_eq!(refusal.retry_after, Some(10 * MS));
    }

    #[test]
    fn zero_and_huge_latencies_neither_panic_nor_poison_the_limit() {
        let limit = Gradient::new();
        run(&limit, 3, AttemptOutcome::Ok, Duration::ZERO);
        run(&limit, 3, AttemptOutcome::Ok, Duration::MAX);
        run(&limit, 3, AttemptOutcome::Ok, MS);
        let now = limit.inner.limit();
        assert!(now.is_finite() && (4.0..=200.0).contains(&now), "{now}");
    }

    #[test]
    fn invalid_settings_are_all_reported_with_their_values() {
        let err = Gradient::builder()
            .initial(300)
            .smoothing(0.0)
            .tolerance(f64::INFINITY)
            .queue(5_000)
            .build()
            .expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "gradient.initial must be between min 4 and max 200 (was 300); gradient.smoothing must be above 0 and at most 1 (was 0); gradient.tolerance must be finite and at least 1 (was inf); gradient.queue must be at most 1000 (was 5000)"
        );
    }
}
