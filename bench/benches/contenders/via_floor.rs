//! The hand-written floor (`rampart_bench::floor`): W1 and W2 only.

use rampart_bench::floor::{Limits, retry_loop, retry_now};

use super::{ATTEMPT_TIMEOUT, BACKOFF_BASE, Case, DEADLINE, Failure, MAX_ATTEMPTS, Op, Outcome};

const LIMITS: Limits = Limits {
    max_attempts: MAX_ATTEMPTS,
    deadline: DEADLINE,
    attempt_timeout: ATTEMPT_TIMEOUT,
    base: BACKOFF_BASE,
};

/// W1's floor: deadline, a ceiling per attempt, jittered exponential backoff.
#[derive(Debug, Clone, Copy)]
pub(crate) struct W1<O>(pub(crate) O);

impl<O: Op> Case for W1<O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        let op = self.0;
        retry_loop(LIMITS, async |n| op.run(n).await)
            .await
            .map_err(|_| Failure::Failed)
    }
}

/// W2's floor: the same with zero backoff (a failed attempt is retried at once).
#[derive(Debug, Clone, Copy)]
pub(crate) struct W2<O>(pub(crate) O);

impl<O: Op> Case for W2<O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        let op = self.0;
        retry_now(LIMITS, async |n| op.run(n).await)
            .await
            .map_err(|_| Failure::Failed)
    }
}
