//! A policy with one attempt and nothing that bounds it can run its callback with no state
//! machine at all (`Policy::none()` does): these pin that each part with a rule a single
//! attempt can meet takes a policy off that path, so that a one-attempt policy never skips
//! the part's rule. Each test gives a one-attempt policy exactly one part (breaker, budget,
//! listener, dynamic or adaptive attempt timeout, ambient deadline, admission component),
//! and would fail if the part did not count among those that need the machine. A hedge has
//! no such rule: with one attempt there is no second leg to send.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::limit::RateLimit;
use rampart::{
    AdaptiveTimeout, Ambient, Breaker, Deadline, Error, Event, Instant, Policy, RejectReason,
    RetryBudget, StopReason,
};

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

/// One attempt, no total timeout, no attempt timeout: `Policy::none()`'s settings.
fn bare() -> rampart::PolicyBuilder {
    Policy::builder()
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
}

/// A callback whose attempt runs 5 s, longer than any bound these tests set.
async fn hang(_: &rampart::Attempt) -> Result<(), Fail> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

/// [`bare`] with a part added by `part`.
fn one_attempt(part: impl FnOnce(rampart::PolicyBuilder) -> rampart::PolicyBuilder) -> Policy {
    part(bare()).build().expect("valid policy")
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
    let cut = policy.run(hang).await;
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
        .scope(policy.run(hang))
        .await;
    assert!(
        matches!(cut, Err(Error::DeadlineExceeded { .. })),
        "{cut:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(40));
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policys_adaptive_timeout_cuts_a_slow_attempt_once_it_has_measured() {
    let adaptive = AdaptiveTimeout::default()
        .min_samples(5)
        .multiple(3.0)
        .floor(Duration::from_millis(10));
    let policy = one_attempt(|p| p.adaptive_attempt_timeout(adaptive));
    for _ in 0..5 {
        policy
            .run(async |_| {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, Fail>(())
            })
            .await
            .expect("ok");
    }
    let start = Instant::now();
    let cut = policy.run(hang).await;
    // Three times the 5 ms measured, to the latency histogram's resolution.
    let Err(Error::AttemptTimeout { timeout, .. }) = cut else {
        panic!("cut at its adaptive ceiling: {cut:?}")
    };
    assert!(
        (Duration::from_millis(15)..Duration::from_millis(17)).contains(&timeout),
        "{timeout:?}"
    );
    let elapsed = start.elapsed();
    assert!(
        (timeout..timeout + Duration::from_millis(1)).contains(&elapsed),
        "ended at its ceiling, {elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policys_admission_component_refuses_what_it_has_no_room_for() {
    let policy = bare()
        .admit(RateLimit::new(1, Duration::from_secs(3600)).expect("valid limit"))
        .build()
        .expect("valid policy");
    policy
        .run(async |_| Ok::<_, Fail>(()))
        .await
        .expect("admitted");
    let refused = policy.run(async |_| Ok::<_, Fail>(())).await;
    assert!(
        matches!(
            refused,
            Err(Error::Rejected {
                reason: RejectReason::Overloaded,
                ..
            })
        ),
        "{refused:?}"
    );
}
