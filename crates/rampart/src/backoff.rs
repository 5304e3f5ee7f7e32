//! Backoff: how long to wait before the next attempt.
//!
//! Retrying at once turns one dependency's bad second into a synchronized stampede. A backoff
//! spreads retries out in time: the delay grows with each retry and, with jitter, callers that
//! failed together do not come back together.
//!
//! ```
//! use std::time::Duration;
//! use rampart::backoff::{Backoff, Jitter};
//!
//! let backoff = Backoff::exponential(Duration::from_millis(50))
//!     .factor(3.0)
//!     .max(Duration::from_secs(5))
//!     .jitter(Jitter::Full);
//! assert_eq!(backoff.to_string(), "exponential 50ms x3 max 5s full jitter");
//! ```
//!
//! | curve | delay before retry `n` (1-based) |
//! |---|---|
//! | [`exponential`](Backoff::exponential) (default, base 100 ms) | `base × factorⁿ⁻¹`, capped |
//! | [`constant`](Backoff::constant) | `delay` |
//! | [`linear`](Backoff::linear) | `step × n`, capped |
//! | [`decorrelated`](Backoff::decorrelated) | random in `[base, 3 × previous]` (previous = `base` before the first retry), capped |
//! | [`none`](Backoff::none) | zero |
//! | [`custom`](Backoff::custom) | your function of [`BackoffInput`] |
//!
//! | knob | default |
//! |---|---|
//! | base (transient) | 100 ms |
//! | base (throttled, the long curve) | 1 s |
//! | factor | 2 |
//! | max | 30 s |
//! | jitter | full (uniform in `[0, delay]`) |
//!
//! A server's retry-after (from a [`Verdict::Throttled`](crate::Verdict::Throttled) or
//! [`Verdict::Refused`](crate::Verdict::Refused)) wins over the curve: it is used as is, capped by
//! the maximum, without jitter. Randomness is seedable ([`Backoff::seed`]) so tests are exact.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigProblem;

/// Which curve a retry follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Curve {
    /// After a transient failure: the short curve.
    Transient,
    /// After the dependency said "slow down" without saying for how long: the long curve.
    Throttled,
}

/// What a [custom](Backoff::custom) backoff is given.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct BackoffInput {
    /// The retry about to happen: 1 before the second attempt.
    pub retry: u32,
    /// The curve the failure asks for.
    pub curve: Curve,
    /// The delay slept before the previous retry (zero before the first).
    pub previous: Duration,
}

/// How a computed delay is randomized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Jitter {
    /// No randomness: the curve as computed.
    None,
    /// Uniform in `[0, delay]` (the AWS "full jitter"); the default.
    Full,
    /// Uniform in `[delay / 2, delay]`.
    Equal,
}

type CustomFn = Arc<dyn Fn(&BackoffInput) -> Duration + Send + Sync>;

#[derive(Clone)]
enum Kind {
    Exponential { base: Duration, factor: f64 },
    Constant(Duration),
    Linear(Duration),
    Decorrelated(Duration),
    None,
    Custom(CustomFn),
}

/// A backoff curve with its cap, its jitter and its randomness.
#[derive(Clone)]
pub struct Backoff {
    kind: Kind,
    throttled_base: Duration,
    max: Duration,
    jitter: Jitter,
    seed: Option<u64>,
}

const DEFAULT_MAX: Duration = Duration::from_secs(30);
/// The longest delay a backoff may be configured to sleep.
const MAX_DELAY: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_THROTTLED_BASE: Duration = Duration::from_secs(1);

impl Backoff {
    fn with(kind: Kind, jitter: Jitter) -> Self {
        Backoff {
            kind,
            throttled_base: DEFAULT_THROTTLED_BASE,
            max: DEFAULT_MAX,
            jitter,
            seed: None,
        }
    }

    /// `base × 2ⁿ⁻¹`, max 30 s, full jitter; change with [`factor`](Self::factor),
    /// [`max`](Self::max), [`jitter`](Self::jitter).
    pub fn exponential(base: Duration) -> Self {
        Self::with(Kind::Exponential { base, factor: 2.0 }, Jitter::Full)
    }

    /// The same delay before every retry, no jitter.
    pub fn constant(delay: Duration) -> Self {
        Self::with(Kind::Constant(delay), Jitter::None)
    }

    /// `step × n` before retry `n`, max 30 s, no jitter.
    pub fn linear(step: Duration) -> Self {
        Self::with(Kind::Linear(step), Jitter::None)
    }

    /// "Decorrelated jitter": random in `[base, 3 × previous delay]`, max 30 s; before the
    /// first retry the previous delay counts as `base`, so the first delay is random in
    /// `[base, 3 × base]`. Its randomness is the curve itself, so [`jitter`](Self::jitter) does
    /// not apply.
    pub fn decorrelated(base: Duration) -> Self {
        Self::with(Kind::Decorrelated(base), Jitter::None)
    }

    /// Retry at once.
    pub fn none() -> Self {
        Self::with(Kind::None, Jitter::None)
    }

    /// Your own curve. The result is capped by [`max`](Self::max) and then jittered (no jitter
    /// unless you set one).
    pub fn custom(curve: impl Fn(&BackoffInput) -> Duration + Send + Sync + 'static) -> Self {
        Self::with(Kind::Custom(Arc::new(curve)), Jitter::None)
    }

    /// Growth per retry of the exponential curve (default 2; must be finite and at least 1).
    pub fn factor(mut self, factor: f64) -> Self {
        if let Kind::Exponential { factor: f, .. } = &mut self.kind {
            *f = factor;
        }
        self
    }

    /// The longest delay ever slept, retry-after included (default 30 s).
    pub fn max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// How the delay is randomized.
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The base of the long curve used after a throttled outcome without a retry-after
    /// (default 1 s). Applies to the exponential and linear curves.
    pub fn throttled_base(mut self, base: Duration) -> Self {
        self.throttled_base = base;
        self
    }

    /// Makes the randomness repeatable: the same seed gives the same delays.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The longest delay this backoff sleeps.
    pub fn max_delay(&self) -> Duration {
        self.max
    }

    pub(crate) fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if self.max > MAX_DELAY {
            problems.push(ConfigProblem::new(
                "backoff.max",
                format!("must be at most 24h (was {:?})", self.max),
            ));
        }
        if let Kind::Exponential { factor, .. } = self.kind
            && !(factor.is_finite() && factor >= 1.0)
        {
            problems.push(ConfigProblem::new(
                "backoff.factor",
                format!("must be finite and at least 1 (was {factor})"),
            ));
        }
    }

    /// A random source for one call: seeded from the policy's seed and the call's sequence
    /// number, or from the thread's generator.
    pub(crate) fn rng(&self, call: u64) -> fastrand::Rng {
        match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed.wrapping_add(call)),
            None => fastrand::Rng::new(),
        }
    }

    /// Whether a delay draws random numbers (jitter or the decorrelated curve).
    pub(crate) fn is_random(&self) -> bool {
        matches!(self.kind, Kind::Decorrelated(_)) || self.jitter != Jitter::None
    }

    pub(crate) fn is_seeded(&self) -> bool {
        self.seed.is_some()
    }

    /// The delay before retry `input.retry`, or the server's `retry_after` capped by the max.
    pub(crate) fn delay(
        &self,
        input: BackoffInput,
        retry_after: Option<Duration>,
        rng: &mut fastrand::Rng,
    ) -> Duration {
        if let Some(after) = retry_after {
            return after.min(self.max);
        }
        let n = input.retry.max(1);
        let base = |transient: Duration| match input.curve {
            Curve::Transient => transient,
            Curve::Throttled => self.throttled_base,
        };
        let curve = match &self.kind {
            Kind::None => Duration::ZERO,
            Kind::Constant(delay) => *delay,
            Kind::Linear(step) => base(*step).saturating_mul(n),
            Kind::Exponential { base: b, factor } => exponential(base(*b), *factor, n, self.max),
            Kind::Decorrelated(b) => {
                // Before the first retry there is no previous delay: the curve starts from
                // `base`, so the first delay is already random in `[base, 3 × base]` and
                // clients that failed together do not retry in lockstep.
                let low = base(*b).min(self.max);
                let high = input
                    .previous
                    .max(low)
                    .saturating_mul(3)
                    .clamp(low, self.max);
                return uniform(rng, low, high);
            }
            Kind::Custom(curve) => curve(&input),
        };
        let capped = curve.min(self.max);
        match self.jitter {
            Jitter::None => capped,
            Jitter::Full => uniform(rng, Duration::ZERO, capped),
            Jitter::Equal => uniform(rng, capped / 2, capped),
        }
    }
}

/// `base × factorⁿ⁻¹`, at most `max`. A zero base is zero whatever the factor (the float product
/// would be `0 × ∞ = NaN` once the power overflows), and a product too large for a `Duration`
/// (an infinite power included) is `max`: no NaN reaches the conversion.
fn exponential(base: Duration, factor: f64, n: u32, max: Duration) -> Duration {
    if base.is_zero() {
        return Duration::ZERO;
    }
    let growth = factor.powi(n.saturating_sub(1).min(1_023) as i32);
    let secs = base.as_secs_f64() * growth;
    if secs.is_nan() {
        // Only an unvalidated factor (NaN) gets here; `validate` refuses it at `build()`.
        return max;
    }
    Duration::try_from_secs_f64(secs).map_or(max, |d| d.min(max))
}

fn uniform(rng: &mut fastrand::Rng, low: Duration, high: Duration) -> Duration {
    let (low, high) = (low.as_nanos() as u64, high.as_nanos() as u64);
    if high <= low {
        return Duration::from_nanos(low);
    }
    Duration::from_nanos(rng.u64(low..=high))
}

impl Default for Backoff {
    /// Exponential from 100 ms, factor 2, max 30 s, full jitter.
    fn default() -> Self {
        Backoff::exponential(Duration::from_millis(100))
    }
}

impl fmt::Display for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::None => return f.write_str("no backoff"),
            Kind::Exponential { base, factor } => {
                write!(f, "exponential {base:?} x{factor} max {:?}", self.max)?
            }
            Kind::Constant(delay) => write!(f, "constant {delay:?}")?,
            Kind::Linear(step) => write!(f, "linear {step:?} max {:?}", self.max)?,
            Kind::Decorrelated(base) => {
                return write!(f, "decorrelated jitter {base:?} max {:?}", self.max);
            }
            Kind::Custom(_) => write!(f, "custom max {:?}", self.max)?,
        }
        match self.jitter {
            Jitter::None => Ok(()),
            Jitter::Full => f.write_str(" full jitter"),
            Jitter::Equal => f.write_str(" equal jitter"),
        }
    }
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Backoff({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(retry: u32, curve: Curve, previous: Duration) -> BackoffInput {
        BackoffInput {
            retry,
            curve,
            previous,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exponential_without_jitter_doubles_from_base_and_stops_at_max() {
        let b = Backoff::exponential(ms(100))
            .jitter(Jitter::None)
            .max(ms(500));
        let mut rng = fastrand::Rng::with_seed(1);
        let delays: Vec<_> = (1..=5)
            .map(|n| b.delay(input(n, Curve::Transient, ms(0)), None, &mut rng))
            .collect();
        assert_eq!(delays, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
    }

    #[test]
    fn throttled_curve_starts_at_one_second() {
        let b = Backoff::default().jitter(Jitter::None);
        let mut rng = fastrand::Rng::with_seed(1);
        let d = b.delay(input(2, Curve::Throttled, ms(0)), None, &mut rng);
        assert_eq!(d, Duration::from_secs(2));
    }

    #[test]
    fn full_jitter_stays_within_zero_and_the_curve() {
        let b = Backoff::exponential(ms(100));
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 1..=20 {
            let d = b.delay(input(n, Curve::Transient, ms(0)), None, &mut rng);
            let curve = ms(100).saturating_mul(1 << (n - 1).min(20)).min(b.max);
            assert!(d <= curve, "retry {n}: {d:?} above {curve:?}");
        }
    }

    #[test]
    fn retry_after_wins_over_the_curve_capped_by_max_without_jitter() {
        let b = Backoff::default().max(Duration::from_secs(10));
        let mut rng = fastrand::Rng::with_seed(3);
        let i = input(1, Curve::Transient, ms(0));
        assert_eq!(b.delay(i, Some(ms(1_500)), &mut rng), ms(1_500));
        assert_eq!(
            b.delay(i, Some(Duration::from_secs(60)), &mut rng),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let b = Backoff::default().seed(42);
        let run = || {
            let mut rng = b.rng(5);
            (1..6)
                .map(|n| b.delay(input(n, Curve::Transient, ms(0)), None, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn decorrelated_stays_between_base_and_three_times_previous() {
        let b = Backoff::decorrelated(ms(10));
        let mut rng = fastrand::Rng::with_seed(9);
        let mut previous = Duration::ZERO;
        for n in 1..50 {
            let d = b.delay(input(n, Curve::Transient, previous), None, &mut rng);
            let high = (previous.max(ms(10)) * 3).min(b.max);
            assert!(
                d >= ms(10) && d <= high,
                "retry {n}: {d:?} outside [10ms, {high:?}]"
            );
            previous = d;
        }
    }

    #[test]
    fn decorrelated_first_delays_are_spread_over_base_to_three_times_base() {
        let b = Backoff::decorrelated(ms(100));
        let first: std::collections::BTreeSet<Duration> = (0..200)
            .map(|seed| {
                let mut rng = fastrand::Rng::with_seed(seed);
                b.delay(input(1, Curve::Transient, Duration::ZERO), None, &mut rng)
            })
            .collect();
        assert!(
            first.iter().all(|d| (ms(100)..=ms(300)).contains(d)),
            "{first:?}"
        );
        // Clients that failed together must not all come back after exactly `base`.
        assert!(
            first.len() > 150,
            "only {} distinct first delays",
            first.len()
        );
        assert!(
            first.iter().any(|d| *d > ms(200)),
            "never in the upper half"
        );
    }

    #[test]
    fn a_zero_base_gives_zero_delays_whatever_the_factor() {
        let mut rng = fastrand::Rng::with_seed(1);
        for factor in [1.0, 2.0, 1e300, f64::MAX] {
            let b = Backoff::exponential(Duration::ZERO)
                .factor(factor)
                .jitter(Jitter::None);
            for n in [1, 2, 3, 10, 1_000, u32::MAX] {
                for curve in [Curve::Transient, Curve::Throttled] {
                    let b = b.clone().throttled_base(Duration::ZERO);
                    let d = b.delay(input(n, curve, ms(0)), None, &mut rng);
                    assert_eq!(d, Duration::ZERO, "factor {factor}, retry {n}");
                }
            }
        }
        let linear = Backoff::linear(Duration::ZERO).throttled_base(Duration::ZERO);
        let decorrelated = Backoff::decorrelated(Duration::ZERO);
        for n in [1, 7, u32::MAX] {
            let i = input(n, Curve::Transient, ms(0));
            assert_eq!(linear.delay(i, None, &mut rng), Duration::ZERO);
            assert_eq!(decorrelated.delay(i, None, &mut rng), Duration::ZERO);
        }
    }

    #[test]
    fn a_growth_that_overflows_to_infinity_is_the_maximum() {
        let b = Backoff::exponential(ms(1))
            .factor(1e300)
            .jitter(Jitter::None)
            .max(ms(700));
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            b.delay(input(1, Curve::Transient, ms(0)), None, &mut rng),
            ms(1)
        );
        for n in [2, 3, 1_000] {
            let d = b.delay(input(n, Curve::Transient, ms(0)), None, &mut rng);
            assert_eq!(d, ms(700), "retry {n}");
        }
    }

    #[test]
    fn huge_exponents_saturate_at_max_instead_of_panicking() {
        let b = Backoff::exponential(Duration::from_secs(1))
            .factor(10.0)
            .jitter(Jitter::None);
        let mut rng = fastrand::Rng::with_seed(1);
        let d = b.delay(input(u32::MAX, Curve::Transient, ms(0)), None, &mut rng);
        assert_eq!(d, DEFAULT_MAX);
    }

    #[test]
    fn factor_below_one_is_a_config_problem() {
        let mut problems = Vec::new();
        Backoff::default().factor(0.5).validate(&mut problems);
        assert_eq!(
            problems[0].to_string(),
            "backoff.factor must be finite and at least 1 (was 0.5)"
        );
    }

    #[test]
    fn linear_and_constant_and_custom_follow_their_formula() {
        let mut rng = fastrand::Rng::with_seed(1);
        let i = input(3, Curve::Transient, ms(7));
        assert_eq!(Backoff::linear(ms(10)).delay(i, None, &mut rng), ms(30));
        assert_eq!(Backoff::constant(ms(10)).delay(i, None, &mut rng), ms(10));
        assert_eq!(Backoff::none().delay(i, None, &mut rng), ms(0));
        let custom = Backoff::custom(|i| i.previous * i.retry);
        assert_eq!(custom.delay(i, None, &mut rng), ms(21));
    }
}
