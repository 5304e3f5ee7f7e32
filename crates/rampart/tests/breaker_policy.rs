//! The circuit breaker inside the executor: what counts as evidence, what an open breaker
//! does to a call, and the single half-open probe.

use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::breaker::{Breaker, StateKind};
use rampart::{Error, Event, Instant, Policy, RejectReason, StopReason, Verdict};

const SEC: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq, Eq)]
enum Fail {
    Flaky,
    Busy,
    NotFound,
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

fn breaker() -> Breaker {
    Breaker::builder()
        .consecutive_failures(5)
        .break_duration(15 * SEC)
        .jitter(0.0)
        .build()
        .expect("valid breaker")
}

fn policy(
    breaker: &Breaker,
    transitions: &Arc<Mutex<Vec<(StateKind, StateKind)>>>,
) -> Policy<impl rampart::Classify<(), Fail>> {
    let seen = transitions.clone();
    Policy::builder()
        .max_attempts(1)
        .no_budget()
        .breaker(breaker.clone())
        .listener(move |event: &Event<'_>| {
            if let Event::BreakerTransition { from, to, .. } = event {
                seen.lock().expect("transitions").push((*from, *to));
            }
        })
        .classifier(|r: &Result<(), Fail>| match r {
            Ok(()) => Verdict::Ok,
            Err(Fail::Flaky) => Verdict::Transient,
            Err(Fail::Busy) => Verdict::Throttled { retry_after: None },
            Err(Fail::NotFound) => Verdict::Permanent,
        })
        .build()
        .expect("valid")
}

#[tokio::test(start_paused = true)]
async fn throttled_and_permanent_outcomes_are_never_breaker_evidence() {
    let breaker = breaker();
    let transitions = Arc::default();
    let policy = policy(&breaker, &transitions);
    for _ in 0..20 {
        let _ = policy.run(async |_a| Err::<(), _>(Fail::Busy)).await;
        let _ = policy.run(async |_a| Err::<(), _>(Fail::NotFound)).await;
    }
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Closed);
    assert!(transitions.lock().expect("transitions").is_empty());
}

#[tokio::test(start_paused = true)]
async fn five_transient_failures_open_the_breaker_and_the_next_call_never_runs() {
    let breaker = breaker();
    let transitions = Arc::default();
    let policy = policy(&breaker, &transitions);
    for _ in 0..5 {
        let _ = policy.run(async |_a| Err::<(), _>(Fail::Flaky)).await;
    }
    assert_eq!(
        *transitions.lock().expect("transitions"),
        [(StateKind::Closed, StateKind::Open)]
    );
    tokio::time::sleep(5 * SEC).await;
    let ran = Mutex::new(false);
    let result = policy
        .call()
        .try_run(async |_a| {
            *ran.lock().expect("ran") = true;
            Ok::<_, Fail>(())
        })
        .await
        .expect("not cancelled");
    assert!(!*ran.lock().expect("ran"), "the callback never ran");
    assert_eq!(result.stop(), StopReason::DependencyUnavailable);
    assert_eq!(result.attempts(), 0);
    match result.into_result() {
        Err(Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            retry_after,
            ..
        }) => assert_eq!(retry_after, Some(10 * SEC), "the break's remaining time"),
        other => panic!("expected a breaker rejection, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_while_the_single_probe_is_in_flight_is_rejected_and_two_good_probes_close_it() {
    let breaker = breaker();
    let transitions = Arc::default();
    let policy = policy(&breaker, &transitions);
    for _ in 0..5 {
        let _ = policy.run(async |_a| Err::<(), _>(Fail::Flaky)).await;
    }
    tokio::time::sleep(15 * SEC).await;
    let probe = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| {
                    tokio::time::sleep(SEC).await;
                    Ok::<_, Fail>(())
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    let concurrent = policy
        .run(async |_a| pending::<Result<(), Fail>>().await)
        .await;
    assert!(matches!(
        concurrent,
        Err(Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            ..
        })
    ));
    probe.await.expect("joined").expect("probe succeeded");
    policy
        .run(async |_a| Ok::<_, Fail>(()))
        .await
        .expect("second probe succeeded");
    assert_eq!(
        *transitions.lock().expect("transitions"),
        [
            (StateKind::Closed, StateKind::Open),
            (StateKind::Open, StateKind::HalfOpen),
            (StateKind::HalfOpen, StateKind::Closed),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_rejected_by_an_open_breaker_carries_the_last_failure() {
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .breaker(breaker)
        .build()
        .expect("valid");
    let outcome = policy.run(async |_a| Err::<(), _>(Fail::Flaky)).await;
    match outcome {
        Err(Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            attempts: 1,
            last: Some(last),
            ..
        }) => assert_eq!(last.into_inner(), Some(Fail::Flaky)),
        other => panic!("expected a breaker rejection after one attempt, got {other:?}"),
    }
}
