//! Client-side adaptive throttling: stop sending what the dependency would reject anyway.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::TimeBase;
use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::clock::Instant;
use crate::criticality::Criticality;
use crate::error::{ConfigError, ConfigProblem};
use crate::outcome::AttemptOutcome;

/// Buckets in the window.
const BUCKETS: usize = 12;

/// Client-side adaptive throttling: stop sending what the dependency would reject anyway.
///
/// When a dependency is overloaded it rejects requests, but a rejection still costs it work
/// (reading the request, deciding, answering), and a client that keeps sending at full rate
/// keeps it overloaded on rejections alone. [`Throttle`] is the remedy from Google's SRE book
/// ("Handling Overload", client-side throttling): each client remembers, over the last two
/// minutes, how many requests it sent and how many the dependency accepted, and refuses new
/// requests locally, before they leave, with probability
///
/// ```text
/// max(0, (requests − K × accepts) / (requests + 1))
/// ```
///
/// While the dependency accepts everything this is zero. When it starts rejecting, the client
/// sheds just enough that what it still sends is about `K` times what gets accepted: `K = 2`
/// lets through twice what the dependency can take (it still sees some excess, so it can tell
/// when it has room again); a lower `K` is more aggressive. Counts are kept per criticality
/// level, so a dependency rejecting `Sheddable` traffic does not throttle `Critical` traffic.
///
/// ```
/// use std::time::Duration;
/// use rampart::{Criticality, Instant};
/// use rampart::limit::Throttle;
///
/// let throttle = Throttle::builder().k(2.0).seed(7).build()?;
/// let now = Instant::now();
/// // Nothing seen yet: nothing refused.
/// assert_eq!(throttle.probability(Criticality::Critical, now), 0.0);
/// # Ok::<(), rampart::ConfigError>(())
/// ```
///
/// | knob | default | meaning |
/// |---|---|---|
/// | `k` | 2.0 | accepted requests are multiplied by this; finite, at least 1 |
/// | `window` | 120 s | how far back requests and accepts count, in 12 buckets |
/// | `seed` | random | the seed of the refusal draws, for reproducible tests |
///
/// # What counts
///
/// Every attempt asked about is a *request*, including those refused here (as in the SRE
/// book: the client's own refusals keep the ratio honest). An *accept* is an attempt the
/// dependency did not reject, judged by the [`Feedback`] outcome its permit comes back with:
///
/// | outcome | counts as |
/// |---|---|
/// | `Ok`, `Permanent` | accept: the dependency processed it (an application error is still an answer) |
/// | `Throttled`, `Transient`, `TimedOut` | rejection: "slow down", a failure, or no answer in time: the signs of overload |
/// | `Refused`, `Cancelled`, a permit dropped without feedback | accept: it says nothing against the dependency, and must not push the probability up |
///
/// A refusal's retry-after is one bucket (`window / 12`, 10 s by default): the soonest the
/// oldest counts begin to leave the window. Inside a policy that usually ends the call: the
/// point of throttling is to fail locally instead of sending.
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one set of counts. Counts are atomic counters
/// in 12 buckets per level, rotated without a lock: the first request of a new bucket claims
/// it with a compare-and-swap and zeroes it. A request that races that rotation may be lost
/// or counted in the new bucket (one request, harmless). Deciding reads the level's 12 buckets
/// and adds one to the current one; the random draw (a lock-free counter) is taken only when
/// the probability is above zero. No lock, no allocation.
///
/// # Events
///
/// A refusal is reported by the executor as `Event::AttemptRefused { by: "adaptive throttle",
/// .. }`. [`Throttle::probability`] reads the current refusal probability of a level, for a
/// gauge.
#[derive(Clone)]
pub struct Throttle {
    inner: Arc<Inner>,
}

struct Inner {
    levels: [[Bucket; BUCKETS]; 4],
    time: TimeBase,
    bucket: Duration,
    bucket_nanos: u64,
    window: Duration,
    /// `k`, as `f64` bits: changed live by [`Throttle::set_k`].
    k: AtomicU64,
    /// The state of the refusal draws (wyrand).
    rng: AtomicU64,
}

#[derive(Default)]
struct Bucket {
    /// The bucket's number, counted from the time base, plus one; 0 while never used.
    epoch: AtomicU64,
    requests: AtomicU64,
    accepts: AtomicU64,
}

/// Held while an attempt admitted by a [`Throttle`] runs. Dropping it counts an accept,
/// unless it was given back with an outcome that counts as a rejection.
#[must_use = "dropping the permit counts the attempt as accepted"]
pub struct ThrottlePermit {
    inner: Arc<Inner>,
    level: Criticality,
    epoch: u64,
    accepted: bool,
}

/// Builds a [`Throttle`]; see [`Throttle`] for the defaults.
#[must_use]
#[derive(Debug, Clone)]
pub struct ThrottleBuilder {
    k: f64,
    window: Duration,
    seed: Option<u64>,
}

impl Throttle {
    /// The defaults: `k` 2, a 120 s window, random draws.
    pub fn new() -> Throttle {
        Throttle::from_valid(&Throttle::builder())
    }

    /// A builder with the defaults.
    pub fn builder() -> ThrottleBuilder {
        ThrottleBuilder {
            k: 2.0,
            window: Duration::from_secs(120),
            seed: None,
        }
    }

    fn from_valid(b: &ThrottleBuilder) -> Throttle {
        let bucket = b.window / BUCKETS as u32;
        Throttle {
            inner: Arc::new(Inner {
                levels: Default::default(),
                time: TimeBase::default(),
                bucket,
                bucket_nanos: u64::try_from(bucket.as_nanos()).unwrap_or(u64::MAX),
                window: b.window,
                k: AtomicU64::new(b.k.to_bits()),
                rng: AtomicU64::new(b.seed.unwrap_or_else(|| fastrand::u64(..))),
            }),
        }
    }

    /// The probability that an attempt at `level` is refused at `now`:
    /// `max(0, (requests − k × accepts) / (requests + 1))` over the window.
    pub fn probability(&self, level: Criticality, now: Instant) -> f64 {
        let inner = &*self.inner;
        let epoch = inner.epoch(inner.time.nanos(now));
        inner.probability(level, epoch)
    }

    /// Requests and accepts of `level` in the window at `now`.
    pub fn counts(&self, level: Criticality, now: Instant) -> (u64, u64) {
        let inner = &*self.inner;
        inner.counts(level, inner.epoch(inner.time.nanos(now)))
    }

    /// The multiplier of accepts.
    pub fn k(&self) -> f64 {
        f64::from_bits(self.inner.k.load(Relaxed))
    }

    /// Changes `k` while the throttle serves, for every clone: the next refusal probability is
    /// computed with it, over the counts already in the window (a lower `k` sheds more at
    /// once). A `k` the builder would refuse (below 1, or not finite) is refused with a
    /// [`ConfigError`] naming `throttle.k` and the value, and changes nothing. The window is
    /// fixed when the throttle is built.
    ///
    /// ```
    /// use rampart::limit::Throttle;
    ///
    /// let throttle = Throttle::new();
    /// throttle.set_k(1.5)?;
    /// assert_eq!(throttle.k(), 1.5);
    /// let refused = throttle.set_k(0.5).unwrap_err();
    /// assert_eq!(refused.to_string(), "throttle.k must be finite and at least 1 (was 0.5)");
    /// assert_eq!(throttle.k(), 1.5);
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `k` is not finite or below 1; the throttle keeps its multiplier.
    pub fn set_k(&self, k: f64) -> Result<(), ConfigError> {
        if let Some(problem) = k_problem(k) {
            return Err(ConfigError::new(vec![problem]));
        }
        self.inner.k.store(k.to_bits(), Relaxed);
        Ok(())
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new()
    }
}

impl Inner {
    /// The bucket number of `nanos`, plus one.
    fn epoch(&self, nanos: u64) -> u64 {
        nanos / self.bucket_nanos + 1
    }

    fn bucket(&self, level: Criticality, epoch: u64) -> &Bucket {
        &self.levels[level as usize][(epoch % BUCKETS as u64) as usize]
    }

    fn counts(&self, level: Criticality, epoch: u64) -> (u64, u64) {
        let oldest = epoch.saturating_sub(BUCKETS as u64 - 1);
        self.levels[level as usize]
            .iter()
            .filter(|b| (oldest..=epoch).contains(&b.epoch.load(Relaxed)))
            .fold((0, 0), |(requests, accepts), b| {
                (
                    requests + b.requests.load(Relaxed),
                    accepts + b.accepts.load(Relaxed),
                )
            })
    }

    fn probability(&self, level: Criticality, epoch: u64) -> f64 {
        let (requests, accepts) = self.counts(level, epoch);
        let requests = requests as f64;
        let k = f64::from_bits(self.k.load(Relaxed));
        ((requests - k * accepts as f64) / (requests + 1.0)).max(0.0)
    }

    /// Counts one request at `level` in bucket `epoch`, claiming the bucket if it is stale.
    fn request(&self, level: Criticality, epoch: u64) {
        let bucket = self.bucket(level, epoch);
        let seen = bucket.epoch.load(Relaxed);
        if seen != epoch {
            if seen > epoch {
                return; // an instant a whole window older than the bucket's requests
            }
            if bucket
                .epoch
                .compare_exchange(seen, epoch, Relaxed, Relaxed)
                .is_ok()
            {
                bucket.requests.store(0, Relaxed);
                bucket.accepts.store(0, Relaxed);
            }
        }
        bucket.requests.fetch_add(1, Relaxed);
    }

    /// Counts one accept for a request made in bucket `epoch`, if it is still in the window.
    fn accept(&self, level: Criticality, epoch: u64) {
        let bucket = self.bucket(level, epoch);
        if bucket.epoch.load(Relaxed) == epoch {
            bucket.accepts.fetch_add(1, Relaxed);
        }
    }

    /// A uniform draw in `[0, 1)`: wyrand on an atomic counter.
    fn draw(&self) -> f64 {
        const GAMMA: u64 = 0xa076_1d64_78bd_642f;
        let s = self.rng.fetch_add(GAMMA, Relaxed).wrapping_add(GAMMA);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        let x = (t >> 64) as u64 ^ t as u64;
        (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

impl ThrottleBuilder {
    /// Accepts are multiplied by `k`: finite, at least 1. Default 2.
    pub fn k(self, k: f64) -> Self {
        ThrottleBuilder { k, ..self }
    }

    /// How far back requests and accepts count, in 12 buckets: at least 12 ns, at most one
    /// day. Default 120 s.
    pub fn window(self, window: Duration) -> Self {
        ThrottleBuilder { window, ..self }
    }

    /// Seeds the refusal draws, for reproducible tests. Default: a random seed.
    pub fn seed(self, seed: u64) -> Self {
        ThrottleBuilder {
            seed: Some(seed),
            ..self
        }
    }

    /// The throttle; or every invalid setting at once.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once, each naming its field and value.
    pub fn build(self) -> Result<Throttle, ConfigError> {
        let mut problems: Vec<_> = k_problem(self.k).into_iter().collect();
        if self.window < Duration::from_nanos(BUCKETS as u64)
            || self.window > Duration::from_secs(24 * 3600)
        {
            let message = format!("must be between 12ns and 1 day (was {:?})", self.window);
            problems.push(ConfigProblem::new("throttle.window", message));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        Ok(Throttle::from_valid(&self))
    }
}

/// What [`ThrottleBuilder::build`] and [`Throttle::set_k`] say of a `k` below 1 or not finite.
fn k_problem(k: f64) -> Option<ConfigProblem> {
    let valid = k >= 1.0 && k.is_finite();
    (!valid).then(|| {
        ConfigProblem::new(
            "throttle.k",
            format!("must be finite and at least 1 (was {k})"),
        )
    })
}

impl Admit for Throttle {
    type Permit = ThrottlePermit;

    #[inline]
    fn acquire(
        &self,
        cx: &AdmitContext<'_>,
    ) -> impl std::future::Future<Output = Result<ThrottlePermit, Refusal>> + Send {
        let inner = &self.inner;
        let epoch = inner.epoch(inner.time.nanos(cx.now));
        let p = inner.probability(cx.level, epoch);
        inner.request(cx.level, epoch);
        std::future::ready(if p > 0.0 && inner.draw() < p {
            Err(Refusal {
                retry_after: Some(inner.bucket),
                by: "adaptive throttle",
            })
        } else {
            Ok(ThrottlePermit {
                inner: Arc::clone(inner),
                level: cx.level,
                epoch,
                accepted: true,
            })
        })
    }

    fn release(&self, mut permit: ThrottlePermit, feedback: Feedback) {
        permit.accepted = !matches!(
            feedback.outcome,
            AttemptOutcome::Throttled | AttemptOutcome::Transient | AttemptOutcome::TimedOut
        );
        drop(permit);
    }
}

impl Drop for ThrottlePermit {
    fn drop(&mut self) {
        if self.accepted {
            self.inner.accept(self.level, self.epoch);
        }
    }
}

impl fmt::Debug for ThrottlePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottlePermit")
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("k", &self.k())
            .field("window", &self.inner.window)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn ask(
        throttle: &Throttle,
        level: Criticality,
        now: Instant,
    ) -> Result<ThrottlePermit, Refusal> {
        let cx = AdmitContext::new("test", level, now);
        let mut future = std::pin::pin!(throttle.acquire(&cx));
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("a throttle never waits"),
        }
    }

    fn answer(throttle: &Throttle, permit: ThrottlePermit, outcome: AttemptOutcome) {
        throttle.release(permit, Feedback::new(outcome, Duration::from_millis(3)));
    }

    #[test]
    fn a_healthy_dependency_is_never_throttled() {
        let throttle = Throttle::builder().seed(1).build().expect("valid");
        let t0 = Instant::now();
        for i in 0..10_000u32 {
            let permit = ask(
                &throttle,
                Criticality::Critical,
                t0 + i * Duration::from_millis(20),
            )
            .expect("admitted");
            answer(&throttle, permit, AttemptOutcome::Ok);
        }
        let end = t0 + 200 * SEC;
        assert_eq!(throttle.probability(Criticality::Critical, end), 0.0);
        // The last 120 s hold 12 buckets of 500 requests, all accepted.
        assert_eq!(throttle.counts(Criticality::Critical, end), (5_500, 5_500));
    }

    #[test]
    fn the_mapping_of_outcomes_to_accepts() {
        let throttle = Throttle::builder().seed(2).build().expect("valid");
        let now = Instant::now();
        for outcome in [
            AttemptOutcome::Ok,
            AttemptOutcome::Permanent,
            AttemptOutcome::Refused,
            AttemptOutcome::Cancelled,
            AttemptOutcome::Throttled,
            AttemptOutcome::Transient,
            AttemptOutcome::TimedOut,
        ] {
            let permit = ask(&throttle, Criticality::Sheddable, now).expect("nothing rejected yet");
            answer(&throttle, permit, outcome);
        }
        let dropped = ask(&throttle, Criticality::Sheddable, now).expect("admitted");
        drop(dropped);
        assert_eq!(throttle.counts(Criticality::Sheddable, now), (8, 5));
        assert_eq!(throttle.counts(Criticality::Critical, now), (0, 0));
    }

    #[test]
    fn rejections_age_out_of_the_window() {
        let throttle = Throttle::builder().seed(3).build().expect("valid");
        let t0 = Instant::now();
        for _ in 0..100 {
            if let Ok(permit) = ask(&throttle, Criticality::Critical, t0) {
                answer(&throttle, permit, AttemptOutcome::Throttled);
            }
        }
        assert!(throttle.probability(Criticality::Critical, t0) > 0.9);
        assert_eq!(throttle.probability(Criticality::Sheddable, t0), 0.0);
        let later = t0 + 120 * SEC;
        assert_eq!(throttle.counts(Criticality::Critical, later), (0, 0));
        assert_eq!(throttle.probability(Criticality::Critical, later), 0.0);
        assert!(ask(&throttle, Criticality::Critical, later).is_ok());
    }

    #[test]
    fn a_refusal_names_the_throttle_and_waits_one_bucket() {
        let throttle = Throttle::builder().seed(4).build().expect("valid");
        let now = Instant::now();
        let refusal = loop {
            match ask(&throttle, Criticality::Critical, now) {
                Ok(permit) => answer(&throttle, permit, AttemptOutcome::Transient),
                Err(refusal) => break refusal,
            }
        };
        assert_eq!(refusal.by, "adaptive throttle");
        assert_eq!(refusal.retry_after, Some(10 * SEC));
    }

    #[test]
    fn an_accept_for_a_request_older_than_the_window_is_dropped() {
        let throttle = Throttle::builder().seed(5).build().expect("valid");
        let t0 = Instant::now();
        let old = ask(&throttle, Criticality::Critical, t0).expect("admitted");
        let later = t0 + 125 * SEC; // the same bucket slot, reused
        let new = ask(&throttle, Criticality::Critical, later).expect("admitted");
        drop(old);
        assert_eq!(throttle.counts(Criticality::Critical, later), (1, 0));
        drop(new);
        assert_eq!(throttle.counts(Criticality::Critical, later), (1, 1));
        // A request stamped with an instant a window older than its bucket is not counted.
        drop(ask(&throttle, Criticality::Critical, t0 + 5 * SEC));
        assert_eq!(throttle.counts(Criticality::Critical, later), (1, 1));
    }

    #[test]
    fn the_draws_are_uniform_and_reproducible() {
        let a = Throttle::builder().seed(9).build().expect("valid");
        let b = Throttle::builder().seed(9).build().expect("valid");
        let draws: Vec<f64> = (0..10_000).map(|_| a.inner.draw()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(
            draws
                .iter()
                .zip((0..).map(|_| b.inner.draw()))
                .all(|(x, y)| *x == y)
        );
        let below_a_fifth = draws.iter().filter(|d| **d < 0.2).count();
        assert!((1_850..2_150).contains(&below_a_fifth), "{below_a_fifth}");
    }

    #[test]
    fn invalid_settings_are_all_reported_with_their_values() {
        let err = Throttle::builder()
            .k(0.5)
            .window(Duration::ZERO)
            .build()
            .expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "throttle.k must be finite and at least 1 (was 0.5); throttle.window must be between 12ns and 1 day (was 0ns)"
        );
        assert!(Throttle::builder().k(f64::NAN).build().is_err());
    }
}
