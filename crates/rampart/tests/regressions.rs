//! Regression tests named after what broke (found in review): each would fail without its fix.

use std::future::pending;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::admit::{Admit, AdmitContext};
use rampart::backoff::{Backoff, Jitter};
use rampart::breaker::{Breaker, StateKind};
use rampart::clock::{Blocked, Clock, ManualClock};
use rampart::drain::Drain;
use rampart::hedge::Hedge;
use rampart::limit::ConcurrencyLimit;
use rampart::{
    CancellationToken, Criticality, Error, Event, Instant, Policy, RejectReason, RetryBudget,
    StopReason, TimeoutMode,
};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

fn names(events: &Arc<Mutex<Vec<String>>>) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
    let events = events.clone();
    move |event: &Event<'_>| {
        let name = format!("{event:?}");
        let kind = name.split([' ', '{']).next().unwrap_or_default().to_owned();
        events.lock().expect("events").push(kind);
    }
}

#[tokio::test(start_paused = true)]
async fn a_suppressed_zero_delay_hedge_does_not_spin() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let empty = RetryBudget::builder()
        .fraction(0.0)
        .min_per_sec(0.0)
        .build()
        .expect("valid");
    empty.try_spend(Instant::now(), 0.0).expect("the one token");
    let policy = Policy::builder()
        .max_attempts(3)
        .budget(empty)
        .hedge(Hedge::fixed(Duration::ZERO))
        .listener(names(&events))
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |_a| {
            tokio::time::sleep(1_000 * MS).await;
            Ok::<_, Fail>(())
        })
        .await;
    assert!(outcome.is_ok());
    assert_eq!(start.elapsed(), 1_000 * MS);
    let suppressed = events
        .lock()
        .expect("events")
        .iter()
        .filter(|e| *e == "HedgeSuppressed")
        .count();
    assert_eq!(suppressed, 1, "one suppression, not one per timer turn");
}

#[tokio::test(start_paused = true)]
async fn a_caller_cancel_while_queued_for_admission_is_cancellation_not_a_timeout() {
    let limit = ConcurrencyLimit::new(1).queue(1);
    let timeouts = Arc::new(AtomicU32::new(0));
    let seen = timeouts.clone();
    let policy = Policy::builder()
        .max_attempts(1)
        .no_budget()
        .admit(limit.clone())
        .on_timeout(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("valid");
    let holder = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| pending::<Result<(), Fail>>().await)
                .await
        })
    };
    tokio::task::yield_now().await;
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(50 * MS).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |_a| Ok::<_, Fail>(()))
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert_eq!(start.elapsed(), 50 * MS);
    assert_eq!(timeouts.load(Ordering::SeqCst), 0);
    assert_eq!(limit.queued(), 0, "the waiter left the queue");
    holder.abort();
}

#[tokio::test(start_paused = true)]
async fn an_admission_queue_timeout_is_not_breaker_evidence() {
    let limit = ConcurrencyLimit::new(1).queue(4);
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .no_budget()
        .admit(limit)
        .breaker(breaker.clone())
        .build()
        .expect("valid");
    let holder = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| {
                    tokio::time::sleep(90 * MS).await;
                    Ok::<_, Fail>(())
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    // Queued behind the holder with a 100 ms ceiling.
    let start = Instant::now();
    let outcome = policy.run(async |_a| Ok::<_, Fail>(())).await;
    // The holder frees the slot at 90 ms, inside the waiter's ceiling: admitted.
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(start.elapsed(), 90 * MS);
    holder.await.expect("joined").expect("holder");

    // Now a waiter whose ceiling passes in the queue, behind a long holder on another policy.

    let limit = ConcurrencyLimit::new(1).queue(4);
    let long = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(Duration::from_secs(10))
        .no_budget()
        .admit(limit.clone())
        .build()
        .expect("valid");
    let short = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .no_budget()
        .admit(limit)
        .breaker(breaker.clone())
        .build()
        .expect("valid");
    let blocker = tokio::spawn(async move {
        long.run(async |_a| {
            tokio::time::sleep(500 * MS).await;
            Ok::<_, Fail>(())
        })
        .await
    });
    tokio::task::yield_now().await;
    let outcome = short.run(async |_a| Ok::<_, Fail>(())).await;
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        breaker.state(Instant::now()).kind(),
        StateKind::Closed,
        "a wait in the local queue says nothing about the dependency"
    );
    blocker.await.expect("joined").expect("blocker");
}

#[tokio::test(start_paused = true)]
async fn a_plain_retry_of_a_hedging_policy_is_not_reported_as_a_hedge_win() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::none())
        .hedge(Hedge::fixed(100 * MS))
        .listener(names(&events))
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |attempt| {
            tokio::time::sleep(10 * MS).await;
            if attempt.number() == 1 {
                Err(Fail)
            } else {
                Ok(())
            }
        })
        .await;
    assert!(outcome.is_ok());
    let events = events.lock().expect("events");
    assert!(!events.contains(&"HedgeWon".to_owned()), "{events:?}");
    assert!(!events.contains(&"HedgeStarted".to_owned()), "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_still_emits_its_terminal_event() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let policy = Policy::builder()
        .listener(names(&events))
        .build()
        .expect("valid");
    let call = policy.run(async |_a| pending::<Result<(), Fail>>().await);
    let _ = tokio::time::timeout(10 * MS, call).await;
    let ended = events
        .lock()
        .expect("events")
        .iter()
        .filter(|e| *e == "CallEnded")
        .count();
    assert_eq!(ended, 1);
}

#[tokio::test(start_paused = true)]
async fn a_caller_cancel_during_the_abandon_grace_ends_the_call_at_once() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .timeout_mode(TimeoutMode::Abandon {
            grace: Duration::from_secs(10),
        })
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(200 * MS).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |_a| pending::<Result<(), Fail>>().await)
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert_eq!(start.elapsed(), 200 * MS);
}

#[test]
fn a_blocking_attempts_cancelled_future_completes_at_its_ceiling() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(5 * MS)
        .build()
        .expect("valid");
    let clock = rampart::Clock::system();
    let result = policy.call().try_run_blocking(|attempt| {
        match clock.block_on(attempt.cancelled(), None, None) {
            rampart::clock::Blocked::Ready(()) => Err::<(), _>(Fail),
            _ => Ok(()),
        }
    });
    let result = result.expect("not cancelled");
    assert_eq!(result.stop(), StopReason::AttemptsExhausted);
    assert!(matches!(
        result.into_result(),
        Err(Error::AttemptTimeout { .. })
    ));
}

#[test]
fn delays_beyond_a_day_are_configuration_errors_not_panics() {
    let err = Policy::builder()
        .backoff(Backoff::default().max(Duration::MAX))
        .hedge(Hedge::fixed(Duration::MAX))
        .build()
        .expect_err("invalid");
    let fields: Vec<_> = err.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["backoff.max", "hedge.delay"]);
}

#[tokio::test(start_paused = true)]
async fn a_hedged_call_future_is_send() {
    let policy = Policy::builder()
        .hedge(Hedge::fixed(10 * MS))
        .build()
        .expect("valid");
    let handle = tokio::spawn(async move {
        policy
            .run(async move |attempt| Ok::<_, Fail>(attempt.number()))
            .await
    });
    assert_eq!(handle.await.expect("joined").ok(), Some(1));
}

#[test]
fn a_queue_timeout_in_blocking_execution_needs_no_tokio_runtime() {
    // A plain thread, no runtime: the queue timeout used to be `tokio::time::timeout`, which
    // panicked with "there is no reactor running".
    let clock = ManualClock::new();
    let limit = ConcurrencyLimit::new(1).queue(1).queue_timeout(50 * MS);
    let holder = AdmitContext::new("holder", Criticality::Critical, clock.now());
    let held = match Clock::system().block_on(limit.acquire(&holder), None, None) {
        Blocked::Ready(Ok(permit)) => permit,
        other => panic!("the free slot: {other:?}"),
    };
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
        .no_budget()
        .admit(limit.clone())
        .build()
        .expect("valid");
    let call = std::thread::spawn(move || policy.call().run_blocking(|_a| Ok::<_, Fail>(())));
    // Queued, and waiting on the manual clock for its queue timeout (or already ended).
    while (limit.queued() == 0 || clock.sleepers() == 0) && !call.is_finished() {
        std::thread::yield_now();
    }
    clock.advance(50 * MS);
    let outcome = call.join().expect("refused, not a panic");
    assert!(
        matches!(
            outcome,
            Err(Error::Rejected {
                reason: RejectReason::Overloaded,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(limit.queued(), 0, "the waiter left the queue");
    drop(held);
}

#[test]
fn a_queue_timeout_on_the_system_clock_fires_from_the_timer_thread_without_a_runtime() {
    // The shortest timeout there is: the shared timer thread fires it at once, so the test
    // does not wait on the wall clock.
    let limit = ConcurrencyLimit::new(1)
        .queue(1)
        .queue_timeout(Duration::from_nanos(1));
    let holder = AdmitContext::new("holder", Criticality::Critical, Instant::now());
    let held = match Clock::system().block_on(limit.acquire(&holder), None, None) {
        Blocked::Ready(Ok(permit)) => permit,
        other => panic!("the free slot: {other:?}"),
    };
    let policy = Policy::builder()
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
        .no_budget()
        .admit(limit.clone())
        .build()
        .expect("valid");
    let outcome = policy.call().run_blocking(|_a| Ok::<_, Fail>(()));
    assert!(
        matches!(
            outcome,
            Err(Error::Rejected {
                reason: RejectReason::Overloaded,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(limit.queued(), 0);
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_drain_begun_with_the_longest_grace_leaves_calls_unbounded_not_expired() {
    let drain = Drain::new();
    assert!(drain.begin(Some(Duration::MAX)));
    let policy = Policy::builder()
        .drain(&drain)
        .no_total_timeout()
        .build()
        .expect("valid");
    let outcome = policy.run(async |a| Ok::<_, Fail>(a.number())).await;
    assert_eq!(
        outcome.ok(),
        Some(1),
        "the attempt ran: the grace is not zero"
    );
}

#[tokio::test(start_paused = true)]
async fn a_zero_base_exponential_backoff_never_waits_whatever_its_factor() {
    let policy = Policy::builder()
        .max_attempts(5)
        .no_total_timeout()
        .no_budget()
        .backoff(
            Backoff::exponential(Duration::ZERO)
                .factor(1e300)
                .jitter(Jitter::None),
        )
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy.call().try_run(async |_a| Err::<(), _>(Fail)).await;
    let outcome = outcome.expect("not cancelled");
    assert_eq!(outcome.attempts(), 5);
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "0 x inf is not the maximum delay"
    );
}

#[test]
fn a_hedge_floor_beyond_an_hour_is_a_configuration_error() {
    let err = Policy::builder()
        .hedge(Hedge::adaptive().floor(Duration::MAX))
        .build()
        .expect_err("invalid");
    let problems: Vec<_> = err.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        problems,
        ["hedge.floor must be at most 1h (was 18446744073709551615.999999999s)"]
    );
}

#[tokio::test]
async fn a_hedge_delay_that_overflows_the_clock_is_never_rather_than_at_once() {
    // A manual clock half an hour before the latest instant it can stand at: one hour later
    // cannot be represented, and must saturate there instead of collapsing to "now".
    let clock = ManualClock::new();
    let now = clock.now();
    let (mut fits, mut overflows) = (Duration::ZERO, Duration::MAX);
    while overflows - fits > Duration::from_nanos(1) {
        let mid = fits + (overflows - fits) / 2;
        if now.checked_add(mid).is_some() {
            fits = mid;
        } else {
            overflows = mid;
        }
    }
    clock.advance(fits - Duration::from_secs(1800));
    let hedges = Arc::new(AtomicU32::new(0));
    let started = hedges.clone();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(2)
        .no_total_timeout()
        .no_attempt_timeout()
        .hedge(Hedge::fixed(Duration::from_secs(3600)))
        .listener(move |event| {
            if let Event::HedgeStarted { .. } = event {
                started.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |_a| {
            tokio::task::yield_now().await;
            Ok::<_, Fail>(())
        })
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        hedges.load(Ordering::SeqCst),
        0,
        "no hedge launched at once"
    );
}

#[tokio::test]
async fn a_probe_that_never_finishes_reopens_the_breaker_after_the_probe_timeout() {
    let clock = ManualClock::new();
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .probe_timeout(Duration::from_secs(5))
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let seen = transitions.clone();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
        .no_budget()
        .breaker(breaker.clone())
        .listener(move |event| {
            if let Event::BreakerTransition { from, to, .. } = event {
                seen.lock().expect("transitions").push((*from, *to));
            }
        })
        .build()
        .expect("valid");
    assert!(policy.run(async |_a| Err::<(), _>(Fail)).await.is_err());
    clock.advance(Duration::from_secs(15));
    // The probe hangs: no attempt timeout, no deadline.
    let probe = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| pending::<Result<(), Fail>>().await)
                .await
        })
    };
    while breaker.state(clock.now()).kind() != StateKind::HalfOpen {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_secs(5));
    let refused = policy.run(async |_a| Ok::<_, Fail>(())).await;
    assert!(
        matches!(
            refused,
            Err(Error::Rejected {
                reason: RejectReason::DependencyUnavailable,
                retry_after: Some(_),
                ..
            })
        ),
        "{refused:?}"
    );
    clock.advance(Duration::from_secs(30));
    let outcome = policy.run(async |a| Ok::<_, Fail>(a.number())).await;
    assert_eq!(outcome.ok(), Some(1), "a new probe after the break");
    use StateKind::{Closed, HalfOpen, Open};
    assert_eq!(
        *transitions.lock().expect("transitions"),
        [
            (Closed, Open),
            (Open, HalfOpen),
            (HalfOpen, Open),
            (Open, HalfOpen)
        ],
        "the re-opening is reported, and the chain is unbroken"
    );
    probe.abort();
}
