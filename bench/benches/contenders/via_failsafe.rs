//! failsafe: a circuit breaker only (W3): no retry, no timeout, no hedging.

use failsafe::futures::CircuitBreaker;
use failsafe::{Config, backoff, failure_policy};

use super::{BREAK, Case, Failure, Op, Outcome};

/// A call through a failsafe breaker.
#[derive(Clone)]
pub(crate) struct Guard<B, O> {
    breaker: B,
    op: O,
}

impl<B: CircuitBreaker, O: Op> Case for Guard<B, O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        match self.breaker.call(self.op.run(1)).await {
            Ok(value) => Ok(value),
            Err(failsafe::Error::Rejected) => Err(Failure::Rejected),
            Err(failsafe::Error::Inner(_)) => Err(Failure::Failed),
        }
    }
}

/// W3: opens after 5 consecutive failures (rampart 0.1's default breaker), for a
/// one-hour break.
pub(crate) fn w3<O: Op>(op: O) -> Guard<impl CircuitBreaker + Clone, O> {
    let policy = failure_policy::consecutive_failures(5, backoff::constant(BREAK));
    Guard {
        breaker: Config::new().failure_policy(policy).build(),
        op,
    }
}
