//! The hand-written floor: what a careful engineer writes by hand for "3 attempts, an attempt
//! timeout, a total deadline, exponential backoff with full jitter", with tokio alone
//! ([`retry_loop`]), and the same with zero backoff ([`retry_now`]).
//!
//! It does the same work as rampart's executor on the success path (a deadline computed once,
//! a ceiling per attempt, a timer raced against the work) and nothing else: no events, no
//! classification, no cancellation token, no arbitration, and no breaker or budget: it is the
//! floor of a policy without them (`.no_budget()`, no breaker). A full policy's floor, with a
//! breaker and a budget, is [`crate::floor2`].

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout_at};

/// The limits the floor enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Attempts, the first included.
    pub max_attempts: u32,
    /// The total bound.
    pub deadline: Duration,
    /// The bound on each attempt.
    pub attempt_timeout: Duration,
    /// The first backoff delay (doubled per retry, full jitter).
    pub base: Duration,
}

/// Why the floor gave up.
#[derive(Debug, PartialEq, Eq)]
pub enum FloorError<E> {
    /// The last attempt's error.
    Inner(E),
    /// The last attempt timed out.
    Timeout,
    /// The deadline ran out.
    Deadline,
}

/// Runs `op` (given the attempt number) under `limits`, by hand.
pub async fn retry_loop<T, E, F>(limits: Limits, mut op: F) -> Result<T, FloorError<E>>
where
    F: AsyncFnMut(u32) -> Result<T, E>,
{
    let deadline = Instant::now() + limits.deadline;
    let mut last = FloorError::Deadline;
    for attempt in 1..=limits.max_attempts {
        let now = Instant::now();
        if now >= deadline {
            return Err(FloorError::Deadline);
        }
        let ceiling = deadline.min(now + limits.attempt_timeout);
        match timeout_at(ceiling, op(attempt)).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => last = FloorError::Inner(e),
            Err(_) => last = FloorError::Timeout,
        }
        if attempt < limits.max_attempts {
            let delay = backoff(limits.base, attempt);
            if delay.is_zero() {
                continue;
            }
            if Instant::now() + delay >= deadline {
                return Err(FloorError::Deadline);
            }
            sleep(delay).await;
        }
    }
    Err(last)
}

/// The floor with zero backoff (workload W2): [`retry_loop`] with no delay between attempts
/// (a failed attempt is retried at once; `limits.base` is not used).
pub async fn retry_now<T, E, F>(limits: Limits, op: F) -> Result<T, FloorError<E>>
where
    F: AsyncFnMut(u32) -> Result<T, E>,
{
    let limits = Limits {
        base: Duration::ZERO,
        ..limits
    };
    retry_loop(limits, op).await
}

/// The delay after failed attempt `attempt` (from 1): `base` doubled per retry, full jitter.
#[inline]
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    let curve = base.saturating_mul(1 << (attempt - 1).min(16));
    curve.mul_f64(fastrand_unit())
}

/// A uniform number in `[0, 1)` from a tiny xorshift: the floor's jitter.
fn fastrand_unit() -> f64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}
