//! Regressions found by acceptance and reliability runs of the core (issue 11), through the
//! public API on tokio's paused time. The same rules are unit-tested on the call state machine
//! (`src/executor/machine_tests.rs`); these pin them where users meet them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::{
    Breaker, CancellationToken, Error, Policy, RetryBudget, StopReason, TimeoutMode, Verdict,
};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq)]
enum Fail {
    Stopped,
    NotFound,
    Reset,
}

#[tokio::test(start_paused = true)]
async fn cooperative_err_after_the_caller_cancelled_is_cancelled_and_never_classified() {
    let classified = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&classified);
    let policy = Policy::builder()
        .timeout_mode(TimeoutMode::Cooperative)
        .classifier(move |_: &Result<(), Fail>| {
            seen.fetch_add(1, Ordering::SeqCst);
            Verdict::Transient
        })
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(10 * MS).await;
        cancel.cancel();
    });
    let outcome = policy
        .call()
        .token(&token)
        .run(async |attempt| {
            attempt.cancelled().await;
            Err(Fail::Stopped)
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(classified.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn late_permanent_error_after_the_ceiling_comes_back_after_one_attempt() {
    let policy = Policy::builder()
        .max_attempts(3)
        .attempt_timeout(100 * MS)
        .timeout_mode(TimeoutMode::Cooperative)
        .classifier(|r: &Result<(), Fail>| match r {
            Err(Fail::NotFound) => Verdict::Permanent,
            Err(_) => Verdict::Transient,
            Ok(()) => Verdict::Ok,
        })
        .build()
        .expect("valid");
    let calls = AtomicU32::new(0);
    let result = policy
        .call()
        .try_run(async |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            let _token = attempt.token();
            tokio::time::sleep(150 * MS).await;
            Err(Fail::NotFound)
        })
        .await
        .expect("not cancelled");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(result.stop(), StopReason::Permanent);
    assert!(matches!(
        result.into_result(),
        Err(Error::Inner(Fail::NotFound))
    ));
}

#[tokio::test(start_paused = true)]
async fn breaker_opened_by_the_attempt_refuses_the_retry_without_sleeping_or_charging() {
    let budget = RetryBudget::builder().build().expect("valid");
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid");
    let retries = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&retries);
    let policy = Policy::builder()
        .budget(budget.clone())
        .breaker(breaker)
        .backoff(Backoff::constant(200 * MS))
        .on_retry(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("valid");
    let before = budget.balance(tokio::time::Instant::now());
    let start = tokio::time::Instant::now();
    let result = policy
        .call()
        .try_run(async |_| Err::<(), _>(Fail::Reset))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::DependencyUnavailable);
    assert_eq!(result.attempts(), 1);
    assert_eq!(start.elapsed(), Duration::ZERO, "no backoff slept");
    assert_eq!(retries.load(Ordering::SeqCst), 0, "no retry announced");
    assert_eq!(budget.balance(tokio::time::Instant::now()), before);
    let Err(Error::Rejected { last, .. }) = result.into_result() else {
        panic!("expected the breaker's refusal");
    };
    assert!(matches!(last.as_deref(), Some(Error::Inner(Fail::Reset))));
}

#[test]
fn blocking_call_checks_the_caller_after_a_zero_backoff() {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let calls = AtomicU32::new(0);
    let outcome = policy.call().token(&token).run_blocking(|_| {
        calls.fetch_add(1, Ordering::SeqCst);
        token.cancel();
        Err::<(), _>(Fail::Reset)
    });
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no attempt after the cancel"
    );
}

#[tokio::test(start_paused = true)]
async fn error_display_says_what_the_executor_decided_and_source_gives_the_last_failure() {
    let policy = Policy::builder()
        .max_attempts(3)
        .total_timeout(1000 * MS)
        .backoff(Backoff::constant(800 * MS))
        .build()
        .expect("valid");
    let error = policy
        .run(async |_| {
            tokio::time::sleep(400 * MS).await;
            Err::<(), _>(std::io::Error::other("connection reset"))
        })
        .await
        .expect_err("the backoff does not fit");
    assert_eq!(
        error.to_string(),
        "deadline of 1s exceeded after 1 attempt: the next backoff of 800ms would not fit in the 600ms left"
    );
    let source = std::error::Error::source(&error).map(ToString::to_string);
    assert_eq!(source.as_deref(), Some("connection reset"));
}

#[tokio::test(start_paused = true)]
async fn try_run_log_keeps_the_last_attempts() {
    let policy = Policy::builder()
        .max_attempts(6)
        .no_budget()
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let result = policy
        .call()
        .try_run(async |_| Err::<(), _>(Fail::Reset))
        .await
        .expect("not cancelled");
    let numbers: Vec<u32> = result.log().iter().map(|r| r.number).collect();
    assert_eq!(numbers, [3, 4, 5, 6]);
    assert_eq!(result.attempts(), 6);
}
