//! seatbelt (microsoft/oxidizer): timeout (the deadline) → retry → breaker → timeout (the
//! attempt timeout), outer to inner as its documentation orders them, on a tokio `tick` clock;
//! and its hedging (W4). seatbelt has no retry budget.

use std::sync::Arc;
use std::time::Duration;

use layered::{Execute, Service, Stack};
use seatbelt::breaker::Breaker;
use seatbelt::hedging::Hedging;
use seatbelt::retry::Retry;
use seatbelt::timeout::Timeout;
use seatbelt::{RecoveryInfo, ResilienceContext};
use tick::Clock;

use super::{
    ATTEMPT_TIMEOUT, BACKOFF_BASE, BREAK, Case, DEADLINE, Failure, Fault, HEDGE_DELAY,
    MAX_ATTEMPTS, Op, Outcome,
};

type Out = Result<u32, Fault>;

/// A call through a seatbelt service, shared by reference (clones share it).
pub(crate) struct Pipeline<S>(Arc<S>);

impl<S> Clone for Pipeline<S> {
    fn clone(&self) -> Self {
        Pipeline(Arc::clone(&self.0))
    }
}

impl<S: Service<u32, Out = Out>> Case for Pipeline<S> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        self.0.execute(1).await.map_err(|fault| match fault {
            Fault::Rejected => Failure::Rejected,
            _ => Failure::Failed,
        })
    }
}

/// Transient failures and timeouts are retried; a rejection by the breaker is "unavailable",
/// which seatbelt's retry does not retry by default (as rampart does not).
fn recovery(out: &Out) -> RecoveryInfo {
    match out {
        Ok(_) => RecoveryInfo::never(),
        Err(Fault::Rejected) => RecoveryInfo::unavailable(),
        Err(_) => RecoveryInfo::retry(),
    }
}

fn context() -> ResilienceContext<u32, Out> {
    ResilienceContext::new(Clock::new_tokio())
}

fn timeout(
    name: &'static str,
    context: &ResilienceContext<u32, Out>,
    after: Duration,
) -> seatbelt::timeout::TimeoutLayer<u32, Out, seatbelt::typestates::Set, seatbelt::typestates::Set>
{
    Timeout::layer(name, context)
        .timeout_error(|_| Fault::TimedOut)
        .timeout(after)
}

fn with_breaker<O: Op>(
    op: O,
    base_delay: Duration,
    break_duration: Option<Duration>,
) -> Pipeline<impl Service<u32, Out = Out>> {
    let context = context();
    let retry = Retry::layer("retry", &context)
        .clone_input()
        .recovery_with(|out, _| recovery(out))
        .max_retry_attempts(MAX_ATTEMPTS - 1)
        .base_delay(base_delay);
    let breaker = Breaker::layer("breaker", &context)
        .recovery_with(|out, _| recovery(out))
        .rejected_input_error(|_, _| Fault::Rejected);
    let breaker = match break_duration {
        Some(duration) => breaker.break_duration(duration),
        None => breaker,
    };
    let service = (
        timeout("deadline", &context, DEADLINE),
        retry,
        breaker,
        timeout("attempt", &context, ATTEMPT_TIMEOUT),
        Execute::new(move |n: u32| op.run(n)),
    )
        .into_service();
    Pipeline(Arc::new(service))
}

/// W1: deadline, attempt timeout, 3 attempts (2 retries), exponential backoff from 100 ms with
/// jitter (the default curve), the default breaker (10 % failures over 30 s, 100 calls).
pub(crate) fn w1<O: Op>(op: O) -> Pipeline<impl Service<u32, Out = Out>> {
    with_breaker(op, BACKOFF_BASE, None)
}

/// W2: deadline, attempt timeout, 3 attempts, zero backoff, no breaker.
pub(crate) fn w2<O: Op>(op: O) -> Pipeline<impl Service<u32, Out = Out>> {
    let context = context();
    let retry = Retry::layer("retry", &context)
        .clone_input()
        .recovery_with(|out, _| recovery(out))
        .max_retry_attempts(MAX_ATTEMPTS - 1)
        .base_delay(Duration::ZERO)
        .use_jitter(false);
    let service = (
        timeout("deadline", &context, DEADLINE),
        retry,
        timeout("attempt", &context, ATTEMPT_TIMEOUT),
        Execute::new(move |n: u32| op.run(n)),
    )
        .into_service();
    Pipeline(Arc::new(service))
}

/// W3: W1 with zero backoff (to open the breaker quickly) and a one-hour break.
pub(crate) fn w3<O: Op>(op: O) -> Pipeline<impl Service<u32, Out = Out>> {
    with_breaker(op, Duration::ZERO, Some(BREAK))
}

/// W4: deadline → hedging (after 100 ms, 1 hedge: 2 legs) → 500 ms per leg.
pub(crate) fn w4<O: Op>(op: O) -> Pipeline<impl Service<u32, Out = Out>> {
    let context = context();
    let hedging = Hedging::layer("hedging", &context)
        .clone_input()
        .recovery_with(|out, _| recovery(out))
        .hedging_delay(HEDGE_DELAY)
        .max_hedged_attempts(1);
    let service = (
        timeout("deadline", &context, DEADLINE),
        hedging,
        timeout("attempt", &context, ATTEMPT_TIMEOUT),
        Execute::new(move |n: u32| op.run(n)),
    )
        .into_service();
    Pipeline(Arc::new(service))
}
