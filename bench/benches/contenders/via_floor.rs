//! The hand-written floors: the operation called directly (the floor of `Policy::none()`),
//! `rampart_bench::floor` (W1, W2: deadline, attempt timeout, retries) and
//! `rampart_bench::floor2` (W1, W5: the same plus a breaker and a budget, a full policy's work).

use std::sync::Arc;

use rampart_bench::floor::{Limits, retry_loop, retry_now};
use rampart_bench::floor2::{GuardedError, Guards, guarded_loop};

use super::{ATTEMPT_TIMEOUT, BACKOFF_BASE, Case, DEADLINE, Failure, MAX_ATTEMPTS, Op, Outcome};

const LIMITS: Limits = Limits {
    max_attempts: MAX_ATTEMPTS,
    deadline: DEADLINE,
    attempt_timeout: ATTEMPT_TIMEOUT,
    base: BACKOFF_BASE,
};

/// The operation alone: no bound, no retry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Direct<O>(pub(crate) O);

impl<O: Op> Case for Direct<O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        self.0.run(1).await.map_err(|_| Failure::Failed)
    }
}

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

/// W1's second floor: [`W1`] plus a consecutive-failure breaker and a token-bucket budget,
/// shared by clones (W5), as a policy's are.
#[derive(Debug, Clone)]
pub(crate) struct W1Guarded<O> {
    op: O,
    guards: Arc<Guards>,
}

/// The second floor with a closed breaker and a full budget.
pub(crate) fn w1_guarded<O: Op>(op: O) -> W1Guarded<O> {
    W1Guarded {
        op,
        guards: Arc::new(Guards::new()),
    }
}

impl<O: Op> Case for W1Guarded<O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        let op = self.op;
        guarded_loop(LIMITS, &self.guards, async |n| op.run(n).await)
            .await
            .map_err(|error| match error {
                GuardedError::BreakerOpen => Failure::Rejected,
                _ => Failure::Failed,
            })
    }
}
