//! Blocking execution on the manual clock: the contract rules that apply to a synchronous
//! callback, with no tokio runtime anywhere.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::{
    CancellationToken, Deadline, DeadlineSource, Error, Event, ManualClock, Policy, StopReason,
};

const SEC: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail(u32);

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failure on attempt {}", self.0)
    }
}

/// Spins (without sleeping) until `condition` holds.
fn wait_for(condition: impl Fn() -> bool) {
    for _ in 0..50_000_000u64 {
        if condition() {
            return;
        }
        std::thread::yield_now();
    }
    panic!("condition never held");
}

#[test]
fn caller_cancel_during_a_blocking_backoff_returns_at_once() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .no_total_timeout()
        .backoff(Backoff::constant(30 * SEC))
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let attempts = Arc::new(AtomicU32::new(0));
    let (seen, caller) = (attempts.clone(), token.clone());
    let start = clock.now();
    let call = std::thread::spawn(move || {
        policy.call().token(&caller).run_blocking(|attempt| {
            seen.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Fail(attempt.number()))
        })
    });
    wait_for(|| clock.sleepers() == 1);
    token.cancel();
    let outcome = call.join().expect("joined");
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(
        clock.now() - start,
        Duration::ZERO,
        "no virtual time passed"
    );
}

#[test]
fn the_ceiling_fires_a_blocking_attempts_token() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(1)
        .attempt_timeout(SEC)
        .build()
        .expect("valid");
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let call = std::thread::spawn(move || {
        policy.call().run_blocking(|attempt| {
            flag.store(true, Ordering::SeqCst);
            while !attempt.is_cancelled() {
                std::thread::yield_now();
            }
            Err::<(), _>(Fail(attempt.number()))
        })
    });
    wait_for(|| started.load(Ordering::SeqCst));
    clock.advance(SEC);
    let outcome = call.join().expect("joined");
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { timeout, attempts: 1 }) if timeout == SEC),
        "{outcome:?}"
    );
}

#[test]
fn a_blocking_attempt_that_overruns_its_ceiling_is_awaited_and_reported_as_orphaned() {
    let clock = ManualClock::new();
    let overruns = Arc::new(Mutex::new(Vec::new()));
    let seen = overruns.clone();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(1)
        .attempt_timeout(SEC)
        .listener(move |event: &Event<'_>| {
            if let Event::OrphanedWork { overrun, .. } = event {
                seen.lock().expect("overruns").push(*overrun);
            }
        })
        .build()
        .expect("valid");
    let until = clock.now() + 3 * SEC;
    let worker_clock = clock.clone();
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let call = std::thread::spawn(move || {
        policy.call().run_blocking(|_attempt| {
            flag.store(true, Ordering::SeqCst);
            // Ignores its token: runs until the clock says three seconds have passed.
            while worker_clock.now() < until {
                std::thread::yield_now();
            }
            Ok::<_, Fail>("late")
        })
    });
    wait_for(|| started.load(Ordering::SeqCst));
    clock.advance(3 * SEC);
    let outcome = call.join().expect("joined");
    assert_eq!(outcome.ok(), Some("late"), "the late value is delivered");
    assert_eq!(*overruns.lock().expect("overruns"), [2 * SEC]);
}

#[test]
fn a_backoff_that_does_not_fit_is_not_slept_in_blocking_execution_either() {
    // Nothing advances this clock: a backoff that was slept would hang the test.
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock)
        .total_timeout(SEC)
        .backoff(Backoff::constant(2 * SEC))
        .build()
        .expect("valid");
    let result = policy
        .call()
        .try_run_blocking(|attempt| Err::<(), _>(Fail(attempt.number())))
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::DeadlineExceeded);
    assert_eq!(result.attempts(), 1);
}

#[test]
fn blocking_retries_sleep_on_the_manual_clock_and_succeed() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(3)
        .total_timeout(10 * SEC)
        .backoff(Backoff::constant(SEC))
        .build()
        .expect("valid");
    let start = clock.now();
    let call = std::thread::spawn(move || {
        policy.call().try_run_blocking(|attempt| {
            if attempt.number() < 3 {
                Err(Fail(attempt.number()))
            } else {
                Ok(attempt.number())
            }
        })
    });
    for _ in 0..2 {
        wait_for(|| clock.sleepers() == 1);
        clock.advance(SEC);
    }
    let result = call.join().expect("joined").expect("not cancelled");
    assert_eq!(result.attempts(), 3);
    assert_eq!(result.into_result().ok(), Some(3));
    assert_eq!(clock.now() - start, 2 * SEC);
}

#[test]
fn the_system_clock_timer_thread_cancels_a_blocking_attempt_at_its_ceiling() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(Duration::from_millis(5))
        .build()
        .expect("valid");
    let outcome = policy.call().run_blocking(|attempt| {
        while !attempt.is_cancelled() {
            std::thread::yield_now();
        }
        Err::<(), _>(Fail(attempt.number()))
    });
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { attempts: 1, .. })),
        "{outcome:?}"
    );
}

#[test]
fn a_blocking_attempt_refused_by_admission_never_runs() {
    use rampart::RejectReason;
    use rampart::limit::RateLimit;

    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock)
        .max_attempts(1)
        .no_budget()
        .admit(RateLimit::new(1, Duration::from_secs(3600)).expect("valid rate"))
        .build()
        .expect("valid");
    let ran = AtomicU32::new(0);
    let call = || {
        policy.call().run_blocking(|_attempt| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
    };
    assert!(call().is_ok(), "the one permit admits the first call");
    let refused = call();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the refused attempt never ran"
    );
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

#[test]
fn a_deadline_given_to_a_blocking_call_bounds_it_and_is_reported_as_inherited() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .no_total_timeout()
        .backoff(Backoff::constant(2 * SEC))
        .build()
        .expect("valid");
    let given = || Deadline::after_from(clock.now(), SEC);
    let left = policy
        .call()
        .deadline(given())
        .run_blocking(|attempt| Ok::<_, Fail>(attempt.remaining()));
    assert_eq!(
        left.ok(),
        Some(Some(SEC)),
        "the attempt is bounded by the given deadline"
    );
    // Nothing advances this clock: the 2 s backoff cannot fit the 1 s given, and the call ends
    // after its first attempt.
    let outcome = policy
        .call()
        .deadline(given())
        .run_blocking(|attempt| Err::<(), _>(Fail(attempt.number())));
    match outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            source,
            attempts,
            ..
        }) => {
            assert_eq!(
                (deadline, source, attempts),
                (SEC, DeadlineSource::Inherited, 1)
            );
        }
        other => panic!("expected the given deadline to end the call, got {other:?}"),
    }
}
