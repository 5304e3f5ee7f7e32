//! rampart: one `Policy` per workload.

use rampart::backoff::Backoff;
use rampart::hedge::Hedge;
use rampart::{Breaker, Policy};

use super::{
    ATTEMPT_TIMEOUT, BREAK, Case, DEADLINE, Failure, HEDGE_DELAY, MAX_ATTEMPTS, Op, Outcome,
};

/// A call through a policy, with `run`.
#[derive(Debug, Clone)]
pub(crate) struct Run<O> {
    policy: Policy,
    op: O,
}

impl<O: Op> Case for Run<O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        let op = self.op;
        self.policy
            .run(async |attempt| op.run(attempt.number()).await)
            .await
            .map_err(|error| failure(&error))
    }
}

/// A call through a hedging policy (`run` hedges when the policy does).
#[derive(Debug, Clone)]
pub(crate) struct RunHedged<O> {
    policy: Policy,
    op: O,
}

impl<O: Op> Case for RunHedged<O> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        let op = self.op;
        self.policy
            .run(async |attempt| op.run(attempt.number()).await)
            .await
            .map_err(|error| failure(&error))
    }
}

fn failure<E>(error: &rampart::Error<E>) -> Failure {
    if error.is_rejected() {
        Failure::Rejected
    } else {
        Failure::Failed
    }
}

/// W1: deadline, attempt timeout, 3 attempts, default backoff (exponential from 100 ms, full
/// jitter), a breaker of five failures in a row (the breaker `floor2` hand-writes; rampart
/// 0.1's default), and the retry budget a policy with retries gets by default.
pub(crate) fn w1<O: Op>(op: O) -> Run<O> {
    w1_with(op, rampart_bench::floor2::same_breaker())
}

/// W1 with rampart 0.2's default breaker (`failure_ratio(1.0, 10 s, 100)`): a success is
/// counted in a time window, more work than `floor2`'s consecutive count.
pub(crate) fn w1_default_breaker<O: Op>(op: O) -> Run<O> {
    w1_with(op, Breaker::builder().build().expect("valid breaker"))
}

fn w1_with<O: Op>(op: O, breaker: Breaker) -> Run<O> {
    let policy = Policy::builder()
        .max_attempts(MAX_ATTEMPTS)
        .total_timeout(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .breaker(breaker)
        .build()
        .expect("valid policy");
    Run { policy, op }
}

/// `Policy::none()`: one attempt, no bound; its floor is the operation called directly.
pub(crate) fn w1_none<O: Op>(op: O) -> Run<O> {
    Run {
        policy: Policy::none(),
        op,
    }
}

/// W1 without the breaker and the budget: the work of the floor and of backon.
pub(crate) fn w1_retry_only<O: Op>(op: O) -> Run<O> {
    let policy = Policy::builder()
        .max_attempts(MAX_ATTEMPTS)
        .total_timeout(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .no_budget()
        .build()
        .expect("valid policy");
    Run { policy, op }
}

/// W2: deadline, attempt timeout, 3 attempts, no backoff, no budget, no breaker.
pub(crate) fn w2<O: Op>(op: O) -> Run<O> {
    let policy = Policy::builder()
        .max_attempts(MAX_ATTEMPTS)
        .total_timeout(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .backoff(Backoff::none())
        .no_budget()
        .build()
        .expect("valid policy");
    Run { policy, op }
}

/// W3: W1 with no backoff (to open the breaker quickly) and a one-hour break.
pub(crate) fn w3<O: Op>(op: O) -> Run<O> {
    let breaker = Breaker::builder()
        .break_duration(BREAK)
        .max_break(BREAK)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .max_attempts(MAX_ATTEMPTS)
        .total_timeout(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .backoff(Backoff::none())
        .breaker(breaker)
        .build()
        .expect("valid policy");
    Run { policy, op }
}

/// W3 with the breaker alone (one attempt, no total timeout, no attempt timeout): the work of
/// failsafe.
pub(crate) fn w3_breaker_only<O: Op>(op: O) -> Run<O> {
    let breaker = Breaker::builder()
        .break_duration(BREAK)
        .max_break(BREAK)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
        .breaker(breaker)
        .build()
        .expect("valid policy");
    Run { policy, op }
}

fn hedging(hedge: Hedge) -> Policy {
    Policy::builder()
        .max_attempts(2)
        .total_timeout(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .hedge(hedge)
        .build()
        .expect("valid policy")
}

/// W4: a hedge after 100 ms, 2 legs, deadline, 500 ms per leg (and the default budget, which
/// hedges are charged to).
pub(crate) fn w4<O: Op>(op: O) -> RunHedged<O> {
    RunHedged {
        policy: hedging(Hedge::fixed(HEDGE_DELAY)),
        op,
    }
}

/// W4 with the adaptive delay (p95 of the last 30 s, once 20 samples are in): the closest to
/// tower's hedge, which only has a percentile delay.
pub(crate) fn w4_adaptive<O: Op>(op: O) -> RunHedged<O> {
    RunHedged {
        policy: hedging(Hedge::adaptive()),
        op,
    }
}
