//! tower-resilience: time limiter (the deadline) → retry with a token-bucket budget → circuit
//! breaker → time limiter (the attempt timeout), each with its documented defaults unless the
//! workload says otherwise; and its hedge (W4).

use std::time::Duration;

use tower::{Service, ServiceBuilder};
use tower_resilience::circuitbreaker::{CircuitBreakerError, CircuitBreakerLayer};
use tower_resilience::hedge::{HedgeError, HedgeLayer};
use tower_resilience::retry::{RetryBudgetBuilder, RetryLayer};
use tower_resilience::timelimiter::{TimeLimiterError, TimeLimiterLayer};

use super::via_tower::Stack;
use super::{
    ATTEMPT_TIMEOUT, BACKOFF_BASE, BREAK, DEADLINE, Failure, Fault, HEDGE_DELAY, MAX_ATTEMPTS, Op,
};

/// The error under the retry layer of W1 and W3.
type Attempt = CircuitBreakerError<TimeLimiterError<Fault>>;
/// The error a W1 or W3 call ends with.
type Call = TimeLimiterError<Attempt>;

fn breaker_failure(error: &Call) -> Failure {
    match error {
        TimeLimiterError::Inner(CircuitBreakerError::OpenCircuit) => Failure::Rejected,
        _ => Failure::Failed,
    }
}

fn with_breaker<O: Op>(
    op: O,
    backoff: Duration,
    breaker: CircuitBreakerLayer,
) -> Stack<impl Service<u32, Response = u32, Error = Call> + Clone + Send + 'static> {
    let budget = RetryBudgetBuilder::new()
        .token_bucket()
        .build()
        .expect("valid budget");
    let retry = RetryLayer::<u32, u32, Attempt>::builder()
        .max_attempts(MAX_ATTEMPTS as usize)
        .exponential_backoff(backoff)
        .budget(budget)
        // A rejection by the breaker is not retried (as rampart does).
        .retry_on(|error: &Attempt| !error.is_circuit_open())
        .build();
    let service = ServiceBuilder::new()
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(DEADLINE)
                .build(),
        )
        .layer(retry)
        .layer(breaker)
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(ATTEMPT_TIMEOUT)
                .build(),
        )
        .service_fn(move |n: u32| op.run(n));
    Stack::new(service, breaker_failure)
}

/// W1: deadline, attempt timeout, 3 attempts, exponential backoff from 100 ms, the default
/// token-bucket budget (10 a second, 100 at most) and the default breaker (50 % of a
/// 100-call window).
pub(crate) fn w1<O: Op>(
    op: O,
) -> Stack<impl Service<u32, Response = u32, Error = Call> + Clone + Send + 'static> {
    let breaker = CircuitBreakerLayer::builder()
        .build()
        .expect("valid breaker");
    with_breaker(op, BACKOFF_BASE, breaker)
}

/// W2: deadline, attempt timeout, 3 attempts, zero backoff, no budget, no breaker.
pub(crate) fn w2<O: Op>(
    op: O,
) -> Stack<impl Service<u32, Response = u32> + Clone + Send + 'static> {
    type Attempt = TimeLimiterError<Fault>;
    let retry = RetryLayer::<u32, u32, Attempt>::builder()
        .max_attempts(MAX_ATTEMPTS as usize)
        .fixed_backoff(Duration::ZERO)
        .build();
    let service = ServiceBuilder::new()
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(DEADLINE)
                .build(),
        )
        .layer(retry)
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(ATTEMPT_TIMEOUT)
                .build(),
        )
        .service_fn(move |n: u32| op.run(n));
    Stack::new(service, |_| Failure::Failed)
}

/// W3: W1 with zero backoff (to open the breaker quickly) and a one-hour break.
pub(crate) fn w3<O: Op>(
    op: O,
) -> Stack<impl Service<u32, Response = u32, Error = Call> + Clone + Send + 'static> {
    let breaker = CircuitBreakerLayer::builder()
        .wait_duration_in_open(BREAK)
        .build()
        .expect("valid breaker");
    with_breaker(op, Duration::ZERO, breaker)
}

/// W4: deadline → hedge (after 100 ms, 2 attempts) → 500 ms per leg. The hedge needs a `Clone`
/// error, so the leg's `TimeLimiterError` is mapped back to the operation's error.
pub(crate) fn w4<O: Op>(
    op: O,
) -> Stack<impl Service<u32, Response = u32> + Clone + Send + 'static> {
    let service = ServiceBuilder::new()
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(DEADLINE)
                .build(),
        )
        .layer(
            HedgeLayer::builder()
                .delay(HEDGE_DELAY)
                .max_hedged_attempts(2)
                .build(),
        )
        .map_err(|error: TimeLimiterError<Fault>| error.into_inner().unwrap_or(Fault::TimedOut))
        .layer(
            TimeLimiterLayer::builder()
                .timeout_duration(ATTEMPT_TIMEOUT)
                .build(),
        )
        .service_fn(move |n: u32| op.run(n));
    Stack::new(service, |_: &TimeLimiterError<HedgeError<Fault>>| {
        Failure::Failed
    })
}
