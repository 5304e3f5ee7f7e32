//! The second hand-written floor: the first floor's work ([`crate::floor::retry_loop`]) plus a
//! hand-written circuit breaker and retry budget, with tokio and `std` atomics alone. It does
//! the work of a full rampart policy (deadline, attempt timeout, 3 attempts, breaker, budget),
//! and rampart's "within 15% of a hand-written loop doing the same work" (`bench/BUDGETS.md`) is
//! measured against it.
//!
//! What [`guarded_loop`] does, in order:
//!
//! 1. Computes the deadline once (`now + limits.deadline`).
//! 2. Before each attempt: reads the clock; a spent deadline ends the call
//!    ([`GuardedError::Deadline`]); the breaker is asked ([`Breaker::admit`]: closed, that is
//!    one relaxed load) and an open breaker ends the call ([`GuardedError::BreakerOpen`]); the
//!    ceiling is `min(deadline, now + attempt timeout)`.
//! 3. Runs the attempt under `tokio::time::timeout_at(ceiling, ..)`.
//! 4. On success: tells the breaker ([`Breaker::succeeded`]: one relaxed load, and a store only
//!    when failures were counted), deposits a tenth of a token ([`Budget::deposit`]: one relaxed
//!    load into a full bucket, nothing written), returns the value.
//! 5. On an error or a timeout: reads the clock, counts a failure in the breaker
//!    ([`Breaker::failed`]; the fifth in a row opens it). If attempts remain: a spent deadline
//!    ends the call, then the budget must fund the retry ([`Budget::try_spend`], one token) or
//!    the call ends ([`GuardedError::BudgetExhausted`]), then the backoff of the first floor
//!    (exponential from `limits.base`, full jitter; a delay that would reach the deadline ends
//!    the call), then the next attempt. Else the last error is returned.
//!
//! The breaker (rampart 0.1's default, consecutive-failure mode): one `AtomicU64`. Below
//! [`FAILURE_THRESHOLD`] it is the count of consecutive failed attempts (closed); the fifth
//! failure in a row stores `FAILURE_THRESHOLD + t` instead, open since `t` (nanoseconds since
//! the breaker was made). Open, it rejects attempts for [`BREAK`]; after that, the first
//! attempt to ask claims a probe by restarting the break (a compare-and-swap), so one probe at a
//! time goes through. A successful attempt (a probe included) resets the word to 0, closed; a
//! failed one while open restarts the break.
//!
//! The budget (rampart's defaults but the fraction, 0.1 here and 0.2 in rampart, which costs
//! nothing on the success path): a token bucket of [`CAPACITY`] tokens, full at first, in
//! integer micro-tokens in an `AtomicU64`. A successful call deposits [`DEPOSIT`] (a tenth of a
//! token) up to capacity, skipped when the bucket is full; a retry spends one token, refused
//! below one. A floor of [`MIN_PER_SEC`] tokens a second refills it regardless of traffic,
//! credited lazily when a retry asks (a second `AtomicU64` holds the instant it was credited
//! to, claimed by compare-and-swap so no interval is credited twice), so the success path never
//! reads the clock for it. Capping at each step gives the same balance as rampart's continuous
//! refill, less under a micro-token per credit.
//!
//! What it does not do, beside rampart: no events, no classification (every error and every
//! timeout is a failure, as rampart's default classifier has it), no caller cancellation, no
//! arbitration, no criticality (no sheddable reserve in the budget), no retry-after hint on a
//! rejection; and off the success path a simpler breaker: a fixed break (rampart doubles it per
//! opening, with jitter), one successful probe closes it (rampart: two), and a failure recorded
//! while open restarts the break (rampart ignores an outcome from an earlier period). None of
//! those differences is on the path the benchmarks time.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout_at};

use crate::floor::{Limits, backoff};

/// Consecutive failed attempts that open the breaker (rampart 0.1's default).
pub const FAILURE_THRESHOLD: u64 = 5;

/// rampart's breaker doing this floor's breaker's work, for every comparison with it: opened by
/// [`FAILURE_THRESHOLD`] failures in a row (rampart's default breaker counts a ratio in a time
/// window instead, more work than this floor does).
pub fn same_breaker() -> rampart::Breaker {
    let failures = u32::try_from(FAILURE_THRESHOLD).unwrap_or(u32::MAX);
    rampart::Breaker::builder()
        .consecutive_failures(failures)
        .build()
        .unwrap_or_else(|e| unreachable!("a valid breaker: {e}"))
}
/// How long an open breaker rejects attempts before it lets a probe through (rampart's first
/// break).
pub const BREAK: Duration = Duration::from_secs(15);
/// One token, in the micro-tokens the budget counts in.
pub const TOKEN: u64 = 1_000_000;
/// The budget's capacity, in micro-tokens: 30 tokens (rampart's `max(min_per_sec × 10 s, 1)`).
pub const CAPACITY: u64 = 30 * TOKEN;
/// What a successful call deposits, in micro-tokens: a tenth of a token.
pub const DEPOSIT: u64 = TOKEN / 10;
/// Tokens refilled per second regardless of traffic (micro-tokens per microsecond).
pub const MIN_PER_SEC: u64 = 3;

/// Nanoseconds from `base` to `now`, or 0 before it.
fn nanos(base: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

/// A consecutive-failure circuit breaker in one atomic word; see the [module docs](self).
#[derive(Debug)]
pub struct Breaker {
    /// Below [`FAILURE_THRESHOLD`]: consecutive failures (closed). At or above: open since
    /// `word - FAILURE_THRESHOLD` nanoseconds after `base`.
    word: AtomicU64,
    base: Instant,
}

impl Breaker {
    /// A closed breaker; its instants are counted from `base`.
    pub fn new(base: Instant) -> Self {
        Breaker {
            word: AtomicU64::new(0),
            base,
        }
    }

    /// Whether an attempt may run at `now`. Closed, this is one relaxed load.
    #[inline]
    pub fn admit(&self, now: Instant) -> bool {
        let word = self.word.load(Relaxed);
        word < FAILURE_THRESHOLD || self.admit_open(word, now)
    }

    /// Open: rejects during the break; after it, the first caller claims the probe by
    /// restarting the break, and the others are rejected.
    #[cold]
    fn admit_open(&self, word: u64, now: Instant) -> bool {
        let opened = word - FAILURE_THRESHOLD;
        let t = nanos(self.base, now);
        if t.saturating_sub(opened) < BREAK.as_nanos() as u64 {
            return false;
        }
        self.word
            .compare_exchange(word, FAILURE_THRESHOLD + t, Relaxed, Relaxed)
            .is_ok()
    }

    /// Records a successful attempt: closes the breaker and clears the count, writing only when
    /// there is something to clear.
    #[inline]
    pub fn succeeded(&self) {
        if self.word.load(Relaxed) != 0 {
            self.word.store(0, Relaxed);
        }
    }

    /// Records a failed attempt (an error or a timeout) at `now`: the
    /// [`FAILURE_THRESHOLD`]th in a row opens the breaker; one while open restarts the break.
    pub fn failed(&self, now: Instant) {
        let open = FAILURE_THRESHOLD + nanos(self.base, now);
        let _ = self.word.fetch_update(Relaxed, Relaxed, |word| {
            Some(if word + 1 < FAILURE_THRESHOLD {
                word + 1
            } else {
                open
            })
        });
    }

    /// Whether the breaker is open (or half-open, a probe in flight).
    pub fn is_open(&self) -> bool {
        self.word.load(Relaxed) >= FAILURE_THRESHOLD
    }
}

/// A token-bucket retry budget in two atomic words; see the [module docs](self).
#[derive(Debug)]
pub struct Budget {
    /// Micro-tokens in the bucket, at most [`CAPACITY`], refill credited up to `credited`.
    balance: AtomicU64,
    /// The instant, in nanoseconds after `base`, up to which the refill has been credited.
    credited: AtomicU64,
    base: Instant,
}

impl Budget {
    /// A full bucket; its instants are counted from `base`.
    pub fn new(base: Instant) -> Self {
        Budget {
            balance: AtomicU64::new(CAPACITY),
            credited: AtomicU64::new(0),
            base,
        }
    }

    /// Records a successful call: deposits [`DEPOSIT`], up to capacity. Into a full bucket
    /// this is one relaxed load and writes nothing.
    #[inline]
    pub fn deposit(&self) {
        if self.balance.load(Relaxed) >= CAPACITY {
            return;
        }
        let _ = self.balance.fetch_update(Relaxed, Relaxed, |balance| {
            (balance < CAPACITY).then(|| (balance + DEPOSIT).min(CAPACITY))
        });
    }

    /// Spends one token for a retry at `now`, after crediting the refill; `false` (nothing
    /// spent) when less than a token is left.
    pub fn try_spend(&self, now: Instant) -> bool {
        self.credit(now);
        self.balance
            .fetch_update(Relaxed, Relaxed, |balance| {
                (balance >= TOKEN).then(|| balance - TOKEN)
            })
            .is_ok()
    }

    /// Credits the [`MIN_PER_SEC`] refill from the last credited instant to `now`, up to
    /// capacity. The instant is claimed first, so each interval is credited once; an interval
    /// too short for a micro-token is left for a later credit.
    fn credit(&self, now: Instant) {
        let t = nanos(self.base, now);
        let from = self.credited.load(Relaxed);
        // 10 s fill an empty bucket; bounding the interval keeps the product small.
        let elapsed = t.saturating_sub(from).min(10_000_000_000);
        let refill = elapsed * MIN_PER_SEC / 1_000;
        if refill == 0
            || self
                .credited
                .compare_exchange(from, t, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let _ = self.balance.fetch_update(Relaxed, Relaxed, |balance| {
            (balance < CAPACITY).then(|| (balance + refill).min(CAPACITY))
        });
    }

    /// Tokens in the bucket, refill not yet credited left out.
    pub fn tokens(&self) -> f64 {
        self.balance.load(Relaxed) as f64 / TOKEN as f64
    }
}

/// The breaker and the budget one dependency's calls share (what a policy holds behind its
/// `Arc`).
#[derive(Debug)]
pub struct Guards {
    /// The circuit breaker.
    pub breaker: Breaker,
    /// The retry budget.
    pub budget: Budget,
}

impl Guards {
    /// A closed breaker and a full budget, their instants counted from now.
    pub fn new() -> Self {
        let base = Instant::now();
        Guards {
            breaker: Breaker::new(base),
            budget: Budget::new(base),
        }
    }
}

impl Default for Guards {
    fn default() -> Self {
        Guards::new()
    }
}

/// Why the second floor gave up.
#[derive(Debug, PartialEq, Eq)]
pub enum GuardedError<E> {
    /// The last attempt's error.
    Inner(E),
    /// The last attempt timed out.
    Timeout,
    /// The deadline ran out.
    Deadline,
    /// The breaker was open: the attempt did not run.
    BreakerOpen,
    /// The budget could not fund a retry.
    BudgetExhausted,
}

/// Runs `op` (given the attempt number) under `limits`, guarded by `guards`, by hand; see the
/// [module docs](self) for every step.
pub async fn guarded_loop<T, E, F>(
    limits: Limits,
    guards: &Guards,
    mut op: F,
) -> Result<T, GuardedError<E>>
where
    F: AsyncFnMut(u32) -> Result<T, E>,
{
    let deadline = Instant::now() + limits.deadline;
    let mut last = GuardedError::Deadline;
    for attempt in 1..=limits.max_attempts {
        let now = Instant::now();
        if now >= deadline {
            return Err(GuardedError::Deadline);
        }
        if !guards.breaker.admit(now) {
            return Err(GuardedError::BreakerOpen);
        }
        let ceiling = deadline.min(now + limits.attempt_timeout);
        match timeout_at(ceiling, op(attempt)).await {
            Ok(Ok(value)) => {
                guards.breaker.succeeded();
                guards.budget.deposit();
                return Ok(value);
            }
            Ok(Err(e)) => last = GuardedError::Inner(e),
            Err(_) => last = GuardedError::Timeout,
        }
        let now = Instant::now();
        guards.breaker.failed(now);
        if attempt < limits.max_attempts {
            if now >= deadline {
                return Err(GuardedError::Deadline);
            }
            if !guards.budget.try_spend(now) {
                return Err(GuardedError::BudgetExhausted);
            }
            let delay = backoff(limits.base, attempt);
            if delay.is_zero() {
                continue;
            }
            if now + delay >= deadline {
                return Err(GuardedError::Deadline);
            }
            sleep(delay).await;
        }
    }
    Err(last)
}
