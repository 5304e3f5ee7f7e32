//! Retry budget: a token bucket, shared by every call to one dependency, that funds retries.
//!
//! A fixed "retry up to 3 times" multiplies load exactly when a dependency can least take it:
//! when it fails, every caller sends 3x (and each layer of a deep stack multiplies again), a
//! retry storm. A budget instead caps retries to a fraction of the traffic: each success
//! deposits `fraction` of a token, each retry spends one, and a small per-second floor keeps
//! retries possible at low traffic. A failing dependency then sees at most about
//! `1 + fraction` (1.2x by default) of its normal load instead of 3x per layer.
//!
//! Deposits come from *successes*, not requests (as in the SRE book's per-client budget, and
//! unlike tower's `TpsBudget`, which deposits per request): under heavy partial failure a
//! budget funds fewer retries than a per-request one, trading some availability at, say, 50%
//! errors for a hard cap on the load a struggling dependency sees. The simulator's
//! `retry-storm` scenario shows both sides of that trade.
//!
//! The default `fraction` is 0.2, as in Finagle and Linkerd (the SRE book uses 0.1). The
//! simulator's `defaults` scenario (a chain of 2 to 4 services, the leaf failing at 0–100 %,
//! seeds 1–5) chose it: with the down-only default [breaker](crate::breaker), it is the
//! smallest fraction tried that answers at least as many roots as tower's `TpsBudget` at 10 %
//! at every error rate and depth, on every seed, while a leaf failing 100 % still sees at most
//! 1.1 requests per root; 0.1 fell short by 0.3 to 3.4 points on three seeds of five. It gets
//! there partly by spending more retries than tower's budget at 10 %: against tower's budget at
//! the same 20 % (`budgeted 20%`), rampart answers 4.8 to 10.5 points fewer roots at its worst
//! point on each seed (depth 4, 50 % leaf errors) and 1.9 to 4.0 more at its best: a loss
//! at the same numbers, printed in the report. Part of what it keeps is how a call the
//! budget ended reads upstream: rampart-http answers it as its last failure (502 or 504, no
//! `Retry-After`), so the caller may retry at once under its own budget; answered as a refusal
//! with a `Retry-After` of at least 1 s, as in rampart 0.1, a caller whose propagated deadline
//! is shorter could not wait, and rampart answered 10 to 13 points fewer roots than tower's
//! budget at 10 % (the scenario's "refusal as 503" rows).
//!
//! ```
//! use std::time::Duration;
//! use rampart::budget::RetryBudget;
//! use rampart::clock::Instant;
//!
//! let budget = RetryBudget::builder().fraction(0.1).min_per_sec(2.0).build()?;
//! assert_eq!(budget.capacity(), 20.0); // starts full
//! let now = Instant::now();
//! for _ in 0..20 {
//!     assert!(budget.try_spend(now, 0.0).is_ok());
//! }
//! // Empty: the floor refills 2 tokens a second, so the next token comes in 500 ms.
//! assert_eq!(budget.try_spend(now, 0.0), Err(Some(Duration::from_millis(500))));
//! budget.deposit(now); // a success adds 0.1 token
//! assert!((budget.balance(now) - 0.1).abs() < 1e-9);
//! assert!(budget.try_spend(now + Duration::from_secs(1), 0.0).is_ok());
//! # Ok::<(), rampart::error::ConfigError>(())
//! ```
//!
//! | Setting       | Default | Meaning                                                         |
//! |---------------|---------|-----------------------------------------------------------------|
//! | `fraction`    | 0.2     | tokens deposited per successful call, in `[0, 1]`               |
//! | `min_per_sec` | 3.0     | tokens refilled per second regardless of traffic, `[0, 1000]`   |
//! | capacity      | 30      | `max(min_per_sec × 10 s, 1)` tokens; the bucket starts full     |
//! | reserve       | 0.0     | per spend: a sheddable call passes 0.5, keeping half for others |
//!
//! # Thread safety
//!
//! A [`RetryBudget`] is `Send + Sync` and cheap to clone; clones share one bucket. The bucket is
//! one `AtomicU64` updated by lock-free compare-and-swap loops in integer micro-tokens, with no
//! allocation and no lock. A deposit into a full bucket (a healthy dependency) only reads it.
//! Only [`RetryBudget::shared`] takes a lock, on its registry, when a policy is built.
//!
//! # Events
//!
//! The budget emits nothing itself: when it refuses a retry the executor ends the call with
//! [`Error::Rejected`](crate::Error::Rejected) (reason `BudgetExhausted`, with the retry-after
//! hint returned here) and emits `Event::CallEnded` with the stop reason `BudgetExhausted`.

use std::collections::HashMap;
use std::fmt;
use std::sync::{OnceLock, PoisonError};
use std::time::Duration;

use crate::clock::Instant;
use crate::error::{ConfigError, ConfigProblem};
use crate::sync::Arc;
use crate::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One token, in the micro-tokens the bucket counts in.
const TOKEN: i64 = 1_000_000;
/// The largest `min_per_sec`: at most one micro-token per nanosecond, so the refill count
/// (`Inner::refilled`) never exceeds the nanoseconds elapsed and fits a `u64` for 584 years.
const MAX_MIN_PER_SEC: f64 = 1_000.0;

/// A retry budget: a token bucket that funds retries. Cheap to clone: clones share one bucket.
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

// The state is one number, `z`: the refill count (see `refilled`) at which the bucket would be
// empty. The balance at `now` is `min(capacity, refilled(now) - z)`, so the refill needs no stored
// timestamp and is never rounded away: `refilled` is a pure function of `now`. A spend moves `z`
// up by one token, a deposit down by `fraction` (both independent of `now` below capacity); at
// capacity a write re-anchors `z` to `refilled(now) - capacity`. Every update is one CAS from the
// `z` it read, so no concurrent update is lost or applied twice. Every write keeps `z` between
// `-capacity` and the largest `refilled(t)` a write saw (a spend leaves a balance >= 0, a deposit
// one <= capacity), and `refilled` stays below 2^63 for 292 years, so the wrapping difference
// read as `i64` is exact. It is negative only for a `now` earlier than a write, which then sees
// less, never more.
//
// `refilled` only grows with time, so a bucket found full for some `z` at some instant is full
// for that `z` at every later instant, whatever happened in between: `full` remembers the last
// `z` a deposit found full, and a deposit that reads the same `z` returns after two loads, with
// no clock arithmetic. It is written only when the full `z` changes (after a spend), so a busy
// full bucket is read, never written. A deposit whose `now` is earlier than the instant that
// `full` was recorded at may be skipped; it would only have raised the balance before that
// instant, by which the bucket was full with or without it.
struct Inner {
    /// `z`, in micro-tokens, wrapping.
    state: AtomicU64,
    /// A `z` for which a deposit found the bucket full.
    full: AtomicU64,
    /// The time base, set by the first deposit or spend.
    base: OnceLock<Instant>,
    /// Refill rate in micro-tokens per nanosecond, as a 64.64 fixed-point number rounded up.
    rate: u128,
    /// Capacity in micro-tokens.
    cap: i64,
    /// Deposit per success in micro-tokens.
    deposit: i64,
    fraction: f64,
    min_per_sec: f64,
}

impl Inner {
    /// Micro-tokens the floor has refilled between the time base and `now`.
    fn refilled(&self, base: Instant, now: Instant) -> u64 {
        let nanos = now.saturating_duration_since(base).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        ((u128::from(nanos) * self.rate) >> 64) as u64
    }

    /// The balance, capped at capacity, implied by `z` once `refilled` micro-tokens are in.
    fn balance(&self, refilled: u64, z: u64) -> i64 {
        (refilled.wrapping_sub(z) as i64).min(self.cap)
    }
}

/// Builds a [`RetryBudget`]; see the [module docs](self) for the defaults.
#[must_use]
#[derive(Debug, Clone)]
pub struct RetryBudgetBuilder {
    fraction: f64,
    min_per_sec: f64,
}

impl RetryBudget {
    /// A builder with the defaults: `fraction` 0.2, `min_per_sec` 3.0 (capacity 30).
    pub fn builder() -> RetryBudgetBuilder {
        RetryBudgetBuilder {
            fraction: 0.2,
            min_per_sec: 3.0,
        }
    }

    /// The budget registered under `name`, created from `builder` if none is. Registered
    /// budgets live for the rest of the process.
    ///
    /// # Errors
    ///
    /// Every problem of an invalid `builder` (validated either way), and a `builder` whose
    /// parameters differ from those `name` was registered with: the one budget cannot have
    /// both, and keeping the first silently would hide the second's intent.
    pub fn shared(name: &str, builder: RetryBudgetBuilder) -> Result<RetryBudget, ConfigError> {
        static REGISTRY: OnceLock<std::sync::Mutex<HashMap<String, RetryBudget>>> = OnceLock::new();
        let wanted = (builder.fraction, builder.min_per_sec);
        let budget = builder.build()?;
        let registry = REGISTRY.get_or_init(Default::default);
        let mut map = registry.lock().unwrap_or_else(PoisonError::into_inner);
        let registered = map.entry(name.to_owned()).or_insert(budget);
        let (fraction, min_per_sec) = (registered.fraction(), registered.min_per_sec());
        if (fraction, min_per_sec) != wanted {
            return Err(ConfigError::new(vec![ConfigProblem::new(
                "budget.shared",
                format!(
                    "`{name}` is registered with fraction {fraction} and min_per_sec {min_per_sec}; it cannot also have fraction {} and min_per_sec {}",
                    wanted.0, wanted.1
                ),
            )]));
        }
        Ok(registered.clone())
    }

    /// Records one successful call: deposits `fraction` of a token, up to capacity. Into a full
    /// bucket this only reads the shared state.
    #[inline]
    pub fn deposit(&self, now: Instant) {
        let inner = &*self.inner;
        if inner.deposit == 0 {
            return;
        }
        let z = inner.state.load(Relaxed);
        // Once the time base is set (the first deposit or spend sets it).
        if inner.full.load(Relaxed) == z && inner.base.get().is_some() {
            return;
        }
        self.deposit_into(z, now);
    }

    /// [`deposit`](Self::deposit) into a bucket that was not full at `z`.
    #[inline(never)]
    fn deposit_into(&self, mut z: u64, now: Instant) {
        let inner = &*self.inner;
        let refilled = inner.refilled(*inner.base.get_or_init(|| now), now);
        loop {
            let balance = inner.balance(refilled, z);
            if balance >= inner.cap {
                inner.full.store(z, Relaxed);
                return;
            }
            let after = (balance + inner.deposit).min(inner.cap);
            let next = refilled.wrapping_sub(after as u64);
            match inner.state.compare_exchange_weak(z, next, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(actual) => z = actual,
            }
        }
    }

    /// Spends one token for a retry if at least `reserve × capacity` tokens remain afterwards:
    /// `reserve` is 0.0 normally and 0.5 for a sheddable call; it is clamped to `[0, 1]`, NaN
    /// counting as 0. A refusal carries the time until the `min_per_sec` refill alone would fund
    /// this spend, or `None` when it never would (`min_per_sec` 0, or a reserve the capacity
    /// cannot leave).
    ///
    /// # Errors
    ///
    /// The time until the `min_per_sec` refill alone would fund this spend, or `None` when it never
    /// would: the bucket stays as it was.
    pub fn try_spend(&self, now: Instant, reserve: f64) -> Result<(), Option<Duration>> {
        let inner = &*self.inner;
        let reserve = if reserve.is_nan() {
            0.0
        } else {
            reserve.clamp(0.0, 1.0)
        };
        let need = TOKEN + (reserve * inner.cap as f64).ceil() as i64;
        let refilled = inner.refilled(*inner.base.get_or_init(|| now), now);
        let mut z = inner.state.load(Relaxed);
        loop {
            let balance = inner.balance(refilled, z);
            if balance < need {
                return Err(self.retry_after(need, balance));
            }
            let next = refilled.wrapping_sub((balance - TOKEN) as u64);
            match inner.state.compare_exchange_weak(z, next, Relaxed, Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => z = actual,
            }
        }
    }

    #[cold]
    fn retry_after(&self, need: i64, balance: i64) -> Option<Duration> {
        let inner = &*self.inner;
        if inner.min_per_sec == 0.0 || need > inner.cap {
            return None;
        }
        // micro-tokens / (tokens per second) = microseconds; × 1000 for nanoseconds.
        let nanos = ((need - balance) as f64 * 1_000.0 / inner.min_per_sec).ceil();
        Some(Duration::from_nanos(nanos as u64))
    }

    /// Tokens in the bucket at `now`, refill included, in `[0, capacity]`. Reading changes
    /// nothing. A `now` earlier than a previous deposit or spend gains nothing: it sees at most
    /// the balance that write left.
    pub fn balance(&self, now: Instant) -> f64 {
        let inner = &*self.inner;
        let Some(&base) = inner.base.get() else {
            return self.capacity(); // never written: still full
        };
        let balance = inner.balance(inner.refilled(base, now), inner.state.load(Relaxed));
        balance.max(0) as f64 / TOKEN as f64
    }

    /// The most tokens the bucket holds: `max(min_per_sec × 10 s, 1)`.
    pub fn capacity(&self) -> f64 {
        self.inner.cap as f64 / TOKEN as f64
    }

    /// Tokens deposited per successful call.
    pub fn fraction(&self) -> f64 {
        self.inner.fraction
    }

    /// Tokens refilled per second regardless of traffic.
    pub fn min_per_sec(&self) -> f64 {
        self.inner.min_per_sec
    }
}

impl RetryBudgetBuilder {
    /// Tokens deposited per successful call: finite, in `[0, 1]`. Default 0.2.
    pub fn fraction(self, f: f64) -> Self {
        RetryBudgetBuilder {
            fraction: f,
            ..self
        }
    }

    /// Tokens refilled per second regardless of traffic: finite, in `[0, 1000]`. Default 3.0.
    /// Capacity is `max(r × 10 s, 1)`.
    pub fn min_per_sec(self, r: f64) -> Self {
        RetryBudgetBuilder {
            min_per_sec: r,
            ..self
        }
    }

    /// The budget, full; or every invalid setting at once.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once (`budget.fraction`,
    /// `budget.min_per_sec`), each with its value.
    pub fn build(self) -> Result<RetryBudget, ConfigError> {
        let RetryBudgetBuilder {
            fraction,
            min_per_sec: rate,
        } = self;
        let mut problems = Vec::new();
        if !(0.0..=1.0).contains(&fraction) {
            let message = format!("must be between 0 and 1 (was {fraction})");
            problems.push(ConfigProblem::new("budget.fraction", message));
        }
        if !(0.0..=MAX_MIN_PER_SEC).contains(&rate) {
            let message = format!("must be between 0 and {MAX_MIN_PER_SEC} (was {rate})");
            problems.push(ConfigProblem::new("budget.min_per_sec", message));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        // Rounded up so that whole tokens arrive on time: the excess stays under 2 micro-tokens
        // over 584 years. `rate * 2^64` is exact (a power-of-two scaling) and below 2^74.
        let rate_fp = ((rate * 2f64.powi(64)).ceil() as u128).div_ceil(1_000);
        let cap = ((rate * 10.0).max(1.0) * TOKEN as f64).round() as i64;
        let full = 0u64.wrapping_sub(cap as u64);
        Ok(RetryBudget {
            inner: Arc::new(Inner {
                state: AtomicU64::new(full), // full at refilled = 0
                full: AtomicU64::new(full),
                base: OnceLock::new(),
                rate: rate_fp,
                cap,
                deposit: (fraction * TOKEN as f64).round() as i64,
                fraction,
                min_per_sec: rate,
            }),
        })
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("fraction", &self.fraction())
            .field("min_per_sec", &self.min_per_sec())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for RetryBudget {
    /// `retry budget 20% of successes, floor 3/s, capacity 30`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let percent = (self.fraction() * 100.0 * 1e6).round() / 1e6;
        write!(
            f,
            "retry budget {percent}% of successes, floor {}/s, capacity {}",
            self.min_per_sec(),
            self.capacity()
        )
    }
}

#[cfg(all(test, not(rampart_loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_deposit_into_a_full_bucket_leaves_the_shared_word_untouched_as_time_passes() {
        // Any write on this path would store a different word: the anchor `refilled - cap` moves
        // with every millisecond, so an unchanged word means no store was made.
        let budget = RetryBudget::builder().build().expect("valid");
        let base = Instant::now();
        budget.deposit(base);
        let word = budget.inner.state.load(Relaxed);
        for step in 1..=100 {
            budget.deposit(base + ms(step * 37));
            assert_eq!(budget.inner.state.load(Relaxed), word);
        }
        assert_eq!(budget.balance(base + ms(10_000)), 30.0);
    }

    #[test]
    fn the_refill_is_exact_for_whole_seconds_and_never_runs_ahead_by_a_token() {
        let budget = RetryBudget::builder()
            .min_per_sec(2.0)
            .build()
            .expect("valid");
        let base = Instant::now();
        let at = |d: Duration| budget.inner.refilled(base, base + d);
        assert_eq!(at(ms(500)), 1_000_000);
        assert_eq!(at(ms(1_000)), 2_000_000);
        assert_eq!(
            at(Duration::from_secs(86_400 * 365)),
            2 * 86_400 * 365 * 1_000_000
        );
        let max = RetryBudget::builder()
            .min_per_sec(1_000.0)
            .build()
            .expect("valid");
        assert_eq!(
            max.inner.refilled(base, base + Duration::from_secs(1)),
            1_000_000_000
        );
    }

    #[test]
    fn an_instant_before_the_last_write_gains_nothing_and_never_panics() {
        let budget = RetryBudget::builder()
            .fraction(0.1)
            .min_per_sec(1.0)
            .build()
            .expect("valid");
        let base = Instant::now();
        budget.deposit(base); // sets the time base
        for _ in 0..10 {
            budget.try_spend(base + ms(60_000), 0.0).expect("funded");
        }
        let earlier = base + ms(30_000);
        assert_eq!(budget.balance(earlier), 0.0);
        assert!(budget.try_spend(earlier, 0.0).is_err());
        budget.deposit(earlier); // still lands: below capacity a deposit does not depend on `now`
        assert!((budget.balance(base + ms(60_000)) - 0.1).abs() < 1e-9);
        assert_eq!(budget.balance(base - ms(1)), 0.0); // before the time base
    }

    #[test]
    fn a_reserve_outside_zero_to_one_or_nan_is_clamped() {
        let budget = RetryBudget::builder()
            .min_per_sec(2.0)
            .build()
            .expect("valid");
        let now = Instant::now();
        assert!(budget.try_spend(now, f64::NAN).is_ok());
        assert!(budget.try_spend(now, -3.0).is_ok());
        assert_eq!(budget.try_spend(now, 7.0), Err(None)); // 1 + 20 tokens can never be there
        assert!(budget.try_spend(now, f64::NEG_INFINITY).is_ok());
    }

    #[test]
    fn display_and_debug_name_the_parameters() {
        let budget = RetryBudget::builder().build().expect("valid");
        assert_eq!(
            budget.to_string(),
            "retry budget 20% of successes, floor 3/s, capacity 30"
        );
        assert_eq!(
            format!("{budget:?}"),
            "RetryBudget { fraction: 0.2, min_per_sec: 3.0, capacity: 30.0, .. }"
        );
    }
}
