//! A policy with one attempt and nothing that bounds it can run its callback with no state
//! machine at all (`Policy::none()` does): these pin that each part a policy is built with
//! takes it off that path, so that a one-attempt policy never skips the part's rule. Each test
//! gives a one-attempt policy exactly one part, and would fail if the part did not count
//! among those that need the machine. (An admission component's: `tests/limits.rs`, whose
//! policies all have one attempt.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::{
    Ambient, Breaker, Deadline, Error, Event, Instant, Policy, RejectReason, RetryBudget,
    StopReason,
};

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

/// One attempt, no total timeout, no attempt timeout: `Policy::none()`'s settings, with a
/// part added by `part`.
fn one_attempt(part: impl FnOnce(rampart::PolicyBuilder) -> rampart::PolicyBuilder) -> Policy {
    part(
        Policy::builder()
            .max_attempts(1)
            .no_total_timeout()
            .no_attempt_timeout(),
    )
    .build()
    .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policys_breaker_opens_on_its_failures_and_refuses_the_next_call() {
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::from_secs(10))
        .build()
        .expect("valid breaker");
    let policy = one_attempt(|p| p.breaker(breaker));
    let failed = policy.run(async |_| Err::<(), _>(Fail)).await;
    assert!(matches!(failed, Err(Error::Inner(Fail))), "{failed:?}");

    let called = std::sync::atomic::AtomicBool::new(false);
    let refused = policy
        .run(async |_| {
            called.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, Fail>(())
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::Rejected {
                reason: RejectReason::DependencyUnavailable,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(
        !called.load(std::sync::atomic::Ordering::Relaxed),
        "the open breaker sent nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policys_successes_fund_the_retry_budget_it_shares() {
    let budget = RetryBudget::builder()
        .fraction(0.5)
        .min_per_sec(1.0)
        .build()
        .expect("valid budget");
    // Spent down to nothing (its capacity is 10 tokens; no time passes, so none refills).
    let start = Instant::now();
    while budget.try_spend(start, 0.0).is_ok() {}
    let empty = budget.balance(start);

    let policy = one_attempt(|p| p.budget(budget.clone()));
    for _ in 0..4 {
        policy.run(async |_| Ok::<_, Fail>(())).await.expect("ok");
    }
    assert_eq!(
        budget.balance(start) - empty,
        2.0,
        "4 successes at 0.5 a token each, no time passed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policy_tells_its_listener_how_each_call_ended() {
    let stops = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&stops);
    let policy = one_attempt(move |p| {
        p.listener(move |event| {
            if let Event::CallEnded { stop, .. } = event {
                heard.lock().expect("not poisoned").push(*stop);
            }
        })
    });
    policy.run(async |_| Ok::<_, Fail>(())).await.expect("ok");
    let _ = policy.run(async |_| Err::<(), _>(Fail)).await;
    assert_eq!(
        *stops.lock().expect("not poisoned"),
        [StopReason::Succeeded, StopReason::AttemptsExhausted]
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policys_dynamic_attempt_timeout_cuts_its_attempt() {
    let policy = one_attempt(|p| p.attempt_timeout_fn(|_| Duration::from_millis(30)));
    let start = Instant::now();
    let cut = policy
        .run(async |_| {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, Fail>(())
        })
        .await;
    assert!(
        matches!(cut, Err(Error::AttemptTimeout { timeout, .. }) if timeout == Duration::from_millis(30)),
        "{cut:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(30));
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policy_reading_the_ambient_deadline_ends_the_call_at_it() {
    let policy = one_attempt(|p| p.use_ambient_deadline(true));
    let start = Instant::now();
    let cut = Ambient::current()
        .with_deadline(Deadline::after(Duration::from_millis(40)))
        .scope(policy.run(async |_| {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, Fail>(())
        }))
        .await;
    assert!(
        matches!(cut, Err(Error::DeadlineExceeded { .. })),
        "{cut:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(40));
}
