//! backon: retry only; the deadline and the attempt timeout are tokio's `timeout`, as backon's
//! documentation leaves timeouts to the runtime. backon has no breaker, budget or hedging.

use backon::{BackoffBuilder, ConstantBuilder, ExponentialBuilder, Retryable};
use tokio::time::timeout;

use super::{
    ATTEMPT_TIMEOUT, BACKOFF_BASE, Case, DEADLINE, Failure, Fault, MAX_ATTEMPTS, Op, Outcome,
};

/// A call retried by backon with `builder`'s backoff.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retried<B, O> {
    builder: B,
    op: O,
}

impl<B: BackoffBuilder + Copy, O: Op> Case for Retried<B, O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        let op = self.op;
        let attempt = async || match timeout(ATTEMPT_TIMEOUT, op.run(1)).await {
            Ok(result) => result,
            Err(_) => Err(Fault::TimedOut),
        };
        match timeout(DEADLINE, attempt.retry(self.builder)).await {
            Ok(Ok(value)) => Ok(value),
            _ => Err(Failure::Failed),
        }
    }
}

/// W1: deadline, attempt timeout, 3 attempts, exponential backoff from 100 ms with jitter.
pub(crate) fn w1<O: Op>(op: O) -> Retried<ExponentialBuilder, O> {
    let builder = ExponentialBuilder::new()
        .with_min_delay(BACKOFF_BASE)
        .with_max_times(MAX_ATTEMPTS as usize - 1)
        .with_jitter();
    Retried { builder, op }
}

/// W2: deadline, attempt timeout, 3 attempts, zero backoff.
pub(crate) fn w2<O: Op>(op: O) -> Retried<ConstantBuilder, O> {
    let builder = ConstantBuilder::new()
        .with_delay(std::time::Duration::ZERO)
        .with_max_times(MAX_ATTEMPTS as usize - 1);
    Retried { builder, op }
}
