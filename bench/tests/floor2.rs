//! The second hand-written floor is honest: its breaker opens after 5 consecutive failed
//! attempts and then rejects without running the operation, and its budget refuses a retry
//! once empty. Instants are passed in where a component takes them; the calls run on real time
//! with zero backoff, and a budget is drained at an instant an hour ahead, so no refill can
//! reach it during the test.

use std::cell::Cell;
use std::time::Duration;

use rampart_bench::floor::Limits;
use rampart_bench::floor2::{
    BREAK, Breaker, Budget, CAPACITY, FAILURE_THRESHOLD, GuardedError, Guards, TOKEN, guarded_loop,
};
use tokio::time::Instant;

const LIMITS: Limits = Limits {
    max_attempts: 3,
    deadline: Duration::from_secs(2),
    attempt_timeout: Duration::from_millis(500),
    base: Duration::ZERO,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// One call through the floor with an operation that fails its first `failures` runs (in this
/// call) and then answers; returns the outcome and how many times the operation ran.
fn call(guards: &Guards, failures: u32) -> (Result<u32, GuardedError<&'static str>>, u32) {
    let runs = Cell::new(0);
    let outcome = runtime().block_on(guarded_loop(LIMITS, guards, async |n| {
        runs.set(runs.get() + 1);
        if runs.get() <= failures {
            Err("transient")
        } else {
            Ok(n)
        }
    }));
    (outcome, runs.get())
}

/// Spends every token of `budget` at an instant an hour ahead, so that no refill is credited
/// before then.
fn drain(budget: &Budget) {
    let later = Instant::now() + Duration::from_secs(3_600);
    for _ in 0..CAPACITY / TOKEN {
        assert!(budget.try_spend(later), "a full bucket funds 30 retries");
    }
    assert!(!budget.try_spend(later));
}

#[test]
fn the_breaker_opens_after_five_failed_attempts_and_then_rejects_without_running() {
    let guards = Guards::new();
    // Three failed attempts: the attempts are exhausted, the breaker is still closed.
    assert_eq!(call(&guards, 3), (Err(GuardedError::Inner("transient")), 3));
    assert!(!guards.breaker.is_open());
    // Two more: the fifth in a row opens it, so the third attempt does not run.
    assert_eq!(call(&guards, 3), (Err(GuardedError::BreakerOpen), 2));
    assert!(guards.breaker.is_open());
    // Open: rejected before the operation runs.
    assert_eq!(call(&guards, 0), (Err(GuardedError::BreakerOpen), 0));
}

#[test]
fn a_success_resets_the_consecutive_count() {
    let guards = Guards::new();
    assert_eq!(call(&guards, 2), (Ok(3), 3));
    assert_eq!(call(&guards, 2), (Ok(3), 3));
    assert_eq!(call(&guards, 2), (Ok(3), 3));
    assert!(
        !guards.breaker.is_open(),
        "six failures, never five in a row"
    );
}

#[test]
fn an_open_breaker_lets_one_probe_through_after_the_break_and_its_success_closes_it() {
    let base = Instant::now();
    let breaker = Breaker::new(base);
    for _ in 0..FAILURE_THRESHOLD - 1 {
        breaker.failed(base);
        assert!(breaker.admit(base));
    }
    breaker.failed(base);
    assert!(!breaker.admit(base));
    assert!(!breaker.admit(base + BREAK - Duration::from_millis(1)));
    assert!(breaker.admit(base + BREAK), "the probe");
    assert!(!breaker.admit(base + BREAK), "one probe at a time");
    breaker.succeeded();
    assert!(!breaker.is_open());
    assert!(breaker.admit(base + BREAK));
}

#[test]
fn a_failed_probe_opens_the_breaker_for_another_break() {
    let base = Instant::now();
    let breaker = Breaker::new(base);
    for _ in 0..FAILURE_THRESHOLD {
        breaker.failed(base);
    }
    assert!(breaker.admit(base + BREAK));
    breaker.failed(base + BREAK);
    assert!(!breaker.admit(base + BREAK * 2 - Duration::from_millis(1)));
    assert!(breaker.admit(base + BREAK * 2));
}

#[test]
fn the_budget_refuses_a_retry_when_empty() {
    let guards = Guards::new();
    drain(&guards.budget);
    // The first attempt fails and the empty budget refuses the retry: one run.
    assert_eq!(call(&guards, 1), (Err(GuardedError::BudgetExhausted), 1));
}

#[test]
fn ten_successes_deposit_one_token() {
    let guards = Guards::new();
    drain(&guards.budget);
    for _ in 0..10 {
        assert_eq!(call(&guards, 0), (Ok(1), 1));
    }
    assert!((guards.budget.tokens() - 1.0).abs() < 1e-9);
    assert_eq!(call(&guards, 1), (Ok(2), 2), "the token funds one retry");
    assert_eq!(call(&guards, 1), (Err(GuardedError::BudgetExhausted), 1));
}

#[test]
fn a_deposit_into_a_full_bucket_keeps_it_at_capacity() {
    let budget = Budget::new(Instant::now());
    budget.deposit();
    assert_eq!(budget.tokens(), 30.0);
}

#[test]
fn the_floor_refills_three_tokens_a_second_regardless_of_traffic() {
    let base = Instant::now();
    let budget = Budget::new(base);
    for _ in 0..30 {
        assert!(budget.try_spend(base));
    }
    assert!(!budget.try_spend(base + Duration::from_millis(333)));
    assert!(budget.try_spend(base + Duration::from_millis(334)));
    assert!(!budget.try_spend(base + Duration::from_millis(334)));
    // Ten seconds fill it, and it holds no more than its capacity.
    assert!(budget.try_spend(base + Duration::from_secs(60)));
    assert_eq!(budget.tokens(), 29.0);
}
