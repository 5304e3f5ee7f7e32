//! Fallback (issue 15): the policy decides the call, then a fallback answers the ends it
//! names, once; cancelled calls never fall back; the report keeps the policy's stop reason.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::fallback::Fallback;
use rampart::{Breaker, CancellationToken, Error, Event, Policy, StopReason};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

fn failing(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff::constant(10 * MS))
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn a_call_that_runs_out_of_attempts_answers_with_the_fallback_value_after_every_retry() {
    let calls = AtomicU32::new(0);
    let answer = failing(3)
        .call()
        .fallback(Fallback::on([StopReason::AttemptsExhausted]).value(7))
        .run(async |_a| {
            calls.fetch_add(1, Ordering::Relaxed);
            Err::<u32, _>(Down)
        })
        .await;
    assert_eq!(answer.ok(), Some(7));
    assert_eq!(calls.load(Ordering::Relaxed), 3, "the policy retried first");
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_is_answered_by_a_fallback_on_dependency_unavailable() {
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .max_attempts(1)
        .breaker(breaker)
        .build()
        .expect("valid policy");
    let _ = policy.run(async |_a| Err::<u32, _>(Down)).await;
    let report = policy
        .call()
        .fallback(Fallback::on([StopReason::DependencyUnavailable]).value(42))
        .try_run(async |_a| Ok::<u32, Down>(1))
        .await
        .expect("not cancelled");
    assert_eq!(report.value(), Some(&42));
    assert_eq!(report.stop(), StopReason::DependencyUnavailable);
    assert!(report.fell_back());
    assert_eq!(
        report.attempts(),
        0,
        "the breaker refused before any attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_reason_the_fallback_does_not_name_returns_the_error_and_never_runs_it() {
    let ran = AtomicU32::new(0);
    let answer = Policy::builder()
        .max_attempts(1)
        .build()
        .expect("valid policy")
        .call()
        .fallback(Fallback::on([StopReason::Overloaded]).with(async |error| {
            ran.fetch_add(1, Ordering::Relaxed);
            Err(error)
        }))
        .try_run(async |_a| Err::<u32, _>(Down))
        .await
        .expect("not cancelled");
    assert!(matches!(answer.error(), Some(Error::Inner(Down))));
    assert!(!answer.fell_back());
    assert_eq!(ran.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_never_falls_back_even_when_the_predicate_says_yes() {
    let token = CancellationToken::new();
    token.cancel();
    let policy = failing(3);
    let answer = policy
        .call()
        .token(&token)
        .fallback(Fallback::when(|_stop, _error: &Error<Down>| true).value(1))
        .run(async |_a| Err::<u32, _>(Down))
        .await;
    assert!(matches!(answer, Err(Error::Cancelled)));
    let report = policy
        .call()
        .token(&token)
        .fallback(Fallback::when(|_stop, _error: &Error<Down>| true).value(1))
        .try_run(async |_a| Err::<u32, _>(Down))
        .await;
    assert!(
        report.is_err(),
        "try_run reports a cancelled call as Cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn a_predicate_fallback_sees_the_stop_reason_and_the_error() {
    let seen = Mutex::new(None);
    let answer = failing(2)
        .call()
        .fallback(
            Fallback::when(|stop, error: &Error<Down>| {
                *seen.lock().expect("seen") = Some((stop, matches!(error, Error::Inner(Down))));
                true
            })
            .value(5),
        )
        .run(async |_a| Err::<u32, _>(Down))
        .await;
    assert_eq!(answer.ok(), Some(5));
    assert_eq!(
        *seen.lock().expect("seen"),
        Some((StopReason::AttemptsExhausted, true))
    );
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_cannot_help_returns_its_own_error_and_the_report_says_it_answered() {
    let report = failing(1)
        .call()
        .fallback(
            Fallback::on([StopReason::AttemptsExhausted]).with(async |_error| {
                tokio::time::sleep(5 * MS).await;
                Err(Error::Inner(Down))
            }),
        )
        .try_run(async |_a| Err::<u32, _>(Down))
        .await
        .expect("not cancelled");
    assert!(report.fell_back());
    assert!(matches!(report.error(), Some(Error::Inner(Down))));
}

#[tokio::test(start_paused = true)]
async fn listeners_hear_fallback_used_after_the_calls_end() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(1)
        .listener(move |event: &Event<'_>| {
            let line = match event {
                Event::CallEnded { stop, .. } => format!("ended {}", stop.as_str()),
                Event::FallbackUsed { policy, stop } => {
                    format!("fallback {policy} {}", stop.as_str())
                }
                _ => return,
            };
            sink.lock().expect("events").push(line);
        })
        .build()
        .expect("valid policy");
    let answer = policy
        .call()
        .fallback(Fallback::on([StopReason::AttemptsExhausted]).value(3))
        .run(async |_a| Err::<u32, _>(Down))
        .await;
    assert_eq!(answer.ok(), Some(3));
    assert_eq!(
        *events.lock().expect("events"),
        ["ended attempts_exhausted", "fallback p attempts_exhausted"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_with_a_fallback_can_be_spawned() {
    let policy = failing(2);
    let task = tokio::spawn(async move {
        policy
            .call()
            .fallback(Fallback::on([StopReason::AttemptsExhausted]).value("cached".to_owned()))
            .run(async |_a| Err::<String, _>(Down))
            .await
    });
    assert_eq!(
        task.await.expect("no panic").ok().as_deref(),
        Some("cached")
    );
}

#[path = "support/ready.rs"]
mod support;
use support::ready;

#[test]
fn the_success_path_with_a_fallback_configured_allocates_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let policy = Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .breaker(Breaker::builder().build().expect("valid breaker"))
        .build()
        .expect("valid policy");
    let call = || {
        ready(
            policy
                .call()
                .fallback(Fallback::on([StopReason::DependencyUnavailable]).value(0))
                .run(async |attempt| Ok::<_, Down>(attempt.number())),
        )
    };
    assert_eq!(call().ok(), Some(1));
    let allocations = allocation_counter::measure(|| {
        for _ in 0..1_000 {
            assert_eq!(call().ok(), Some(1));
        }
    });
    assert_eq!(allocations.count_total, 0);
}
